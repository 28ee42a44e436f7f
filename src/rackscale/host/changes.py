"""What a host says happened to a job: one :class:`Change` each, which the service persists as a row of the
job's event log and acts on (start, stop); the simulator keeps its own record (the job runs) instead, so
it ignores them (a NOTICE, the only kind that changes nothing, is for the event log alone)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rackscale.model.placement import Placement


class ChangeKind(StrEnum):
    SCHEDULED = "scheduled"
    PREEMPTED = "preempted"
    RESIZED = "resized"  # an elastic gang shrunk or grown: it goes on, from a checkpoint, on a new placement
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # a new pending reason (no status change)
    # Something the job (and whoever reads its events) should know that does not move it: a drain will
    # stop it, a drain was called off, the autoscaler holds it. An event only: no phase or placement change.
    NOTICE = "notice"

    @property
    def ends(self) -> bool:
        """The change ends the job's run."""
        return self in (ChangeKind.COMPLETED, ChangeKind.FAILED, ChangeKind.CANCELLED)


@dataclass(frozen=True, slots=True)
class Change:
    """One thing that happened to a job. ``run``: the store's run of the job it was decided for (0:
    whichever run of the name is active); the service's runner sets it, so a change never lands on a newer
    run of a reused name."""

    job: str
    type: ChangeKind
    time: float
    reason: str = ""
    message: str = ""
    placement: Placement | None = None
    exit_code: int | None = None
    run: int = 0


__all__ = ["Change", "ChangeKind"]
