"""Primitive Functions: elementwise math, reductions, shapes, indexing, matmul. Forward stands beside backward.

Every ``forward``/``backward`` works on raw backend arrays and takes its array module from them (``xp_of``), so
one implementation serves NumPy and CuPy. Gradients may come back in broadcast shapes: the engine reduces them.
The end of the file attaches the PyTorch-named methods and operators to Tensor.
"""
import builtins
import itertools
import math

from .backend import DEVICES, device_of, scatter_add, to_device, xp_of
from .creation import shape_from_args
from .tensor import Function, Tensor, as_array, as_tensor_like


def _axes(dim, ndim):
    """PyTorch's dim argument (None, int or tuple, negatives allowed) as a tuple of axes, or None for all."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % ndim for d in dims)


def _restore_reduced(grad, shape, axes, keepdim):
    """Broadcast the gradient of a reduction back over the axes it reduced."""
    xp = xp_of(grad)
    if axes is not None and not keepdim:
        grad = xp.expand_dims(grad, axes)
    return xp.broadcast_to(grad, shape)


# -- elementwise, two inputs ------------------------------------------------------------------------
class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, -grad


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (grad * b if ctx.needs_input_grad[0] else None,
                grad * a if ctx.needs_input_grad[1] else None)


class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad / b
        return grad_a, (-grad_a * a / b if ctx.needs_input_grad[1] else None)


class Pow(Function):
    """a ** b for two tensors; d/db needs log(a), so b's gradient is defined for a > 0."""

    @staticmethod
    def forward(ctx, a, b):
        out = a ** b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, out = ctx.saved_tensors
        xp = xp_of(a)
        grad_a = grad * b * a ** (b - 1) if ctx.needs_input_grad[0] else None
        grad_b = grad * out * xp.log(xp.where(a > 0, a, 1)) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class PowScalar(Function):
    """x ** p for a Python number p (the common case: squares, square roots, reciprocals)."""

    @staticmethod
    def forward(ctx, x, exponent):
        ctx.save_for_backward(x)
        ctx.exponent = exponent
        return x ** exponent

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        p = ctx.exponent
        return grad * p * x ** (p - 1), None


class Maximum(Function):
    """Elementwise max; a tie sends half the gradient each way (as PyTorch does)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return xp_of(a).maximum(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        share = (a > b) + 0.5 * (a == b)
        share = share.astype(grad.dtype)
        return grad * share, grad * (1 - share)


# -- elementwise, one input -------------------------------------------------------------------------
class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, grad):
        return -grad


class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        out = xp_of(x).exp(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out


class Log(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return xp_of(x).log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


class Sqrt(Function):
    @staticmethod
    def forward(ctx, x):
        out = xp_of(x).sqrt(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad / (2 * out)


class Abs(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return xp_of(x).abs(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * xp_of(x).sign(x)


class Tanh(Function):
    @staticmethod
    def forward(ctx, x):
        out = xp_of(x).tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


def sigmoid_array(x):
    """1 / (1 + exp(-x)), from e = exp(-|x|) so that nothing overflows: 1 / (1 + e) for x >= 0, e / (1 + e) for
    x < 0 (not 1 - 1 / (1 + e), which rounds small values to 0)."""
    xp = xp_of(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


class Sigmoid(Function):
    @staticmethod
    def forward(ctx, x):
        out = sigmoid_array(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        out = xp_of(x).maximum(x, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class Cast(Function):
    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.dtype), None


class ToDevice(Function):
    @staticmethod
    def forward(ctx, x, device):
        ctx.device = device_of(x)
        return to_device(x, device)

    @staticmethod
    def backward(ctx, grad):
        return to_device(grad, ctx.device), None


# -- matmul -----------------------------------------------------------------------------------------
class MatMul(Function):
    """a @ b with NumPy's rules: 1-D operands are promoted, batch dimensions broadcast."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        xp = xp_of(a)
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        # Put back the unit dims NumPy dropped for 1-D operands, so the 2-D formulas below apply.
        if a.ndim == 1 and b.ndim == 1:
            g2 = grad.reshape(1, 1)
        elif a.ndim == 1:
            g2 = xp.expand_dims(grad, -2)
        elif b.ndim == 1:
            g2 = xp.expand_dims(grad, -1)
        else:
            g2 = grad
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = g2 @ xp.swapaxes(b2, -1, -2)
            grad_a = grad_a.reshape(grad_a.shape[:-2] + (-1,)) if a.ndim == 1 else grad_a
        if ctx.needs_input_grad[1]:
            if b2.ndim == 2 and a2.ndim > 2:
                # A weight shared by every batch element: one large matmul instead of a batch of small ones.
                grad_b = a2.reshape(-1, a2.shape[-1]).T @ g2.reshape(-1, g2.shape[-1])
            else:
                grad_b = xp.swapaxes(a2, -1, -2) @ g2
            grad_b = grad_b[..., 0] if b.ndim == 1 else grad_b
        return grad_a, grad_b


