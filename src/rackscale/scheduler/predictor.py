"""Runtime predictions from history, for jobs that give no ``duration_estimate_s``.

The scheduler plans with durations: backfill admits a job ahead of a reservation only if it ends before
the reservation starts (``admission._fits_before``), the reservation's start comes from the running jobs'
expected ends (``backfill.plan_reservation``), and the pending queue keeps each shape's shortest duration.
A job without an estimate never fits before a reservation and never frees anything in the plan. A
:class:`RuntimePredictor` fills that gap from how long similar jobs ran: :meth:`~RuntimePredictor.observe`
each job that completed, :meth:`~RuntimePredictor.predict` for a new one.

*Similar* is the most specific group with at least ``min_history`` observations, backing off (as the
:data:`BACKOFF` levels say): (queue, kind, GPU size bucket) -> (queue, kind) -> (kind, size bucket) ->
(kind) -> no prediction. :class:`JobSpec` has no user: the queue stands for the tenant (in the Philly trace
it is the virtual cluster), so the "same user" of the literature is the same queue here.

Each group keeps a bounded log-histogram (:class:`LogHistogram`): buckets of relative width 2 % (the
DDSketch mapping) over 1 s .. ~24 years, in a Fenwick tree, so ``observe`` and ``predict`` cost O(log B)
whatever the history, and a group never holds more than ``B + 1`` numbers, after a million jobs as after
ten. Pure: no clock, no I/O, no randomness: the same observations give the same predictions.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from rackscale.model.workload import JobKind, JobSpec

__all__ = ["BACKOFF", "BUCKETS", "GroupLevel", "LogHistogram", "Prediction", "RuntimePredictor", "size_bucket"]

BUCKETS = 512  # log buckets per group: with RELATIVE_ACCURACY, 1 s .. 7e8 s (~24 years)
RELATIVE_ACCURACY = 0.02  # a bucket's representative is within 2 % of any value in it
MIN_RUNTIME_S = 1.0  # the floor of the scale: shorter runtimes (0 included) count as 1 s
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
_TOP = 1 << (BUCKETS - 1).bit_length()  # smallest power of two >= BUCKETS: the Fenwick search's first step


class GroupLevel(StrEnum):
    """How specific the group a prediction came from is (most specific first)."""

    QUEUE_KIND_SIZE = "queue/kind/size"
    QUEUE_KIND = "queue/kind"
    KIND_SIZE = "kind/size"
    KIND = "kind"


BACKOFF: tuple[GroupLevel, ...] = tuple(GroupLevel)

_GroupKey = tuple[GroupLevel, str, JobKind, int]  # (level, queue or "", kind, size bucket or -1)


def size_bucket(spec: JobSpec) -> int:
    """The job's GPU size class: 0 for shared (fractional) GPUs, else ``1 + ceil(log2(total GPUs))``:
    1 GPU -> 1, 2 -> 2, 3-4 -> 3, 5-8 -> 4, 9-16 -> 5, ... (runtimes differ more across sizes than within)."""
    total = spec.total_gpus
    return 0 if total <= 0 else (total - 1).bit_length() + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """A predicted runtime. ``estimate_s`` is the predictor's ``quantile``; ``p50_s <= p80_s <= p90_s``.

    ``level`` and ``history`` say where it came from: the group's level and how many jobs it has seen.
    """

    estimate_s: float
    p50_s: float
    p80_s: float
    p90_s: float
    level: GroupLevel
    history: int


class LogHistogram:
    """A bounded histogram of runtimes on a log scale (DDSketch's mapping, fixed range), as a Fenwick tree.

    Bucket ``i`` holds ``[MIN_RUNTIME_S * g**i, MIN_RUNTIME_S * g**(i+1))`` with ``g = (1+a)/(1-a)`` and
    ``a = RELATIVE_ACCURACY``; its representative ``MIN_RUNTIME_S * g**i * 2g/(1+g)`` is within ``a`` of every
    value in it. Values under the range count in the first bucket, values over it in the last. Weights are
    floats so that :meth:`halve` can age the history (a Fenwick tree is linear: halving every node halves
    every prefix sum).
    """

    __slots__ = ("_tree", "count", "weight")

    def __init__(self) -> None:
        self._tree = array("d", bytes(8 * (BUCKETS + 1)))  # 1-based: node 0 unused
        self.count = 0  # observations ever added (what "enough history" counts)
        self.weight = 0.0  # their total weight, after halvings (what the quantiles rank by)

    @staticmethod
    def bucket_of(runtime_s: float) -> int:
        if runtime_s <= MIN_RUNTIME_S:
            return 0
        return min(BUCKETS - 1, int(math.log(runtime_s / MIN_RUNTIME_S) / _LOG_GAMMA))

    @staticmethod
    def value_of(bucket: int) -> float:
        return MIN_RUNTIME_S * _GAMMA**bucket * 2 * _GAMMA / (1 + _GAMMA)

    def add(self, bucket: int) -> None:
        tree, i = self._tree, bucket + 1
        while i <= BUCKETS:
            tree[i] += 1.0
            i += i & -i
        self.count += 1
        self.weight += 1.0

    def halve(self) -> None:
        # In place, through a numpy view of the array's buffer: each node times 0.5, the same IEEE product
        # as a Python loop gives (node 0, unused, stays 0.0), without a bytecode loop over the buckets.
        np.frombuffer(self._tree, dtype=np.float64)[:] *= 0.5
        self.weight *= 0.5

    def quantile(self, q: float) -> float:
        """The smallest bucket whose cumulative weight reaches ``q`` of the total, as a value (needs weight)."""
        tree, target, pos, step = self._tree, max(q * self.weight, 1e-12), 0, _TOP
        while step:
            nxt = pos + step
            if nxt <= BUCKETS and tree[nxt] < target:
                pos = nxt
                target -= tree[nxt]
            step >>= 1
        return self.value_of(min(pos, BUCKETS - 1))  # pos: buckets wholly below the target (0-based answer)

    def entries(self) -> int:
        """The numbers it holds: fixed, whatever it has seen."""
        return len(self._tree)


class RuntimePredictor:
    """Predicts a job's runtime from the runtimes of the completed jobs most like it (see the module doc).

    - ``quantile`` (default 0.5): which quantile :attr:`Prediction.estimate_s` is, i.e. what the scheduler
      plans with. The median is the estimate most often close (it minimises the mean absolute log error).
      A higher one (0.8, 0.9) makes a *backfill candidate* conservative: it is admitted ahead of a
      reservation only if even its long case ends in time, so it delays the reserved gang less often, at
      the price of fewer backfills. Beware that the same estimate, once the job runs, is its expected end:
      too late an end pushes the reservation's start later, which lets *more* candidates in. One quantile
      serves both sides here; the default stays the median until a simulation says otherwise.
    - ``min_history`` (default 4): observations a group needs before it answers; fewer, and the next
      coarser group answers. Smaller is more specific but noisier.
    - ``recent`` (default 32; None: all history counts alike): when a group's weight reaches
      ``2 * recent``, every weight in it halves, so the last ``recent`` or so jobs of a group carry about
      as much weight as all before them: habits change (Tsafrir et al. found recent jobs predict better
      than the whole history; on Philly, 32 halves the median error of no ageing, docs/scheduler-predictor.md).

    Feed it only jobs that *completed*: a failed job's runtime is its time to failure and a cancelled
    one's is cut short by a person; both would teach that jobs are shorter than they are when they run to
    the end, which is what backfill and reservations must plan for. (The host calls ``observe`` from its
    completion path only.)
    """

    def __init__(self, *, quantile: float = 0.5, min_history: int = 4, recent: int | None = 32) -> None:
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        if min_history < 1:
            raise ValueError(f"min_history must be at least 1, got {min_history!r}")
        if recent is not None and recent < 1:
            raise ValueError(f"recent must be at least 1 (or None), got {recent!r}")
        self.quantile = quantile
        self.min_history = min_history
        self.recent = recent
        self._groups: dict[_GroupKey, LogHistogram] = {}
        self.observed = 0  # observations taken

    def observe(self, spec: JobSpec, *, runtime_s: float) -> None:
        """Record that ``spec`` (a completed job) ran ``runtime_s`` seconds.

        Raises ``ValueError`` for a runtime that is NaN, infinite or negative: no clock gives one, so it
        is a caller's bug, and one such value would shift a group's quantiles for good. A runtime in
        ``[0, MIN_RUNTIME_S]`` counts as ``MIN_RUNTIME_S`` (a job that ended at once is real history).
        """
        if not math.isfinite(runtime_s) or runtime_s < 0:
            raise ValueError(f"runtime_s must be finite and >= 0, got {runtime_s!r} for job {spec.name!r}")
        bucket = LogHistogram.bucket_of(runtime_s)
        cap = 2 * self.recent if self.recent is not None else None
        groups = self._groups
        for key in _keys(spec):
            h = groups.get(key)
            if h is None:
                h = groups[key] = LogHistogram()
            h.add(bucket)
            if cap is not None and h.weight >= cap:
                h.halve()
        self.observed += 1

    def predict(self, spec: JobSpec) -> Prediction | None:
        """The runtime of ``spec`` from its most specific group with ``min_history`` jobs, or None when even
        its kind has fewer. Reads the job's queue, kind and size only (never its ``duration_estimate_s``)."""
        groups, need = self._groups, self.min_history
        for key in _keys(spec):
            h = groups.get(key)
            if h is not None and h.count >= need:
                return Prediction(
                    estimate_s=h.quantile(self.quantile),
                    p50_s=h.quantile(0.5),
                    p80_s=h.quantile(0.8),
                    p90_s=h.quantile(0.9),
                    level=key[0],
                    history=h.count,
                )
        return None

    def estimate_s(self, spec: JobSpec) -> float | None:
        """Just the point estimate (the predictor's quantile), or None: what a host writes in the spec."""
        p = self.predict(spec)
        return p.estimate_s if p is not None else None

    @property
    def groups(self) -> int:
        return len(self._groups)

    def entries(self) -> int:
        """The numbers held in all: ``groups * (BUCKETS + 1)``, bounded by the groups, never by the jobs."""
        return sum(h.entries() for h in self._groups.values())


def _keys(spec: JobSpec) -> tuple[_GroupKey, ...]:
    """The job's groups, most specific first (the back-off order)."""
    q, k, s = spec.queue, spec.kind, size_bucket(spec)
    return (
        (GroupLevel.QUEUE_KIND_SIZE, q, k, s),
        (GroupLevel.QUEUE_KIND, q, k, -1),
        (GroupLevel.KIND_SIZE, "", k, s),
        (GroupLevel.KIND, "", k, -1),
    )
