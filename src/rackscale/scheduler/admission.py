"""Admission: what a cycle decides about a pending job before any placement search.

In order: may the cycle stop here (nothing left can fit)? do the filters reject the job (static ones
remembered per job shape)? is it fenced off a reservation's racks? did a no smaller job of its shape fail
already this cycle? Only a job that passes all of them becomes an :class:`Attempt` for the actions.
"""

from __future__ import annotations

from rackscale.model.topology import GPUCluster
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec
from rackscale.scheduler.cycle import Attempt, Cycle, JobShape, job_shape
from rackscale.scheduler.decisions import Pending
from rackscale.scheduler.framework import CycleContext, Filter, VictimChooser
from rackscale.scheduler.gang import GangPlacement
from rackscale.scheduler.pending import fewest_units, static_shape
from rackscale.scheduler.status import Status
from rackscale.scheduler.waiting import CLUSTER_FULL, SAME_SHAPE_FAILED


class Admission:
    def __init__(self, *, filters: list[Filter], gang: GangPlacement, victims: VictimChooser | None = None) -> None:
        self.filters = filters
        self.victims = victims  # the profile's victim chooser (None: no preemption)
        self._static = [f for f in filters if f.static]
        self._dynamic = [f for f in filters if not f.static]
        self._static_for: GPUCluster | None = None
        self._static_memo: dict[tuple[object, ...], Status | None] = {}
        # Per queued job, across cycles: the static filters' answer and its shapes (by fenced, may_split),
        # with the spec they were read from. A backlog's jobs wait through many cycles, and deriving both
        # was most of the cost of a job that waits (docs/benchmarks.md, "Issue 13: the backlog cycle").
        self._job_memo: dict[str, _JobMemo] = {}
        self.gang = gang
        self._equal_room: dict[int, bool] = {}  # per cycle: see _room_from_equals

    def new_cycle(self, *, cluster: GPUCluster, queued: int) -> None:
        """Forget what was read on another cluster, and now and then the jobs that left the queue (the
        per-job memo holds at most about twice the queue)."""
        self._equal_room = {}
        if cluster is not self._static_for:
            self._static_for, self._static_memo, self._job_memo = cluster, {}, {}
        elif len(self._job_memo) > 2 * queued + 1024:
            self._job_memo.clear()

    def stop_status(self, cycle: Cycle, job: JobSpec) -> Status | None:
        """Why the cycle may stop before ``job`` (the next in queue order), or None to go on."""
        if cycle.shapes is not None and len(cycle.covered) == cycle.shapes:
            return SAME_SHAPE_FAILED  # every queued shape has failed at its smallest size: nothing else can fit
        # No remaining job fits and nobody of lower priority can be preempted: the rest would fail too,
        # unless jobs of their own priority could make room. (The head of the queue is always examined, so it
        # always gets a detailed reason.)
        if (
            cycle.examined
            and cycle.min_demand
            and _no_room_left(cycle.state, cycle.min_demand, job.priority)
            and not self._room_from_equals(cycle, job.priority)
        ):
            return CLUSTER_FULL
        return None

    def _room_from_equals(self, cycle: Cycle, priority: int) -> bool:
        """Could a waiting job of ``priority`` get GPUs from running jobs of its own priority, which the
        early stop's test of lower priorities leaves out: a victim the chooser would take (``las-victims``),
        or what an elastic gang grew into beyond its request (``shrink``)? Read once per cycle and priority:
        the cycle's placements are protected from both, and elastic gangs grow only after its last job.
        (Loans of equal priority are taken back only for the reservation's holder, a job examined before
        any stop: the reservation is planned for the first job blocked.)"""
        got = self._equal_room.get(priority)
        if got is None:
            state = cycle.state
            running = state.running
            got = (self.victims is not None and self.victims.may_take_equal(priority, state, cycle.ctx)) or (
                self.gang.profile.elastic
                and any(
                    (rj := running[n]).spec.priority == priority and rj.placement.units > rj.spec.units
                    for n in state.elastic
                )
            )
            self._equal_room[priority] = got
        return got

    def admit(self, cycle: Cycle, job: JobSpec) -> Attempt | None:
        """The job's attempt, or None when it waits already (its reason is recorded in ``cycle``)."""
        state, ctx = cycle.state, cycle.ctx
        memo = self._job_memo.get(job.name)
        if memo is None or memo.job is not job:
            memo = self._job_memo[job.name] = _JobMemo(
                job,
                self._static_status(job, state, ctx),
                fewest_units(job, elastic=ctx.elastic),
                self.gang.split_is_free(job),
            )
        status = memo.static
        if status is not None:
            cycle.wait(job, status)
            return None
        now = ctx.now
        end = now + job.duration_estimate_s if job.duration_estimate_s is not None else None
        exclude: frozenset[int] = frozenset()
        r = cycle.reservation
        if (
            r is not None
            and job.name != r.job
            and job.priority <= r.priority
            and not (end is not None and r.start is not None and end <= r.start)  # (inline: once per queued job)
        ):
            exclude = r.racks  # it would delay the reservation's holder: it may only be backfilled
        fenced = bool(exclude)
        may_split = memo.split_free or self.gang.may_split(job, now, state)
        shape = None
        if cycle.failed:  # (no failure yet: no shape to look up)
            shape = memo.shape(fenced, may_split)
            seen = cycle.failed.get(shape)
            if seen is not None and memo.needed >= seen.units and job.name not in state.running:
                cycle.waiting.append(Pending(job, seen.status))
                return None  # (most of a backlog's jobs: no Attempt built for them)
        attempt = Attempt(job, exclude, fenced, may_split, _shape=shape)
        status = _run(self._dynamic, job, state, ctx)
        if status is not None:
            cycle.wait(job, status)
            return None
        return attempt

    def _static_status(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status | None:
        """The static filters' answer, remembered per job shape (they read only the job and the cluster,
        and ``new_cycle`` forgets them for another cluster)."""
        # The static shape spells out the unit's fields (see ``pending.static_shape``): a ``Resources`` key
        # would run its dataclass ``__eq__`` in Python on every hit.
        key = (static_shape(job), job.units, job.min_units)
        if key in self._static_memo:
            return self._static_memo[key]
        st = self._static_memo[key] = _run(self._static, job, state, ctx)
        return st


class _JobMemo:
    """What admission derives from a queued job alone: the static filters' answer, and its shape for the
    last (fenced, may_split) it was asked with (one object per waiting job, for the garbage collector to
    track: no list of four)."""

    __slots__ = ("_asked", "_shape", "job", "needed", "split_free", "static")

    def __init__(self, job: JobSpec, static: Status | None, needed: int, split_free: bool) -> None:
        self.job = job
        self.static = static
        self.needed = needed  # ``fewest_units`` under the profile (``CycleContext.elastic``, the same every cycle)
        self.split_free = split_free  # ``GangPlacement.split_is_free``: may split now, whatever the state
        self._asked = -1
        self._shape: JobShape | None = None

    def shape(self, fenced: bool, may_split: bool) -> JobShape:
        asked = 2 * fenced + may_split
        shape = self._shape
        if shape is None or asked != self._asked:
            shape = self._shape = job_shape(self.job, fenced=fenced, may_split=may_split)
            self._asked = asked
        return shape


def _run(filters: list[Filter], job: JobSpec, state: StateView, ctx: CycleContext) -> Status | None:
    for f in filters:
        st = f.filter(job, state, ctx)
        if not st.ok:
            return st
    return None


def _no_room_left(state: StateView, min_demand: int, priority: int) -> bool:
    """True when fewer whole GPUs are free than the smallest pending job needs, and no running job of
    lower priority than ``priority`` (the highest priority still to be tried) could make room."""
    return state.free_whole_gpus < min_demand and not state.has_preemptible_below(priority)
