"""Dropout's product x * keep * scale as one CUDA kernel (the array code makes two passes and a temporary): what
FastDropout runs on float32 CuPy arrays, forward and backward alike."""
import functools

from ..backend import float32, is_cupy_array, xp_of


def applies(x):
    """True for the arrays this kernel takes: float32 on the GPU."""
    return is_cupy_array(x) and x.dtype == float32


@functools.cache
def _kernel(xp):
    return xp.ElementwiseKernel("float32 x, bool keep, float32 scale", "float32 y", "y = x * (float)keep * scale",
                                "tinyattn_dropout")


def masked_scale(x, keep, scale):
    return _kernel(xp_of(x))(x, keep, scale)
