"""PyTorch's type promotion: the dtype an operation on several values computes in.

Categories rank bool < integer < floating. The result takes the highest category among the operands; within it,
the widest dtype among the tensors that have dims, else among the 0-d tensors, else the category's default (the
default float dtype, int64, bool). So Python and NumPy numbers never widen a tensor (float32 * 2.5 stays float32,
and so does float32 * numpy.int64(3)), a 0-d tensor does not widen one with dims, float32 with a float64 tensor
that has dims gives float64, and an integer tensor with a float gives the default float dtype. NumPy's own rules
differ on exactly these cases, which is why tinyattn casts before it computes.

Functions of one tensor follow one of PyTorch's rules, declared by a decorator here and nowhere else:
- computes_in_float (exp, log, sqrt, sin, sigmoid, ...): an integer or bool input computes in the default float
  dtype (float32), as torch.exp(torch.tensor([1, 2])) does; a floating input keeps its dtype.
- float_only (softmax, mean, var, layer_norm, the losses, ...): an integer or bool input is refused, naming its dtype
  and the dtypes the function takes (PyTorch refuses these too, with its kernel's name).
- no_bool (relu, abs, neg): a bool input is refused, as in PyTorch; integers keep their dtype.
A floating input pays one attribute test: the fast path stays as it was.
"""
import functools

from .. import backend
from ..backend import get_default_dtype
from ..tensor import Tensor

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


def _on_input(rule):
    """A decorator that passes a function's first argument (its input tensor) through rule(input, name) first."""
    def decorate(function):
        name = function.__name__

        @functools.wraps(function)
        def apply(input, *args, **kwargs):
            return function(rule(input, name), *args, **kwargs)
        return apply
    return decorate


def _kind(input, name):
    try:
        return input.array.dtype.kind
    except AttributeError:
        raise TypeError(f"{name}() takes a tensor, got {type(input).__name__} ({input!r})") from None


def _in_default_float(input, name):
    if _kind(input, name) == "f":
        return input
    from .elementwise import Cast
    return Cast.apply(input, get_default_dtype())


computes_in_float = _on_input(_in_default_float)


def require_float(input, name, error=RuntimeError):
    """input, when it is floating; else error (PyTorch's type for the function: NotImplementedError where its kernel
    is missing for the dtype, RuntimeError where it checks), naming the dtype and the dtypes the function takes."""
    if _kind(input, name) != "f":
        raise error(f"{name} takes floating tensors ({FLOATING}), got {input.array.dtype} of shape "
                    f"{tuple(input.shape)}: cast it with .float()")
    return input


def float_only(error=RuntimeError):
    """The decorator form of require_float, for a function whose first argument is its input."""
    return _on_input(lambda input, name: require_float(input, name, error))


def _refuse_bool(input, name):
    if _kind(input, name) == "b":
        raise RuntimeError(f"{name} does not take bool tensors (shape {tuple(input.shape)}); it takes integer and "
                           f"floating ones" + (": to invert a mask use ~ or logical_not()" if name == "neg" else ""))
    return input


no_bool = _on_input(_refuse_bool)
