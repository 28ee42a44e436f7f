"""The pending queue, kept sorted between cycles so a cycle does not re-sort a large backlog.

Jobs are held per priority level, per queue, in submit order (then name). Adding or removing a job is
a binary search plus a list insert/delete (memmove, fast in C). The queue also tracks the smallest
whole-GPU demand among its jobs, so a cycle can stop as soon as no remaining job could fit.

A queue is built for every cycle a caller runs from a plain list (the placement bench's 10,000-job
backlog, a one-job arrival cycle), so building it is kept to C-level work where it can be: one sort with
an ``attrgetter`` key, one list per (priority, queue) level, and the per-shape summaries (units and
durations per static shape) built in one pass, only when a cycle first needs them.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import attrgetter
from typing import cast

from rackscale.model.workload import JobKind, JobSpec, PreemptionPolicy

# What a job asks for, independent of the cycle: kind, unit, constraints, priority, whether it may preempt.
StaticShape = tuple[object, ...]

_ORDER = attrgetter("priority", "queue", "submit_time", "name")
_LEVEL = attrgetter("priority", "queue")
_SUBMITTED = attrgetter("submit_time", "name")
_MIN_UNITS = attrgetter("min_units")
_UNITS = attrgetter("units")
_DURATION = attrgetter("duration_estimate_s")
_NEVER = PreemptionPolicy.NEVER
_INFERENCE = JobKind.INFERENCE


def static_shape(job: JobSpec) -> StaticShape:
    """The unit's fields are spelled out rather than the ``Resources`` itself: jobs built by a workload
    generator or a trace have a ``Resources`` object each (only specs parsed from documents share equal
    ones), and comparing two of them runs the dataclass's ``__eq__`` in Python, once per lookup of a shape
    (the fields compare in C). Equal exactly when the ``Resources`` are equal."""
    u = job.unit
    t = job.topology
    return (
        job.kind,
        u.gpus,
        u.gpu_milli,
        u.cpu_milli,
        u.memory_mib,
        u.gpu_models,
        t.required,
        t.preferred,
        job.priority,
        job.preemption_policy is not _NEVER,  # (not ``.value``: a Python-level property)
    )


def fewest_units(job: JobSpec, *, elastic: bool = True) -> int:
    """The fewest units the job can start on under a profile: a service's minimum replicas; an elastic gang's
    minimum only where the profile resizes gangs (``Profile.elastic``), else every unit it asked for. (A
    profile that runs gangs at their size must not read the minimum: the cycle remembers a failed shape at
    this count and skips later jobs of the shape asking no fewer, which would skip a smaller gang that fits.)"""
    return job.required_units if elastic or job.kind is _INFERENCE else job.units


def whole_demand(job: JobSpec) -> int:
    """Whole GPUs the job needs at the least to start (0 for shared-GPU or CPU-only units)."""
    gpus = job.unit.gpus
    if gpus == 0:
        return 0
    return gpus if job.kind is _INFERENCE else gpus * (job.min_units or job.units)


def whole_demand_fixed(job: JobSpec) -> int:
    """:func:`whole_demand` under a profile that runs every gang at its size: all a gang asked for."""
    return job.unit.gpus * (1 if job.kind is _INFERENCE else job.units)  # (a service: one replica to start)


class _ShapeSummary:
    """The queued jobs of one static shape: how many ask for each unit count, and how many have each
    duration estimate (inf for none), with a heap of those durations (lazy deletion) built when the
    shortest is first asked for. The counts are built by ``Counter`` over ``attrgetter`` (C loops), and
    then read and written only through ``get``/``pop``/``[]=`` (no ``__missing__``, which runs in Python)."""

    __slots__ = ("elastic", "heap", "live", "units")

    def __init__(self, jobs: list[JobSpec], *, elastic: bool) -> None:
        self.elastic = elastic
        if any(map(_MIN_UNITS, jobs)):  # some job may start with fewer units (inference, elastic gangs)
            self.units: dict[int, int] = Counter(fewest_units(j, elastic=elastic) for j in jobs)
        else:
            self.units = Counter(map(_UNITS, jobs))
        live: dict[float | None, int] = Counter(map(_DURATION, jobs))
        unestimated = live.pop(None, 0)
        if unestimated:
            live[math.inf] = live.get(math.inf, 0) + unestimated
        self.live = cast("dict[float, int]", live)
        self.heap: list[float] | None = None

    def note(self, job: JobSpec, sign: int) -> None:
        units, live = self.units, self.live
        u = fewest_units(job, elastic=self.elastic)
        n = units.get(u, 0) + sign
        if n:
            units[u] = n
        else:
            units.pop(u)
        d = job.duration_estimate_s
        d = math.inf if d is None else d
        n = live.get(d, 0) + sign
        if n:
            live[d] = n
        else:
            live.pop(d)  # its heap entry goes when it comes to the top
        if sign > 0 and n == 1 and self.heap is not None:
            heapq.heappush(self.heap, d)

    def min_duration(self) -> float:
        heap, live = self.heap, self.live
        if heap is None:
            heap = self.heap = list(live)
            heapq.heapify(heap)
        while heap and heap[0] not in live:
            heapq.heappop(heap)
        return heap[0] if heap else math.inf


class PendingQueue:
    __slots__ = ("_demand", "_jobs", "_levels", "_shapes", "_whole_demand", "elastic")

    def __init__(self, jobs: Iterable[JobSpec] = (), *, elastic: bool = True) -> None:
        # ``elastic``: the profile's (``Profile.elastic``): whether a gang's minimum is what it needs to start,
        # for the smallest demand and the per-shape counts (off: every gang needs all it asked for).
        self.elastic = elastic
        self._whole_demand = whole_demand if elastic else whole_demand_fixed
        # Per priority, per queue: the jobs in (submit time, name) order; found by ``bisect`` with that
        # key (no list of keys alongside: a queue built for one cycle would build one per job for nothing).
        self._levels: dict[int, dict[str, list[JobSpec]]] = {}
        self._jobs: dict[str, JobSpec] = {}
        # Whole-GPU demands (counts per demand): every cycle reads their minimum, so they are built with
        # the queue. Per static shape, the units and durations asked for: built on first use (a queue
        # built for one cycle may never need them), then kept up to date.
        self._demand: dict[int, int] = {}
        self._shapes: dict[StaticShape, _ShapeSummary] | None = None
        self._bulk_load(jobs)

    def _bulk_load(self, jobs: Iterable[JobSpec]) -> None:
        """Build from many jobs with one sort (``add`` one by one would bisect and insert each)."""
        # A later job of the same name replaces an earlier one, as ``add`` does.
        latest = {j.name: j for j in jobs}
        ordered = sorted(latest.values(), key=_ORDER)
        levels = self._levels
        for (prio, queue), group in groupby(ordered, key=_LEVEL):
            levels.setdefault(prio, {})[queue] = list(group)
        demand = self._demand  # (not a ``Counter``: its constructor runs in Python, for one job as for many)
        for d in map(self._whole_demand, ordered):
            demand[d] = demand.get(d, 0) + 1
        self._jobs.update(latest)

    def _summaries(self) -> dict[StaticShape, _ShapeSummary]:
        if self._shapes is None:
            groups: dict[StaticShape, list[JobSpec]] = {}
            values = list(self._jobs.values())
            for key, j in zip(map(static_shape, values), values, strict=True):
                group = groups.get(key)
                if group is None:
                    groups[key] = [j]
                else:
                    group.append(j)
            self._shapes = {key: _ShapeSummary(js, elastic=self.elastic) for key, js in groups.items()}
        return self._shapes

    def _note_shape(self, job: JobSpec, sign: int) -> None:
        if self._shapes is None:
            return
        key = static_shape(job)
        summary = self._shapes.get(key)
        if summary is None:
            summary = self._shapes[key] = _ShapeSummary([], elastic=self.elastic)
        summary.note(job, sign)
        if not summary.units:
            del self._shapes[key]

    def min_duration(self, shape: StaticShape) -> float:
        """The shortest duration estimate among queued jobs of ``shape`` (inf: none, or none estimated)."""
        summary = self._summaries().get(shape)
        return summary.min_duration() if summary is not None else math.inf

    def add(self, job: JobSpec) -> None:
        """Queue a job (replacing a queued job of the same name)."""
        if job.name in self._jobs:
            self.remove(job.name)
        jobs = self._levels.setdefault(job.priority, {}).setdefault(job.queue, [])
        jobs.insert(bisect.bisect_left(jobs, (job.submit_time, job.name), key=_SUBMITTED), job)
        self._jobs[job.name] = job
        d = self._whole_demand(job)
        self._demand[d] = self._demand.get(d, 0) + 1
        self._note_shape(job, +1)

    def remove(self, name: str) -> JobSpec:
        """Take a job out of the queue. Raises ``KeyError`` if it is not queued."""
        job = self._jobs.pop(name)
        level = self._levels[job.priority]
        jobs = level[job.queue]
        del jobs[bisect.bisect_left(jobs, (job.submit_time, job.name), key=_SUBMITTED)]
        if not jobs:
            del level[job.queue]
            if not level:
                del self._levels[job.priority]
        d = self._whole_demand(job)
        n = self._demand[d] - 1
        if n:
            self._demand[d] = n
        else:
            self._demand.pop(d)
        self._note_shape(job, -1)
        return job

    def discard(self, name: str) -> None:
        if name in self._jobs:
            self.remove(name)

    def get(self, name: str) -> JobSpec | None:
        return self._jobs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobSpec]:
        """Priority (highest first), then queue name, then submit time."""
        for prio in self.priorities():
            for q in sorted(self._levels[prio]):
                yield from self._levels[prio][q]

    def priorities(self) -> list[int]:
        return sorted(self._levels, reverse=True)

    def queues_at(self, priority: int) -> dict[str, list[JobSpec]]:
        """The jobs of one priority level per queue, each list in submit order (do not mutate)."""
        return dict(self._levels[priority])

    def shape_count(self) -> int:
        """How many distinct static shapes the queued jobs have."""
        return len(self._summaries())

    def min_units(self, shape: StaticShape) -> int | None:
        """The fewest units any queued job of ``shape`` asks for (None if there is none)."""
        summary = self._summaries().get(shape)
        return min(summary.units) if summary is not None and summary.units else None

    def min_whole_demand(self) -> int:
        """The fewest whole GPUs any queued job needs to start (0 if some job needs none)."""
        return min(self._demand) if self._demand else 0
