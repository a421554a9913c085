"""PyTorch's type promotion: the dtype an operation on several values computes in.

Categories rank bool < integer < floating. The result takes the highest category among the operands; within it,
the widest dtype among the tensors that have dims, else among the 0-d tensors, else the category's default (the
default float dtype, int64, bool). So Python and NumPy numbers never widen a tensor (float32 * 2.5 stays float32,
and so does float32 * numpy.int64(3)), a 0-d tensor does not widen one with dims, float32 with a float64 tensor
that has dims gives float64, and an integer tensor with a float gives the default float dtype. NumPy's own rules
differ on exactly these cases, which is why tinyattn casts before it computes.
"""
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