# -- reductions -------------------------------------------------------------------------------------
class Sum(Function):
    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False):
        ctx.shape, ctx.axes, ctx.keepdim = x.shape, _axes(dim, x.ndim), keepdim
        return x.sum(axis=ctx.axes, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        return _restore_reduced(grad, ctx.shape, ctx.axes, ctx.keepdim)


class Mean(Function):
    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False):
        ctx.shape, ctx.axes, ctx.keepdim = x.shape, _axes(dim, x.ndim), keepdim
        ctx.count = x.size if ctx.axes is None else math.prod(x.shape[a] for a in ctx.axes)
        return x.mean(axis=ctx.axes, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        return _restore_reduced(grad / ctx.count, ctx.shape, ctx.axes, ctx.keepdim)


class Var(Function):
    """Variance with Bessel's correction by default (correction=1), as torch.var."""

    @staticmethod
    def forward(ctx, x, dim=None, keepdim=False, correction=1):
        axes = _axes(dim, x.ndim)
        count = x.size if axes is None else math.prod(x.shape[a] for a in axes)
        centred = x - x.mean(axis=axes, keepdims=True)
        ctx.save_for_backward(centred)
        ctx.axes, ctx.keepdim, ctx.denominator = axes, keepdim, builtins.max(count - correction, 0)
        return (centred * centred).sum(axis=axes, keepdims=keepdim) / ctx.denominator

    @staticmethod
    def backward(ctx, grad):
        (centred,) = ctx.saved_tensors
        return _restore_reduced(grad, centred.shape, ctx.axes, ctx.keepdim) * centred * (2 / ctx.denominator)


class TakeAlongDim(Function):
    """x's values at given indices along one dim (max or min picks them); the gradient goes back to those indices."""

    @staticmethod
    def forward(ctx, x, indices, dim, keepdim=False):
        xp = xp_of(x)
        dim = dim % x.ndim
        values = xp.take_along_axis(x, xp.expand_dims(indices, dim), axis=dim)
        ctx.shape, ctx.dim, ctx.keepdim, ctx.indices = x.shape, dim, keepdim, indices
        return values if keepdim else values.squeeze(dim)

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        positions = xp.arange(ctx.shape[ctx.dim]).reshape((-1,) + (1,) * (len(ctx.shape) - ctx.dim - 1))
        chosen = positions == xp.expand_dims(ctx.indices, ctx.dim)
        if not ctx.keepdim:
            grad = xp.expand_dims(grad, ctx.dim)
        return xp.where(chosen, grad, xp.zeros((), dtype=grad.dtype)), None, None


class MaxOrMin(Function):
    """max (largest=True) or min of all elements; ties share the gradient evenly."""

    @staticmethod
    def forward(ctx, x, largest=True):
        out = x.max() if largest else x.min()
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        hits = (x == out).astype(grad.dtype)
        return grad * hits / hits.sum()


# -- shapes -----------------------------------------------------------------------------------------
class Reshape(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.shape), None


class Permute(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.inverse = tuple(sorted(range(len(dims)), key=dims.__getitem__))
        return x.transpose(dims)

    @staticmethod
    def backward(ctx, grad):
        return grad.transpose(ctx.inverse), None


class Expand(Function):
    @staticmethod
    def forward(ctx, x, shape):
        return xp_of(x).broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # the engine sums it back to the input's shape


class Contiguous(Function):
    @staticmethod
    def forward(ctx, x):
        return xp_of(x).ascontiguousarray(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


# -- indexing, joining, selecting -------------------------------------------------------------------
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
            scatter_add(full, ctx.index, grad)  # repeated indices must add up
        else:
            full[ctx.index] = grad
        return full, None


class Cat(Function):
    @staticmethod
    def forward(ctx, *arrays, dim=0):
        ctx.dim = dim % arrays[0].ndim
        ctx.sizes = [a.shape[ctx.dim] for a in arrays]
        return xp_of(arrays[0]).concatenate(arrays, axis=ctx.dim)

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        bounds = list(itertools.accumulate(ctx.sizes))[:-1]
        return tuple(xp.split(grad, bounds, axis=ctx.dim))


class Stack(Function):
    @staticmethod
    def forward(ctx, *arrays, dim=0):
        ctx.dim = dim % (arrays[0].ndim + 1)
        return xp_of(arrays[0]).stack(arrays, axis=ctx.dim)

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad.take(i, axis=ctx.dim) for i in range(grad.shape[ctx.dim]))


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


class RepeatInterleave(Function):
    @staticmethod
    def forward(ctx, x, repeats, dim):
        ctx.dim, ctx.repeats = dim % x.ndim, repeats
        return xp_of(x).repeat(x, repeats, axis=ctx.dim)

    @staticmethod
    def backward(ctx, grad):
        d = ctx.dim
        split = grad.shape[:d] + (grad.shape[d] // ctx.repeats, ctx.repeats) + grad.shape[d + 1:]
        return grad.reshape(split).sum(axis=d + 1), None, None


class Roll(Function):
    """Cyclic shift along dims (torch.roll); the gradient rolls back the other way."""

    @staticmethod
    def forward(ctx, x, shifts, dims):
        ctx.shifts, ctx.dims = shifts, dims
        return xp_of(x).roll(x, shifts, axis=dims)

    @staticmethod
    def backward(ctx, grad):
        return xp_of(grad).roll(grad, tuple(-s for s in ctx.shifts), axis=ctx.dims), None, None


class IndexAdd(Function):
    """out = x, then out[index[i]] += source[i] along dim 0; repeated indices add up (torch.index_add)."""

    @staticmethod
    def forward(ctx, x, index, source):
        ctx.save_for_backward(index)
        out = x.copy()
        scatter_add(out, index, source)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad, None, grad[index]


# -- the public functions ---------------------------------------------------------------------------
def _binary(function, a, b):
    if not isinstance(a, Tensor):
        a = as_tensor_like(a, b)
    if not isinstance(b, Tensor):
        b = as_tensor_like(b, a)
    return function.apply(a, b)


def add(a, b):
    return _binary(Add, a, b)


def sub(a, b):
    return _binary(Sub, a, b)


def mul(a, b):
    return _binary(Mul, a, b)


def div(a, b):
    return _binary(Div, a, b)


def pow(a, b):
    if isinstance(a, Tensor) and isinstance(b, (builtins.int, builtins.float)):
        return PowScalar.apply(a, b)
    return _binary(Pow, a, b)


def maximum(a, b):
    return _binary(Maximum, a, b)


def matmul(a, b):
    return _binary(MatMul, a, b)


def neg(x):
    return Neg.apply(x)


def exp(x):
    return Exp.apply(x)


def log(x):
    return Log.apply(x)


def sqrt(x):
    return Sqrt.apply(x)


def abs(x):
    return Abs.apply(x)


def tanh(x):
    return Tanh.apply(x)


def sigmoid(x):
    return Sigmoid.apply(x)


def relu(x):
    return Relu.apply(x)


def sum(x, dim=None, keepdim=False):
    return Sum.apply(x, dim=dim, keepdim=keepdim)


def mean(x, dim=None, keepdim=False):
    return Mean.apply(x, dim=dim, keepdim=keepdim)


def var(x, dim=None, keepdim=False, correction=1, unbiased=None):
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return Var.apply(x, dim=dim, keepdim=keepdim, correction=correction)


class _ValuesIndices(tuple):
    """(values, indices) as returned by max(dim=...) / min(dim=...), like torch.return_types.max."""

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def _extreme(x, dim, keepdim, largest):
    if dim is None:
        return MaxOrMin.apply(x, largest=largest)
    xp = xp_of(x.array)
    indices = (xp.argmax if largest else xp.argmin)(x.array, axis=dim)
    values = TakeAlongDim.apply(x, indices, dim, keepdim=keepdim)
    return _ValuesIndices((values, Tensor(xp.expand_dims(indices, dim) if keepdim else indices)))


def max(x, dim=None, keepdim=False):
    return _extreme(x, dim, keepdim, largest=True)


def min(x, dim=None, keepdim=False):
    return _extreme(x, dim, keepdim, largest=False)


def argmax(x, dim=None, keepdim=False):
    xp = xp_of(x.array)
    if dim is None:
        return Tensor(xp.argmax(x.array))
    out = xp.argmax(x.array, axis=dim)
    return Tensor(xp.expand_dims(out, dim) if keepdim else out)


def argmin(x, dim=None, keepdim=False):
    return argmax(-x.detach(), dim, keepdim)


def reshape(x, *shape):
    shape = shape_from_args(shape)
    return x if shape == x.shape else Reshape.apply(x, shape)


def permute(x, *dims):
    dims = tuple(d % x.ndim for d in shape_from_args(dims))
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute needs a permutation of {x.ndim} dims, got {dims}")
    return Permute.apply(x, dims)


def transpose(x, dim0, dim1):
    dims = list(range(x.ndim))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return Permute.apply(x, tuple(dims))


def unsqueeze(x, dim):
    dim = dim % (x.ndim + 1)
    return Reshape.apply(x, x.shape[:dim] + (1,) + x.shape[dim:])


def squeeze(x, dim=None):
    if dim is None:
        shape = tuple(s for s in x.shape if s != 1)
    else:
        dims = _axes(dim, x.ndim)
        shape = tuple(s for i, s in enumerate(x.shape) if not (i in dims and s == 1))
    return Reshape.apply(x, shape)


def flatten(x, start_dim=0, end_dim=-1):
    start, end = start_dim % builtins.max(x.ndim, 1), end_dim % builtins.max(x.ndim, 1)
    middle = 1
    for s in x.shape[start:end + 1]:
        middle *= s
    return Reshape.apply(x, x.shape[:start] + (middle,) + x.shape[end + 1:])


def expand(x, *shape):
    shape = shape_from_args(shape)
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return Expand.apply(x, shape)


def contiguous(x):
    return Contiguous.apply(x)


def getitem(x, index):
    return GetItem.apply(x, _raw_index(index, xp_of(x.array)))


def cat(tensors, dim=0):
    tensors = list(tensors)
    shapes = [t.shape for t in tensors]
    d = dim % tensors[0].ndim
    if any(len(s) != len(shapes[0]) or s[:d] + s[d + 1:] != shapes[0][:d] + shapes[0][d + 1:] for s in shapes):
        raise ValueError(f"cat along dim {dim} needs equal sizes in the other dims, got shapes {shapes}")
    return Cat.apply(*tensors, dim=dim)


def stack(tensors, dim=0):
    tensors = list(tensors)
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"stack needs tensors of one shape, got {sorted(shapes)}")
    return Stack.apply(*tensors, dim=dim)


def where(condition, input, other):
    anchor = input if isinstance(input, Tensor) else other
    input, other = as_tensor_like(input, anchor), as_tensor_like(other, anchor)
    return Where.apply(condition, input, other)


def masked_fill(x, mask, value):
    mask = as_array(mask)
    if mask.dtype != bool:
        raise TypeError(f"masked_fill needs a boolean mask, got dtype {mask.dtype}")
    return MaskedFill.apply(x, mask, builtins.float(value))


def repeat_interleave(x, repeats, dim=None):
    if not isinstance(repeats, builtins.int):
        raise TypeError("repeat_interleave supports an int number of repeats")
    if dim is None:
        x, dim = flatten(x), 0
    return RepeatInterleave.apply(x, repeats, dim)


def split(x, split_size_or_sections, dim=0):
    """Pieces of split_size along dim (the last may be smaller), or pieces of the listed sizes."""
    size = x.shape[dim]
    if isinstance(split_size_or_sections, builtins.int):
        sizes = [builtins.min(split_size_or_sections, size - start) for start in range(0, size, split_size_or_sections)]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != size:
            raise ValueError(f"split sizes {sizes} do not add up to dim {dim}'s size {size}")
    pieces, start = [], 0
    lead = (slice(None),) * (dim % x.ndim)
    for s in sizes:
        pieces.append(GetItem.apply(x, lead + (slice(start, start + s),)))
        start += s
    return tuple(pieces)


def chunk(x, chunks, dim=0):
    return split(x, -(-x.shape[dim] // chunks), dim)


def roll(x, shifts, dims):
    shifts = (shifts,) if isinstance(shifts, builtins.int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, builtins.int) else tuple(dims)
    return Roll.apply(x, shifts, dims)


def index_add(x, dim, index, source):
    """x with source's rows added at index along dim 0 (the only dim supported), differentiable in x and source."""
    if dim != 0:
        raise ValueError("index_add supports dim=0")
    return IndexAdd.apply(x, as_array(index), source)


def _triangle(x, keep):
    """x with zeros outside the triangle that keep marks in its last two dims."""
    return MaskedFill.apply(x, ~keep(xp_of(x.array).ones(x.shape[-2:], dtype=bool)), 0.0)


def tril(x, diagonal=0):
    """Keep the lower triangle (j <= i + diagonal) of the last two dims, zeros elsewhere."""
    return _triangle(x, lambda ones: xp_of(ones).tril(ones, diagonal))


def triu(x, diagonal=0):
    """Keep the upper triangle (j >= i + diagonal) of the last two dims, zeros elsewhere."""
    return _triangle(x, lambda ones: xp_of(ones).triu(ones, diagonal))


def to_args(args, dtype=None, device=None):
    """(dtype, device) from the arguments of tensor.to / module.to: ("cuda"), (float64), (device=..., dtype=...)."""
    for arg in args:
        if isinstance(arg, str) and arg.split(":")[0] in DEVICES:
            device = arg
        else:
            dtype = arg
    return dtype, device


def to(x, *args, dtype=None, device=None):
    """x.to("cuda"), x.to(float64), x.to(device=..., dtype=...): differentiable moves and casts."""
    dtype, device = to_args(args, dtype, device)
    if device is not None and device.split(":")[0] != x.device:
        x = ToDevice.apply(x, device.split(":")[0])
    if dtype is not None and xp_of(x.array).dtype(dtype) != x.dtype:
        x = Cast.apply(x, xp_of(x.array).dtype(dtype))
    return x


def _compare(op):
    def compare(a, b):
        b = as_array(b)
        return Tensor(op(a.array, b))
    return compare


# -- Tensor methods and operators, named as in PyTorch ----------------------------------------------
def _reflected(function):
    return lambda self, other: function(as_tensor_like(other, self), self)


def _install_methods():
    import operator
    methods = {
        "__add__": add, "__radd__": _reflected(add), "__sub__": sub, "__rsub__": _reflected(sub),
        "__mul__": mul, "__rmul__": _reflected(mul), "__truediv__": div, "__rtruediv__": _reflected(div),
        "__pow__": pow, "__rpow__": _reflected(pow), "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
        "__neg__": neg, "__getitem__": getitem,
        "__lt__": _compare(operator.lt), "__le__": _compare(operator.le), "__gt__": _compare(operator.gt),
        "__ge__": _compare(operator.ge), "__eq__": _compare(operator.eq), "__ne__": _compare(operator.ne),
        "eq": _compare(operator.eq), "ne": _compare(operator.ne), "lt": _compare(operator.lt),
        "gt": _compare(operator.gt), "le": _compare(operator.le), "ge": _compare(operator.ge),
        "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "matmul": matmul, "maximum": maximum,
        "exp": exp, "log": log, "sqrt": sqrt, "abs": abs, "tanh": tanh, "sigmoid": sigmoid, "relu": relu,
        "sum": sum, "mean": mean, "var": var, "max": max, "min": min, "argmax": argmax, "argmin": argmin,
        "reshape": reshape, "view": reshape, "permute": permute, "transpose": transpose,
        "unsqueeze": unsqueeze, "squeeze": squeeze, "flatten": flatten, "expand": expand,
        "contiguous": contiguous, "masked_fill": masked_fill, "repeat_interleave": repeat_interleave,
        "split": split, "chunk": chunk, "index_add": index_add, "roll": roll, "tril": tril, "triu": triu, "to": to,
        "float": lambda self: to(self, "float32"), "double": lambda self: to(self, "float64"),
        "long": lambda self: Tensor(self.array.astype("int64")), "bool": lambda self: Tensor(self.array.astype(bool)),
        "cpu": lambda self: to(self, "cpu"), "cuda": lambda self: to(self, "cuda"),
        "__bool__": lambda self: builtins.bool(self.item()),
        "__hash__": object.__hash__,
    }
    for name, function in methods.items():
        setattr(Tensor, name, function)
    Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
    Tensor.mT = property(lambda self: transpose(self, -2, -1))


_install_methods()
