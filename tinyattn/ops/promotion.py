"""PyTorch's type promotion: the dtype an operation on several values computes in.

Categories rank bool < integer < floating. The result takes the highest category among the operands; within it,
the widest dtype among the tensors that have dims, else among the 0-d tensors, else the category's default (the
default float dtype, int64, bool). So Python and NumPy numbers never widen a tensor (float32 * 2.5 stays float32,
and so does float32 * numpy.int64(3)), a 0-d tensor does not widen one with dims, float32 with a float64 tensor
that has dims gives float64, and an integer tensor with a float gives the default float dtype. NumPy's own rules
differ on exactly these cases, which is why tinyattn casts before it computes: Cast changes a tensor's dtype
differentiably, and cast(x, dtype, like) makes each operand (a tensor, an array or a number) a tensor of the dtype
chosen.

Functions of one tensor follow one of PyTorch's rules, declared by a decorator here and nowhere else:
- computes_in_float (exp, log, sqrt, sin, sigmoid, ...): an integer or bool input computes in the default float
  dtype (float32), as torch.exp(torch.tensor([1, 2])) does; a floating input keeps its dtype.
- float_only (softmax, mean, var, layer_norm, the losses, ...): an integer or bool input is refused, naming its dtype
  and the dtypes the function takes (PyTorch refuses these too, with its kernel's name).
- no_bool (relu, abs, neg): a bool input is refused, as in PyTorch; integers keep their dtype.
- accumulates_in_float32 (sum, mean, cumsum, var, norm, softmax, layer_norm, ...): a float16 input computes in float32
  and the result is float16 again, as PyTorch's CPU kernels accumulate float16 (a sum of 5000 float16 0.1 is 500,
  not 256: a float16 running sum stops growing once its steps round away).
A float32 input pays one attribute test: the fast path stays as it was.
"""
import functools

from .. import backend
from ..backend import device_of, get_default_dtype, is_array, xp_of
from ..tensor import Function, Tensor


class Cast(Function):
    """x in another dtype, differentiably: the gradient goes back in x's dtype."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.dtype), None


def cast(x, dtype, like):
    """x as a tensor of dtype: a tensor through Cast (differentiable), a number or array as a constant on the device
    of the tensor like."""
    if isinstance(x, Tensor):
        return x if x.dtype == dtype else Cast.apply(x, dtype)
    if is_array(x) and device_of(x) != like.device:
        raise RuntimeError(f"cannot combine a {device_of(x)} array of shape {x.shape} with a {like.device} tensor "
                           f"of shape {like.shape}")
    return Tensor(xp_of(like.array).asarray(x, dtype=dtype))


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def _number_category(value):
    if isinstance(value, (bool, backend.numpy.bool_)):
        return 0
    if isinstance(value, (int, backend.numpy.integer)):
        return 1
    if isinstance(value, (float, backend.numpy.floating)):
        return 2
    raise TypeError(f"cannot compute with a {type(value).__name__} ({value!r}): expected a tensor or a number")


def result_dtype(*operands):
    """The dtype PyTorch would compute operands (tensors, arrays, numbers) in."""
    with_dims, zero_dim, categories = [], [], []
    for x in operands:
        if isinstance(x, Tensor) or backend.is_array(x):
            (with_dims if x.ndim else zero_dim).append(x.dtype)
            categories.append(_CATEGORY[x.dtype.kind])
        else:
            categories.append(_number_category(x))
    top = max(categories)
    for group in (with_dims, zero_dim):
        same = [dtype for dtype in group if _CATEGORY[dtype.kind] == top]
        if same:
            return backend.numpy.result_type(*same)
    return (backend.bool_, backend.int64, get_default_dtype())[top]


def check_one_dtype(caller, input, **parameters):
    """Refuse parameters (a weight, a bias) of another dtype than the input, naming each, as PyTorch does: the
    result would silently take one dtype or the other."""
    other = {name: p.dtype for name, p in parameters.items() if p is not None and p.dtype != input.dtype}
    if other:
        raise RuntimeError(f"{caller} needs one dtype: input {input.dtype}, "
                           + ", ".join(f"{name} {dtype}" for name, dtype in other.items()) + " (cast with .to(dtype))")


FLOATING = "float16, float32 or float64"


def _not_a_tensor(name, value):
    return TypeError(f"{name}() takes a tensor, got {type(value).__name__} ({value!r})")


def _on_input(rule, untouched):
    """A decorator: the function's first argument (its input tensor) passes straight when its dtype's kind is in
    untouched (the common case costs one test), else through rule(input, name) first."""
    def decorate(function):
        name = function.__name__

        @functools.wraps(function)
        def apply(input, *args, **kwargs):
            try:
                kind = input.array.dtype.kind
            except AttributeError:
                raise _not_a_tensor(name, input) from None
            return function(input if kind in untouched else rule(input, name), *args, **kwargs)
        return apply
    return decorate


def _in_default_float(input, name):
    return Cast.apply(input, get_default_dtype())


def require_float(input, name, error=RuntimeError):
    """input, when it is floating; else error (PyTorch's type for the function: NotImplementedError where its kernel
    is missing for the dtype, RuntimeError where it checks), naming the dtype and the dtypes the function takes."""
    try:
        kind = input.array.dtype.kind
    except AttributeError:
        raise _not_a_tensor(name, input) from None
    if kind != "f":
        raise error(f"{name} takes floating tensors ({FLOATING}), got {input.array.dtype} of shape "
                    f"{tuple(input.shape)}: cast it with .float()")
    return input


def _refuse_bool(input, name):
    raise RuntimeError(f"{name} does not take bool tensors (shape {tuple(input.shape)}); it takes integer and "
                       f"floating ones" + (": to invert a mask use ~ or logical_not()" if name == "neg" else ""))


computes_in_float = _on_input(_in_default_float, "f")
no_bool = _on_input(_refuse_bool, "fiu")


def float_only(error=RuntimeError):
    """The decorator form of require_float, for a function whose first argument is its input."""
    return _on_input(lambda input, name: require_float(input, name, error), "f")


def in_float32_if_half(function, input, *args, **kwargs):
    """function(input, *args, **kwargs); when input is float16, with every float16 tensor among the arguments cast
    to float32 first and every float32 tensor it returns cast back to float16 (gradients go back the same way)."""
    if input.array.dtype != backend.float16:
        return function(input, *args, **kwargs)

    def up(a):
        return Cast.apply(a, backend.float32) if isinstance(a, Tensor) and a.array.dtype == backend.float16 else a

    def down(a):
        return Cast.apply(a, backend.float16) if isinstance(a, Tensor) and a.array.dtype == backend.float32 else a
    return down(function(up(input), *map(up, args), **{key: up(value) for key, value in kwargs.items()}))


def accumulates_in_float32(function):
    """The decorator form of in_float32_if_half, for a function whose first argument is its input."""
    @functools.wraps(function)
    def apply(input, *args, **kwargs):
        if input.array.dtype != backend.float16:
            return function(input, *args, **kwargs)
        return in_float32_if_half(function, input, *args, **kwargs)
    return apply
