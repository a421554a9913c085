"""The only module that knows NumPy from CuPy.

Everything above it asks for an array module (``xp``) by device name or from an
array it already holds, so the same op code runs on the CPU and on an NVIDIA GPU.
CuPy is imported lazily: a machine without it never pays for the import.
"""
import os
import sys

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


def keep_freed_memory_for_reuse():
    """Ask glibc to keep freed blocks for reuse instead of returning them to the OS at once.

    NumPy allocates a fresh array for every temporary; by default glibc serves arrays of more than about 128 KiB
    with mmap and unmaps them on free, so the next op of the same size pays page faults on every 4 KiB page. For
    attention blocks that costs as much as the arithmetic (measured in tinyattn.bench). Raising the mmap and trim
    thresholds lets those pages be reused. Set TINYATTN_KEEP_MALLOC=1 to leave the allocator alone.
    """
    if os.environ.get("TINYATTN_KEEP_MALLOC") == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, for example): nothing to tune
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 256 << 20))


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
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
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
    return type(array).__module__.split(".")[0] == "cupy"


def is_array(value):
    """A NumPy or CuPy array (not a Python number, not a Tensor)."""
    return isinstance(value, numpy.ndarray) or is_cupy_array(value)


def xp_of(array):
    """The array module an array belongs to (numpy for Python scalars too)."""
    return _load_cupy() if is_cupy_array(array) else numpy


def device_of(array):
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


def scatter_add(target, indices, values):
    """target[indices] += values, summing repeated indices (plain assignment would keep only one)."""
    if is_cupy_array(target):
        _load_cupy().add.at(target, indices, values)      # atomic adds on the GPU
    elif isinstance(indices, numpy.ndarray) and indices.ndim == 1 and indices.dtype.kind in "iu":
        _add_rows(target, indices, values)
    else:
        numpy.add.at(target, indices, values)
    return target


def _add_rows(target, rows, values):
    """target[rows] += values for one integer index along axis 0 (embedding gradients): sort the rows, sum each run
    of equal ones with reduceat, then one indexed add. ~2.7x faster than numpy.add.at, which goes element by element."""
    if rows.size == 0:
        return
    rows = numpy.where(rows < 0, rows + target.shape[0], rows)
    order = numpy.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = numpy.flatnonzero(numpy.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    target[sorted_rows[starts]] += numpy.add.reduceat(values[order], starts, axis=0)


def manual_seed(seed):
    """Seed every device's generator; CPU runs are then reproducible."""
    global _seed
    _seed = int(seed)
    _generators.clear()


def generator(device):
    """The seeded random generator of a device (NumPy Generator or CuPy's equivalent)."""
    device = check_device(device)
    if device not in _generators:
        _generators[device] = xp_for(device).random.default_rng(_seed)
    return _generators[device]


# dtype names as PyTorch spells them (NumPy and CuPy share NumPy's dtype objects)
float32, float64, float16 = numpy.dtype("float32"), numpy.dtype("float64"), numpy.dtype("float16")
int64, int32, bool_ = numpy.dtype("int64"), numpy.dtype("int32"), numpy.dtype("bool")
