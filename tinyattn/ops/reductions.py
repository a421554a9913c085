"""Reductions, forward beside backward: sum, mean, var, max and min (over everything or along a dim), arg max/min."""
import builtins
import math
import warnings
from collections import namedtuple

from ..backend import silent_float_errors, xp_of
from ..tensor import Function, Tensor
from .dims import dim_index, dim_indices
from .elementwise import maximum, minimum
from .promotion import accumulates_in_float32, computes_in_float, float_only


def _restore_reduced(grad, shape, axes, keepdim):
    """Broadcast the gradient of a reduction back over the axes it reduced."""
    xp = xp_of(grad)
    if axes is not None and not keepdim:
        grad = xp.expand_dims(grad, axes)
    return xp.broadcast_to(grad, shape)


def _count(shape, axes):
    return math.prod(shape) if axes is None else math.prod(shape[a] for a in axes)


class Sum(Function):
    @staticmethod
    def forward(ctx, x, axes, keepdim):
        ctx.shape, ctx.axes, ctx.keepdim = x.shape, axes, keepdim
        return x.sum(axis=axes, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        return _restore_reduced(grad, ctx.shape, ctx.axes, ctx.keepdim), None, None


def _divide(total, count):
    """total / count (a Python int: the dtype stays); count 0 gives 0/0 = nan or s/0 = inf, quietly, as in PyTorch."""
    if count:
        return total / count
    with silent_float_errors(total):
        return total / 0.0


def _mean_array(x, axes, keepdims):
    """The mean over axes as sum / count (nan over no elements)."""
    return _divide(x.sum(axis=axes, keepdims=keepdims), _count(x.shape, axes))


class Mean(Function):
    @staticmethod
    def forward(ctx, x, axes, keepdim):
        ctx.shape, ctx.axes, ctx.keepdim = x.shape, axes, keepdim
        return _mean_array(x, axes, keepdim)

    @staticmethod
    def backward(ctx, grad):
        grad = _divide(grad, _count(ctx.shape, ctx.axes))    # over no elements: no element takes the inf either
        return _restore_reduced(grad, ctx.shape, ctx.axes, ctx.keepdim), None, None


class Var(Function):
    """Variance with Bessel's correction by default (correction=1), as torch.var. With no degrees of freedom left
    (n <= correction: the std of one element) it is 0/0 = nan (or s/0 = inf), and so is its gradient, as in PyTorch."""

    @staticmethod
    def forward(ctx, x, axes, keepdim, correction):
        centred = x - _mean_array(x, axes, True)
        ctx.save_for_backward(centred)
        ctx.axes, ctx.keepdim = axes, keepdim
        ctx.denominator = builtins.max(_count(x.shape, axes) - correction, 0)
        return _divide((centred * centred).sum(axis=axes, keepdims=keepdim), ctx.denominator)

    @staticmethod
    def backward(ctx, grad):
        (centred,) = ctx.saved_tensors
        grad = _restore_reduced(grad, centred.shape, ctx.axes, ctx.keepdim)
        return _divide(2 * grad * centred, ctx.denominator), None, None, None


class Norm(Function):
    """(sum |x|^p)^(1/p) over axes (p = inf: max |x|); its gradient sign(x) |x|^(p-1) / norm^(p-1), and 0 where the
    norm is 0 (a subgradient, as PyTorch gives, where the formula would be 0/0)."""

    @staticmethod
    def forward(ctx, x, p, axes, keepdim):
        xp = xp_of(x)
        magnitude = xp.abs(x)
        norm = magnitude.max(axis=axes, keepdims=True) if p == math.inf else \
            (magnitude ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)
        ctx.save_for_backward(x, norm)
        ctx.p, ctx.axes, ctx.keepdim = p, axes, keepdim
        return norm if keepdim else norm.reshape(tuple(s for i, s in enumerate(norm.shape)
                                                       if axes is not None and i not in axes))

    @staticmethod
    def backward(ctx, grad):
        x, norm = ctx.saved_tensors
        xp = xp_of(x)
        grad = grad.reshape(norm.shape)
        safe = xp.where(norm == 0, xp.ones((), dtype=norm.dtype), norm)
        if ctx.p == math.inf:
            hits = (xp.abs(x) == norm).astype(x.dtype)
            slope = xp.sign(x) * hits / hits.sum(axis=ctx.axes, keepdims=True)
        elif ctx.p == 2:
            slope = x / safe
        else:                                 # sign(x) |x|^(p-1): 0 at a zero element for every p (PyTorch's), where
            magnitude = xp.abs(x)             # x |x|^(p-2) would be 0 * inf = nan for p < 2
            nonzero = xp.where(magnitude == 0, xp.ones((), dtype=x.dtype), magnitude)
            slope = xp.where(magnitude == 0, xp.zeros((), dtype=x.dtype), xp.sign(x) * nonzero ** (ctx.p - 1)) \
                / safe ** (ctx.p - 1)
        return xp.where(norm == 0, xp.zeros((), dtype=x.dtype), grad * slope), None, None, None


class Cumsum(Function):
    """Running sums along a dim; each input element reaches every later sum, so its gradient sums the output
    gradients from itself to the end (a cumulative sum taken backwards)."""

    @staticmethod
    def forward(ctx, x, dim):
        ctx.dim = dim
        return xp_of(x).cumsum(x, axis=dim)

    @staticmethod
    def backward(ctx, grad):
        xp = xp_of(grad)
        return xp.flip(xp.cumsum(xp.flip(grad, ctx.dim), axis=ctx.dim), ctx.dim), None


class TakeAlongDim(Function):
    """x's values at given indices along one dim (max or min picks them); the gradient goes back to those indices."""

    @staticmethod
    def forward(ctx, x, indices, dim, keepdim):
        xp = xp_of(x)
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
        return xp.where(chosen, grad, xp.zeros((), dtype=grad.dtype)), None, None, None


class MaxOrMin(Function):
    """max (largest=True) or min over axes (None: all elements), as amax and amin. Tied values share the gradient
    evenly, as in PyTorch; when a NaN is there, the result is NaN and the gradient goes to the NaNs."""

    @staticmethod
    def forward(ctx, x, axes, keepdim, largest):
        out = x.max(axis=axes, keepdims=True) if largest else x.min(axis=axes, keepdims=True)
        ctx.save_for_backward(x, out)
        ctx.axes, ctx.keepdim = axes, keepdim
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape)
                                                     if axes is not None and i not in axes))

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        xp = xp_of(x)
        hits = xp.where(xp.isnan(out), xp.isnan(x), x == out).astype(grad.dtype)
        return grad.reshape(out.shape) * hits / hits.sum(axis=ctx.axes, keepdims=True), None, None, None


