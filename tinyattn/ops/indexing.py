"""Indexing and selecting, forward beside backward: x[index], writing into x[index], where, masked_fill, index_add,
and keeping a triangle."""
import builtins

from .. import backend
from ..backend import broadcast_shapes, xp_of
from ..tensor import Function, Tensor, as_array
from .dims import dim_index
from .promotion import cast, result_dtype


def check_broadcasts_to(shape, target, what):
    """An error naming both shapes unless an array of shape broadcasts to target without changing it."""
    try:
        fits = broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError(f"{what} of shape {tuple(shape)} does not broadcast to shape {tuple(target)}")


def _raw_index(index, xp):
    """Tensors and lists inside an index become arrays of the indexed tensor's module."""
    def raw(part):
        if isinstance(part, Tensor):
            return part.array
        if isinstance(part, list):
            return xp.asarray(part)
        return part
    return tuple(raw(p) for p in index) if isinstance(index, tuple) else raw(index)


class GetItem(Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.shape, ctx.dtype, ctx.index = x.shape, x.dtype, index
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        full = xp.zeros(ctx.shape, dtype=grad.dtype)
        parts = ctx.index if isinstance(ctx.index, tuple) else (ctx.index,)
        integer_arrays = any(hasattr(p, "dtype") and p.dtype.kind in "iu" for p in parts)
        if integer_arrays:
            backend.scatter_add(full, ctx.index, grad)  # repeated indices must add up
        else:
            full[ctx.index] = grad
        return full, None


class IndexPut(Function):
    """out = x with out[index] = values (what x[index] = values does, out of place); the gradient of x is zero
    where values went, and values get the gradient of the places they went to."""

    @staticmethod
    def forward(ctx, x, values, index):
        ctx.index = index
        out = x.copy()
        out[index] = values
        return out

    @staticmethod
    def backward(ctx, grad):
        grad_x = grad.copy()
        grad_x[ctx.index] = 0
        return grad_x, grad[ctx.index], None


def _along(index, dim):
    """Full index arrays that pick, for every position of index, the element index names along dim."""
    xp = xp_of(index)
    return tuple(index if axis == dim else xp.arange(n).reshape((-1,) + (1,) * (index.ndim - axis - 1))
                 for axis, n in enumerate(index.shape))


class Gather(Function):
    """out[..., i, ...] = x[..., index[..., i, ...], ...] along dim (torch.gather); repeated picks add up their
    gradients."""

    @staticmethod
    def forward(ctx, x, index, dim):
        ctx.shape, ctx.dim = x.shape, dim
        ctx.save_for_backward(index)
        return x[_along(index, dim)]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        grad_x = xp_of(grad).zeros(ctx.shape, dtype=grad.dtype)
        backend.scatter_add(grad_x, _along(index, ctx.dim), grad)
        return grad_x, None, None


class Scatter(Function):
    """out = x, then out[..., index[..., i, ...], ...] = src[..., i, ...] along dim (torch.scatter); the gradient of
    x is zero where src wrote, src gets the gradient of the places it went to."""

    @staticmethod
    def forward(ctx, x, index, src, dim):
        ctx.dim = dim
        ctx.save_for_backward(index)
        out = x.copy()
        out[_along(index, dim)] = src[tuple(slice(0, n) for n in index.shape)] if src.ndim else src
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        places = _along(index, ctx.dim)
        grad_x = grad.copy()
        grad_x[places] = 0
        return grad_x, None, grad[places], None


class ScatterAdd(Function):
    """out = x, then out[..., index[..., i, ...], ...] += src[..., i, ...] along dim (torch.scatter_add), repeated
    indices adding up; x's gradient passes unchanged, src gets the gradient of the places it went to."""

    @staticmethod
    def forward(ctx, x, index, src, dim):
        ctx.dim = dim
        ctx.save_for_backward(index)
        out = x.copy()
        backend.scatter_add(out, _along(index, dim), src[tuple(slice(0, n) for n in index.shape)])
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad, None, grad[_along(index, ctx.dim)], None


class Where(Function):
    @staticmethod
    def forward(ctx, condition, a, b):
        ctx.save_for_backward(condition)
        return xp_of(a).where(condition, a, b)

    @staticmethod
    def backward(ctx, grad):
        (condition,) = ctx.saved_tensors
        xp = xp_of(grad)
        zero = xp.zeros((), dtype=grad.dtype)
        return None, xp.where(condition, grad, zero), xp.where(condition, zero, grad)


class MaskedFill(Function):
    @staticmethod
    def forward(ctx, x, mask, value):
        xp = xp_of(x)
        ctx.save_for_backward(mask)
        return xp.where(mask, xp.asarray(value, dtype=x.dtype), x)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        xp = xp_of(grad)
        return xp.where(mask, xp.zeros((), dtype=grad.dtype), grad), None, None


class IndexAdd(Function):
    """out = x, then out[index[i]] += source[i] along dim 0; repeated indices add up (torch.index_add)."""

    @staticmethod
    def forward(ctx, x, index, source):
        ctx.save_for_backward(index)
        out = x.copy()
        backend.scatter_add(out, index, source)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad, None, grad[index]


def getitem(x, index):
    index = _raw_index(index, xp_of(x.array))
    out = GetItem.apply(x, index)
    if out._is_view:                   # basic indexing: an in-place change of out changes x too (ops/in_place.py)
        out._base = (x, index)
    return out


def index_put(x, index, values):
    """x with x[index] replaced by values, out of place and differentiable in both."""
    return IndexPut.apply(x, cast(values, x.dtype, x), _raw_index(index, xp_of(x.array)))


def _along_dim_index(caller, x, dim, index, src=None):
    """(dim as an axis, index as an array) for gather, scatter and scatter_add, checked as PyTorch checks them: an
    integer index with x's number of dims, no larger than x (and src) in the other dims, every entry in range."""
    index = _integer_index(index, caller)
    dim = dim_index(dim, x.ndim)
    if index.ndim != x.ndim or any(n > size for i, (n, size) in enumerate(zip(index.shape, x.shape)) if i != dim) \
            or (src is not None and src.ndim and any(n > size for n, size in zip(index.shape, src.shape))):
        raise RuntimeError(f"{caller}: index of shape {index.shape} needs the {x.ndim} dims of the input {x.shape} and "
                           "no larger size than it in the dims other than dim"
                           + ("" if src is None else f", nor than src {tuple(src.shape)} in any"))
    _check_in_range(caller, index, x.shape[dim], dim, RuntimeError)
    return dim, index


def _check_in_range(caller, index, size, dim, error):
    """error (PyTorch's type for caller) naming the first index outside 0..size - 1: a negative one would count from
    the end in NumPy, silently."""
    if index.size:
        low, high = int(index.min()), int(index.max())
        if low < 0 or high >= size:
            raise error(f"{caller}: index {low if low < 0 else high} is out of bounds for dimension {dim} with size "
                        f"{size}")


def gather(x, dim, index):
    dim, index = _along_dim_index("gather", x, dim, index)
    return Gather.apply(x, index, dim)


def scatter(x, dim, index, src=None, value=None):
    """x with src's values (or value) written at index along dim, out of place (torch.scatter)."""
    if (src is None) == (value is None):
        raise TypeError("scatter takes either src or value")
    dim, index = _along_dim_index("scatter", x, dim, index, src if isinstance(src, Tensor) else None)
    return Scatter.apply(x, index, cast(src if src is not None else value, x.dtype, x), dim)


def scatter_add(x, dim, index, src):
    """x with src's values added at index along dim, repeated indices adding up, out of place (torch.scatter_add)."""
    dim, index = _along_dim_index("scatter_add", x, dim, index, src)
    return ScatterAdd.apply(x, index, cast(src, x.dtype, x), dim)


def index_select(x, dim, index):
    """The slices of x at index (1-D, or a single index) along dim, as torch.index_select; repeated indices add
    their gradients up."""
    index = _integer_index(index, "index_select")
    if index.ndim > 1 or x.ndim == 0:
        raise IndexError(f"index_select takes a tensor with dims and a 1-D index (or a single one), got shapes "
                         f"{x.shape} and {index.shape}")
    dim = dim_index(dim, x.ndim)
    _check_in_range("index_select", index, x.shape[dim], dim, IndexError)
    return GetItem.apply(x, (slice(None),) * dim + (index.reshape(-1),))


def _integer_index(index, caller):
    index = as_array(index)
    if not hasattr(index, "dtype") or index.dtype.kind not in "iu":
        raise RuntimeError(f"{caller}: index must be an integer tensor, got "
                           f"{getattr(index, 'dtype', type(index).__name__)}")
    return index


def index_fill(x, dim, index, value):
    """x with the slices at index along dim set to value, out of place (torch.index_fill)."""
    dim = dim_index(dim, x.ndim)
    hit = xp_of(x.array).zeros(x.shape[dim], dtype=bool)
    hit[_integer_index(index, "index_fill")] = True
    return masked_fill(x, hit.reshape((-1,) + (1,) * (x.ndim - dim - 1)), value)


def nonzero(x, as_tuple=False):
    """The positions of the nonzero elements: an (N, ndim) int64 tensor, or one 1-D tensor per dim (as_tuple)."""
    xp = xp_of(x.array)
    places = xp.nonzero(x.array)
    if as_tuple:
        return tuple(Tensor(p.astype("int64")) for p in places)
    return Tensor(xp.stack(places, axis=1).astype("int64") if places else xp.zeros((0, 0), dtype="int64"))


def where(condition, input=None, other=None):
    """input where condition is True, else other (tensors or numbers, promoted to one dtype as in PyTorch);
    where(condition) alone is nonzero(condition, as_tuple=True)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    condition = as_array(condition)
    if condition.dtype != bool:
        raise TypeError(f"where needs a boolean condition, got dtype {condition.dtype}")
    like = input if isinstance(input, Tensor) else other
    dtype = result_dtype(input, other)
    return Where.apply(condition, cast(input, dtype, like), cast(other, dtype, like))


def masked_fill(x, mask, value):
    """x with value where mask is True (value a number, or a 0-d tensor that then gets the gradient of the places it
    filled, as in PyTorch); the result keeps x's dtype."""
    mask = as_array(mask)
    if mask.dtype != bool:
        raise TypeError(f"masked_fill needs a boolean mask, got dtype {mask.dtype}")
    try:
        broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        raise RuntimeError(f"masked_fill: a mask of shape {mask.shape} and a tensor of shape {x.shape} do not "
                           "broadcast together") from None
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError(f"masked_fill takes a number or a 0-d tensor as its value, got shape {value.shape}")
        return Where.apply(mask, cast(value, x.dtype, x), x)
    return MaskedFill.apply(x, mask, builtins.float(as_array(value)))


def index_add(x, dim, index, source):
    """x with source's rows added at index along dim 0 (the only dim supported), differentiable in x and source."""
    if dim != 0:
        raise ValueError("index_add supports dim=0")
    index = _integer_index(index, "index_add")
    _check_in_range("index_add", index, x.shape[0], 0, IndexError)
    return IndexAdd.apply(x, index, source)


def _triangle(x, keep):
    """x with zeros outside the triangle that keep marks in its last two dims."""
    if x.ndim < 2:
        raise RuntimeError(f"tril and triu need a tensor of at least 2 dims (a matrix or a batch of them), got shape "
                           f"{x.shape}")
    return MaskedFill.apply(x, ~keep(xp_of(x.array).ones(x.shape[-2:], dtype=bool)), 0.0)


def tril(x, diagonal=0):
    """Keep the lower triangle (j <= i + diagonal) of the last two dims, zeros elsewhere."""
    return _triangle(x, lambda ones: xp_of(ones).tril(ones, diagonal))


def triu(x, diagonal=0):
    """Keep the upper triangle (j >= i + diagonal) of the last two dims, zeros elsewhere."""
    return _triangle(x, lambda ones: xp_of(ones).triu(ones, diagonal))
