"""When to split a gang that prefers one NVLink domain: only when waiting for one would cost more.

A gang that fits in a rack but finds no rack with room now can run split over two racks at once, or wait
for a rack. Splitting makes every step slower (its ring crosses the RDMA fabric): it costs
``(slowdown - 1) x duration``. Waiting costs the time until the first rack has room, which the expected
ends of running jobs tell (the same estimate backfill uses). The gang is split only when waiting would
cost more — "relaxed only when needed". Jobs with no duration estimate or no communication split at once
(waiting cannot be shown to pay). The slowdown is priced by the same step model the simulator runs
(:func:`rackscale.llm.jobs.job_step`): an LLM job's plan on one rack vs on two (its DP all-reduce, and any
TP group the split cuts, on the NIC), a generic job's ``CommProfile`` ring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, LlmWork
from rackscale.network.collectives import Layout


class SplitAdvisor:
    """Per-scheduler memo of slowdowns (static) and per-cycle earliest rack-room times (dynamic)."""

    def __init__(self) -> None:
        self._slowdown: dict[tuple[int, float, float, str] | tuple[int, JobKind, LlmWork], float] = {}
        self._room: _RackRoom | None = None

    def new_cycle(self) -> None:
        self._room = None

    def split_pays_off(self, job: JobSpec, state: StateView, now: float) -> bool:
        total = job.total_gpus
        if total < 2:  # (most of a backlog: asked first, before the reads the others need)
            return True
        duration = job.duration_estimate_s
        talks = job.timed_by_llm or job.comm.bytes_per_step > 0
        if duration is None or not talks or total > state.cluster.max_rack_gpus:
            return True
        extra = (self._slowdown_of(job, state) - 1.0) * duration
        return extra < self._wait_for_rack(state, total, now)

    def _slowdown_of(self, job: JobSpec, state: StateView) -> float:
        key: tuple[int, float, float, str] | tuple[int, JobKind, LlmWork]
        if job.llm is not None and job.timed_by_llm:
            key = (job.total_gpus, job.kind, job.llm)
        else:
            key = (job.total_gpus, job.comm.bytes_per_step, job.comm.compute_s_per_step, job.comm.collective)
        got = self._slowdown.get(key)
        if got is None:
            # imported here: the whole LLM model, which a scheduler with no communicating gang never needs
            # (the CLI imports the scheduler at start-up)
            from rackscale.llm.jobs import job_step

            n = job.total_gpus
            one = job_step(state.cluster, job, Layout(((0, 0, n),))).total_s
            half = -(-n // 2)
            two = job_step(state.cluster, job, Layout(((0, 0, half), (0, 1, n - half)))).total_s
            got = self._slowdown[key] = two / one if one > 0 else 1.0
        return got

    def _wait_for_rack(self, state: StateView, gpus: int, now: float) -> float:
        """Seconds until some rack is expected to have ``gpus`` whole GPUs free (inf if no estimate says)."""
        if self._room is None:
            self._room = _RackRoom(state, now)
        return self._room.earliest(gpus) - now


class _RackRoom:
    """When some rack first has ``k`` whole GPUs free, releasing running jobs at their expected ends,
    soonest first. Read lazily: a question about ``k`` walks the ends only as far as ``k`` needs, and the
    walk resumes there for a larger ``k`` (one pass per cycle at most)."""

    def __init__(self, state: StateView, now: float) -> None:
        self._state = state
        self._now = now
        self._free = list(state.rack_whole)  # as the walk releases jobs (a copy in C)
        # The most free GPUs any rack has so far: from the racks' buckets, not ``max`` over 1,389 racks.
        self._best = _most_free(state)
        self._when: dict[int, float] = {}  # k > current best at the start -> time it is reached
        self._ends: Iterator[tuple[float, str]] | None = state.ends_in_order()

    def earliest(self, k: int) -> float:
        if k <= self._best:
            return self._when.get(k, self._now)
        nodes = self._state.cluster.nodes
        free = self._free
        while self._ends is not None and self._best < k:
            step = next(self._ends, None)
            if step is None:
                self._ends = None
                break
            end, name = step
            rj = self._state.running.get(name)
            if rj is None:
                continue  # preempted since the snapshot was taken
            for a in rj.placement.allocs:
                r = nodes[a.node].rack
                free[r] += a.whole_gpus
                if free[r] > self._best:
                    for j in range(self._best + 1, free[r] + 1):
                        self._when[j] = max(end, self._now)
                    self._best = free[r]
        return self._when.get(k, self._now) if k <= self._best else math.inf


def _most_free(state: StateView) -> int:
    """The most whole free GPUs of any rack (``max(state.rack_whole)``), from the racks' buckets: the first
    rack each GPU model's index gives, most free first, above the best so far."""
    best = 0
    for ix in state.rack_index_all.values():
        top = next(ix.descending(best + 1), None)
        if top is not None:
            best = state.rack_whole[top]
    return best
