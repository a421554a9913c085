"""Array formulas that give the same numbers as the plain ones, arranged to run faster in NumPy.

Each was measured against the plain form it replaces (the reference twins in tinyattn/functional use those):
- row sums as a product with a ones vector: BLAS does it ~4x faster than sum(axis=-1) on short rows;
- selections written as arithmetic: NumPy's where() branches per element, ~5x slower on data of mixed signs;
- embedding gradients by sorting the ids: ~2.7x faster than numpy.add.at, which goes element by element;
- the normal CDF from a fitted polynomial, in place, for float32: NumPy has no erf, and an erfc called element
  by element from Python is ~6x slower (fit_normal_cdf.py made the polynomial);
- an output laid out in memory as an input is (attention's, as its transposed queries): the caller's transpose
  back and reshape are then views, not copies;
- exp(x) as exp2(x log2 e) for float32 where NumPy runs exp2 with AVX-512 (twice as fast as its exp there, a third
  less time with the multiply; with AVX2 its exp2 is the slower one).
"""
import functools
import math

from ..backend import erfc, is_cupy_array, scatter_add, xp_of


def _ones(like, shape):
    """Ones of like's dtype for the row sums below. NumPy's are made once per shape and kept (read-only): making and
    filling a vector for every sum cost about as much as summing a small block. CuPy's are made each time (there is
    a device to choose, and no allocation to save)."""
    xp = xp_of(like)
    return xp.ones(shape, dtype=like.dtype) if is_cupy_array(like) else _kept_ones(xp, shape, like.dtype)


@functools.lru_cache(maxsize=64)
def _kept_ones(xp, shape, dtype):
    ones = xp.ones(shape, dtype=dtype)
    ones.setflags(write=False)
    return ones


def last_axis_sum(x):
    """x summed over its last axis, keeping that axis (size 1): x @ ones."""
    return x @ _ones(x, (x.shape[-1], 1))


def leading_axes_sum(x):
    """x summed over every axis but the last (a bias gradient): ones @ rows."""
    rows = x.reshape(-1, x.shape[-1])
    return _ones(x, (rows.shape[0],)) @ rows


def row_mean(rows):
    """Each row's mean, as a column; summing before dividing keeps the mean of a constant row exact."""
    return last_axis_sum(rows) / rows.shape[1]


def laid_out_like(like, shape, dtype, make="empty"):
    """A new array (xp.empty or xp.zeros, by make) of shape whose axes lie in memory in the order of like's, an array
    of that same shape (else in the usual order). Attention's queries are usually a transposed view, (B, H, T, E)
    laid out as (B, T, H, E), and the caller transposes the output back before it reshapes it: an output and
    gradients laid out as the queries are make both reshapes views instead of copies."""
    xp = xp_of(like)
    order = sorted(range(like.ndim), key=like.strides.__getitem__, reverse=True)   # outermost first, ties kept
    if tuple(like.shape) != tuple(shape) or 0 in like.strides or order[-1] != like.ndim - 1:    # rows stay rows
        return getattr(xp, make)(shape, dtype=dtype)
    stored = getattr(xp, make)(tuple(shape[axis] for axis in order), dtype=dtype)
    return stored.transpose([order.index(axis) for axis in range(like.ndim)])


def exp_in_place(x):
    """exp(x), written over x (a float array). For float32 where NumPy's exp2 loop is its AVX-512 one, as
    exp2(x log2 e), within 4 + 1.5 |x| float32 roundings of exp(x) (NumPy's exp: ~2): the rounding of x log2 e
    grows with |x|. In flash attention x = S - m, m a row's maximum over its first block of keys: the terms that
    make its sums have |x| of a few units, up to ~22 + log(keys) where later keys score far higher (20 higher:
    output and dQ 31 and 35 float32 roundings off float64's, the reference flash's 32 and 33)."""
    xp = xp_of(x)
    if x.dtype == xp.float32 and not is_cupy_array(x) and _exp2_runs_avx512():
        x *= LOG2_E
        return xp.exp2(x, out=x)
    return xp.exp(x, out=x)


LOG2_E = 1 / math.log(2)


