"""Fit the polynomial that arrays.normal_cdf uses, and measure its error: `python -m tinyattn.cpu.fit_normal_cdf`.

NumPy has no erf. Write the lower tail of the normal CDF as Phi(-|x|) = t exp(-x^2 / 2) P(t) with
t = 1 / (1 + |x| / (2 sqrt 2)), which maps x in [0, inf) to t in (0, 1]. P is smooth on [0, 1] (P(0) = 1 / (4 sqrt pi),
from the tail's asymptote), so a polynomial of degree 10 fits it. The fit is least squares on the relative error at
Chebyshev nodes of [0, 1], against math.erfc (the C library's, correct to about an ulp); for large x the scaled
erfcx(z) = exp(z^2) erfc(z) comes from its asymptotic series, where erfc itself underflows. It prints the
coefficients (highest power first, rounded to 9 digits as arrays.py keeps them) and the largest relative error of
Phi they give over x in [-37, 37] (beyond, Phi(-|x|) is subnormal in float64).
"""
import math

import numpy

DEGREE = 10
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


def fit(degree=DEGREE, nodes=2000):
    """Coefficients of P, highest power first, rounded to 9 significant digits."""
    t = 0.5 - 0.5 * numpy.cos(numpy.pi * (numpy.arange(nodes) + 0.5) / nodes)      # Chebyshev nodes of [0, 1]
    p = numpy.array([tail_over_gauss(v) for v in t])
    series = numpy.polynomial.Polynomial.fit(t, p, degree, w=1 / p, domain=[0, 1]).convert()
    return tuple(float(f"{c:.9g}") for c in series.coef[::-1])


def normal_cdf(x, coefficients):
    """Phi(x) from the polynomial, as arrays.normal_cdf computes it (without its in-place arrangement)."""
    t = 1 / (1 + numpy.abs(x) * SCALE)
    tail = numpy.polyval(coefficients, t) * t * numpy.exp(-x * x / 2)
    return numpy.where(x >= 0, 1 - tail, tail)


def largest_relative_error(coefficients, points=200001, limit=37.0):
    """max |Phi_poly(x) - Phi(x)| / Phi(x) over x in [-limit, limit], with Phi from math.erfc."""
    x = numpy.linspace(-limit, limit, points)
    exact = numpy.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    keep = exact > 1e-300                               # below, Phi is subnormal and loses its digits
    return float(numpy.max(numpy.abs(normal_cdf(x[keep], coefficients) - exact[keep]) / exact[keep]))


if __name__ == "__main__":
    coefficients = fit()
    print("NORMAL_TAIL_POLY = (" + ", ".join(repr(c) for c in coefficients) + ")")
    print(f"largest relative error of Phi over [-37, 37]: {largest_relative_error(coefficients):.2e}")
