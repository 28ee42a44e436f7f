"""Expected outcomes are values, not exceptions: a :class:`Status` says what happened and why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    SUCCESS = "Success"
    # Could run later, when GPUs free up (or after preemption / a reservation).
    UNSCHEDULABLE = "Unschedulable"
    # Can never run as asked on this cluster: the user must change the request.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    # Held back on purpose: a reservation for a larger job, or a queue quota.
    WAIT = "Wait"


class Reason(StrEnum):
    """Machine-readable reasons; each :class:`Status` also carries a sentence a user can act on."""

    PLACED = "Placed"
    INSUFFICIENT_GPUS = "InsufficientGPUs"
    TOO_LARGE = "LargerThanConstraintAllows"
    NO_GPU_MODEL = "NoGPUsOfRequestedModel"
    NODE_TOO_SMALL = "UnitLargerThanAnyNode"
    QUOTA = "QueueQuotaExceeded"
    RESERVATION = "WaitingForReservation"
    FRAGMENTED = "Fragmented"
    TOPOLOGY = "TopologyNotAvailable"
    NO_CPU_MEMORY = "InsufficientCPUOrMemory"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: Reason
    message: str
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status(Code.SUCCESS, Reason.PLACED, "placed")


def unschedulable(reason: Reason, message: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, reason, message, plugin)


def unresolvable(reason: Reason, message: str, plugin: str = "") -> Status:
    return Status(Code.UNRESOLVABLE, reason, message, plugin)


def wait(reason: Reason, message: str, plugin: str = "") -> Status:
    return Status(Code.WAIT, reason, message, plugin)
