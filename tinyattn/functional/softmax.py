"""softmax and log_softmax over one dim: the reference twins, then the fast versions.

Both subtract each row's max before exp, so no logit overflows; a row that is -inf everywhere (an attention query
with every key masked) gives zeros and a zero gradient, never NaN.
"""
from .. import cpu
from ..backend import xp_of
from ..ops import dim_index, in_float32_if_half, require_float
from ..tensor import Function
from . import twins


def row_max(x, axis):
    """Each row's max for shifting exponents; 0 where the whole row is -inf, so exp gives 0 rather than NaN, and 0
    for rows of no elements (a softmax over nothing is empty, as in PyTorch)."""
    xp = xp_of(x)
    if x.shape[axis] == 0:
        return xp.zeros(tuple(1 if i == axis % x.ndim else s for i, s in enumerate(x.shape)), dtype=x.dtype)
    m = x.max(axis=axis, keepdims=True)
    return xp.where(xp.isfinite(m), m, xp.zeros((), dtype=x.dtype))


def softmax_array(x, axis):
    """exp(x - max) / sum(exp(x - max)) along axis, on raw arrays."""
    xp = xp_of(x)
    e = xp.exp(x - row_max(x, axis))
    total = e.sum(axis=axis, keepdims=True)
    return e / xp.where(total == 0, xp.ones((), dtype=x.dtype), total)


def log_softmax_array(x, axis):
    """x - max - log(sum(exp(x - max))) along axis, on raw arrays."""
    xp = xp_of(x)
    shifted = x - row_max(x, axis)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


class ReferenceSoftmax(Function):
    """y = softmax(x); backward: dx = y * (dy - sum(dy * y)) over the same dim."""

    @staticmethod
    def forward(ctx, x, dim):
        y = softmax_array(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(axis=ctx.dim, keepdims=True)), None


class ReferenceLogSoftmax(Function):
    """y = log_softmax(x); backward: dx = dy - exp(y) * sum(dy) over the same dim."""

    @staticmethod
    def forward(ctx, x, dim):
        y = log_softmax_array(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad - xp_of(y).exp(y) * grad.sum(axis=ctx.dim, keepdims=True), None


# -- the fast versions: the softmax dim moved last, row sums by BLAS, in place ---------------------------------
def softmax_in_place(x):
    """softmax over the last axis, overwriting x (attention scores: no second array of their size)."""
    xp = xp_of(x)
    x -= row_max(x, -1)
    xp.exp(x, out=x)
    total = cpu.last_axis_sum(x)
    x /= xp.where(total == 0, xp.ones((), dtype=x.dtype), total)
    return x


def log_softmax_last(x):
    """log_softmax over the last axis."""
    xp = xp_of(x)
    shifted = x - row_max(x, -1)
    shifted -= xp.log(cpu.last_axis_sum(xp.exp(shifted)))
    return shifted


@cpu.tuned
class FastSoftmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        xp = xp_of(x)
        y = softmax_in_place(xp.moveaxis(x, dim, -1).copy())
        ctx.save_for_backward(y)
        ctx.dim = dim
        return xp.moveaxis(y, -1, dim)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        xp = xp_of(y)
        grad_x = xp.moveaxis(grad, ctx.dim, -1) * y
        grad_x -= y * cpu.last_axis_sum(grad_x)
        return xp.moveaxis(grad_x, -1, ctx.dim), None


@cpu.tuned
class FastLogSoftmax(Function):
    @staticmethod
    def forward(ctx, x, dim):
        xp = xp_of(x)
        y = log_softmax_last(xp.moveaxis(x, dim, -1))
        ctx.save_for_backward(y)
        ctx.dim = dim
        return xp.moveaxis(y, -1, dim)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        xp = xp_of(y)
        grad = xp.moveaxis(grad, ctx.dim, -1)
        grad_x = xp.exp(y)
        grad_x *= -cpu.last_axis_sum(grad)
        grad_x += grad
        return xp.moveaxis(grad_x, -1, ctx.dim), None


twins.register("softmax", FastSoftmax, ReferenceSoftmax)
twins.register("log_softmax", FastLogSoftmax, ReferenceLogSoftmax)


def softmax(input, dim=-1, dtype=None):
    """softmax over dim of a floating tensor; dtype casts the input first (as F.softmax's dtype argument)."""
    input = require_float(input if dtype is None else input.to(dtype), "softmax", NotImplementedError)
    return in_float32_if_half(twins.implementation("softmax").apply, input, dim_index(dim, input.ndim))


def log_softmax(input, dim=-1, dtype=None):
    input = require_float(input if dtype is None else input.to(dtype), "log_softmax", NotImplementedError)
    return in_float32_if_half(twins.implementation("log_softmax").apply, input, dim_index(dim, input.ndim))
