"""How a tensor prints: as PyTorch prints one, so that output copied from a PyTorch tutorial reads the same.

tensor([[1.5000, 2.0000]]) for floats (4 decimals, or scientific notation when the values span more than a factor of
1000 or are very large or small), the dtype shown only when it is not the default of its kind (the default float
dtype, int64, bool), with the device first when it is not the CPU, then the size of an empty tensor that has other
than one dim (tensor([], size=(2, 0))), then requires_grad or grad_fn. Long tensors are summarised with ... as
PyTorch does past 1000 elements.
"""
import numpy

from . import backend


def _float_format(values):
    finite = numpy.abs(values[numpy.isfinite(values)])
    nonzero = finite[finite > 0]
    scientific = nonzero.size and (nonzero.max() / nonzero.min() > 1000 or nonzero.max() >= 1e8
                                   or nonzero.min() < 1e-4)
    if scientific:
        return lambda v: f"{v:.4e}"
    whole = finite.size and (finite == numpy.round(finite)).all()
    return (lambda v: f"{v:.0f}.") if whole else (lambda v: f"{v:.4f}")


def tensor_repr(array, device, grad):
    """The text of tensor(...): the values, then device (if not the CPU), dtype (if not a default) and grad (a
    "requires_grad=True" or "grad_fn=<...>", or None), in PyTorch's order."""
    values = backend.to_host(array)
    if values.dtype.kind == "f":
        formatter = {"float_kind": _float_format(values.astype(numpy.float64))}
    else:
        formatter = None
    body = numpy.array2string(values, separator=", ", prefix="tensor(", formatter=formatter, threshold=1000,
                              edgeitems=3, max_line_width=80)
    extras = [f"device='{device}'"] if device != "cpu" else []
    if values.size == 0 and values.ndim != 1:          # tensor([]) alone would hide the shape of a (2, 0) tensor
        extras.append(f"size={tuple(values.shape)}")
    if values.dtype not in (backend.get_default_dtype(), numpy.int64, numpy.bool_):
        extras.append(f"dtype=tinyattn.{values.dtype.name}")
    extras += [grad] if grad else []
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
