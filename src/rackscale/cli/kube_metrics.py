"""Prometheus metrics of ``rackscale kube-scheduler``, served at ``/metrics`` on its health port.

One Collector reads the scheduler at scrape time (as ``rackscale.service.metrics`` does): its counters
(``Stats``, bumped by the loop and watcher threads), the cycle-time histogram, and the pending gangs of the
last cycle (a view the loop replaces whole, so a scrape never sees a cycle half-counted). Nothing is
counted twice: the scheduler keeps the numbers, this only names them.

A series that means what ``rackscale serve``'s does keeps its name (``rackscale_schedule_attempts_total``,
``rackscale_scheduling_attempt_duration_seconds``, ``rackscale_pending_jobs``,
``rackscale_oldest_pending_job_age_seconds``, ``rackscale_leader``), so the rules and dashboards read both;
the adapter's own are ``rackscale_kube_*``. Labels are bounded: result, kind, namespace (the queue), the
replica's identity, rack, region, tier; never a pod or a gang. The GPU, traffic and network series come from the
last snapshot of the caches (``KubeScheduler.use``); the traffic and network ones are modelled from the running
gangs' placements (:mod:`rackscale.kube.traffic`), never measured.

Here and not in ``rackscale.kube``: adapters may not import ``prometheus_client`` (import-linter).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from rackscale.kube.observed import AttemptResult, GpuUse
from rackscale.network.paths import tier_p99_latency_s

if TYPE_CHECKING:
    from rackscale.kube.scheduler import KubeScheduler

# Every series the collector exports (counters with their _total), for the docs' test and the tests.
METRIC_NAMES = (
    "rackscale_schedule_attempts_total",
    "rackscale_scheduling_attempt_duration_seconds",
    "rackscale_pending_jobs",
    "rackscale_oldest_pending_job_age_seconds",
    "rackscale_leader",
    "rackscale_kube_pending_pods",
    "rackscale_gpus",
    "rackscale_rack_gpus",
    "rackscale_rack_gpus_allocated",
    "rackscale_gpu_utilization_ratio",
    "rackscale_idle_rate_ratio",
    "rackscale_gpu_available_seconds_total",
    "rackscale_gpu_available_while_waiting_seconds_total",
    "rackscale_gpu_idle_while_waiting_seconds_total",
    "rackscale_traffic_bytes_total",
    "rackscale_intra_rack_traffic_ratio",
    "rackscale_uplink_utilization_ratio",
    "rackscale_network_latency_p99_seconds",
    "rackscale_cost_per_hour",  # with --price-per-gpu-hour only
    "rackscale_kube_cycles_total",
    "rackscale_kube_cycle_errors_total",
    "rackscale_kube_binds_total",
    "rackscale_kube_bind_errors_total",
    "rackscale_kube_bind_aborts_total",
    "rackscale_kube_gang_rollbacks_total",
    "rackscale_kube_undone_pods_total",
    "rackscale_kube_undo_errors_total",
    "rackscale_kube_refused_cycles_total",
    "rackscale_preemption_victims_total",
    "rackscale_kube_preemptions_total",
    "rackscale_kube_preempted_pods_total",
    "rackscale_kube_preemption_errors_total",
    "rackscale_kube_pdb_violations_total",
    "rackscale_kube_watch_lists_total",
    "rackscale_kube_watch_expired_total",
    "rackscale_kube_watch_bookmarks_total",
    "rackscale_kube_cache_synced",
    "rackscale_kube_cache_refused",
)

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


class KubeCollector(Collector):
    """Every series of the Kubernetes scheduler, read from it at scrape time."""

    def __init__(self, sched: KubeScheduler, *, wall: Callable[[], float] = time.time) -> None:
        self.sched = sched
        self.wall = wall  # the pending age compares the API server's creationTimestamp with the wall clock

    def collect(self) -> Iterator[Family]:
        s = self.sched
        st = s.stats
        attempts = CounterMetricFamily(
            "rackscale_schedule_attempts",
            "Gangs looked at in a cycle, by result (error: placed but not bound, the bind failed or the cycle "
            "was refused).",
            labels=["result"],
        )
        for result in AttemptResult:
            attempts.add_metric([result.value], st.attempts[result])
        yield attempts
        buckets, total = st.cycle_seconds.cumulative()
        yield HistogramMetricFamily(
            "rackscale_scheduling_attempt_duration_seconds",
            "Wall time of one scheduling cycle that looked at a pending gang, its binds included.",
            buckets=[(_le(bound), n) for bound, n in buckets],
            sum_value=total,
        )
        victims = CounterMetricFamily(
            "rackscale_preemption_victims",
            "Running gangs stopped to make room for others, by cause: priority (a waiting gang of higher "
            "priority), consolidation (moved to free a rack whole for a waiting gang), attained-service (with "
            "--las-preemption: a waiting gang of the same priority that has had less GPU time).",
            labels=["cause"],
        )
        for cause, n in st.victims.items():
            victims.add_metric([cause.value], n)
        yield victims
        yield from self._pending()
        yield from self._gpus()
        leading = GaugeMetricFamily(
            "rackscale_leader", "1 if this replica leads (schedules), 0 if a standby.", labels=["replica"]
        )
        leading.add_metric([s.identity], 1.0 if s.is_leader else 0.0)
        yield leading
        for name, doc, value in (
            ("cycles", "Scheduling cycles run (the leader's).", st.cycles),
            ("cycle_errors", "Scheduling cycles that raised (a bug: logged, and the loop goes on).", st.cycle_errors),
            ("binds", "Pods bound as members of a gang bound whole.", st.binds),
            ("bind_errors", "Gang binds the API server refused or that failed on the way.", st.bind_errors),
            ("bind_aborts", "Gangs not bound at all: a pod had changed since the cache showed it.", st.bind_aborts),
            (
                "gang_rollbacks",
                "Gangs whose bind failed midway and whose bound pods were deleted again.",
                st.gang_rollbacks,
            ),
            ("undone_pods", "Pods deleted to undo a partial gang bind.", st.undone),
            ("undo_errors", "Deletions of such pods that failed (retried on the next cycles).", st.undo_errors),
            (
                "refused_cycles",
                "Cycles whose decisions would resize, move or grow a running gang, or stop one other than by "
                "priority: none carried out.",
                st.refused_cycles,
            ),
            ("preemptions", "Waiting gangs that preempted: deleted lower-priority gangs' pods to run.", st.preemptions),
            ("preempted_pods", "Pods deleted for a preemption (each with its grace period).", st.preempted_pods),
            (
                "preemption_errors",
                "Deletions of preemption victims the API server refused or that failed (tried again later).",
                st.preemption_errors,
            ),
            (
                "pdb_violations",
                "Disruptions past a PodDisruptionBudget that preemptions made: victims taken although their budget "
                "allowed no more, as no others freed the room (kube-scheduler's NumPDBViolations).",
                st.pdb_violations,
            ),
        ):
            yield CounterMetricFamily(f"rackscale_kube_{name}", doc, value=value)
        for name, doc, per_kind in (
            ("watch_lists", "Full lists of a resource (the first, and one after each expired watch).", st.lists),
            ("watch_expired", "Watches whose resourceVersion expired (410 Gone): each is listed again.", st.gone),
            ("watch_bookmarks", "Watch bookmarks received.", st.bookmarks),
        ):
            family = CounterMetricFamily(f"rackscale_kube_{name}", doc, labels=["kind"])
            for kind, n in sorted(per_kind.items()):
                family.add_metric([kind], n)
            yield family
        synced = GaugeMetricFamily(
            "rackscale_kube_cache_synced", "1 once a resource's cache holds its first list (/readyz).", labels=["kind"]
        )
        for kind, ok in sorted(s.synced.items()):
            synced.add_metric([kind], 1.0 if ok else 0.0)
        yield synced
        # An optional resource read as none because the API server refuses it: a PodDisruptionBudgets cache that
        # reads "synced" while no budget is honoured is what an operator needs to see (the log says it once).
        refused = GaugeMetricFamily(
            "rackscale_kube_cache_refused",
            "1 while an optional resource is read as none because the API server refuses it (403: no RBAC, 404).",
            labels=["kind"],
        )
        for kind, w in sorted(s.watchers.items()):
            if w.optional:
                refused.add_metric([kind], 1.0 if w.unreadable else 0.0)
        yield refused

    def _pending(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "rackscale_pending_jobs", "Gangs waiting, per namespace (the queue), at the last cycle.", labels=["queue"]
        )
        pods = GaugeMetricFamily("rackscale_kube_pending_pods", "Their pods, per namespace.", labels=["queue"])
        oldest = GaugeMetricFamily(
            "rackscale_oldest_pending_job_age_seconds",
            "Age of the oldest waiting pod (from its creationTimestamp), per namespace.",
            labels=["queue"],
        )
        # A standby runs no cycles: its view is of the time it last led, so it says nothing rather than that.
        if self.sched.is_leader:
            now = self.wall()
            for ns, q in self.sched.waiting.queues.items():
                jobs.add_metric([ns], q.jobs)
                pods.add_metric([ns], q.pods)
                if q.oldest is not None:
                    oldest.add_metric([ns], max(now - q.oldest, 0.0))
        yield jobs
        yield pods
        yield oldest

    def _gpus(self) -> Iterator[Family]:
        """serve's GPU series, from the last snapshot the loop published (``KubeScheduler.use``); none from a
        standby (its view is of the time it last led), nor before the first cycle."""
        s = self.sched
        use = s.use
        if use is None or not s.is_leader:
            return
        gpus = GaugeMetricFamily("rackscale_gpus", "GPUs of the cluster by state, at the last cycle.", labels=["state"])
        for state, n in (("allocated", use.allocated), ("free", use.free), ("failed", use.failed)):
            gpus.add_metric([state], n)
        gpus.add_metric(["cordoned"], use.cordoned)
        yield gpus
        cap = GaugeMetricFamily("rackscale_rack_gpus", "GPUs per rack (NVLink domain).", labels=["rack", "region"])
        used = GaugeMetricFamily(
            "rackscale_rack_gpus_allocated",
            "GPUs that pods hold per rack, at the last cycle.",
            labels=["rack", "region"],
        )
        for r in use.racks:
            cap.add_metric([r.rack, r.region], r.gpus)
            used.add_metric([r.rack, r.region], r.allocated)
        yield cap
        yield used
        healthy = use.allocated + use.free
        yield GaugeMetricFamily(
            "rackscale_gpu_utilization_ratio",
            "Allocated / in-service GPUs at the last cycle (requests, not measured activity: DCGM's is, when scraped).",
            value=use.allocated / healthy if healthy else 0.0,
        )
        now = s.elapsed()
        sec = use.seconds(now)
        yield GaugeMetricFamily(
            "rackscale_idle_rate_ratio",
            "GPU-seconds free while a gang waited / in-service GPU-seconds of those periods, in this replica's "
            "term as leader.",
            value=sec.idle_waiting / sec.available_waiting if sec.available_waiting else 0.0,
        )
        yield CounterMetricFamily(
            "rackscale_gpu_available_seconds",
            "In-service GPU-seconds in this replica's term as leader.",
            value=sec.available,
        )
        yield CounterMetricFamily(
            "rackscale_gpu_available_while_waiting_seconds",
            "In-service GPU-seconds while a gang waited: the idle rate's denominator.",
            value=sec.available_waiting,
        )
        yield CounterMetricFamily(
            "rackscale_gpu_idle_while_waiting_seconds",
            "GPU-seconds left free while a gang waited: the idle rate's numerator.",
            value=sec.idle_waiting,
        )
        yield from _network(use, now)
        price = s.config.price_per_gpu_hour
        if price is not None:  # the operator's: node labels carry no price
            yield GaugeMetricFamily(
                "rackscale_cost_per_hour",
                "Cost of the whole cluster per hour (the nodes' GPUs x --price-per-gpu-hour, in its currency).",
                value=sum(r.gpus for r in use.racks) * price,
            )


def _network(use: GpuUse, now: float) -> Iterator[Family]:
    """serve's traffic and network series, **modelled** from the placements of rackscale's running gangs (the
    last snapshot's; :mod:`rackscale.kube.traffic`), not measured."""
    net = use.network
    moved = net.moved(now)
    traffic = CounterMetricFamily(
        "rackscale_traffic_bytes",
        "Modelled (not measured): bytes rackscale's running gangs moved per link tier, in this replica's term as "
        "leader.",
        labels=["tier"],
    )
    traffic.add_metric(["nvlink"], moved.nvlink)
    traffic.add_metric(["rdma"], moved.rdma)
    traffic.add_metric(["backbone"], moved.backbone)
    yield traffic
    ratio = GaugeMetricFamily(
        "rackscale_intra_rack_traffic_ratio",
        "Modelled: NVLink bytes / all bytes rackscale's gangs moved, in this replica's term as leader.",
    )
    if moved.total:  # no sample until a byte has moved (serve's rule): a share of nothing is not 100 %
        ratio.add_metric([], moved.nvlink / moved.total)
    yield ratio
    uplink = GaugeMetricFamily(
        "rackscale_uplink_utilization_ratio",
        "Modelled: rack uplink load / capacity from rackscale's running gangs, at the last cycle.",
        labels=["rack"],
    )
    for i, r in enumerate(use.racks):  # the racks in the cluster's order: index i is rack i
        uplink.add_metric([r.rack], net.uplinks.get(i, 0.0))
    yield uplink
    latency = GaugeMetricFamily(
        "rackscale_network_latency_p99_seconds",
        "Modelled (not measured) p99 latency per link tier: its latency plus M/M/1 queueing on its busiest link.",
        labels=["tier"],
    )
    if net.cluster is not None:
        for tier, seconds in tier_p99_latency_s(net.cluster, net.busiest_uplink).items():
            latency.add_metric([tier], seconds)
    yield latency


def _le(bound: float) -> str:
    """``le`` as prometheus_client writes it for serve's histogram ("1.0", "+Inf"): "1" would be another series."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]  # the library leaves it unannotated


def kube_registry(sched: KubeScheduler) -> CollectorRegistry:
    """A registry of the scheduler's series only (not the process's: a scrape asks for what is documented)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(KubeCollector(sched))
    return registry


__all__ = ["METRIC_NAMES", "KubeCollector", "kube_registry"]
