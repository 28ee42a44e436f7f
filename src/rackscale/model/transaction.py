"""A group of admissions and releases that is kept together or undone together.

The scheduler places a gang's units one by one inside the cycle's transaction; if any unit cannot be
placed, it rolls back to the :class:`Checkpoint` it took before the gang, which restores the state exactly
(every index included). At the end of the cycle it rolls back everything: decisions are values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from rackscale.model.errors import RackscaleError
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.running import RunningJob

if TYPE_CHECKING:
    from rackscale.model.state import ClusterState
    from rackscale.model.workload import JobSpec


class CheckpointError(RackscaleError, ValueError):
    """A rollback to a checkpoint the transaction does not hold (a bug in the caller)."""


class _Op(StrEnum):
    ALLOCATED = "allocated"
    RELEASED = "released"
    EXTENDED = "extended"


class Checkpoint:
    """A point in one transaction to roll back to. Opaque: only the transaction that made it reads it.

    Immutable by convention, not a frozen dataclass: one is taken for every job a cycle tries, and a
    frozen dataclass's ``__init__`` costs five times as much (it sets each field through
    ``object.__setattr__``)."""

    __slots__ = ("_depth", "_owner")

    def __init__(self, owner: Transaction, depth: int) -> None:
        self._owner = owner  # a checkpoint of another transaction is refused
        self._depth = depth  # how many changes the transaction held when it was taken

    def __repr__(self) -> str:
        return f"Checkpoint(depth={self._depth})"


class Transaction:
    """Changes to a :class:`ClusterState`, logged so that :meth:`rollback` can undo them, newest first."""

    __slots__ = ("_log", "state")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._log: list[tuple[_Op, RunningJob | Placement]] = []

    def allocate(
        self, spec: JobSpec, placement: Placement, *, now: float, expected_end: float | None = None
    ) -> RunningJob:
        rj = self.state.allocate(spec, placement, now=now, expected_end=expected_end)
        self._log.append((_Op.ALLOCATED, rj))
        return rj

    def release(self, name: str) -> RunningJob:
        rj = self.state.release(name)
        self._log.append((_Op.RELEASED, rj))
        return rj

    def extend(self, name: str, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        rj = self.state.extend(name, allocs, units)
        self._log.append((_Op.EXTENDED, Placement(name, allocs, units)))
        return rj

    def checkpoint(self) -> Checkpoint:
        """The current point: :meth:`rollback` to it undoes every change made after this call."""
        return Checkpoint(self, len(self._log))

    def rollback(self, to: Checkpoint | None = None) -> None:
        """Undo the changes made since ``to`` (all of them without it), newest first; ``to`` stays valid
        (rolling back to it again undoes what was done after it since). A checkpoint of another
        transaction, or one past the changes this one still holds (they were rolled back or committed
        since), raises :class:`CheckpointError` and changes nothing."""
        stop = 0
        if to is not None:
            if to._owner is not self or to._depth > len(self._log):
                raise CheckpointError("rollback to a checkpoint this transaction does not hold")
            stop = to._depth
        log = self._log
        while len(log) > stop:
            op, item = log.pop()
            self._undo(op, item)

    def _undo(self, op: _Op, item: RunningJob | Placement) -> None:
        if isinstance(item, Placement):
            self.state.retract(item.job, item.allocs, item.units)
        elif op is _Op.ALLOCATED:
            self.state.release(item.spec.name)
        else:  # released: put the job back exactly as it was, even on hardware that has failed since
            self.state.allocate(
                item.spec,
                item.placement,
                now=item.started_at,
                expected_end=item.expected_end,
                checkpointed_at=item.checkpointed_at,
                health=False,
            )

    def commit(self) -> None:
        """Keep every change: a later :meth:`rollback` undoes only what comes after."""
        self._log.clear()

    def __len__(self) -> int:
        return len(self._log)
