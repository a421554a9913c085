"""PyTorch's dim arguments, checked: a dim outside the tensor's dims raises IndexError (it never wraps around)."""
import operator


def dim_index(dim, ndim):
    """One dim (negatives count from the end) as an axis in range(ndim); IndexError outside [-ndim, ndim).
    A 0-d tensor takes dims -1 and 0, as in PyTorch."""
    try:
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"a dim must be an int, got {dim!r}") from None
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-size}, {size - 1}], but got {dim})")
    return dim % size


def dim_indices(dim, ndim):
    """PyTorch's dim argument (None, an int or a sequence of ints) as a tuple of axes, or None for all."""
    if dim is None:
        return None
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    axes = tuple(dim_index(d, ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"dims {dims} name one dim more than once (tensor with {ndim} dims)")
    return axes if ndim else ()
