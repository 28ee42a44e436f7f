"""A group of admissions and releases that is kept together or undone together.

The scheduler places a gang's units one by one inside the cycle's transaction; if any unit cannot be
placed, it rolls back to the :class:`Checkpoint` it took before the gang, which restores the state exactly
(every index included). At the end of the cycle it rolls back everything: decisions are values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rackscale.model.errors import RackscaleError
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.running import RunningJob

if TYPE_CHECKING:
    from rackscale.model.state import ClusterState
    from rackscale.model.workload import JobSpec


class CheckpointError(RackscaleError, ValueError):
    """A rollback to a checkpoint the transaction does not hold (a bug in the caller)."""


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
    """Changes to a :class:`ClusterState`, logged so that :meth:`rollback` can undo them, newest first.

    A cycle logs, and at its end rolls back, every placement it tries, so an admission is logged as the
    job's name alone (undone by releasing it): no tuple or bound method to build for it, and a string
    is no work for the garbage collector. A release or an extension logs its undo step and argument."""

    __slots__ = ("_log", "state")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._log: list[str | tuple[Callable[[Any], object], Any]] = []

    def allocate(
        self, spec: JobSpec, placement: Placement, *, now: float, expected_end: float | None = None
    ) -> RunningJob:
        rj = self.state.allocate(spec, placement, now=now, expected_end=expected_end)
        self._log.append(spec.name)
        return rj

    def release(self, name: str) -> RunningJob:
        rj = self.state.release(name)
        self._log.append((self._restore, rj))
        return rj

    def extend(self, name: str, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        rj = self.state.extend(name, allocs, units)
        self._log.append((self._retract, Placement(name, allocs, units)))
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
        pop = log.pop
        release = self.state.release
        while len(log) > stop:
            entry = pop()
            if isinstance(entry, str):
                release(entry)
            else:
                undo, item = entry
                undo(item)

    def _retract(self, p: Placement) -> None:
        self.state.retract(p.job, p.allocs, p.units)

    def _restore(self, rj: RunningJob) -> None:
        """Put a released job back exactly as it was, even on hardware that has failed since."""
        self.state.allocate(
            rj.spec,
            rj.placement,
            now=rj.started_at,
            expected_end=rj.expected_end,
            checkpointed_at=rj.checkpointed_at,
            health=False,
        )

    def commit(self) -> None:
        """Keep every change: a later :meth:`rollback` undoes only what comes after."""
        self._log.clear()

    def __len__(self) -> int:
        return len(self._log)
