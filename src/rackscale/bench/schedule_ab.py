"""The ``schedule-ab`` what-if: the default workload with and without scheduled scaling.

The schedules are the plan's (section 8.1) on the default mix: the ``interns`` training queue gets no GPUs
from 02:00 to 08:00 (quota 0, then none), and every inference service is held to its minimum replicas
from 00:00 to 06:00 (``maxReplicas`` = its ``minReplicas``, then its own maximum again). Virtual time 0 is
Monday 00:00 UTC (``rackscale.sim.schedules.DEFAULT_START_EPOCH``), so the steps fire at those hours of
the workload's days. What it measures: allocated GPU-hours and their cost at the cluster's price (a bill
per GPU-hour used), mean wait, mean JCT and SLO attainment, and each one's ratio with / without.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind
from rackscale.model.workload import JobKind, JobSpec

NIGHT_QUEUE = "interns"
WITH = "rackscale+schedules"
# The services' night caps alone: what an inference schedule saves against the SLO, without the training
# quota, whose delayed gangs change where they land and so their speed (docs/scheduled-scaling.md).
SERVICES_ONLY = "rackscale+service-schedules"
ARMS = (WITH, SERVICES_ONLY)
COMPARED = ("allocated_gpu_hours", "cost", "mean_queueing_s", "mean_jct_s", "slo_attainment", "makespan_s")


def schedules_of(policy: str, jobs: Sequence[JobSpec]) -> tuple[ScalingSchedule, ...]:
    """The schedules an arm of the what-if runs with (none for any other policy)."""
    if policy == WITH:
        return night_schedules(jobs)
    if policy == SERVICES_ONLY:
        return night_schedules(jobs)[1:]
    return ()


def night_schedules(jobs: Sequence[JobSpec], *, queue: str = NIGHT_QUEUE) -> tuple[ScalingSchedule, ...]:
    """The night quota of ``queue`` (first) and a night replica cap for every inference service of ``jobs``."""
    quota = ScalingSchedule(
        name=f"{queue}-nights",
        time_zone="UTC",
        target_kind=TargetKind.QUEUE,
        target=queue,
        steps=(
            ScheduleStep(cron="0 2 * * *", quota_gpus=0.0, set_quota=True),
            ScheduleStep(cron="0 8 * * *", quota_gpus=None, set_quota=True),
        ),
    )
    services = tuple(
        ScalingSchedule(
            name=f"{j.name}-nights",
            time_zone="UTC",
            target_kind=TargetKind.SERVICE,
            target=j.name,
            steps=(
                ScheduleStep(cron="0 0 * * *", max_replicas=max(j.min_units, 1)),
                ScheduleStep(cron="0 6 * * *", max_replicas=max(j.max_units, j.units, j.min_units, 1)),
            ),
        )
        for j in jobs
        if j.kind is JobKind.INFERENCE
    )
    return (quota, *services)


def ratios(results: Mapping[str, Mapping[str, Any]], arm: str = WITH) -> dict[str, float | None]:
    """``arm / without`` of each compared number (None where either is missing or the base is 0)."""
    base, got = results.get("rackscale", {}), results.get(arm, {})
    out: dict[str, float | None] = {}
    for key in COMPARED:
        a, b = base.get(key), got.get(key)
        out[key] = b / a if isinstance(a, int | float) and isinstance(b, int | float) and a else None
    return out


__all__ = ["ARMS", "COMPARED", "NIGHT_QUEUE", "SERVICES_ONLY", "WITH", "night_schedules", "ratios", "schedules_of"]
