"""The simulator's records: its configuration and the result of a run (each job's life is the host's
:class:`~rackscale.host.runs.JobRun`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.host.kpis import Kpis
from rackscale.host.runs import JobRun, RunStatus
from rackscale.host.scaling import ScalingSchedule, ScheduleFired
from rackscale.scheduler.framework import Profile
from rackscale.sim.faults import FaultConfig
from rackscale.sim.maintenance import Window
from rackscale.sim.schedules import DEFAULT_START_EPOCH

DEFAULT_HORIZON_S = 315_576_000.0  # ten years of 365.25 days


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    policy: str | Profile = "rackscale"
    seed: int = 0
    faults: FaultConfig = field(default_factory=FaultConfig)
    sample_every_s: float = 900.0
    autoscale_every_s: float = 300.0
    # Stop here even if jobs remain (they end as failed: "horizon"). Ten years after the first arrival by
    # default: a job estimated at 1e308 s (in the simulator, its length) kept the 15-minute samples going
    # for ever; every real workload ends long before (Philly spans months, the million 30 days).
    horizon_s: float | None = DEFAULT_HORIZON_S
    record_series: bool = True
    # What the scheduler is told of durations (``host.Estimates``): the jobs' own, or history's predictions.
    estimates: str = "given"
    maintenance: tuple[Window, ...] = ()  # planned rack drains (rackscale.sim.maintenance)
    schedules: tuple[ScalingSchedule, ...] = ()  # scheduled scaling (rackscale.sim.schedules)
    start_epoch: float = DEFAULT_START_EPOCH  # the wall-clock instant of virtual time 0 (for cron times)


@dataclass(slots=True)
class SimResult:
    policy: str
    kpis: Kpis  # None values: nothing to measure (see host/kpis.py)
    jobs: dict[str, JobRun]
    series: dict[str, list[float]]
    rack_series: list[list[float]]  # per sample: allocated share of each rack
    fired: list[ScheduleFired] = field(default_factory=list)  # the schedules' steps, as they fired
    allocated_gpu_s: float = 0.0  # GPU-seconds held by jobs (what a pay-per-use bill charges)

    def failed_reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.jobs.values():
            if r.status is RunStatus.FAILED:
                out[r.reason] = out.get(r.reason, 0) + 1
        return out
