"""The simulator's records: its configuration, each job's life, and the result of a run."""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.model.workload import JobSpec
from rackscale.network.traffic import Traffic
from rackscale.scheduler.framework import Profile
from rackscale.sim.faults import FaultConfig
from rackscale.sim.perf import Layout


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    policy: str | Profile = "rackscale"
    seed: int = 0
    faults: FaultConfig = field(default_factory=FaultConfig)
    sample_every_s: float = 900.0
    autoscale_every_s: float = 300.0
    horizon_s: float | None = None  # stop here even if jobs remain (they end as failed: "horizon")
    record_series: bool = True


@dataclass(slots=True)
class JobRun:
    """A job's life in the simulation (mutable bookkeeping; the spec stays immutable)."""

    spec: JobSpec
    work: float  # steps (training, batch) or seconds of service (inference)
    done: float = 0.0
    rate: float = 0.0  # work per second now
    since: float = 0.0  # when ``done`` was last brought up to date
    run_start: float = 0.0
    first_start: float | None = None
    generation: int = 0
    restarts: int = 0
    status: str = "pending"  # pending | running | completed | failed
    reason: str = ""
    end: float | None = None
    traffic: Traffic | None = None
    layout: Layout | None = None
    replica_tps: float = 0.0
    speed: float = 1.0  # compute speed of the GPUs it runs on (the cluster's gpu_speed for their model)


@dataclass(slots=True)
class SimResult:
    policy: str
    kpis: dict[str, float | int | None]  # None: nothing to measure (see sim/kpis.py)
    jobs: dict[str, JobRun]
    series: dict[str, list[float]]
    rack_series: list[list[float]]  # per sample: allocated share of each rack

    def failed_reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.jobs.values():
            if r.status == "failed":
                out[r.reason] = out.get(r.reason, 0) + 1
        return out
