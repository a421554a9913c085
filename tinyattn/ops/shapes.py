"""Shapes, forward beside backward: reshape, permute, expand, joining and splitting, repeating and rolling."""
import builtins
import itertools
import math

from ..backend import xp_of
from ..creation import shape_from_args
from .dims import dim_index, dim_indices
from .indexing import GetItem, getitem
from .promotion import cast, result_dtype
from ..tensor import Function


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
        if math.prod(shape) == x.size:     # no element repeated (size-1 dims only): a writable view, as PyTorch's
            return x.reshape(shape)
        return xp_of(x).broadcast_to(x, shape)     # read-only: a write would land on one element several times

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


class Cat(Function):
    @staticmethod
    def forward(ctx, *arrays, dim=0):
        ctx.dim = dim
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
        ctx.dim = dim
        return xp_of(arrays[0]).stack(arrays, axis=ctx.dim)

    @staticmethod
    def backward(ctx, grad):
        return tuple(xp_of(grad).moveaxis(grad, ctx.dim, 0))          # one view per stacked input, no copies


class RepeatInterleave(Function):
    @staticmethod
    def forward(ctx, x, repeats, dim):
        ctx.dim, ctx.repeats, ctx.size = dim, repeats, x.shape[dim]
        return xp_of(x).repeat(x, repeats, axis=ctx.dim)

    @staticmethod
    def backward(ctx, grad):
        d = ctx.dim         # sizes from forward, not from grad: with 0 repeats or a 0-size dim, grad has no elements
        split = grad.shape[:d] + (ctx.size, ctx.repeats) + grad.shape[d + 1:]
        return grad.reshape(split).sum(axis=d + 1), None, None


class Flip(Function):
    """The order of elements reversed along dims; the gradient flips back."""

    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return xp_of(x).flip(x, dims)

    @staticmethod
    def backward(ctx, grad):
        return xp_of(grad).flip(grad, ctx.dims), None


class Repeat(Function):
    """x tiled: repeats[i] copies along each dim (torch's x.repeat, NumPy's tile); every copy's gradient adds up."""

    @staticmethod
    def forward(ctx, x, repeats):
        x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
        ctx.shape, ctx.repeats = x.shape, repeats
        return xp_of(x).tile(x, repeats)

    @staticmethod
    def backward(ctx, grad):
        blocks = grad.reshape(tuple(n for pair in zip(ctx.repeats, ctx.shape) for n in pair))  # (r0, s0, r1, s1, ...)
        return blocks.sum(axis=tuple(range(0, blocks.ndim, 2))), None


class Pad(Function):
    """x with constant borders; the gradient is the middle, cut back out."""

    @staticmethod
    def forward(ctx, x, widths, value):
        ctx.middle = tuple(slice(before, before + n) for (before, _), n in zip(widths, x.shape))
        return xp_of(x).pad(x, widths, constant_values=value)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.middle], None, None


class Roll(Function):
    """Cyclic shift along dims (torch.roll); the gradient rolls back the other way."""

    @staticmethod
    def forward(ctx, x, shifts, dims):
        ctx.shifts, ctx.dims = shifts, dims
        return xp_of(x).roll(x, shifts, axis=dims)

    @staticmethod
    def backward(ctx, grad):
        return xp_of(grad).roll(grad, tuple(-s for s in ctx.shifts), axis=ctx.dims), None, None


