"""What running jobs hold: a job's admission record, and the resources each queue holds."""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.model.placement import Placement
from rackscale.model.workload import JobSpec


@dataclass(frozen=True, slots=True)
class RunningJob:
    spec: JobSpec
    placement: Placement
    started_at: float
    expected_end: float | None = None
    checkpointed_at: float | None = None
    racks: tuple[int, ...] = ()  # filled in by ClusterState (placements hold node indexes only)


@dataclass(slots=True)
class Usage:
    """Resources held by one queue (for fair share and quota). Mutable: ClusterState keeps it up to date
    in place; plugins see it through the read-only ``UsageView``."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    jobs: int = 0
