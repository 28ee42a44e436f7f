"""How good the runtime predictor's estimates were: for each completed job the scheduler planned with
history's prediction (``scheduler/predictor.py``; it gave no estimate of its own), its run over the
prediction, in fixed buckets (the service's ``rackscale_runtime_prediction_ratio`` histogram).

A ratio of 1 is a perfect prediction; 2, a job that ran twice as long as planned (a reservation behind it
started late); 0.5, one that ended in half the time (GPUs held back for nothing)."""

from __future__ import annotations

import bisect
import math

# Upper bounds of the buckets (Prometheus' ``le``), +Inf last: a factor of two either way of 1, and within
# 25 % of it.
RATIO_BUCKETS: tuple[float, ...] = (0.125, 0.25, 0.5, 0.8, 1.25, 2.0, 4.0, 8.0, math.inf)


class PredictionRatios:
    """Counts per bucket (not cumulative), their sum and count: a histogram's state, bounded whatever the
    number of jobs."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(RATIO_BUCKETS)
        self.total = 0.0

    def observe(self, *, run_s: float, predicted_s: float) -> None:
        if not (predicted_s > 0.0 and math.isfinite(predicted_s) and run_s >= 0.0 and math.isfinite(run_s)):
            return  # (no ratio to speak of: the predictor gives positive finite estimates)
        ratio = run_s / predicted_s
        self.counts[bisect.bisect_left(RATIO_BUCKETS, ratio)] += 1
        self.total += ratio

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, jobs at or under it), as a Prometheus histogram's buckets."""
        out, seen = [], 0
        for le, n in zip(RATIO_BUCKETS, self.counts, strict=True):
            seen += n
            out.append((le, seen))
        return out