class Diag(Function):
    """torch.diag: a vector (n,) becomes the matrix with it on diagonal k; a matrix gives its diagonal k. The gradient
    goes back the other way: the diagonal of the matrix's gradient, or the vector's gradient laid on the diagonal."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.shape, ctx.k = x.shape, k
        out = xp_of(x).diag(x, k)
        return out.copy() if x.ndim == 2 else out      # NumPy's diagonal is a read-only view; torch.diag copies

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        if len(ctx.shape) == 1:
            return xp.diagonal(grad, ctx.k).copy(), None
        grad_x = xp.zeros(ctx.shape, dtype=grad.dtype)
        steps = xp.arange(grad.shape[0])
        grad_x[steps + builtins.max(-ctx.k, 0), steps + builtins.max(ctx.k, 0)] = grad
        return grad_x, None


def reshape(x, *shape):
    shape = shape_from_args(shape)
    if shape == x.shape:
        return x
    known = math.prod(s for s in shape if s != -1)
    fits = (shape.count(-1) == 0 and known == x.numel()) or (
        shape.count(-1) == 1 and known != 0 and x.numel() % known == 0)
    if not fits:
        raise RuntimeError(f"shape {shape} is invalid for a tensor of shape {x.shape} ({x.numel()} elements)")
    return Reshape.apply(x, shape)


def permute(x, *dims):
    dims = tuple(dim_index(d, x.ndim) for d in shape_from_args(dims))
    if sorted(dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute needs a permutation of the {x.ndim} dims of shape {x.shape}, got {dims}")
    return Permute.apply(x, dims)


def transpose(x, dim0, dim1):
    dims = list(range(x.ndim))
    dim0, dim1 = dim_index(dim0, x.ndim), dim_index(dim1, x.ndim)
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return Permute.apply(x, tuple(dims))


def unsqueeze(x, dim):
    dim = dim_index(dim, x.ndim + 1)
    return Reshape.apply(x, x.shape[:dim] + (1,) + x.shape[dim:])


def squeeze(x, dim=None):
    dims = range(x.ndim) if dim is None else dim_indices(dim, x.ndim)
    return Reshape.apply(x, tuple(s for i, s in enumerate(x.shape) if not (i in dims and s == 1)))


def flatten(x, start_dim=0, end_dim=-1):
    start, end = dim_index(start_dim, x.ndim), dim_index(end_dim, x.ndim)
    if start > end:
        raise RuntimeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} (shape {x.shape})")
    return Reshape.apply(x, x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


def expand(x, *shape):
    shape = shape_from_args(shape)
    lead = len(shape) - x.ndim
    if any(s < 0 for s in shape[:builtins.max(lead, 0)]) or any(s < -1 for s in shape):
        raise RuntimeError(f"cannot expand shape {x.shape} to {shape}: -1 (keep a size) is only for existing dims, "
                           "and sizes cannot be negative")
    if lead < 0 or any(s not in (-1, x.shape[i - lead]) and x.shape[i - lead] != 1
                       for i, s in enumerate(shape) if i >= lead):
        raise RuntimeError(f"cannot expand shape {x.shape} to {shape}: only dims of size 1 grow")
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return Expand.apply(x, shape)


def broadcast_to(x, shape):
    """x viewed at a larger shape, as torch.broadcast_to (expand's rules: size-1 dims grow, -1 keeps a size)."""
    return expand(x, shape)


def unflatten(x, dim, sizes):
    """Dim `dim` split into `sizes` (one of them may be -1), as torch.unflatten: (2, 12).unflatten(1, (3, 4))."""
    d, sizes = dim_index(dim, x.ndim), tuple(sizes)
    known = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or (known != x.shape[d] if -1 not in sizes else known == 0 or x.shape[d] % known):
        raise RuntimeError(f"unflatten: sizes {list(sizes)} don't multiply up to the size of dim {dim} "
                           f"({x.shape[d]}) in the input tensor of shape {x.shape}")
    return reshape(x, x.shape[:d] + sizes + x.shape[d + 1:])


def diag(x, diagonal=0):
    """A 1-D x as a square matrix with x on diagonal `diagonal` (above the main one when positive), or the diagonal
    of a 2-D x, as torch.diag."""
    if x.ndim not in (1, 2):
        raise RuntimeError(f"diag takes a 1-D or 2-D tensor, got shape {x.shape}")
    return Diag.apply(x, int(diagonal))


def contiguous(x):
    return Contiguous.apply(x)


def _one_dtype(tensors):
    """The tensors cast to their promoted dtype (int64 with float32 is float32, as in PyTorch's cat and stack)."""
    if len({t.dtype for t in tensors}) == 1:
        return tensors
    dtype = result_dtype(*tensors)
    return [cast(t, dtype, t) for t in tensors]


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat needs at least one tensor")
    tensors = _one_dtype(tensors)
    shapes = [t.shape for t in tensors]
    d = dim_index(dim, tensors[0].ndim)
    if any(len(s) != len(shapes[0]) or s[:d] + s[d + 1:] != shapes[0][:d] + shapes[0][d + 1:] for s in shapes):
        raise RuntimeError(f"cat along dim {dim} needs equal sizes in the other dims, got shapes {shapes}")
    return Cat.apply(*tensors, dim=d)


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise RuntimeError(f"stack needs tensors of one shape, got {sorted(shapes)}")
    tensors = _one_dtype(tensors)
    return Stack.apply(*tensors, dim=dim_index(dim, tensors[0].ndim + 1))


def repeat_interleave(x, repeats, dim=None):
    if not isinstance(repeats, builtins.int):
        raise TypeError("repeat_interleave supports an int number of repeats")
    if repeats < 0:
        raise RuntimeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
    if dim is None:
        x, dim = flatten(x), 0
    return RepeatInterleave.apply(x, repeats, dim_index(dim, x.ndim))


def split(x, split_size_or_sections, dim=0):
    """Pieces of split_size along dim (the last may be smaller), or pieces of the listed sizes."""
    dim = dim_index(dim, x.ndim)
    size = x.shape[dim]
    if isinstance(split_size_or_sections, builtins.int):
        step = split_size_or_sections
        if step <= 0:
            raise RuntimeError(f"split needs a positive split_size, got {step}")
        sizes = [builtins.min(step, size - start) for start in range(0, size, step)] or [0]   # a 0-size dim: one
    else:
        sizes = list(split_size_or_sections)
        if builtins.any(s < 0 for s in sizes):
            raise RuntimeError(f"split sizes must be non-negative, got {sizes}")
        if builtins.sum(sizes) != size:
            raise RuntimeError(f"split sizes {sizes} do not add up to dim {dim}'s size {size} (shape {x.shape})")
    pieces, start = [], 0
    lead = (slice(None),) * dim
    for s in sizes:
        pieces.append(GetItem.apply(x, lead + (slice(start, start + s),)))
        start += s
    return tuple(pieces)


def narrow(x, dim, start, length):
    """The length elements from start along dim, a view as x[..., start:start + length] (a negative start counts
    from the end), as torch.narrow."""
    dim = dim_index(dim, x.ndim)
    size = x.shape[dim]
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start}): "
                         f"narrow of dim {dim} of shape {x.shape}")
    start = start + size if start < 0 else start
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}): narrow of dim {dim} "
                           f"of shape {x.shape}, and length must be non-negative")
    return getitem(x, (slice(None),) * dim + (slice(start, start + length),))


