"""What one scheduling cycle decided. Decisions are values; applying them is the caller's job."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import ClusterState
from rackscale.model.workload import JobSpec
from rackscale.scheduler.status import Status


@dataclass(frozen=True, slots=True)
class Placed:
    """Start ``spec`` on ``placement`` (or, for a running inference job, add the replicas in it)."""

    spec: JobSpec
    placement: Placement
    expected_end: float | None
    backfilled: bool = False
    scale_up: bool = False
    # A running job moved by consolidation (``consolidate.py``): its ``Preemption`` of this cycle stops it,
    # this starts it again here.
    moved: bool = False


class PreemptionCause(StrEnum):
    """Which mechanism stopped a running job for another (the ``cause`` label of the service's
    ``rackscale_preemption_victims_total``)."""

    PRIORITY = "priority"  # a job of higher priority needs its GPUs (``preemption.py``, ``las.py``)
    ATTAINED_SERVICE = "attained-service"  # one of equal priority that has had less GPU time (``las.py``)
    RECLAIM = "reclaim"  # it ran on loan on GPUs reserved for a job that can now start (``loans.py``)
    CONSOLIDATION = "consolidation"  # moved to free a rack whole for a waiting gang (``consolidate.py``)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    victim: str
    preemptor: str
    reason: str  # for the victim's owner: no job names
    cause: PreemptionCause
    # Disruptions past a budget that this stop adds (``budgets.py``): 0 within them, and always without budgets.
    over_budget: int = 0


class ResizeKind(StrEnum):
    SHRUNK = "shrunk"
    GROWN = "grown"


@dataclass(frozen=True, slots=True)
class Resized:
    """A running elastic gang goes on at another size: ``placement`` is all it holds after the change (it
    restarts from a checkpoint on it, ``elastic.py``). ``reason`` is for the job's owner (no job names)."""

    spec: JobSpec
    placement: Placement
    units_before: int
    kind: ResizeKind
    reason: str


class Pending(NamedTuple):
    """A job left waiting, and why. A named tuple, not a frozen dataclass: a cycle over a backlog builds one
    per waiting job (8,000 in the placement bench's 10,000-job cycle), and a frozen dataclass's
    ``__init__`` costs about three times as much (it sets each field through ``object.__setattr__``)."""

    spec: JobSpec
    status: Status


@dataclass(frozen=True, slots=True)
class Reservation:
    """A blocked job holds these racks from ``start`` on; backfill must not delay it."""

    job: str
    racks: frozenset[int]
    start: float | None  # None: no estimate of when it can start (some running jobs have no end estimate)
    priority: int = 0  # the holder's: only jobs of no higher priority must stay off its racks
    job_spec: JobSpec | None = field(default=None, compare=False, repr=False)  # the holder, to re-plan it


@dataclass(frozen=True, slots=True)
class Decisions:
    placed: tuple[Placed, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    resized: tuple[Resized, ...] = ()  # applied after the preemptions, before the placements
    pending: tuple[Pending, ...] = ()
    reservation: Reservation | None = None
    # Jobs the cycle did not look at because none of them could fit (listed in no ``pending`` entry).
    not_examined: int = 0
    not_examined_status: Status | None = None
    stats: dict[str, int] = field(default_factory=dict)

    def pending_status(self, name: str) -> Status | None:
        """Why ``name`` waits (the shared status of unexamined jobs if it was not looked at)."""
        for p in self.pending:
            if p.spec.name == name:
                return p.status
        return self.not_examined_status


def apply_decisions(state: ClusterState, decisions: Decisions, *, now: float) -> None:
    """Apply a cycle's decisions to ``state``: preempt the victims, resize the elastic gangs, then start the
    placements, in the order the scheduler decided them (which is the order in which they were valid: a
    shrink frees what a placement takes; a growth takes only what was still free after every placement)."""
    victims = {p.victim for p in decisions.preemptions}
    for v in sorted(victims):
        state.release(v)
    for z in decisions.resized:
        old = state.release(z.spec.name)
        state.allocate(z.spec, z.placement, now=old.started_at, expected_end=old.expected_end, checkpointed_at=now)
    for p in decisions.placed:
        if p.scale_up:
            state.extend(p.spec.name, p.placement.allocs, p.placement.units)
        else:
            state.allocate(p.spec, p.placement, now=now, expected_end=p.expected_end)


def merge_allocs(allocs: list[NodeAlloc]) -> tuple[NodeAlloc, ...]:
    """Merge whole-GPU slices on the same node into one slice (fractional slices stay apart)."""
    merged: dict[int, NodeAlloc] = {}
    out: list[NodeAlloc] = []
    for a in allocs:
        if a.milli != 1000 or not a.gpus:
            out.append(a)
            continue
        m = merged.get(a.node)
        if m is None:
            merged[a.node] = a
        else:
            merged[a.node] = NodeAlloc(
                a.node, m.gpus + a.gpus, 1000, m.cpu_milli + a.cpu_milli, m.memory_mib + a.memory_mib
            )
    return tuple(merged.values()) + tuple(out)
