"""The Kubernetes scheduler's settings and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.kube.attained import MAX_ENTRIES, TTL_S
from rackscale.kube.cluster import LabelKeys
from rackscale.kube.observed import AttemptResult, CycleTimes, per_result
from rackscale.scheduler.decisions import PreemptionCause


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeSchedulerConfig:
    scheduler_name: str = "rackscale"
    labels: LabelKeys = field(default_factory=LabelKeys)
    policy: str = "rackscale"
    preemption: bool = True  # a waiting gang may delete lower-priority gangs' pods (kube.preemption)
    # --las-preemption: keep the profile's least-attained-service preemption between equal priorities, with the
    # gangs' earlier service recorded in a ConfigMap (kube.attained); off: exactly as without it.
    las_preemption: bool = False
    record_name: str = ""  # that ConfigMap's name; default: "<lease name>-attained-service"
    record_namespace: str = ""  # ... and namespace; default: the lease's
    record_max_entries: int = MAX_ENTRIES  # gangs recorded at most (the least recently seen dropped first)
    record_ttl_s: float = TTL_S  # a gang not seen (pending or running) for this long is forgotten
    leader_elect: bool = True
    lease_name: str = ""  # default: the scheduler name
    lease_namespace: str = "kube-system"
    identity: str = ""  # default: hostname_uuid
    lease_duration_s: float = 15.0
    renew_interval_s: float = 2.0
    watch_timeout_s: int = 300  # server-side timeout of one watch request; the watcher then re-watches
    retry_interval_s: float = 30.0  # re-run a cycle this often even when nothing changed (pending pods)
    report_interval_s: float = 60.0  # repeat an unchanged FailedScheduling event at most this often
    assume_ttl_s: float = 60.0  # forget a bind (or an undo) the watch has not confirmed after this long
    backoff_s: float = 1.0  # after a failed list/watch request
    unreadable_retry_s: float = 300.0  # list an optional resource the API server refused (403, 404) again after
    # The operator's price of one GPU-hour (node labels carry none): rackscale_cost_per_hour, as serve's from its
    # cluster spec's pricing.perGpuHour. None: no cost series.
    price_per_gpu_hour: float | None = None


def _per_cause() -> dict[PreemptionCause, int]:
    return {PreemptionCause.PRIORITY: 0, PreemptionCause.CONSOLIDATION: 0}  # the causes the adapter carries out


PDBS = "poddisruptionbudgets"  # the third resource watched, for preemption (rackscale.kube.budgets)


def _per_kind() -> dict[str, int]:
    return {"nodes": 0, "pods": 0, PDBS: 0}


@dataclass(slots=True)
class Stats:
    """Counters, bumped by the loop and watcher threads and read by tests, health checks and a metrics
    scrape (``rackscale.cli.kube_metrics``).

    Not frozen: these are running counts, one instance for the scheduler's life. Every field counts what
    happened at the API server, so a gang whose bind was undone adds nothing to ``binds``.
    """

    cycles: int = 0
    cycle_errors: int = 0  # cycles that raised (a bug: the loop logs it and goes on)
    attempts: dict[AttemptResult, int] = field(default_factory=per_result)  # gangs looked at, by result
    cycle_seconds: CycleTimes = field(default_factory=CycleTimes)  # wall time of cycles that looked at a gang
    binds: int = 0  # pods bound as part of a gang whose every pod was bound (committed)
    bind_errors: int = 0  # binds the API server refused or that failed on the way
    bind_aborts: int = 0  # gangs not bound at all: a pod had changed since the cache showed it
    gang_rollbacks: int = 0  # gangs whose bind failed midway and whose bound pods were deleted again
    undone: int = 0  # pods deleted to undo a partial gang bind
    undo_errors: int = 0  # deletions of such pods that failed (retried on the next cycles)
    refused_cycles: int = 0  # cycles whose decisions stopped, resized or moved a running job: none carried out
    preemptions: int = 0  # waiting gangs that preempted or consolidated (deleted running gangs' pods)
    victims: dict[PreemptionCause, int] = field(default_factory=_per_cause)  # running gangs stopped, by cause
    preempted_pods: int = 0  # pods deleted for a preemption
    preemption_errors: int = 0  # such deletions the API server refused or that failed on the way
    pdb_violations: int = 0  # disruptions past a PodDisruptionBudget that preemptions made (kube.budgets)
    lists: dict[str, int] = field(default_factory=_per_kind)
    gone: dict[str, int] = field(default_factory=_per_kind)
    bookmarks: dict[str, int] = field(default_factory=_per_kind)
