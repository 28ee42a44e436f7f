"""How well the runtime predictor (:mod:`rackscale.scheduler.predictor`) predicts, replayed online on a trace.

Jobs go in submit order. Each job is predicted from the jobs that *ended before its submit time*, then,
once its own end comes, observed: no job is ever predicted from its own future. The trace has no start
times, so a job's end is taken as ``submit + duration``: the earliest it could have ended (queueing makes
real ends later), which shows each predictor slightly more history than a live cluster would have had.

Scored against the same predictor without ageing (``history-all``: ``recent=None``) and two naive baselines
fed the same ends: the running median of every ended job, and the queue's last ended job (the "user's
last job" of Tsafrir et al.; the queue stands for the user). Per
predictor: jobs predicted / not, median and p90 of ``|ln(pred/actual)|``, the share within 2x, the coverage
of the p80/p90 quantiles (share of actuals at or below; the predictor only), and the under/over-estimates.
A prediction within the sketch's accuracy (``RELATIVE_ACCURACY``, 2 %) of the actual counts as exact,
neither under nor over, and covered: a bucket's representative may sit up to 2 % below a value that every
job of the group had, which is no error of the prediction.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rackscale.bench import Result, machine_info
from rackscale.model.workload import JobSpec
from rackscale.scheduler.predictor import MIN_RUNTIME_S, RELATIVE_ACCURACY, GroupLevel, Prediction, RuntimePredictor

__all__ = ["PREDICTORS", "evaluate", "run_predict_benchmark"]

PREDICTORS = ("history", "history-all", "global-median", "queue-last")
_LN2 = math.log(2.0)
_TOL = 1.0 + RELATIVE_ACCURACY


class _Score:
    """Accumulates (prediction, actual) pairs of one predictor; :meth:`result` sums them up."""

    def __init__(self, *, quantiles: bool) -> None:
        self.errors: list[float] = []  # |ln(pred / actual)|
        self.missing = 0
        self.under = 0  # predicted shorter than it ran
        self.under_s = 0.0
        self.over = 0
        self.over_s = 0.0
        self.bias = 0.0  # sum of ln(pred / actual)
        self.covered: dict[str, int] | None = {"p80": 0, "p90": 0} if quantiles else None

    def add(self, pred: float | None, actual: float, *, p80: float = 0.0, p90: float = 0.0) -> None:
        if pred is None:
            self.missing += 1
            return
        log_ratio = math.log(pred / actual)
        self.errors.append(abs(log_ratio))
        self.bias += log_ratio
        if pred * _TOL < actual:
            self.under += 1
            self.under_s += actual - pred
        elif pred > actual * _TOL:
            self.over += 1
            self.over_s += pred - actual
        if self.covered is not None:
            self.covered["p80"] += actual <= p80 * _TOL
            self.covered["p90"] += actual <= p90 * _TOL

    def result(self) -> Result:
        n = len(self.errors)
        ordered = sorted(self.errors)
        out: Result = {
            "predicted": n,
            "no_prediction": self.missing,
            "median_abs_log_error": _nearest_rank(ordered, 0.5),
            "p90_abs_log_error": _nearest_rank(ordered, 0.9),
            "within_2x_share": sum(e <= _LN2 + 1e-12 for e in ordered) / n if n else None,
            "mean_log_bias": self.bias / n if n else None,  # > 0: predicts long on average (geometric)
            "under_share": self.under / n if n else None,
            "mean_under_s": self.under_s / self.under if self.under else None,
            "over_share": self.over / n if n else None,
            "mean_over_s": self.over_s / self.over if self.over else None,
        }
        if self.covered is not None:
            out["p80_coverage"] = self.covered["p80"] / n if n else None
            out["p90_coverage"] = self.covered["p90"] / n if n else None
        return out


def _add(score: _Score, p: Prediction | None, actual: float) -> None:
    if p is None:
        score.add(None, actual)
    else:
        score.add(p.estimate_s, actual, p80=p.p80_s, p90=p.p90_s)


def _nearest_rank(ordered: Sequence[float], q: float) -> float | None:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


class _RunningMedian:
    """The exact median of everything added (two heaps: O(log n) per add)."""

    def __init__(self) -> None:
        self._low: list[float] = []  # max-heap, negated
        self._high: list[float] = []

    def add(self, x: float) -> None:
        if self._low and x > -self._low[0]:
            heapq.heappush(self._high, x)
        else:
            heapq.heappush(self._low, -x)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def median(self) -> float | None:
        if not self._low:
            return None
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2


def evaluate(
    jobs: Iterable[JobSpec], *, quantile: float = 0.5, min_history: int = 4, recent: int | None = 32
) -> Result:
    """Replay ``jobs`` (their ``duration_estimate_s`` is the runtime they had) online; the scores by predictor.

    Jobs without a duration are skipped (counted). Runtimes under ``MIN_RUNTIME_S`` are scored as
    ``MIN_RUNTIME_S``, the predictor's floor (a log error needs a positive actual).
    """
    predictor = RuntimePredictor(quantile=quantile, min_history=min_history, recent=recent)
    ageless = RuntimePredictor(quantile=quantile, min_history=min_history, recent=None)
    median = _RunningMedian()
    last: dict[str, float] = {}
    scores = {name: _Score(quantiles=name.startswith("history")) for name in PREDICTORS}
    levels = dict.fromkeys((str(level) for level in GroupLevel), 0)
    ending: list[tuple[float, int, JobSpec, float]] = []  # (end, order, spec, runtime): a min-heap of ends
    skipped = 0
    order = sorted(enumerate(jobs), key=lambda ij: (ij[1].submit_time, ij[0]))  # stable: ties keep trace order
    for i, spec in order:
        if spec.duration_estimate_s is None:
            skipped += 1
            continue
        now = spec.submit_time
        while ending and ending[0][0] <= now:  # everything that ended by now is history
            _end, _, done, runtime = heapq.heappop(ending)
            predictor.observe(done, runtime_s=runtime)
            ageless.observe(done, runtime_s=runtime)
            median.add(runtime)
            last[done.queue] = runtime
        actual = max(spec.duration_estimate_s, MIN_RUNTIME_S)
        p = predictor.predict(spec)
        if p is not None:
            levels[str(p.level)] += 1
        _add(scores["history"], p, actual)
        _add(scores["history-all"], ageless.predict(spec), actual)
        scores["global-median"].add(median.median(), actual)
        scores["queue-last"].add(last.get(spec.queue), actual)
        heapq.heappush(ending, (now + spec.duration_estimate_s, i, spec, spec.duration_estimate_s))
    results = {name: s.result() for name, s in scores.items()}
    results["history"]["by_level"] = levels
    return {
        "params": {"quantile": quantile, "min_history": min_history, "recent": recent},
        "jobs": len(order),
        "skipped_no_duration": skipped,
        "groups": predictor.groups,
        "entries": predictor.entries(),
        "results": results,
    }


def run_predict_benchmark(
    *, philly: Path | None = None, quantile: float = 0.5, min_history: int = 4, recent: int | None = 32
) -> Result:
    """Load the Philly trace (default ``../shared/traces/philly/philly.csv``) and :func:`evaluate` it.

    Raises ``FileNotFoundError`` when the trace is not there, ``ValueError`` for bad parameters.
    """
    from rackscale.bench.simulate import default_philly  # (its scenarios are not needed here)
    from rackscale.workloads import load_trace

    path = philly or default_philly()
    if not path.exists():
        raise FileNotFoundError(f"no Philly trace at {path}; say where it is with --philly PATH")
    if not path.is_file():  # a folder or a device (/dev/zero would be read until memory runs out)
        from rackscale.workloads.philly import check_philly_file

        check_philly_file(path)
    RuntimePredictor(quantile=quantile, min_history=min_history, recent=recent)  # refuses bad parameters early
    t0 = time.perf_counter()
    load = load_trace(f"philly:{path}")
    t1 = time.perf_counter()
    report = evaluate(load.jobs, quantile=quantile, min_history=min_history, recent=recent)
    t2 = time.perf_counter()
    report["trace"] = str(path)
    report["load_s"] = round(t1 - t0, 3)
    report["replay_s"] = round(t2 - t1, 3)
    report["machine"] = machine_info()
    return report


def rows(report: Result) -> list[tuple[str, list[Any]]]:
    """The report as table rows (metric, one value per predictor of :data:`PREDICTORS`)."""
    keys = (
        "predicted", "no_prediction", "median_abs_log_error", "p90_abs_log_error", "within_2x_share",
        "p80_coverage", "p90_coverage", "mean_log_bias", "under_share", "mean_under_s", "over_share", "mean_over_s",
    )  # fmt: skip
    res = report["results"]
    return [(k, [res[name].get(k) for name in PREDICTORS]) for k in keys]
