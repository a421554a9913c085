"""Making tensors: from data, filled, ranges and random draws (seeded by tinyattn.manual_seed)."""
import numpy

from . import backend
from .backend import get_default_dtype, set_default_dtype  # noqa: F401  (tinyattn.set_default_dtype, as torch)
from .tensor import Tensor, legacy_array


def _resolve(device):
    return backend.check_device(device) if device is not None else backend.default_device()


def _dtype(dtype, fallback=None):
    """A dtype argument (None: the fallback, or the default float dtype)."""
    return numpy.dtype(dtype if dtype is not None else fallback if fallback is not None else get_default_dtype())


def tensor(data, requires_grad=False, dtype=None, device=None):
    """A new leaf tensor holding a copy of data (nested lists, numbers, NumPy or CuPy arrays, a Tensor).

    Python floats become the default float dtype (float32); NumPy arrays keep their dtype (float64 stays float64),
    as in PyTorch.
    """
    if isinstance(data, Tensor):
        data = data.array
    if backend.is_cupy_array(data):
        device = device or "cuda"
        array = data.astype(dtype) if dtype is not None else data.copy()
    else:
        from_python = not isinstance(data, (numpy.ndarray, numpy.generic))
        array = numpy.array(data, dtype=dtype)
        if dtype is None and from_python and array.dtype == numpy.float64:
            array = array.astype(get_default_dtype())
    array = backend.to_device(array, _resolve(device))
    return Tensor(array, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None):
    """data itself when it is already a Tensor and nothing is to change; otherwise a new tensor."""
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    return tensor(data, dtype=dtype, device=device)


def shape_from_args(size):
    """Accept both f(2, 3) and f((2, 3)), as PyTorch does."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)


def new_shape(size):
    """The shape of a new tensor, from f(2, 3), f((2, 3)) or f(n): a negative size is refused, naming the shape."""
    shape = (size,) if isinstance(size, int) else shape_from_args(size)
    if any(n < 0 for n in shape):
        raise RuntimeError(f"trying to create a tensor with a negative dimension: shape {shape}")
    return shape


def zeros(*size, dtype=None, device=None, requires_grad=False):
    array = backend.xp_for(_resolve(device)).zeros(new_shape(size), dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    array = backend.xp_for(_resolve(device)).ones(new_shape(size), dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """Uninitialised values (whatever the memory held), as torch.empty."""
    array = backend.xp_for(_resolve(device)).empty(new_shape(size), dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """Every element fill_value; without a dtype, bool, int64 or the default float dtype as the value is."""
    if dtype is None:
        dtype = backend.bool_ if isinstance(fill_value, bool) else backend.int64 if isinstance(fill_value, int) \
            else None
    size = new_shape(size)
    array = backend.xp_for(_resolve(device)).full(size, fill_value, dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def _like(t, dtype, device):
    return dict(dtype=dtype or t.dtype, device=device or str(t.device))


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return empty(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, **_like(t, dtype, device), requires_grad=requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def from_numpy(array):
    """A tensor sharing a NumPy array's memory (changing one changes the other), as torch.from_numpy."""
    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"from_numpy expects a NumPy array, got {type(array).__name__}")
    return Tensor(array)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(t):
    return t.numel()


def LongTensor(*data):
    """PyTorch's legacy constructor: LongTensor(6) an uninitialised int64 tensor of 6 elements, LongTensor(2, 3) of
    shape (2, 3), LongTensor([1, 2]) that data as int64."""
    return Tensor(legacy_array(data, backend.int64))


def FloatTensor(*data):
    return Tensor(legacy_array(data, backend.float32))


def BoolTensor(*data):
    return Tensor(legacy_array(data, backend.bool_))


