"""Elementwise Functions, forward beside backward: arithmetic with PyTorch's type promotion and broadcasting, and
one-input math. Gradients may come back in broadcast shapes: the engine sums them back to each input's shape."""
import builtins
import importlib

from ..backend import get_default_dtype, silent_float_errors, xp_of
from ..tensor import Function, Tensor, as_array
from .promotion import cast, computes_in_float, float_only, no_bool, result_dtype


# -- two inputs ---------------------------------------------------------------------------------------------------
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


class FloorDivide(Function):
    """a // b, rounded towards -inf (Python's //, and PyTorch's). Its derivative is 0 wherever it exists, and
    PyTorch defines none: a backward through it raises rather than pass on zeros that hide a mistake."""

    @staticmethod
    def forward(ctx, a, b):
        with silent_float_errors(a):                   # x // 0.0 is +-inf or nan, as in PyTorch
            return xp_of(a).floor_divide(a, b)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("the derivative of floor_divide (//) is not implemented, as in PyTorch (it is 0 wherever it "
                           "exists): detach() its operands where no gradient should pass")


class Remainder(Function):
    """a % b with the sign of b (Python's %, torch.remainder): a - b * floor(a / b). d/da = 1, d/db = -floor(a / b)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        with silent_float_errors(a):                   # x % 0.0 is nan, as in PyTorch
            return xp_of(a).remainder(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_b = -grad * xp_of(a).floor_divide(a, b) if ctx.needs_input_grad[1] else None
        return grad, grad_b


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
        if p == 0:                     # x ** 0 is 1 everywhere: its slope is 0, also at x = 0 (not 0 * 0 ** -1)
            return xp_of(grad).zeros_like(grad), None
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
        share = ((a > b) + 0.5 * (a == b)).astype(grad.dtype)
        return grad * share, grad * (1 - share)


class Minimum(Function):
    """Elementwise min; a tie sends half the gradient each way (as PyTorch does)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return xp_of(a).minimum(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        share = ((a < b) + 0.5 * (a == b)).astype(grad.dtype)
        return grad * share, grad * (1 - share)


# -- one input ----------------------------------------------------------------------------------------------------
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


class Sin(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return xp_of(x).sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * xp_of(x).cos(x)


class Cos(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return xp_of(x).cos(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * xp_of(x).sin(x)


class Rsqrt(Function):
    """1 / sqrt(x); its derivative is -1/2 x^(-3/2) = -out^3 / 2."""

    @staticmethod
    def forward(ctx, x):
        out = 1 / xp_of(x).sqrt(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * -0.5 * out * out * out


class Clone(Function):
    """A copy in memory of its own (what x.clone() gives); the gradient passes through unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, grad):
        return grad


class Abs(Function):
    """|x|; its slope at the kink x = 0 is sign(0) = 0, PyTorch's choice (tests/test_kinks.py lists every kink's)."""

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


class LogSigmoid(Function):
    """log s(x) = -log(1 + exp(-x)), as min(x, 0) - log(1 + exp(-|x|)) so that nothing overflows. Its derivative,
    1 - s(x) = s(-x), is smooth everywhere: the min and the abs are inside forward only, so their kinks at 0 never
    reach the gradient (built from abs and relu Functions, the chain rule would take their one-sided slopes there)."""

    @staticmethod
    def forward(ctx, x):
        xp = xp_of(x)
        ctx.save_for_backward(x)
        return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * sigmoid_array(-x)


class Relu(Function):
    """max(x, 0); the gradient passes where x > 0 only, so its slope at 0 is 0, as in PyTorch."""

    @staticmethod
    def forward(ctx, x):
        out = xp_of(x).maximum(x, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


class Clamp(Function):
    """x limited to [low, high] (either may be None; arrays of x's dtype, 0-d for a number). The result is
    min(max(x, low), high): high wherever low > high. The gradient, as PyTorch's, goes to x where low <= x <= high
    (at a bound, both ends included, x keeps it), to low where x < low < high, and to high where x > high or
    high < low (where high is the result)."""

    @staticmethod
    def forward(ctx, x, low, high):
        xp = xp_of(x)
        ctx.save_for_backward(x, low, high)
        out = x if low is None else xp.maximum(x, low)
        return out if high is None else xp.minimum(out, high)

    @staticmethod
    def backward(ctx, grad):
        x, low, high = ctx.saved_tensors
        needs = ctx.needs_input_grad
        inside = True if low is None else x >= low
        if high is not None:
            inside = inside & (x <= high)
        grad_low = grad_high = None
        if needs[1]:
            grad_low = grad * ((x < low) if high is None else (x < low) & (low < high))
        if needs[2]:
            grad_high = grad * ((x > high) if low is None else (x > high) | (high < low))
        return grad * inside, grad_low, grad_high


def binary(function, a, b, dtype=None):
    """function.apply on a and b (tensors, arrays or numbers) cast to their common dtype (promotion.py)."""
    if dtype is None and isinstance(a, Tensor) and isinstance(b, Tensor) and a.array.dtype == b.array.dtype:
        return function.apply(a, b)        # the common case, two tensors of one dtype: nothing to promote
    like = a if isinstance(a, Tensor) else b
    dtype = dtype or result_dtype(a, b)
    return function.apply(cast(a, dtype, like), cast(b, dtype, like))


def add(a, b):
    return binary(Add, a, b)


def sub(a, b):
    return binary(Sub, a, b)


def mul(a, b):
    return binary(Mul, a, b)


def div(a, b):
    """True division: integer operands give the default float dtype, as in PyTorch."""
    dtype = result_dtype(a, b)
    return binary(Div, a, b, dtype if dtype.kind == "f" else get_default_dtype())


def _integer_division(caller, function, a, b):
    """function on a and b promoted, refusing an integer division by zero (NumPy would give 0 with a warning)."""
    dtype = result_dtype(a, b)
    divisor = as_array(b)
    if dtype.kind != "f" and not bool(xp_of(divisor).all(divisor != 0)):
        raise RuntimeError(f"ZeroDivisionError: integer {caller} by zero (a divisor of {dtype} is 0)")
    return binary(function, a, b, dtype)


def floor_divide(a, b):
    """a // b rounded towards -inf, in a and b's promoted dtype, as torch.floor_divide (no gradient)."""
    return _integer_division("floor_divide", FloorDivide, a, b)


def remainder(a, b):
    """a % b with the sign of b, in a and b's promoted dtype, as torch.remainder."""
    return _integer_division("remainder", Remainder, a, b)


def pow(a, b):
    if isinstance(a, Tensor) and isinstance(b, (builtins.int, builtins.float)) and not isinstance(b, builtins.bool):
        return PowScalar.apply(cast(a, result_dtype(a, b), a), b)
    return binary(Pow, a, b)


def maximum(a, b):
    return binary(Maximum, a, b)


def minimum(a, b):
    return binary(Minimum, a, b)


def clamp(x, min=None, max=None):
    """x limited to [min, max], as torch.clamp: either bound may be None, a number or a tensor (which then gets its
    gradient too); the result has the promoted dtype of x and the bounds (an integer tensor clamped by 0.5 is
    float32, as in PyTorch)."""
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    dtype = result_dtype(x, *(bound for bound in (min, max) if bound is not None))
    low, high = (bound if bound is None or type(bound) in (builtins.int, builtins.float) else cast(bound, dtype, x)
                 for bound in (min, max))                     # Python numbers never change an array's dtype
    return Clamp.apply(cast(x, dtype, x), low, high)


@no_bool
def neg(x):
    return Neg.apply(x)


@computes_in_float
def exp(x):
    return Exp.apply(x)


@computes_in_float
def log(x):
    return Log.apply(x)


@computes_in_float
def sqrt(x):
    return Sqrt.apply(x)


@no_bool
def abs(x):
    return Abs.apply(x)


@computes_in_float
def sin(x):
    return Sin.apply(x)


@computes_in_float
def cos(x):
    return Cos.apply(x)


@computes_in_float
def rsqrt(x):
    return Rsqrt.apply(x)


def clone(x):
    return Clone.apply(x)


@computes_in_float
def tanh(x):
    return Tanh.apply(x)


@computes_in_float
def sigmoid(x):
    return Sigmoid.apply(x)


@float_only(NotImplementedError)
def logsigmoid(x):
    return LogSigmoid.apply(x)


@no_bool
def relu(x):
    return Relu.apply(x)


# Names that lived in this file until 2026-11-29, and where they live now: `from tinyattn.ops.elementwise import to`
# keeps working. Looked up when first asked for, so that this file imports none of the files that import it.
_MOVED = {**dict.fromkeys(("ToDevice", "to", "to_args"), "conversions"), "Cast": "promotion",
          **dict.fromkeys(("isnan", "isinf", "isfinite", "allclose", "isclose", "equal", "logical_and", "logical_or",
                           "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"),
                          "logic")}


def __getattr__(name):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__package__}.{_MOVED[name]}"), name)
