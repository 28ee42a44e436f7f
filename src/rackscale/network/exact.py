"""Exact sums of floats, as integers: every finite float is a whole multiple of 2**-1074 (the smallest
subnormal), so ``x * 2**1074`` is an integer and sums of such integers are exact.

The fabric's loads and the monitor's byte totals are kept exactly so that a sum depends only on the set of
terms, not on the order they came and went in (removing a term restores the sum bit for bit). They were
``fractions.Fraction`` values; these integers hold the same rationals (a Fraction of a float has a power of
two as denominator), so :func:`to_float` gives the very float ``float(Fraction)`` gave (both round the same
rational correctly: ``int / int`` is correctly rounded), at a fraction of the cost (no gcd per addition).
"""

from __future__ import annotations

SHIFT = 1074
ONE = 1 << SHIFT  # 1.0, exactly


def exact(x: float) -> int:
    """``x * 2**1074``, an integer, exactly (``x`` finite)."""
    n, d = x.as_integer_ratio()  # d is a power of two, at most 2**1074
    return n << (SHIFT + 1 - d.bit_length())


def to_float(v: int) -> float:
    """The float nearest ``v * 2**-1074`` (correctly rounded, as ``float(Fraction(v, 2**1074))``)."""
    return v / ONE


__all__ = ["ONE", "SHIFT", "exact", "to_float"]
