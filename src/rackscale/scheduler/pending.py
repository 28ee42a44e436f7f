"""The pending queue, kept sorted between cycles so a cycle does not re-sort a large backlog.

Jobs are held per priority level, per queue, in submit order (then name). Adding or removing a job is
a binary search plus a list insert/delete (memmove, fast in C). The queue also tracks the smallest
whole-GPU demand among its jobs, so a cycle can stop as soon as no remaining job could fit.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator

from rackscale.model.workload import JobKind, JobSpec, PreemptionPolicy

_Key = tuple[float, str]
# What a job asks for, independent of the cycle: kind, unit, constraints, priority, whether it may preempt.
StaticShape = tuple[object, ...]


def static_shape(job: JobSpec) -> StaticShape:
    return (
        job.kind,
        job.unit,
        job.topology.required,
        job.topology.preferred,
        job.priority,
        job.preemption_policy is not PreemptionPolicy.NEVER,  # (not ``.value``: a Python-level property)
    )


def whole_demand(job: JobSpec) -> int:
    """Whole GPUs the job needs at the least to start (0 for shared-GPU or CPU-only units)."""
    if job.unit.gpus == 0:
        return 0
    return job.unit.gpus * (1 if job.kind is JobKind.INFERENCE else job.required_units)


class PendingQueue:
    __slots__ = ("_demand", "_durations", "_jobs", "_levels", "_shapes")

    def __init__(self, jobs: Iterable[JobSpec] = ()) -> None:
        self._levels: dict[int, dict[str, tuple[list[_Key], list[JobSpec]]]] = {}
        self._jobs: dict[str, JobSpec] = {}
        # Summaries, built on first use and then kept up to date (a queue built for one cycle from a
        # list may never need them): whole-GPU demands (a plain dict of counts: a queue is built for
        # every cycle, and a Counter's constructor runs in Python), and units asked for per static shape.
        self._demand: dict[int, int] | None = None
        self._shapes: dict[StaticShape, Counter[int]] | None = None
        # Duration estimates per static shape (inf for none): a heap with lazy deletion, and live counts.
        self._durations: dict[StaticShape, tuple[list[float], Counter[float]]] | None = None
        self._bulk_load(jobs)

    def _bulk_load(self, jobs: Iterable[JobSpec]) -> None:
        """Build from many jobs with one sort (``add`` one by one would bisect and insert each)."""
        latest: dict[str, JobSpec] = {}
        for j in jobs:
            latest[j.name] = j  # a later job of the same name replaces an earlier one, as ``add`` does
        ordered = sorted(latest.values(), key=lambda j: (j.priority, j.queue, j.submit_time, j.name))
        demand: dict[int, int] = {}
        for j in ordered:
            keys, items = self._levels.setdefault(j.priority, {}).setdefault(j.queue, ([], []))
            keys.append((j.submit_time, j.name))
            items.append(j)
            d = whole_demand(j)
            demand[d] = demand.get(d, 0) + 1
        self._demand = demand
        self._jobs.update(latest)

    def _demands(self) -> dict[int, int]:
        if self._demand is None:
            self._demand = {}
            for j in self._jobs.values():
                d = whole_demand(j)
                self._demand[d] = self._demand.get(d, 0) + 1
        return self._demand

    def _shape_units(self) -> dict[StaticShape, Counter[int]]:
        if self._shapes is None:
            self._shapes = {}
            for j in self._jobs.values():
                self._count_units(j, +1)
        return self._shapes

    def _count_units(self, job: JobSpec, sign: int) -> None:
        """Count ``job``'s units in its static shape (no ``setdefault(key, Counter())``: that would build
        a Counter, in Python, for every job)."""
        assert self._shapes is not None
        shape = static_shape(job)
        units = self._shapes.get(shape)
        if units is None:
            units = self._shapes[shape] = Counter()
        units[job.required_units] += sign
        if not units[job.required_units]:
            del units[job.required_units]
            if not units:
                del self._shapes[shape]

    def _shape_durations(self) -> dict[StaticShape, tuple[list[float], Counter[float]]]:
        if self._durations is None:
            self._durations = {}
            for j in self._jobs.values():
                self._note_duration(j, +1)
        return self._durations

    def _note_duration(self, job: JobSpec, sign: int) -> None:
        assert self._durations is not None
        d = job.duration_estimate_s if job.duration_estimate_s is not None else math.inf
        shape = static_shape(job)
        entry = self._durations.get(shape)
        if entry is None:
            entry = self._durations[shape] = ([], Counter())
        heap, live = entry
        live[d] += sign
        if sign > 0 and live[d] == 1:
            heapq.heappush(heap, d)

    def min_duration(self, shape: StaticShape) -> float:
        """The shortest duration estimate among queued jobs of ``shape`` (inf: none, or none estimated)."""
        entry = self._shape_durations().get(shape)
        if entry is None:
            return math.inf
        heap, live = entry
        while heap and live[heap[0]] <= 0:
            del live[heapq.heappop(heap)]
        return heap[0] if heap else math.inf

    def add(self, job: JobSpec) -> None:
        """Queue a job (replacing a queued job of the same name)."""
        if job.name in self._jobs:
            self.remove(job.name)
        keys, jobs = self._levels.setdefault(job.priority, {}).setdefault(job.queue, ([], []))
        key = (job.submit_time, job.name)
        i = bisect.bisect_left(keys, key)
        keys.insert(i, key)
        jobs.insert(i, job)
        self._jobs[job.name] = job
        if self._demand is not None:
            d = whole_demand(job)
            self._demand[d] = self._demand.get(d, 0) + 1
        if self._shapes is not None:
            self._count_units(job, +1)
        if self._durations is not None:
            self._note_duration(job, +1)

    def remove(self, name: str) -> JobSpec:
        """Take a job out of the queue. Raises ``KeyError`` if it is not queued."""
        job = self._jobs.pop(name)
        level = self._levels[job.priority]
        keys, jobs = level[job.queue]
        i = bisect.bisect_left(keys, (job.submit_time, job.name))
        del keys[i]
        del jobs[i]
        if not keys:
            del level[job.queue]
            if not level:
                del self._levels[job.priority]
        if self._demand is not None:
            d = whole_demand(job)
            self._demand[d] -= 1
            if not self._demand[d]:
                del self._demand[d]
        if self._shapes is not None:
            self._count_units(job, -1)
        if self._durations is not None:
            self._note_duration(job, -1)
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
                yield from self._levels[prio][q][1]

    def priorities(self) -> list[int]:
        return sorted(self._levels, reverse=True)

    def queues_at(self, priority: int) -> dict[str, list[JobSpec]]:
        """The jobs of one priority level per queue, each list in submit order (do not mutate)."""
        return {q: jobs for q, (_keys, jobs) in self._levels[priority].items()}

    def shape_count(self) -> int:
        """How many distinct static shapes the queued jobs have."""
        return len(self._shape_units())

    def min_units(self, shape: StaticShape) -> int | None:
        """The fewest units any queued job of ``shape`` asks for (None if there is none)."""
        units = self._shape_units().get(shape)
        return min(units) if units else None

    def min_whole_demand(self) -> int:
        """The fewest whole GPUs any queued job needs to start (0 if some job needs none)."""
        demand = self._demands()
        return min(demand) if demand else 0