class Prod(Function):
    """The product over axes (None: all elements). Each element's derivative is the product of the others, built
    from running products from the left and from the right (exact with zeros, where out / x would be 0/0)."""

    @staticmethod
    def forward(ctx, x, axes, keepdim):
        ctx.save_for_backward(x)
        ctx.axes, ctx.keepdim = axes, keepdim
        return x.prod(axis=axes, keepdims=keepdim)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        xp = xp_of(x)
        axes = tuple(range(x.ndim)) if ctx.axes is None else ctx.axes
        last = tuple(range(x.ndim - len(axes), x.ndim))
        moved = xp.moveaxis(x, axes, last)                                   # the reduced dims last, as one row
        rows = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
        if rows.shape[-1] == 0:
            return xp.zeros_like(x), None, None
        ones = xp.ones(rows.shape[:-1] + (1,), dtype=x.dtype)
        before = xp.cumprod(xp.concatenate([ones, rows[..., :-1]], axis=-1), axis=-1)
        after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(rows, -1)[..., :-1]], axis=-1), axis=-1), -1)
        others = xp.moveaxis((before * after).reshape(moved.shape), last, axes)
        return _restore_reduced(grad, x.shape, ctx.axes, ctx.keepdim) * others, None, None


class LogSumExp(Function):
    """log(sum(exp(x))) over axes, with each slice's max taken out first so that nothing overflows; its gradient is
    the softmax over the same axes. A slice that is -inf everywhere gives -inf and a zero gradient (as the softmax
    of a fully masked row here), not NaN."""

    @staticmethod
    def forward(ctx, x, axes, keepdim):
        xp = xp_of(x)
        m = x.max(axis=axes, keepdims=True) if x.size else xp.zeros((1,) * x.ndim, dtype=x.dtype)
        m = xp.where(xp.isfinite(m), m, xp.zeros((), dtype=x.dtype))
        with silent_float_errors(x):                                 # log(0) = -inf for a slice of -inf
            out = m + xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True))
        ctx.save_for_backward(x, out)
        ctx.axes, ctx.keepdim = axes, keepdim
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        xp = xp_of(x)
        weights = xp.exp(x - xp.where(xp.isfinite(out), out, xp.zeros((), dtype=x.dtype)))
        weights = xp.where(xp.isneginf(out), xp.zeros((), dtype=x.dtype), weights)
        return _restore_reduced(grad, x.shape, ctx.axes, ctx.keepdim) * weights, None, None


@accumulates_in_float32
def sum(x, dim=None, keepdim=False):
    return Sum.apply(x, dim_indices(dim, x.ndim), keepdim)


@float_only()
@accumulates_in_float32
def mean(x, dim=None, keepdim=False):
    return Mean.apply(x, dim_indices(dim, x.ndim), keepdim)


@float_only()
@accumulates_in_float32
def var(x, dim=None, keepdim=False, correction=None, unbiased=None, _caller="var"):
    if unbiased is not None and correction is not None:
        raise TypeError(f"{_caller}() takes unbiased or correction, not both")
    if correction is None:                      # Bessel's correction unless unbiased=False asks for none
        correction = 0 if unbiased is False else 1
    axes = dim_indices(dim, x.ndim)
    if _count(x.shape, axes) - correction <= 0:
        warnings.warn(f"{_caller}(): degrees of freedom is <= 0 (correction {correction} for {_count(x.shape, axes)} "
                      f"elements per result, shape {x.shape}): the result is nan or inf, as in PyTorch",
                      UserWarning, stacklevel=3)
    return Var.apply(x, axes, keepdim, correction)


