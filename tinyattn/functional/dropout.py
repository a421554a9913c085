"""Dropout: zero each element with probability p and scale the survivors by 1 / (1 - p), so that the expected
value is unchanged. On the CPU there is nothing to arrange for speed in it; on the GPU the fast version multiplies in
one CUDA kernel (dropout_kernel.py)."""
from ..backend import device_of, generator
from ..ops import require_float
from ..tensor import Function
from . import dropout_kernel, twins


class ReferenceDropout(Function):
    """y = x * keep * scale; backward: dx = dy * keep * scale (keep: the elements that survived)."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None, None


class FastDropout(ReferenceDropout):
    """The same; float32 CuPy arrays take one kernel per direction instead of two array ops."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        if not dropout_kernel.applies(x):
            return ReferenceDropout.forward(ctx, x, keep, scale)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return dropout_kernel.masked_scale(x, keep, scale)

    @staticmethod
    def backward(ctx, grad):
        if not dropout_kernel.applies(grad):
            return ReferenceDropout.backward(ctx, grad)
        (keep,) = ctx.saved_tensors
        return dropout_kernel.masked_scale(grad, keep, ctx.scale), None, None


twins.register("dropout", FastDropout, ReferenceDropout)


def keep_mask(shape, p, like):
    """True where dropout keeps an element, drawn from the seeded generator of like's device."""
    return generator(device_of(like)).random(shape, dtype=like.dtype) >= p


def check_probability(caller, p):
    """ValueError, as PyTorch's, unless p is a probability."""
    if not 0 <= p <= 1:
        raise ValueError(f"{caller} probability has to be between 0 and 1, but got {p}")


def dropout(input, p=0.5, training=True):
    """Zero each element with probability p and scale the rest by 1/(1-p); the identity when not training."""
    check_probability("dropout", p)
    if not training or p == 0:
        return input
    require_float(input, "dropout")                     # an integer tensor cannot hold 1/(1-p), as in PyTorch
    if p == 1:
        return input * 0.0
    return twins.implementation("dropout").apply(input, keep_mask(input.shape, p, input.array), 1.0 / (1.0 - p))
