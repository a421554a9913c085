"""Functions with no gradient: tests of values (isnan, isinf, isfinite), comparisons elementwise (eq, ne, lt, le, gt,
ge: the Tensor's ==, <, ...) and of whole tensors (allclose, isclose, equal), and logic on bool tensors (logical_*,
and bitwise_* bit by bit on integer ones)."""
import operator

from ..backend import xp_of
from ..tensor import Tensor, as_array


def isnan(x):
    return Tensor(xp_of(x.array).isnan(x.array))


def isinf(x):
    return Tensor(xp_of(x.array).isinf(x.array))


def isfinite(x):
    return Tensor(xp_of(x.array).isfinite(x.array))


def _comparison(op):
    """eq, ne, lt, le, gt, ge: a against b elementwise, broadcast, as a bool tensor (torch.eq and the rest)."""
    def compare(a, b):
        if b is None:                      # NumPy would compare each element with None and answer False, silently
            raise TypeError(f"{op.__name__}() received None: compare with a tensor or a number (only `x == None` and "
                            "`x != None` take None, and answer False and True, as in PyTorch)")
        return Tensor(op(a.array, as_array(b)))
    compare.__name__ = op.__name__
    return compare


eq, ne, lt, le, gt, ge = (_comparison(op) for op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
                                                     operator.ge))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether a and b agree elementwise within atol + rtol * |b| (a Python bool, as torch.allclose)."""
    return bool(xp_of(a.array).allclose(a.array, as_array(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Where |a - b| <= atol + rtol * |b|, elementwise (a bool tensor, as torch.isclose)."""
    return Tensor(xp_of(a.array).isclose(a.array, as_array(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(a, b):
    """Whether a and b have one shape and the same values (a Python bool, as torch.equal)."""
    return a.shape == tuple(b.shape) and bool((a.array == as_array(b)).all())


def _logical(name):
    """logical_not/and/or/xor: any dtype read as true where nonzero, a bool result (no gradient)."""
    def apply(a, b=None):
        function = getattr(xp_of(a.array), f"logical_{name}")
        return Tensor(function(a.array) if name == "not" else function(a.array, as_array(b)))
    apply.__name__ = f"logical_{name}"
    return apply


logical_and, logical_or, logical_xor, logical_not = (_logical(n) for n in ("and", "or", "xor", "not"))


def _bitwise(name):
    """&, |, ^ and ~: logic on bool tensors, bit by bit on integer ones (no gradient)."""
    def apply(a, b=None):
        for x in (a, b):
            if isinstance(x, Tensor) and x.dtype.kind not in "biu":
                raise TypeError(f"bitwise_{name} needs bool or integer tensors, got dtype {x.dtype}")
        function = getattr(xp_of(a.array), "invert" if name == "not" else f"bitwise_{name}")
        return Tensor(function(a.array) if name == "not" else function(a.array, as_array(b)))
    apply.__name__ = f"bitwise_{name}"
    return apply


bitwise_and, bitwise_or, bitwise_xor, bitwise_not = (_bitwise(n) for n in ("and", "or", "xor", "not"))
