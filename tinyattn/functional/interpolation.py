"""F.interpolate: the spatial dims of an (N, C, ...) tensor resized by nearest neighbour or by linear weights along
each dim in turn (linear, bilinear, trilinear), as torch.nn.functional.interpolate. Made of index_select and weighted
sums, so its gradient is theirs: each output element sends its gradient back to the inputs it was read from."""
import math

from ..backend import numpy as host, xp_of        # source positions are worked out on the host, then moved
from ..ops import index_select, require_float

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}
_NEAREST = ("nearest", "nearest-exact")


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    spatial = input.ndim - 2
    if spatial < 1:
        raise ValueError(f"interpolate takes (N, C, ...) inputs with at least one spatial dim, got shape {input.shape}")
    if mode not in _NEAREST and mode not in _LINEAR:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not here; there are {_NEAREST + tuple(_LINEAR)}")
    if mode in _LINEAR and _LINEAR[mode] != spatial:
        raise ValueError(f"interpolate: mode {mode!r} needs a {_LINEAR[mode] + 2}-D input, got shape {input.shape}")
    if mode in _NEAREST and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         f"trilinear (mode is {mode!r})")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not here")
    if mode in _LINEAR:
        require_float(input, f"interpolate ({mode})")
    sizes, scales = _output_sizes(input.shape[2:], size, scale_factor, recompute_scale_factor)
    xp, out = xp_of(input.array), input
    for axis, (n_in, n_out, scale) in enumerate(zip(input.shape[2:], sizes, scales), start=2):
        if n_in == n_out and scale is None:
            continue
        if mode in _NEAREST:
            out = index_select(out, axis, xp.asarray(_nearest(n_in, n_out, scale, mode == "nearest-exact")))
            continue
        low, high, weight = _linear(n_in, n_out, scale, bool(align_corners))
        weight = xp.asarray(weight, dtype=input.dtype).reshape((-1,) + (1,) * (input.ndim - 1 - axis))
        out = (1 - weight) * index_select(out, axis, xp.asarray(low)) + weight * index_select(out, axis,
                                                                                             xp.asarray(high))
    return out


def _output_sizes(in_sizes, size, scale_factor, recompute_scale_factor):
    """The output size of each spatial dim, and the scale (input / output) its source positions use: 1 / scale_factor
    when one is given (unless recompute_scale_factor), else None (input size / output size)."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate takes either size or scale_factor, not both and not neither")
    n = len(in_sizes)
    if size is not None:
        sizes = (size,) * n if isinstance(size, int) else tuple(size)
        if len(sizes) != n:
            raise ValueError(f"interpolate: size {size} has {len(sizes)} entries for {n} spatial dims")
        return sizes, (None,) * n
    factors = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
    if len(factors) != n:
        raise ValueError(f"interpolate: scale_factor {scale_factor} has {len(factors)} entries for {n} spatial dims")
    sizes = tuple(math.floor(s * f) for s, f in zip(in_sizes, factors))
    return sizes, (None,) * n if recompute_scale_factor else tuple(1.0 / f for f in factors)


def _nearest(n_in, n_out, scale, exact):
    """Source index of each output position: floor(i * scale), or floor((i + 0.5) * scale) for nearest-exact."""
    scale = n_in / n_out if scale is None else scale
    positions = host.arange(n_out, dtype=host.float64) + (0.5 if exact else 0.0)
    return host.minimum(host.floor(positions * scale).astype(host.int64), n_in - 1)


def _linear(n_in, n_out, scale, align_corners):
    """The two source indices of each output position and the weight of the second: its position is
    i * (n_in - 1) / (n_out - 1) with align_corners, else (i + 0.5) * scale - 0.5 (pixel centres), at least 0."""
    steps = host.arange(n_out, dtype=host.float64)
    if align_corners:
        source = steps * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        source = host.maximum((steps + 0.5) * (n_in / n_out if scale is None else scale) - 0.5, 0.0)
    low = host.minimum(host.floor(source).astype(host.int64), n_in - 1)
    high = host.minimum(low + 1, n_in - 1)
    return low, high, source - low
