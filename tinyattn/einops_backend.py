"""einops on tinyattn tensors: rearrange, repeat, reduce and einsum work on them, differentiably, when einops is
installed (it stays optional). einops finds a backend among the subclasses of its AbstractBackend whose framework
module is imported; this one is defined when tinyattn is imported and einops can be."""
try:
    from einops._backends import AbstractBackend
except ImportError:          # einops not installed: nothing to teach it
    AbstractBackend = None

from . import ops
from .tensor import Tensor

if AbstractBackend is not None:
    class TinyattnBackend(AbstractBackend):
        framework_name = "tinyattn"

        def is_appropriate_type(self, tensor):
            return isinstance(tensor, Tensor)

        def from_numpy(self, x):
            return Tensor(x)

        def to_numpy(self, x):
            return x.numpy()

        def arange(self, start, stop):
            from .creation import arange
            return arange(start, stop)

        def shape(self, x):
            return x.shape

        def reshape(self, x, shape):
            return ops.reshape(x, tuple(shape))

        def transpose(self, x, axes):
            return ops.permute(x, tuple(axes))

        def reduce(self, x, operation, axes):
            """einops' reductions as PyTorch's backend does them: max and min are amax and amin (tied values share
            the gradient), prod multiplies over every axis at once."""
            axes = tuple(axes)
            if operation in ("sum", "mean", "any", "all"):
                return getattr(ops, operation)(x, axes)
            if operation in ("max", "min"):
                return (ops.amax if operation == "max" else ops.amin)(x, axes)
            if operation == "prod":
                for axis in sorted(axes, reverse=True):
                    x = ops.prod(x, axis)
                return x
            raise NotImplementedError(f"einops reduction {operation!r} on tinyattn tensors (sum, mean, max, min, prod, "
                                      "any and all are supported)")

        def stack_on_zeroth_dimension(self, tensors):
            return ops.stack(tensors)

        def add_axis(self, x, new_position):
            return ops.unsqueeze(x, new_position)

        def tile(self, x, repeats):
            return ops.repeat(x, *repeats)

        def concat(self, tensors, axis):
            return ops.cat(tensors, axis)

        def is_float_type(self, x):
            return x.dtype.kind == "f"

        def einsum(self, pattern, *x):
            return ops.einsum(pattern, *x)
