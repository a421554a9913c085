"""Fit the polynomial that arrays.normal_cdf uses, and measure its error: `python -m tinyattn.cpu.fit_normal_cdf`.

NumPy has no erf. Write the lower tail of the normal CDF as Phi(-|x|) = t exp(-x^2 / 2) P(t) with
t = 1 / (1 + |x| / (2 sqrt 2)), which maps x in [0, inf) to t in (0, 1]. P is smooth on [0, 1] (P(0) = 1 / (4 sqrt pi),
from the tail's asymptote), so a polynomial fits it. arrays.normal_cdf serves float32, whose Phi is a normal number
only above x = -12.9 (and rounds to 1 beyond x = 5.4): the fit covers |x| <= LIMIT = 14, where a polynomial of degree 8
reaches 5.5e-8, below float32's rounding (2^-24 = 6e-8). The fit is least squares on the relative error at Chebyshev
nodes of that range of t, against math.erfc (the C library's, correct to about an ulp); for large x the scaled
erfcx(z) = exp(z^2) erfc(z) comes from its asymptotic series, where erfc itself underflows.

t P(t) is then written in u = t / UNIT as u (u^8 + d1 u^7 + ... + d8), UNIT chosen to make it monic: Horner's rule then
starts with an addition and needs no multiplication by the leading coefficient, one pass over the array fewer. It
prints UNIT and d1 .. d8 (rounded to 9 digits, as arrays.py keeps them) and the largest relative error of Phi they
give over x in [-LIMIT, LIMIT].
"""
import math

import numpy

DEGREE = 8
LIMIT = 14.0
SCALE = 1 / (2 * math.sqrt(2))         # t = 1 / (1 + |x| * SCALE)


def erfcx(z):
    """exp(z^2) erfc(z) for z >= 0, in float64."""
    if z < 20:
        return math.erfc(z) * math.exp(z * z)
    # asymptotic series 1 / (z sqrt pi) * sum_k (-1)^k (2k - 1)!! / (2 z^2)^k; at z >= 20 eight terms reach 1e-17
    term, total = 1.0, 1.0
    for k in range(1, 9):
        term *= -(2 * k - 1) / (2 * z * z)
        total += term
    return total / (z * math.sqrt(math.pi))


def tail_over_gauss(t):
    """P(t) exactly: Phi(-x) / (t exp(-x^2 / 2)) at x = (1 / t - 1) / SCALE (P(0) is the limit)."""
    if t == 0:
        return 1 / (4 * math.sqrt(math.pi))
    x = (1 / t - 1) / SCALE
    return 0.5 * erfcx(x / math.sqrt(2)) / t


def fit(degree=DEGREE, limit=LIMIT, nodes=2000):
    """(UNIT, (d1, ..., d_degree)): t P(t) = u (u^degree + d1 u^(degree - 1) + ... + d_degree) with u = t / UNIT,
    each rounded to 9 significant digits."""
    low = 1 / (1 + limit * SCALE)
    t = low + (1 - low) * (0.5 - 0.5 * numpy.cos(numpy.pi * (numpy.arange(nodes) + 0.5) / nodes))   # Chebyshev
    p = numpy.array([tail_over_gauss(v) for v in t])
    c = numpy.polynomial.Polynomial.fit(t, p, degree, w=1 / p, domain=[low, 1]).convert().coef[::-1]  # highest first
    unit = numpy.sign(c[0]) * abs(c[0]) ** (-1 / (degree + 1))           # c0 UNIT^(degree + 1) = 1 (an odd root)
    return (float(f"{unit:.9g}"), tuple(float(f"{c[k] * unit ** (degree + 1 - k):.9g}") for k in range(1, degree + 1)))


def normal_cdf(x, unit, coefficients):
    """Phi(x) from the polynomial, as arrays.normal_cdf computes it (without its in-place arrangement)."""
    u = (1 / (unit * SCALE)) / (1 / SCALE + numpy.abs(x))
    tail = u + coefficients[0]
    for d in coefficients[1:]:
        tail = tail * u + d
    tail = tail * u * numpy.exp(-x * x / 2)
    return numpy.where(x >= 0, 1 - tail, tail)


def largest_relative_error(unit, coefficients, points=200001, limit=LIMIT):
    """max |Phi_poly(x) - Phi(x)| / Phi(x) over x in [-limit, limit], with Phi from math.erfc."""
    x = numpy.linspace(-limit, limit, points)
    exact = numpy.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    return float(numpy.max(numpy.abs(normal_cdf(x, unit, coefficients) - exact) / exact))


if __name__ == "__main__":
    unit, coefficients = fit()
    print(f"NORMAL_TAIL_UNIT = {unit!r}")
    print("NORMAL_TAIL_POLY = (" + ", ".join(repr(c) for c in coefficients) + ")")
    error = largest_relative_error(unit, coefficients)
    print(f"largest relative error of Phi over [-{LIMIT:g}, {LIMIT:g}]: {error:.2e}")
