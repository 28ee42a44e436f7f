"""One scheduling cycle's working state, which its actions share (KAI-Scheduler's ``Session``).

A :class:`Cycle` is opened per ``schedule()`` call over a :class:`Transaction` on the live state; the
actions (``actions.py``) place jobs through the transaction and record what they decided here; at the end
the transaction is rolled back and :meth:`Cycle.decisions` is what the caller gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from rackscale.model.transaction import Transaction
from rackscale.model.view import StateView
from rackscale.model.workload import JobKind, JobSpec, Level, PreemptionPolicy, Resources
from rackscale.scheduler.decisions import Decisions, Pending, Placed, Preemption, Reservation, Resized
from rackscale.scheduler.framework import CycleContext
from rackscale.scheduler.pending import PendingQueue, StaticShape
from rackscale.scheduler.status import Status


class JobShape(NamedTuple):
    """What decides whether a pending job can be placed, besides its unit count, within one cycle.

    Requests of one shape fail monotonically in their unit count within a cycle (capacity only shrinks as
    jobs are placed), so the smallest failure of a shape answers for every larger one. Everything that
    changes what the scheduler would try is part of the shape: kind, unit resources, constraints, whether
    a reservation fences the job off racks (backfill), priority and whether it may preempt (who could be
    preempted), and whether it may be split over racks now.

    A named tuple rather than a frozen dataclass: it is built, hashed and compared for nearly every job a
    cycle examines, and a frozen dataclass costs about three times as much there (its ``__init__``,
    ``__hash__`` and ``__eq__`` run in Python; a tuple's run in C)."""

    kind: JobKind
    unit: UnitKey  # the unit's fields (see ``_unit_key``)
    required: Level | None
    preferred: Level | None
    fenced: bool
    priority: int
    may_preempt: bool
    may_split: bool


UnitKey = tuple[int, int, int, int, frozenset[str] | None]


def _unit_key(u: Resources) -> UnitKey:
    """A unit's fields: equal exactly when the ``Resources`` are, compared in C (its dataclass ``__eq__``
    runs in Python, on every shape lookup of the cycle)."""
    return (u.gpus, u.gpu_milli, u.cpu_milli, u.memory_mib, u.gpu_models)


@dataclass(frozen=True, slots=True)
class ShapeFailure:
    """The smallest request of a shape that failed this cycle, and why."""

    units: int
    status: Status


@dataclass(slots=True)
class Attempt:
    """One pending job on its way through the cycle's actions."""

    job: JobSpec
    exclude: frozenset[int]  # racks a reservation holds that the job must keep off (empty: not fenced)
    fenced: bool  # ``exclude`` is not empty: the job would delay the reservation's holder, only backfill
    may_split: bool  # decided once, before any action: the split decision reads the cycle's state
    status: Status | None = None  # why the job is not placed (yet): the last placement attempt's answer
    _shape: JobShape | None = None

    @property
    def may_preempt(self) -> bool:
        return self.job.preemption_policy is not PreemptionPolicy.NEVER

    @property
    def shape(self) -> JobShape:
        """Built on first use: a job needs it only once the cycle has a failure to compare it with."""
        if self._shape is None:
            self._shape = job_shape(self.job, fenced=self.fenced, may_split=self.may_split)
        return self._shape


def job_shape(job: JobSpec, *, fenced: bool, may_split: bool) -> JobShape:
    return JobShape(
        job.kind,
        _unit_key(job.unit),
        job.topology.required,
        job.topology.preferred,
        fenced,
        job.priority,
        job.preemption_policy is not PreemptionPolicy.NEVER,
        may_split,
    )


@dataclass(slots=True, init=False)
class Cycle:
    """The cycle's state: the transaction that is its only writer, and what it decided so far."""

    tx: Transaction
    state: StateView  # the transaction's state, read-only: changes go through ``tx``
    queue: PendingQueue
    ctx: CycleContext
    reservation: Reservation | None  # in force, from an earlier cycle or planned in this one
    min_demand: int  # the fewest whole GPUs any queued job needs (see ``Admission.stop_status``)
    placed: list[Placed]
    preempted: list[Preemption]
    resized: dict[str, Resized]  # elastic gangs shrunk or grown (``elastic.py``): each job's final size
    elastic: tuple[str, ...] | None  # the running elastic gangs, found at the first shrink (None: not yet)
    waiting: list[Pending]
    # The smallest failed request per shape: a later job of a shape, no smaller, fails the same way.
    failed: dict[JobShape, ShapeFailure]
    # Static shapes whose smallest queued request has failed unconstrained (no reservation racks
    # excluded, split allowed): every queued job of such a shape fails too. Once all shapes are covered
    # the cycle can stop. Inference is left out (a running service's scale-up is not comparable with a
    # new request of the same shape).
    covered: set[StaticShape]
    shapes: int | None  # the queue's count of static shapes, read at the first failure
    examined: int
    tried: int
    stop: Status | None  # why the jobs after ``examined`` were not looked at
    # ``protected()``'s last answer, and the counts of ``placed`` and ``resized`` it was built from
    _protected: frozenset[str]
    _protected_from: tuple[int, int]

    def __init__(
        self,
        *,
        tx: Transaction,
        queue: PendingQueue,
        ctx: CycleContext,
        reservation: Reservation | None,
        min_demand: int,
    ) -> None:
        # Written out (not generated with default factories): one cycle per decision, and the generated
        # ``__init__`` costs twice as much.
        self.tx = tx
        self.state = tx.state
        self.queue = queue
        self.ctx = ctx
        self.reservation = reservation
        self.min_demand = min_demand
        self.placed = []
        self.preempted = []
        self.resized = {}
        self.elastic = None
        self.waiting = []
        self.failed = {}
        self.covered = set()
        self.shapes = None
        self.examined = 0
        self.tried = 0
        self.stop = None
        self._protected = frozenset()
        self._protected_from = (0, 0)

    def protected(self) -> frozenset[str]:
        """The jobs no action of this cycle may stop: those it placed and those it resized. Extended from the
        last answer (``placed`` only grows, ``resized`` only gains keys): a backlog cycle preempts after
        placing thousands of jobs, and rebuilding the set for every preemptor was ~2 % of such a cycle."""
        placed, resized = self.placed, self.resized
        done, done_resized = self._protected_from
        if done == len(placed) and done_resized == len(resized):
            return self._protected
        got = self._protected.union([p.spec.name for p in placed[done:]])
        if done_resized != len(resized):
            got = got.union(resized)
        self._protected, self._protected_from = got, (len(placed), len(resized))
        return got

    def wait(self, job: JobSpec, status: Status) -> None:
        self.waiting.append(Pending(job, status))

    def room_was_freed(self) -> None:
        """Preemption freed GPUs: earlier failures may fit now."""
        self.failed.clear()
        self.covered.clear()

    def decisions(self) -> Decisions:
        unexamined = len(self.queue) - self.examined
        return Decisions(
            placed=tuple(self.placed),
            preemptions=tuple(self.preempted),
            resized=tuple(self.resized.values()),
            pending=tuple(self.waiting),
            reservation=self.reservation,
            not_examined=unexamined,
            not_examined_status=self.stop if unexamined else None,
            stats={
                "pending": len(self.queue),
                "examined": self.examined,
                "tried": self.tried,
                "placed": len(self.placed),
                "resized": len(self.resized),
            },
        )
