"""Statistics over seeds, shared by ``sweep`` (its table's means and comparisons) and ``bench simulate`` (the
goals' paired comparisons): the mean of a sample and the half-width of its 95 % confidence interval,
``t(0.975, n-1) * s / sqrt(n)`` (Student t, sample standard deviation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# Two-sided 95 % quantiles t(0.975, df) of Student's t distribution, df = 1..30, then 40, 60, 120 and the
# normal limit. Source: NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, "Critical
# Values of the Student's t Distribution" (https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm),
# column 0.975. Between the tabulated df above 30 the next smaller df is used (a slightly wider interval).
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
T975_LARGE = ((40, 2.021), (60, 2.000), (120, 1.980))
Z975 = 1.960


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("a confidence interval needs at least two values (df >= 1)")
    if df <= len(T975):
        return T975[df - 1]
    out = T975[-1]
    for at, value in T975_LARGE:
        if df >= at:
            out = value
    return out if df < 1000 else Z975


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    n: int
    mean: float
    ci95: float | None  # half-width; None for a single value


def estimate(values: Iterable[float]) -> Estimate | None:
    import numpy as np

    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if xs.size == 0:
        return None
    mean = float(xs.mean())
    if xs.size == 1:
        return Estimate(n=1, mean=mean, ci95=None)
    half = t975(int(xs.size) - 1) * float(xs.std(ddof=1)) / math.sqrt(xs.size)
    return Estimate(n=int(xs.size), mean=mean, ci95=half)


__all__ = ["T975", "Estimate", "estimate", "t975"]
