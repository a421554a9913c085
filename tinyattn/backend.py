"""The only module that knows NumPy from CuPy.

Everything above it asks for an array module (``xp``) by device name or from an
array it already holds, so the same op code runs on the CPU and on an NVIDIA GPU.
CuPy is imported lazily: a machine without it never pays for the import.
"""
import contextlib
import math
import os
import warnings

import numpy

DEVICES = ("cpu", "cuda")
_cupy = None
_default_device = None
_seed = 0
_generators = {}


def _load_cupy():
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError as error:
            raise RuntimeError("device 'cuda' needs CuPy: pip install cupy-cuda12x (or cupy-cuda13x, "
                               "matching your CUDA driver)") from error
        _cupy = cupy
    return _cupy


class device:
    """A device, as torch.device: device("cuda"), device("cuda:0"), device("cpu"). It equals the string that names it
    (a tensor's .device == "cpu" holds), and "cuda" equals "cuda:0" (there is one GPU here)."""

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        name, _, number = str(type).partition(":")
        self.type = check_device(name)
        self.index = int(number) if number else index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except RuntimeError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and (self.index is None or other.index is None or self.index == other.index)

    def __hash__(self):
        return hash(self.type)


def cuda_is_available():
    """True when CuPy imports and sees at least one GPU."""
    try:
        return _load_cupy().cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU here"
        return False


def check_device(device):
    """Normalise a device name ('cpu', 'cuda', 'cuda:0') to 'cpu' or 'cuda'."""
    name = str(device).split(":")[0]
    if name not in DEVICES:
        raise RuntimeError(f"unknown device {device!r}; expected one of {DEVICES}")
    return name


def default_device():
    """The device new tensors go to: set_default_device(), else $TINYATTN_DEVICE, else 'cpu'."""
    return _default_device or check_device(os.environ.get("TINYATTN_DEVICE", "cpu"))


def set_default_device(device):
    global _default_device
    _default_device = None if device is None else check_device(device)


def xp_for(device):
    """The array module for a device name."""
    return _load_cupy() if check_device(device) == "cuda" else numpy


def is_cupy_array(array):
    return not isinstance(array, numpy.ndarray) and type(array).__module__.startswith("cupy")


def is_array(value):
    """A NumPy or CuPy array (not a Python number, not a Tensor)."""
    return isinstance(value, numpy.ndarray) or is_cupy_array(value)


def read_only(array):
    """A view of a NumPy array that refuses writes (array itself stays writable); anything else as it is: CuPy
    arrays have no such flag."""
    if not isinstance(array, numpy.ndarray):
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def xp_of(array):
    """The array module an array belongs to (numpy for Python scalars too)."""
    return _load_cupy() if is_cupy_array(array) else numpy


def device_of(array):
    """The device name of an array: 'cuda' or 'cpu'."""
    return "cuda" if is_cupy_array(array) else "cpu"


def to_device(array, device):
    """Move an array to a device; a no-op when it is already there."""
    device = check_device(device)
    if device_of(array) == device:
        return array
    if device == "cuda":
        return _load_cupy().asarray(array)
    return array.get()


def to_host(array):
    """A NumPy array on the host (an explicit, synchronising transfer for CuPy arrays)."""
    return array.get() if is_cupy_array(array) else numpy.asarray(array)


def silent_float_errors(array, overflow=False):
    """A context in which a division by zero or an invalid operation on array's module gives inf or nan without
    NumPy's RuntimeWarning (CuPy never warns), for results whose inf or nan is the answer PyTorch gives too; with
    overflow, an overflow as well, for a result that is checked and made again when it is not finite. NumPy keeps
    this setting per thread: a thread that works on a share of the result enters the context itself."""
    if is_cupy_array(array):
        return contextlib.nullcontext()
    return numpy.errstate(divide="ignore", invalid="ignore", over="ignore" if overflow else None)


def scatter_add(target, indices, values):
    """target[indices] += values, summing repeated indices (plain assignment would keep only one)."""
    xp_of(target).add.at(target, indices, values)      # on the GPU, atomic adds
    return target


def erfc(x):
    """The complementary error function, elementwise, from the C library (NumPy has none) or CuPy's."""
    if is_cupy_array(x):
        import cupyx.scipy.special
        return cupyx.scipy.special.erfc(x)
    return _erfc(x).astype(x.dtype)


_erfc = numpy.frompyfunc(math.erfc, 1, 1)


def broadcast_shapes(*shapes):
    """The shape arrays of these shapes broadcast to (ValueError when they do not): shape arithmetic, any device."""
    return numpy.broadcast_shapes(*shapes)


_default_float = numpy.dtype("float32")


def set_default_dtype(dtype):
    """The float dtype that Python floats and new float tensors get (float32 unless changed), as PyTorch. It lives
    here, at the bottom, because everything above reads it: creation, type promotion, printing."""
    global _default_float
    dtype = numpy.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"the default dtype must be a floating dtype, got {dtype}")
    _default_float = dtype


def get_default_dtype():
    return _default_float


_float32_matmul_precision = "highest"


def set_float32_matmul_precision(precision):
    """torch.set_float32_matmul_precision, recorded: "highest" (the default), "high" or "medium". NumPy multiplies
    float32 in float32 whatever it says; on the GPU, "high" and "medium" let the fused attention kernels multiply in
    plain TF32 (as CUPY_TF32=1 does; CuPy's own matmul follows only CUPY_TF32). Another name warns and changes
    nothing, as PyTorch."""
    global _float32_matmul_precision
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "set_float32_matmul_precision call has no effect.", stacklevel=2)
        return
    _float32_matmul_precision = precision


def get_float32_matmul_precision():
    return _float32_matmul_precision


def manual_seed(seed, device=None):
    """Seed every device's generator (CPU runs are then reproducible), or only the given device's."""
    global _seed
    if device is None:
        _seed = int(seed)
        _generators.clear()
    else:
        device = check_device(device)
        _generators[device] = xp_for(device).random.default_rng(int(seed))


def generator(device):
    """The seeded random generator of a device (NumPy Generator or CuPy's equivalent)."""
    device = check_device(device)
    if device not in _generators:
        _generators[device] = xp_for(device).random.default_rng(_seed)
    return _generators[device]


class Generator:
    """A random generator of one's own, as torch.Generator: Generator().manual_seed(42) (which returns it) gives the
    same draws to randperm(n, generator=...), DataLoader(shuffle=True, generator=...) and random_split whatever
    the global seed (tinyattn.manual_seed) is. Unseeded, it starts from PyTorch's default seed, 67280421310721."""

    def __init__(self, device="cpu"):
        self.device = check_device(device)
        self.manual_seed(67280421310721)

    def manual_seed(self, seed):
        self._initial_seed = int(seed)
        self.rng = xp_for(self.device).random.default_rng(self._initial_seed)
        return self

    def initial_seed(self):
        return self._initial_seed


# dtype names as PyTorch spells them (NumPy and CuPy share NumPy's dtype objects)
float32, float64, float16 = numpy.dtype("float32"), numpy.dtype("float64"), numpy.dtype("float16")
int64, int32, bool_ = numpy.dtype("int64"), numpy.dtype("int32"), numpy.dtype("bool")
int16, int8, uint8 = numpy.dtype("int16"), numpy.dtype("int8"), numpy.dtype("uint8")