def chunk(x, chunks, dim=0):
    """At most chunks pieces of equal size along dim (the last may be smaller); a 0-size dim gives chunks empty
    pieces, as in PyTorch."""
    if not isinstance(chunks, builtins.int) or chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be a positive int, got {chunks!r}")
    size = x.shape[dim_index(dim, x.ndim)]
    return split(x, -(-size // chunks) if size else [0] * chunks, dim)


def flip(x, dims):
    dims = (dims,) if isinstance(dims, builtins.int) else tuple(dims)
    return Flip.apply(x, tuple(dim_index(d, x.ndim) for d in dims))


def repeat(x, *repeats):
    repeats = shape_from_args(repeats)
    if len(repeats) < x.ndim:
        raise RuntimeError(f"repeat needs at least as many repeats as the tensor has dims ({x.ndim}), got {repeats}")
    if builtins.any(r < 0 for r in repeats):
        raise RuntimeError(f"repeat: the number of copies cannot be negative, got {repeats}")
    return Repeat.apply(x, repeats)


def unbind(x, dim=0):
    """The slices along dim, as a tuple of tensors with that dim removed."""
    dim = dim_index(dim, x.ndim)
    lead = (slice(None),) * dim
    return tuple(GetItem.apply(x, lead + (i,)) for i in range(x.shape[dim]))


def t(x):
    """The transpose of a matrix (a tensor of at most 2 dims), as torch.t."""
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor of at most 2 dims, got shape {x.shape}: use transpose(d0, d1)")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors, as torch.meshgrid (indexing "ij": the first tensor varies along dim 0)."""
    tensors = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if indexing not in ("ij", "xy"):
        raise ValueError(f"indexing must be 'ij' or 'xy', got {indexing!r}")
    if indexing == "xy" and len(tensors) >= 2:
        tensors[0], tensors[1] = tensors[1], tensors[0]
    shape = tuple(t.numel() for t in tensors)
    grids = [expand(reshape(t, tuple(-1 if i == k else 1 for i in range(len(shape)))), shape)
             for k, t in enumerate(tensors)]
    if indexing == "xy" and len(grids) >= 2:                   # "xy": the first two swap roles (rows follow y)
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def pad(x, pad, mode="constant", value=0.0):
    """torch.nn.functional.pad: pad lists (before, after) widths from the last dim backwards, e.g. (1, 1, 2, 0) pads
    the last dim by 1 on each side and the one before by 2 at its start. Only mode="constant" (the default)."""
    if mode != "constant":
        raise NotImplementedError(f"pad mode {mode!r}: only 'constant' padding is implemented")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise RuntimeError(f"pad needs pairs of widths for at most {x.ndim} dims, got {tuple(pad)}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if builtins.any(w < 0 for pair in widths for w in pair):
        raise NotImplementedError(f"negative pad widths (cropping) are not supported, got {tuple(pad)}")
    return Pad.apply(x, tuple(widths), value)


def roll(x, shifts, dims):
    shifts = (shifts,) if isinstance(shifts, builtins.int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, builtins.int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll needs one shift per dim, got shifts {shifts} and dims {dims}")
    return Roll.apply(x, shifts, tuple(dim_index(d, x.ndim) for d in dims))