@float_only()
def std(x, dim=None, keepdim=False, correction=None, unbiased=None):
    """The square root of var (Bessel's correction by default, as torch.std)."""
    return var(x, dim, keepdim, correction, unbiased, _caller="std").sqrt()


@float_only()
@accumulates_in_float32
def norm(x, p=2, dim=None, keepdim=False):
    """The p-norm over dims (all of them by default), as torch.norm; p may be a number, inf or "fro" (= 2)."""
    p = 2 if p == "fro" else p
    if not (p == math.inf or (isinstance(p, (int, float)) and p > 0)):
        raise ValueError(f"norm supports p > 0, inf and 'fro', got {p!r}")
    return Norm.apply(x, float(p), dim_indices(dim, x.ndim), keepdim)


@accumulates_in_float32
def cumsum(x, dim):
    return Cumsum.apply(x, dim_index(dim, x.ndim))


def any(x, dim=None, keepdim=False):
    return Tensor(x.array.any(axis=dim_indices(dim, x.ndim), keepdims=keepdim))


def all(x, dim=None, keepdim=False):
    return Tensor(x.array.all(axis=dim_indices(dim, x.ndim), keepdims=keepdim))


# (values, indices), as max(dim=...), min(dim=...), sort and topk return them (PyTorch's torch.return_types)
ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _check_not_empty(caller, x, dim):
    """There is no largest (or smallest) of nothing: refuse a reduction over no elements, as PyTorch does; a dim of
    other 0-size dims gives an empty result."""
    if dim is None and x.numel() == 0:
        raise RuntimeError(f"{caller} of an empty tensor of shape {x.shape}: there is no value to return; name a "
                           "dim of non-zero size")
    if dim is not None and x.ndim and x.shape[dim] == 0:
        raise RuntimeError(f"{caller}: expected reduction dim {dim} to have non-zero size (shape {x.shape})")


def _extreme(x, dim, keepdim, largest):
    dim = None if dim is None else dim_index(dim, x.ndim)
    _check_not_empty("max" if largest else "min", x, dim)
    if dim is None:
        return MaxOrMin.apply(x, None, False, largest)
    xp = xp_of(x.array)
    indices = (xp.argmax if largest else xp.argmin)(x.array, axis=dim)
    values = TakeAlongDim.apply(x, indices, dim, keepdim)
    return ValuesIndices(values, Tensor(xp.expand_dims(indices, dim) if keepdim else indices))


def _amax_or_amin(caller, x, dim, keepdim, largest):
    axes = None if dim == () else dim_indices(dim, x.ndim)           # dim=() reduces every dim, as in PyTorch
    for axis in range(x.ndim) if axes is None else axes:
        _check_not_empty(caller, x, axis)
    if x.ndim == 0:
        _check_not_empty(caller, x, None)
    return MaxOrMin.apply(x, axes, keepdim, largest)


def amax(x, dim=(), keepdim=False):
    """The largest values over dims (all by default), as torch.amax: tied values share the gradient evenly (max
    along a dim gives it to the index it returns)."""
    return _amax_or_amin("amax", x, dim, keepdim, True)


def amin(x, dim=(), keepdim=False):
    return _amax_or_amin("amin", x, dim, keepdim, False)


@accumulates_in_float32
def prod(x, dim=None, keepdim=False):
    """The product over one dim (or all elements), as torch.prod; bool and integer inputs give int64."""
    axes = None if dim is None else (dim_index(dim, x.ndim),)
    if x.dtype.kind in "biu":
        return Tensor(x.array.prod(axis=axes, keepdims=keepdim, dtype="int64"))
    return Prod.apply(x, axes, keepdim)


@computes_in_float
@accumulates_in_float32
def logsumexp(x, dim, keepdim=False):
    """log(sum(exp(x))) over dim (an int or a tuple), as torch.logsumexp: stable for large values."""
    return LogSumExp.apply(x, dim_indices(dim, x.ndim), keepdim)


def max(x, dim=None, keepdim=False):
    """The largest element, or (values, indices) along dim; with a tensor second argument, the elementwise max."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _extreme(x, dim, keepdim, largest=True)


def min(x, dim=None, keepdim=False):
    """The smallest element, or (values, indices) along dim; with a tensor second argument, the elementwise min."""
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    return _extreme(x, dim, keepdim, largest=False)


def _arg(pick, x, dim, keepdim):
    """The index pick (argmax or argmin) finds, over all of x or along dim."""
    xp = xp_of(x.array)
    dim = None if dim is None else dim_index(dim, x.ndim)
    _check_not_empty(pick, x, dim)
    if dim is None:
        return Tensor(getattr(xp, pick)(x.array))
    out = getattr(xp, pick)(x.array, axis=dim)
    return Tensor(xp.expand_dims(out, dim) if keepdim else out)


def argmax(x, dim=None, keepdim=False):
    return _arg("argmax", x, dim, keepdim)


def argmin(x, dim=None, keepdim=False):
    return _arg("argmin", x, dim, keepdim)
