"""The pure scheduling core: plugins, profiles and the ResourceScheduler. No I/O, no clock."""

from rackscale.scheduler.budgets import DisruptionBudgets
from rackscale.scheduler.decisions import (
    Decisions,
    Pending,
    Placed,
    Preemption,
    PreemptionCause,
    Reservation,
    apply_decisions,
)
from rackscale.scheduler.framework import PLACERS, PROFILES, Profile, QueueConfig
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.scheduler import ResourceScheduler
from rackscale.scheduler.status import Code, Reason, Status

__all__ = [
    "PLACERS",
    "PROFILES",
    "Code",
    "Decisions",
    "DisruptionBudgets",
    "Pending",
    "PendingQueue",
    "Placed",
    "Preemption",
    "PreemptionCause",
    "Profile",
    "QueueConfig",
    "Reason",
    "Reservation",
    "ResourceScheduler",
    "Status",
    "apply_decisions",
]
