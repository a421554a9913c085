"""GELU, exact and in its tanh form, and SiLU: the reference twins, then the fast versions; softplus and GLU, made of
primitive ops (their gradients are theirs)."""
import math

from .. import cpu
from ..backend import erfc, xp_of
from ..ops import chunk, dim_index, float_only, logsigmoid, sigmoid, sigmoid_array, where
from ..tensor import Function
from . import activations_kernel, twins

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _gelu_tanh(x):
    """0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3); and tanh(u), which its derivative needs."""
    th = xp_of(x).tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1 + th), th


def _gelu_tanh_grad(grad, x, th):
    """dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx), du/dx = sqrt(2 / pi) (1 + 3 * 0.044715 x^2)."""
    du = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
    return grad * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du)


class ReferenceGELU(Function):
    """GELU(x) = x Phi(x), Phi the standard normal CDF; its derivative is Phi(x) + x phi(x), phi the normal density.

    Exact by construction: Phi(x) = erfc(-x / sqrt 2) / 2 with the C library's erfc (correct to about an ulp, and
    in relative terms far into the lower tail, where 1 + erf(x / sqrt 2) would lose every digit).
    approximate="tanh" is the tanh form (Hendrycks & Gimpel), exactly as written.
    """
    WHY = {"cdf": "Phi(x): the derivative Phi(x) + x phi(x)",             # what backward reads each for (memory)
           "th": "the tanh inside the approximation: its derivative reads it"}

    @staticmethod
    def forward(ctx, x, approximate):
        ctx.approximate = approximate
        if approximate == "tanh":
            y, th = _gelu_tanh(x)
            ctx.save_for_backward(x, th)
            return y
        cdf = 0.5 * erfc(-_SQRT_HALF * x)
        ctx.save_for_backward(x, cdf)
        return x * cdf

    @staticmethod
    def backward(ctx, grad):
        if ctx.approximate == "tanh":
            return _gelu_tanh_grad(grad, *ctx.saved_tensors), None
        x, cdf = ctx.saved_tensors
        density = _INV_SQRT_2PI * xp_of(x).exp(-0.5 * x * x)
        return grad * (cdf + x * density), None


class ReferenceSiLU(Function):
    """SiLU(x) = x s(x), s the sigmoid; its derivative is s (1 + x (1 - s))."""
    WHY = {"s": "sigmoid(x): the derivative s (1 + x (1 - s))"}

    @staticmethod
    def forward(ctx, x):
        s = sigmoid_array(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * s * (1 + x * (1 - s))


# -- the fast versions: elementwise chains on cache-sized pieces shared among the CPU threads, each writing its
# results into the arrays it is given ---------------------------------------------------------------------------
def _gelu_piece(x, y, slope=None):
    """y = x Phi(x) with Phi from the fitted polynomial (cpu.normal_cdf); and, where given, the slope
    Phi(x) + x phi(x) that the backward multiplies its gradient by, made while x, Phi(x) and exp(-x^2 / 2) are in
    cache. The backward keeps one array instead of those three: the D=128 GPT step of the bench peaked 7 MiB lower
    (79 MiB above its start, not 86), at the same speed."""
    xp = xp_of(x)
    cdf, gauss = cpu.normal_cdf(x)
    xp.multiply(x, cdf, out=y)
    if slope is not None:
        xp.multiply(x, gauss, out=slope)
        slope *= _INV_SQRT_2PI
        slope += cdf


def _gelu_tanh_piece(x, y, th):
    """The tanh form as the reference writes it, copied into y and th while the piece is in cache."""
    y[...], th[...] = _gelu_tanh(x)


def _gelu_tanh_grad_piece(grad, x, th, grad_x):
    grad_x[...] = _gelu_tanh_grad(grad, x, th)


@cpu.tuned
class FastGELU(Function):
    WHY = {**ReferenceGELU.WHY, "slope": "GELU's derivative at x, made in the forward pass: dx = g slope"}

    @staticmethod
    def forward(ctx, x, approximate):
        ctx.approximate = approximate
        ctx.fused = activations_kernel.applies(x)                        # float32 on the GPU: one CUDA kernel
        if ctx.fused:
            ctx.save_for_backward(x)
            return activations_kernel.gelu(x, approximate)
        flat, xp = x.reshape(-1), xp_of(x)
        if approximate == "tanh":
            y, th = cpu.for_each_piece(_gelu_tanh_piece, [flat], [xp.empty_like(flat) for _ in range(2)])
            ctx.save_for_backward(x, th)
            return y.reshape(x.shape)
        slope_too = ctx.needs_input_grad[0]                  # none under no_grad or for an input without grad
        y, *slope = cpu.for_each_piece(_gelu_piece, [flat], [xp.empty_like(flat) for _ in range(1 + slope_too)])
        ctx.save_for_backward(*slope)
        return y.reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        if ctx.fused:
            (x,) = ctx.saved_tensors
            return activations_kernel.gelu_grad(grad, x, ctx.approximate), None
        if ctx.approximate == "tanh":
            x, th = ctx.saved_tensors
            flat = x.reshape(-1)
            (grad_x,) = cpu.for_each_piece(_gelu_tanh_grad_piece, [grad.reshape(-1), flat, th],
                                           [xp_of(x).empty_like(flat)])
            return grad_x.reshape(x.shape), None
        (slope,) = ctx.saved_tensors
        return grad * slope.reshape(grad.shape), None


@cpu.tuned
class FastSiLU(ReferenceSiLU):
    """The same, with the sigmoid's choice of formula made by arithmetic instead of where() (cpu.sigmoid)."""

    @staticmethod
    def forward(ctx, x):
        s = cpu.sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s


twins.register("gelu", FastGELU, ReferenceGELU)
twins.register("silu", FastSiLU, ReferenceSiLU)


@float_only(NotImplementedError)
def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return twins.implementation("gelu").apply(input, approximate)


@float_only(NotImplementedError)
def silu(input):
    return twins.implementation("silu").apply(input)


@float_only(NotImplementedError)
def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, as torch.nn.functional.softplus: x itself where beta x > threshold. Written as
    -logsigmoid(-beta x) / beta, which never overflows, so its gradient is the sigmoid of beta x everywhere else."""
    scaled = input * beta
    return where(scaled > threshold, input, -logsigmoid(-scaled) / beta)


def glu(input, dim=-1):
    """The gated linear unit a * sigmoid(b), a and b the two halves of input along dim (torch's F.glu)."""
    size = input.shape[dim_index(dim, input.ndim)]
    if size % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {dim} is size {size} "
                           f"(input shape {input.shape})")
    a, b = chunk(input, 2, dim)
    return a * sigmoid(b)
