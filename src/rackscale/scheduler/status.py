"""Expected outcomes are values, not exceptions: a :class:`Status` says what happened and why."""

from __future__ import annotations

from collections.abc import Callable
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
    # A bug of rackscale's, not the job's or the cluster's: a plugin raised or returned something invalid.
    # The job stays pending and is tried again next cycle; the other jobs of the cycle are not affected.
    ERROR = "Error"


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
    INTERNAL_ERROR = "InternalError"


@dataclass(frozen=True, slots=True)
class Status:
    """``message`` is a whole sentence for a user; a time in it is said relative to the cycle that wrote it
    ("in 2 h 10 min"): the core reads no clock and formats no clock time. ``at`` is that time itself, on
    the caller's clock (the service clock, the simulation's seconds), and ``when`` the words of ``message``
    that say it, so that a presentation layer can say it its own way (``text``): the API as a clock time
    ("from 14:05 UTC, in 2 h 10 min")."""

    code: Code
    reason: Reason
    message: str
    plugin: str = ""
    at: float | None = None
    when: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    def text(self, say: Callable[[float], str] | None = None) -> str:
        """The message, with its time (``when``) said by ``say(at)`` instead; the message as it is without
        a time or without ``say``."""
        if say is None or self.at is None or not self.when or self.when not in self.message:
            return self.message
        return self.message.replace(self.when, say(self.at), 1)


SUCCESS = Status(Code.SUCCESS, Reason.PLACED, "placed")


def duration_words(seconds: float) -> str:
    """A duration for people, to the nearest unit of its last part: ``45 s``, ``12 min``, ``2 h 10 min``,
    ``3 d 4 h``. The sign is dropped (see ``relative``)."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        h, m = divmod(minutes, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


def relative(at: float, now: float) -> str:
    """``at`` seen from ``now`` (one clock, any unit of seconds): ``in 2 h 10 min``, ``5 min ago``, ``now``."""
    if round(at - now) == 0:
        return "now"
    words = duration_words(at - now)
    return f"in {words}" if at > now else f"{words} ago"


def unschedulable(reason: Reason, message: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, reason, message, plugin)


def unresolvable(reason: Reason, message: str, plugin: str = "") -> Status:
    return Status(Code.UNRESOLVABLE, reason, message, plugin)


def internal_error(message: str, plugin: str = "") -> Status:
    return Status(Code.ERROR, Reason.INTERNAL_ERROR, message, plugin)


def wait(reason: Reason, message: str, plugin: str = "", *, at: float | None = None, when: str = "") -> Status:
    return Status(Code.WAIT, reason, message, plugin, at, when)
