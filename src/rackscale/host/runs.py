"""A job's life on the host: its phase, the work it carries and how far it got.

The spec stays immutable; a :class:`JobRun` is the host's mutable bookkeeping of one job, the same in the
simulator and the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rackscale.host.perf import Layout
from rackscale.model.workload import JobSpec
from rackscale.network.traffic import Traffic
from rackscale.scheduler.elastic import RESIZE_COST_S


class Estimates(StrEnum):
    """Which duration estimate the scheduler plans a job with (backfill, reservations, splits).

    - ``given``: the job's own; one that gives none gets a prediction from the history of completed jobs
      (``scheduler/predictor.py``), or none while there is too little history;
    - ``predicted``: always the prediction, as on a cluster whose users give none (in the simulator a job's
      true length stays its own estimate: only what the scheduler is told changes);
    - ``none``: no estimate at all (the scheduler plans without durations).
    """

    GIVEN = "given"
    PREDICTED = "predicted"
    NONE = "none"


class RunStatus(StrEnum):
    """Where a job is. ``stopped`` is the instant between losing its GPUs (preempted, a failure) and either
    waiting again (``pending``) or giving up (``failed``)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self in _ENDED


_ENDED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeDefaults:
    """How long a job runs that does not say (``duration_estimate_s`` unset), at its best placement.

    ``service_s`` is for inference: ``None`` serves until cancelled (the service); a simulated workload must
    end, so the simulator gives services the same hour as everything else. (``save_s`` is not a runtime:
    see its comment.)
    """

    runtime_s: float = 3600.0
    service_s: float | None = None
    # What a preemption costs a job that saves on the stop signal (``checkpoint_on_preempt``): the GPU time
    # of writing its checkpoint. An assumption (a minute: sharded saves to a parallel file system take
    # seconds to minutes); the job keeps its progress.
    save_s: float = 60.0
    # What an elastic gang's size change costs it: save, rendezvous of the new workers, reload (the
    # scheduler's own figure, ``scheduler.elastic.RESIZE_COST_S``, so it weighs what the host charges).
    resize_s: float = RESIZE_COST_S


@dataclass(slots=True)
class JobRun:
    """One job's life (mutable bookkeeping; the spec stays immutable)."""

    spec: JobSpec
    work: float  # steps (training), seconds (batch: at speed 1; inference: of service)
    done: float = 0.0
    rate: float = 0.0  # work per second now
    since: float = 0.0  # when ``done`` was last brought up to date
    run_start: float = 0.0
    first_start: float | None = None
    generation: int = 0  # bumped at every re-timing: an end announced before it is stale
    restarts: int = 0
    status: RunStatus = RunStatus.PENDING
    reason: str = ""
    end: float | None = None
    traffic: Traffic | None = None
    layout: Layout | None = None
    replica_tps: float = 0.0
    speed: float = 1.0  # compute speed of the GPUs it runs on (the cluster's gpu_speed for their model)


__all__ = ["JobRun", "RunStatus", "RuntimeDefaults"]