@functools.lru_cache(maxsize=None)
def _exp2_runs_avx512():
    """Whether NumPy's float32 exp2 runs its AVX-512 loop here (NumPy 2.1 and later can say; else no)."""
    try:
        from numpy.lib.introspect import opt_func_info
    except ImportError:
        return False
    loops = opt_func_info(func_name="^exp2$", signature="float32").get("exp2", {})
    return any(loop["current"].startswith(("X86_V4", "AVX512")) for loop in loops.values())


def sigmoid(x):
    """1 / (1 + exp(-x)) without overflow: with e = exp(-|x|), 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0,
    the choice made by arithmetic instead of where()."""
    xp = xp_of(x)
    e = xp.exp(-xp.abs(x))
    negative = x < 0
    numerator = negative * e       # e where x < 0, else 1
    numerator += ~negative
    e += 1
    numerator /= e
    return numerator


def add_rows(target, rows, values):
    """target[rows] += values for integer rows along axis 0, repeated rows adding up: sort the rows, sum each run of
    equal ones with reduceat, then one indexed add. (CuPy adds atomically on the GPU: backend.scatter_add.)"""
    if is_cupy_array(target):
        return scatter_add(target, rows, values)
    xp = xp_of(target)
    if rows.size == 0:
        return target
    rows = xp.where(rows < 0, rows + target.shape[0], rows)
    order = xp.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = xp.flatnonzero(xp.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    target[sorted_rows[starts]] += xp.add.reduceat(values[order], starts, axis=0)
    return target


# Phi(-|x|) / exp(-x^2 / 2) = t P(t) = u (u^8 + d1 u^7 + ... + d8) with t = 1 / (1 + |x| / (2 sqrt 2)) and u = t / UNIT,
# d1 .. d8 below, from `python -m tinyattn.cpu.fit_normal_cdf`: Phi to 5.5e-8 relative error for |x| <= 14 in float64,
# below float32's rounding wherever float32's Phi is a normal number.
NORMAL_TAIL_UNIT = -1.47619396
NORMAL_TAIL_POLY = (3.26203815, 3.79272318, 1.49127856, 0.116380343, 0.48740766, -0.390040448, 0.307751678,
                    -0.208204238)
NORMAL_TAIL_SCALE = 1 / (2 * math.sqrt(2))


def normal_cdf(x):
    """Phi(x), the standard normal CDF, and exp(-x^2 / 2), which the GELU's slope reuses: two new arrays.

    The tail Phi(-|x|) = exp(-x^2 / 2) t P(t) keeps its relative precision far out (Phi(-10) ~ 7.6e-24 comes out to
    5e-8 relative, where 0.5 (1 + erf) would give 0); Phi(|x|) = 1 - Phi(-|x|). Every step works in place. Its
    5.5e-8 is below float32's rounding (6e-8) but not float64's: float64 inputs get the C library's erfc instead.
    Beyond |x| = 14 float32's Phi has underflowed (or rounds to 1) and the polynomial stays positive there.
    """
    xp = xp_of(x)
    gauss = x * x
    gauss *= -0.5
    xp.exp(gauss, out=gauss)
    if x.dtype == xp.float64:
        return 0.5 * erfc(x * -math.sqrt(0.5)), gauss
    u = xp.abs(x)                                        # u = t / UNIT = (1 / (UNIT scale)) / (1 / scale + |x|)
    u += 1 / NORMAL_TAIL_SCALE
    xp.divide(1 / (NORMAL_TAIL_UNIT * NORMAL_TAIL_SCALE), u, out=u)   # NumPy's reciprocal is about twice as slow
    tail = u + NORMAL_TAIL_POLY[0]                       # Horner's rule on the monic polynomial
    for d in NORMAL_TAIL_POLY[1:]:
        tail *= u
        tail += d
    tail *= u
    tail *= gauss                                        # Phi(-|x|)
    positive = xp.greater_equal(x, 0, out=u)             # 1.0 where x >= 0, else 0.0 (u is free again)
    cdf = tail * -2                                      # Phi(x) = tail + [x >= 0] (1 - 2 tail)
    cdf += 1
    cdf *= positive
    cdf += tail
    return cdf, gauss
