"""Prometheus metrics. Events (attempts, preemptions, submissions) are counters updated as they happen;
every state gauge comes from one Collector that reads the live cluster at scrape time (as client_python
recommends), so a scrape never sees a half-updated cycle.

Names mirror kube-scheduler where it has an equivalent (``scheduler_schedule_attempts_total`` ->
``rackscale_schedule_attempts_total``, ``scheduler_scheduling_attempt_duration_seconds``,
``scheduler_pending_pods``, ``scheduler_preemption_victims``). Virtual-time counters (GPU-seconds, bytes)
advance with the service clock, so with ``--speed`` they run faster than the wall clock; ratios of their
rates are what the dashboards and alerts use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from rackscale.host.perf import replica_tokens_per_s
from rackscale.host.serving import demand_tokens_per_s, p99_latency_s
from rackscale.llm.jobs import is_llm, replica_layouts
from rackscale.model.placement import Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.network.collectives import Layout
from rackscale.network.paths import tier_p99_latency_s
from rackscale.scheduler.cycles import CYCLE_SECONDS_BUCKETS
from rackscale.service.live import Change
from rackscale.service.metrics_text import CachedExposition

if TYPE_CHECKING:
    from rackscale.service.runner import Runner

# The names the service exports (the Grafana test checks every dashboard expression against these).
METRIC_NAMES = (
    "rackscale_schedule_attempts_total",
    "rackscale_scheduling_attempt_duration_seconds",
    "rackscale_preemption_victims_total",
    "rackscale_elastic_resizes_total",
    "rackscale_runtime_prediction_ratio",
    "rackscale_jobs_submitted_total",
    "rackscale_jobs_finished_total",
    "rackscale_pending_jobs",
    "rackscale_running_jobs",
    "rackscale_oldest_pending_job_age_seconds",
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
    "rackscale_cost_per_hour",
    "rackscale_cost_per_token",
    "rackscale_inference_tokens_per_second",
    "rackscale_inference_p99_latency_seconds",
    "rackscale_runner_errors_total",
    "rackscale_runner_healthy",
)


class Metrics:
    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: they double the exposition for no use here
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Counts of what the runner did (attempts, victims, outcomes) are kept by the live cluster and read
        # by the collector; only what happens outside it is counted here.
        self.duration = Histogram(
            "rackscale_scheduling_attempt_duration_seconds",
            "Time of one scheduling cycle.",
            buckets=CYCLE_SECONDS_BUCKETS,
            registry=r,
        )
        self.submissions = Counter("rackscale_jobs_submitted", "Jobs accepted by the API.", ["queue"], registry=r)
        self._text = CachedExposition()
        self._formatting = threading.Lock()

    def attach(self, runner: Runner) -> None:
        self.registry.register(StateCollector(runner))

    # called by the runner after each step and by the API per submission
    def cycle(self, *, seconds: float | None, changes: list[Change]) -> None:
        if seconds is not None:
            self.duration.observe(seconds)

    def submitted(self, queue: str) -> None:
        self.submissions.labels(queue).inc()

    def exposition(self) -> tuple[bytes, str]:
        # generate_latest's bytes, each gauge series' line kept between scrapes (metrics_text.py). Scrapes
        # come one at a time (the lock): two never share the cache at once.
        with self._formatting:
            return self._text.render(self.registry), CONTENT_TYPE_LATEST


class StateCollector(Collector):
    """Every state gauge, read from the live cluster under the runner's lock at scrape time."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        # An inference service's capacity depends only on its spec and placement, both replaced (never
        # changed) when it moves or resizes: kept per name while those are the same objects, so a scrape
        # does not re-plan every service's layout (~100 ms for 650 services at 100,000 GPUs).
        self.capacities: dict[str, tuple[object, object, float]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        with self.runner.reading() as live:
            now = self.runner.clock.now()
            yield from _collect(live, now, self.runner, self.capacities)


def _g(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _collect(
    live: object, now: float, runner: Runner, capacities: dict[str, tuple[object, object, float]]
) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
    from rackscale.service.live import LiveCluster

    assert isinstance(live, LiveCluster)
    c = live.cluster
    st = live.state
    k = live.counters

    pending = _g("rackscale_pending_jobs", "Jobs waiting, per queue.", ["queue"])
    oldest = _g("rackscale_oldest_pending_job_age_seconds", "Age of the oldest waiting job, per queue.", ["queue"])
    # Per priority and queue the pending queue keeps its jobs in submit order: a count and the first one's
    # time per list, not a walk of every waiting job (50,000 of them took ~100 ms a scrape).
    per_queue: dict[str, tuple[int, float]] = {}
    for prio in live.pending.priorities():
        for q, waiting in live.pending.queues_at(prio).items():
            n, first = per_queue.get(q, (0, math.inf))
            per_queue[q] = (n + len(waiting), min(first, waiting[0].submit_time))
    for q, (n, first) in sorted(per_queue.items()):
        pending.add_metric([q], n)
        oldest.add_metric([q], max(now - first, 0.0))
    yield pending
    yield oldest

    running = _g("rackscale_running_jobs", "Jobs running, per queue.", ["queue"])
    for q, usage in sorted(st.queue_usage.items()):
        running.add_metric([q], usage.jobs)
    yield running

    healthy = c.total_gpus - st.failed_gpus_count
    allocated = st.used_milli / MILLI_PER_GPU
    gpus = _g("rackscale_gpus", "GPUs of the cluster by state.", ["state"])
    gpus.add_metric(["allocated"], allocated)
    gpus.add_metric(["free"], max(healthy - allocated - st.cordoned_idle_count, 0.0))
    gpus.add_metric(["failed"], st.failed_gpus_count)
    gpus.add_metric(["cordoned"], st.cordoned_idle_count)  # free but out of service (rackscale cordon/drain)
    yield gpus
    modes = _g("rackscale_nodes_cordoned_by_mode", "Nodes an operator holds, by mode.", ["mode"])
    held = [str(live.node_mode(n)) for n in live.holds]
    for mode in ("cordoned", "draining", "drained"):
        modes.add_metric([mode], held.count(mode))
    yield GaugeMetricFamily(
        "rackscale_nodes_cordoned", "Nodes cordoned or drained (no new placements).", value=len(live.holds)
    )
    yield modes
    yield CounterMetricFamily("rackscale_drained_jobs", "Jobs stopped and requeued by drains.", value=live.drain_stops)
    loaned = sum(st.running[n].placement.gpu_milli for n in st.opportunistic) / MILLI_PER_GPU
    yield GaugeMetricFamily(
        "rackscale_jobs_on_loan",
        "Jobs running on loan in GPUs reserved for a waiting gang (stopped when it can start).",
        value=len(st.opportunistic),
    )
    yield GaugeMetricFamily("rackscale_gpus_on_loan", "GPUs those jobs hold.", value=loaned)
    reservation = live.cycles.reservation
    racks = reservation.racks if reservation is not None and reservation.job in live.pending else frozenset()
    yield GaugeMetricFamily(
        "rackscale_reserved_racks",
        "Racks held for the first waiting gang that did not fit (EASY backfill: other jobs run there only if "
        "they end before it can start, or on loan).",
        value=len(racks),
    )
    yield GaugeMetricFamily(
        "rackscale_reserved_free_gpus",
        "Whole GPUs free in those racks now: idle while they drain for it, unless lent.",
        value=sum(st.rack_whole[r] for r in racks),
    )
    yield GaugeMetricFamily(
        "rackscale_gpu_utilization_ratio",
        # Modelled (an allocation ratio, not measured GPU activity): the rules prefer DCGM / NVML when scraped.
        "Modelled: allocated / healthy GPUs now (not measured activity; DCGM_FI_DEV_GPU_UTIL is, when scraped).",
        value=allocated / healthy if healthy else 0.0,
    )

    cap = _g("rackscale_rack_gpus", "GPUs per rack (NVLink domain).", ["rack", "region"])
    used = _g(
        "rackscale_rack_gpus_allocated", "GPUs allocated per rack (a shared GPU counts its share).", ["rack", "region"]
    )
    uplink = _g("rackscale_uplink_utilization_ratio", "Rack uplink load / capacity.", ["rack"])
    # Only racks that carry a flow have uplink load (the monitor keeps them): the others read 0, without
    # summing their links (2,778 link walks a scrape at 1,389 racks, once more for the busiest).
    loaded = {u.rack: u.utilisation for u in live.monitor.hottest_uplinks(len(c.racks))}
    gpu_free = st.gpu_free
    for r in c.racks:
        labels = [r.name, c.regions[r.region].name]
        cap.add_metric(labels, r.gpus)
        free_milli = sum([sum(gpu_free[n]) for n in r.nodes])
        used.add_metric(labels, r.gpus - free_milli / MILLI_PER_GPU)
        uplink.add_metric([r.name], loaded.get(r.index, 0.0))
    yield cap
    yield used
    yield uplink

    kpi = live.kpi
    yield GaugeMetricFamily(
        "rackscale_idle_rate_ratio",
        "GPU-seconds idle while work waited / available GPU-seconds of those periods, since the service started.",
        value=kpi.idle_waiting_gpu_s / kpi.available_while_waiting_gpu_s if kpi.available_while_waiting_gpu_s else 0.0,
    )
    yield CounterMetricFamily(
        "rackscale_gpu_available_seconds", "Healthy GPU-seconds (service clock).", value=kpi.available_gpu_s
    )
    yield CounterMetricFamily(
        "rackscale_gpu_available_while_waiting_seconds",
        "Healthy GPU-seconds while jobs waited (service clock): the idle rate's denominator.",
        value=kpi.available_while_waiting_gpu_s,
    )
    yield CounterMetricFamily(
        "rackscale_gpu_idle_while_waiting_seconds",
        "GPU-seconds left free while jobs that could use them waited (service clock).",
        value=kpi.idle_waiting_gpu_s,
    )
    traffic = CounterMetricFamily("rackscale_traffic_bytes", "Bytes moved by jobs, per link tier.", labels=["tier"])
    moved_by = live.bytes_moved(now)  # modelled: bytes per step x the steps the performance model says were made
    traffic.add_metric(["nvlink"], moved_by.nvlink)
    traffic.add_metric(["rdma"], moved_by.rdma)
    traffic.add_metric(["backbone"], moved_by.backbone)
    yield traffic
    moved = moved_by.total
    ratio = GaugeMetricFamily(
        "rackscale_intra_rack_traffic_ratio", "NVLink bytes / all bytes since the service started."
    )
    if moved:  # no sample until a byte has moved: a share of nothing is not 100 %
        ratio.add_metric([], moved_by.nvlink / moved)
    yield ratio

    # Network latency per tier: the tier's latency plus queueing on its busiest link (M/M/1).
    lat = _g(
        "rackscale_network_latency_p99_seconds",
        "Modelled (not measured) p99 latency per link tier: its latency plus M/M/1 queueing on its busiest link.",
        ["tier"],
    )
    for name, seconds in tier_p99_latency_s(c, max(loaded.values(), default=0.0)).items():
        lat.add_metric([name], seconds)
    yield lat

    cost = c.total_gpus * c.pricing.per_gpu_hour
    yield GaugeMetricFamily("rackscale_cost_per_hour", "Cost of the whole cluster per hour (its currency).", value=cost)
    # Labelled `service`, not `job`: Prometheus owns `job` (the scrape job) and would rename ours.
    tps = _g("rackscale_inference_tokens_per_second", "Tokens per second an inference service serves.", ["service"])
    p99 = _g(
        "rackscale_inference_p99_latency_seconds", "Modelled p99 request latency of an inference service.", ["service"]
    )
    total_tps = 0.0
    # (the host's set of running services, not a walk of every running job: 12,700 at 1,389 racks)
    services = sorted((name, st.running[name]) for name in live.serving_jobs if name in st.running)
    for gone in capacities.keys() - {name for name, _ in services}:
        del capacities[gone]
    for name, rj in services:
        spec = rj.spec
        known = capacities.get(name)
        if known is not None and known[0] is spec and known[1] is rj.placement:
            capacity = known[2]
        else:
            capacity = _capacity(c, name, rj.spec, rj.placement)
            capacities[name] = (spec, rj.placement, capacity)
        profile = spec.serving
        demand = demand_tokens_per_s(profile, now) if profile is not None else capacity * 0.6
        served = min(demand, capacity)
        total_tps += served
        tps.add_metric([name], served)
        latency = p99_latency_s(
            demand_tps=demand,
            capacity_tps=capacity,
            replicas=rj.placement.units,
            tokens_per_request=profile.tokens_per_request if profile is not None else 256.0,
        )
        p99.add_metric([name], latency)  # +Inf when overloaded (no steady state)
    yield tps
    yield p99
    cpt = _g("rackscale_cost_per_token", "Cluster cost per served inference token (its currency; absent when none).")
    if total_tps > 0:  # no sample rather than a 0 that would read as "free"
        cpt.add_metric([], cost / 3600.0 / total_tps)
    yield cpt
    yield CounterMetricFamily(
        "rackscale_runner_errors", "Runner steps and backend calls that raised (bugs).", value=runner.errors
    )
    attempts = CounterMetricFamily(
        "rackscale_schedule_attempts", "Scheduling attempts by result (a job looked at in a cycle).", labels=["result"]
    )
    for result in ("scheduled", "unschedulable"):
        attempts.add_metric([result], k.attempts.get(result, 0))
    yield attempts
    victims = CounterMetricFamily(
        "rackscale_preemption_victims",
        "Jobs stopped to make room for others, by cause: priority, attained-service (least attained service "
        "between equal priorities), reclaim (a loan of reserved GPUs taken back), consolidation (moved).",
        labels=["cause"],
    )
    for cause, n in k.preemption_victims_by_cause.items():
        victims.add_metric([cause.value], n)
    yield victims
    ratios = live.prediction_ratios
    yield HistogramMetricFamily(
        "rackscale_runtime_prediction_ratio",
        "Completed jobs the scheduler planned with the runtime predictor's estimate (they gave none): their "
        "run over the prediction (1: exact; 2: ran twice as long as planned).",
        buckets=[("+Inf" if math.isinf(le) else f"{le:g}", n) for le, n in ratios.cumulative()],
        sum_value=ratios.total,
    )
    sizes = _g(
        "rackscale_elastic_gangs",
        "Running elastic training gangs by their size against their request: below (started smaller or shrunk), "
        "at, above (grown into idle GPUs).",
        ["size"],
    )
    below = at = above = 0
    for name in st.elastic:
        rj = st.running[name]
        units, asked = rj.placement.units, rj.spec.units
        below, at, above = below + (units < asked), at + (units == asked), above + (units > asked)
    for size, n in (("below", below), ("at", at), ("above", above)):
        sizes.add_metric([size], n)
    yield sizes
    yield CounterMetricFamily(
        "rackscale_elastic_resizes",
        "Elastic training gangs shrunk or grown (each a restart from a checkpoint).",
        value=k.resizes,
    )
    finished = CounterMetricFamily("rackscale_jobs_finished", "Jobs that ended, by outcome.", labels=["outcome"])
    finished.add_metric(["completed"], k.completed)
    finished.add_metric(["failed"], k.failed)
    finished.add_metric(["cancelled"], k.cancelled)
    yield finished
    yield GaugeMetricFamily(
        "rackscale_runner_healthy",
        "1 while the service takes work; 0 while the store cannot write (it heals by itself once a commit goes "
        "through: /readyz says why).",
        value=0.0 if runner.problem else 1.0,
    )


def _capacity(c: GPUCluster, name: str, spec: JobSpec, placement: Placement) -> float:
    """Tokens per second a running inference service can serve on ``placement``."""
    if is_llm(spec):  # every replica on its own layout (one split over racks serves less)
        layouts = replica_layouts(c, placement, spec.unit.gpus)
        return sum(replica_tokens_per_s(c, spec, layout) for layout in layouts)
    # One replica's tensor-parallel group: its share of the slices (replicas are alike).
    per = max(1, len(placement.allocs) // max(placement.units, 1))
    layout = Layout.of(c, Placement(name, placement.allocs[:per], 1))
    return replica_tokens_per_s(c, spec, layout) * placement.units
