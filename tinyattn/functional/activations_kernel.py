"""GELU as single CUDA kernels: what FastGELU runs on float32 CuPy arrays.

On a GPU every array op is a launch and a pass over memory, and the CPU path's GELU is a chain of a dozen of them
(cpu.normal_cdf's polynomial, then the products). Here the forward is one pass, y = x Phi(x) with CUDA's normcdff
(the normal CDF to float32's accuracy, in relative terms far into the lower tail), and so is the backward, which
computes Phi(x) again from x instead of keeping it: reading one array back costs less than writing and reading two.
approximate="tanh" is the tanh form, as in activations.py.
"""
import functools

from ..backend import float32, is_cupy_array, xp_of

_CONSTANTS = "#define SQRT_2_OVER_PI 0.7978845608028654f\n#define INV_SQRT_2PI 0.3989422804014327f\n"
_TANH = "const float th = tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x));\n"
_FORWARD = {"none": "y = x * normcdff(x)",
            "tanh": _TANH + "y = 0.5f * x * (1.f + th)"}
# dy * (Phi(x) + x phi(x)); for the tanh form dy * (0.5 (1 + th) + 0.5 x (1 - th^2) du/dx)
_BACKWARD = {"none": "dx = dy * (normcdff(x) + x * INV_SQRT_2PI * expf(-0.5f * x * x))",
             "tanh": _TANH + "dx = dy * (0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * SQRT_2_OVER_PI"
                             " * (1.f + 3.f * 0.044715f * x * x))"}


def applies(x):
    """True for the arrays these kernels take: float32 on the GPU."""
    return is_cupy_array(x) and x.dtype == float32


@functools.cache
def _forward_kernel(xp, approximate):
    return xp.ElementwiseKernel("float32 x", "float32 y", _FORWARD[approximate], f"tinyattn_gelu_{approximate}",
                                preamble=_CONSTANTS)


@functools.cache
def _backward_kernel(xp, approximate):
    return xp.ElementwiseKernel("float32 dy, float32 x", "float32 dx", _BACKWARD[approximate],
                                f"tinyattn_gelu_{approximate}_grad", preamble=_CONSTANTS)


def gelu(x, approximate):
    return _forward_kernel(xp_of(x), approximate)(x)


def gelu_grad(grad, x, approximate):
    return _backward_kernel(xp_of(x), approximate)(grad, x)