def arange(start, end=None, step=1, dtype=None, device=None):
    """Integers from start up to end (int64), or floats when any bound is a float, as torch.arange."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError(f"arange: the bounds {start} and {end} are inconsistent with the sign of step {step}")
    is_float = any(isinstance(v, float) for v in (start, end, step))
    fallback = None if is_float else backend.int64
    return Tensor(backend.xp_for(_resolve(device)).arange(start, end, step, dtype=_dtype(dtype, fallback)))


def eye(n, m=None, dtype=None, device=None):
    n, m = new_shape((n, n if m is None else m))
    return Tensor(backend.xp_for(_resolve(device)).eye(n, m, dtype=_dtype(dtype)))


def randn(*size, dtype=None, device=None, requires_grad=False):
    device = _resolve(device)
    array = backend.generator(device).standard_normal(new_shape(size), dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    device = _resolve(device)
    array = backend.generator(device).random(new_shape(size), dtype=_dtype(dtype))
    return Tensor(array, requires_grad=requires_grad)


def _stream(generator, device):
    """The random stream to draw from and its device: the given Generator's, or the seeded global one of device."""
    if generator is None:
        device = _resolve(device)
        return backend.generator(device), device
    if device is not None and backend.check_device(device) != generator.device:
        raise RuntimeError(f"Expected a '{backend.check_device(device)}' generator device but found "
                           f"'{generator.device}'")
    return generator.rng, generator.device


def randint(*bounds, size=None, low=None, high=None, generator=None, dtype=None, device=None):
    """Integers drawn uniformly from [low, high) (int64 unless told), in torch.randint's forms: randint(high, size),
    randint(low, high, size), or with keywords (randint(high=10, size=(3,))). size is a tuple, as PyTorch requires:
    randint(3, 5) is refused rather than read as high=3, size=5."""
    if size is None and bounds:
        *bounds, size = bounds
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint: size must be a tuple of ints, got {size!r}; the forms are randint(high, size) and "
                        "randint(low, high, size)")
    bounds = ([] if low is None else [low]) + list(bounds) + ([] if high is None else [high])
    if len(bounds) not in (1, 2):
        raise TypeError(f"randint takes high, or low and high, before size; got {len(bounds)} bounds {bounds}")
    low, high = bounds if len(bounds) == 2 else (0, bounds[0])
    if low >= high:
        raise RuntimeError(f"randint draws from [low, high): low must be less than high, got low={low}, high={high}")
    rng, device = _stream(generator, device)
    array = rng.integers(low, high, size=new_shape(size))
    return Tensor(array.astype(_dtype(dtype, backend.int64)))


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Draw num_samples category indices per row of input (weights, not necessarily normalised), as
    torch.multinomial, from generator or else the seeded generator of input's device. Without replacement each row's
    draws differ (the Gumbel top-k trick: the k largest of log w + Gumbel noise are a draw without replacement)."""
    weights = input.array
    xp = backend.xp_of(weights)
    rows = weights.reshape(-1, weights.shape[-1]).astype(backend.float64)
    if rows.size and (bool((rows < 0).any()) or not bool(xp.isfinite(rows).all())):
        raise RuntimeError("multinomial: probabilities must be finite and non-negative")
    if rows.size and bool((rows.sum(axis=1) <= 0).any()):
        raise RuntimeError("multinomial: a row of weights sums to 0, so there is no distribution to draw from")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                           f"{rows.shape[1]} categories")
    rng, _ = _stream(generator, input.device.type)
    if replacement:
        cdf = xp.cumsum(rows, axis=1)
        draws = rng.random((rows.shape[0], num_samples)) * cdf[:, -1:]
        picks = xp.stack([xp.searchsorted(c, d, side="right") for c, d in zip(cdf, draws)])
    else:
        with numpy.errstate(divide="ignore"):
            keys = xp.log(rows) - xp.log(-xp.log(rng.random(rows.shape)))
        picks = xp.argsort(-keys, axis=1)[:, :num_samples]
    return Tensor(picks.reshape(weights.shape[:-1] + (num_samples,)).astype(backend.int64))


def randperm(n, *, generator=None, device=None):
    """A random order of 0..n-1, from the seeded generator of the device, or from the given Generator."""
    rng, device = _stream(generator, device)
    (n,) = new_shape(n)
    draws = rng.random(n)
    return Tensor(backend.xp_for(device).argsort(draws).astype(backend.int64))


def empty_parameter_data(shape, dtype=None, device=None):
    """An uninitialised array for a new parameter, on the default device, float32 unless told otherwise."""
    return backend.xp_for(_resolve(device)).empty(new_shape(shape), dtype=_dtype(dtype))
