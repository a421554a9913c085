"""Moves between devices and dtypes: ToDevice (differentiable: the gradient goes back to the device it came from),
and to(), which takes every form of PyTorch's tensor.to (to_args reads them, for module.to too)."""
from .. import backend
from ..backend import check_device, device_of, to_device
from ..tensor import Function, Tensor
from .elementwise import clone
from .promotion import Cast


class ToDevice(Function):
    @staticmethod
    def forward(ctx, x, device):
        ctx.device = device_of(x)
        return to_device(x, device)

    @staticmethod
    def backward(ctx, grad):
        return to_device(grad, ctx.device), None


def to_args(args, dtype=None, device=None, non_blocking=False, copy=False):
    """(dtype, device, copy) from the arguments of tensor.to / module.to, in every form PyTorch takes: to(device),
    to("cpu"), to(dtype), to(device, dtype), to(other_tensor) (its device and dtype), to(device=..., dtype=...), then
    non_blocking and copy, by position or by name. A device is a name, a tinyattn.device, or anything with a string
    .type as torch.device has; a string that is no dtype name is a device (an unknown one raises, naming the devices
    there are). non_blocking changes nothing: every transfer here finishes before it returns."""
    flags = []
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, bool):
            flags.append(arg)
        elif isinstance(getattr(arg, "type", None), str) or isinstance(arg, str) and not _is_dtype_name(arg):
            device = arg
        else:
            dtype = arg
    if len(flags) > 2:
        raise TypeError(f"to() takes non_blocking and copy after the device and dtype, got {len(flags)} flags")
    copy = flags[1] if len(flags) == 2 else copy
    if dtype is not None:
        try:
            dtype = backend.numpy.dtype(dtype)
        except TypeError:
            raise TypeError(f"to() got {dtype!r}, which is neither a device nor a dtype") from None
    if device is not None:
        device = check_device(device.type if isinstance(getattr(device, "type", None), str) else device)
    return dtype, device, copy


def _is_dtype_name(name):
    try:
        backend.numpy.dtype(name)
        return True
    except TypeError:
        return False


def to(x, *args, dtype=None, device=None, non_blocking=False, copy=False):
    """x.to("cuda"), x.to(float64), x.to(device, dtype), x.to(other), x.to(device=..., dtype=..., copy=True):
    differentiable moves and casts. x itself when nothing changes, unless copy=True asks for a new tensor."""
    dtype, device, copy = to_args(args, dtype, device, non_blocking, copy)
    result = x
    if device is not None and device != x.device:
        result = ToDevice.apply(result, device)
    if dtype is not None and dtype != result.dtype:
        result = Cast.apply(result, dtype)
    return clone(result) if copy and result is x else result
