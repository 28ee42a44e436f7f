"""The discrete-event simulator: the host (:mod:`rackscale.host`) under a virtual clock.

One heap of events (:mod:`rackscale.sim.engine`) in virtual time. At each instant: account the interval
just ended (KPIs), handle the instant's events (arrivals, finishes, failures, repairs, autoscaling ticks,
samples), and run a scheduling cycle only if something changed that could let a waiting job run.
Everything a job lives through — placement, speed, contention, preemption, restarts — is the host's, the
same code the service runs; the simulator adds only the clock, the workload's arrivals, the faults it
draws and the time series it samples. A job ends when the performance model's announced end comes
(:class:`rackscale.host.progress.Progress`): a FINISH event, stale if the job was re-timed since.
Every job ends completed, or failed with a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rackscale.host.host import ClusterHost, Estimates, HostOptions
from rackscale.host.runs import JobRun, RunStatus, RuntimeDefaults
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler.pending import whole_demand
from rackscale.sim.engine import Event, EventKind, EventQueue
from rackscale.sim.failures import FailuresMixin
from rackscale.sim.faults import FaultSource, Part
from rackscale.sim.maintenance import MaintenanceMixin
from rackscale.sim.records import SimConfig, SimResult
from rackscale.sim.schedules import SchedulesMixin

DEFAULT_RUNTIME_S = RuntimeDefaults().runtime_s  # a job without a duration estimate runs an hour at its best placement


class Simulator(FailuresMixin, MaintenanceMixin, SchedulesMixin, ClusterHost):
    def __init__(self, cluster: GPUCluster, jobs: Sequence[JobSpec], config: SimConfig | None = None) -> None:
        self.cfg = config or SimConfig()
        self.q = EventQueue()
        super().__init__(
            cluster,
            policy=self.cfg.policy,
            seed=self.cfg.seed,
            # A simulated workload must end: services without an estimate serve the default hour too.
            options=HostOptions(
                explain=False,
                keep_ended=True,
                max_restarts=self.cfg.faults.max_restarts,
                estimates=Estimates(self.cfg.estimates),
                defaults=RuntimeDefaults(runtime_s=DEFAULT_RUNTIME_S, service_s=DEFAULT_RUNTIME_S),
                batch_serving=True,  # the KPIs are read once, at the end (after ``flush_serving``)
                services_start_at_model=True,  # as its autoscaler's every tick: the model, unstabilised
            ),
            on_end=self._announce_end,
        )
        self.workload = {j.name: j for j in jobs}
        self.total = len(self.workload)
        self.series: dict[str, list[float]] = {k: [] for k in ("t", "allocated", "queued", "running", "nvlink_gbps")}
        self.rack_series: list[list[float]] = []
        self._faults = FaultSource(
            self.cfg.faults,
            seed=self.cfg.seed,
            counts={Part.GPU: cluster.total_gpus, Part.NODE: len(cluster.nodes), Part.UPLINK: len(cluster.racks)},
        )
        if self.total != len(jobs):
            raise ValueError("job names must be unique in a workload")
        for j in jobs:
            self.q.push(j.submit_time, EventKind.ARRIVAL, j.name)
        start = min((j.submit_time for j in jobs), default=0.0)
        self.q.now = start
        self._last = start
        self._start = start
        for part in Part:
            self._schedule_failure(part, start)
        self._schedule_maintenance(self.cfg.maintenance, start)
        self._schedule_schedules(self.cfg.schedules, start_epoch=self.cfg.start_epoch, start=start)
        if self.cfg.record_series:
            self.q.push(start, EventKind.SAMPLE)
        if any(j.kind is JobKind.INFERENCE for j in jobs):
            self.q.push(start + self.cfg.autoscale_every_s, EventKind.AUTOSCALE)

    @property
    def active(self) -> int:
        """Jobs of the workload that have not ended (including those yet to arrive)."""
        return self.total - self.ended

    # ------------------------------------------------------------------ the loop
    def run(self, *, on_progress: Callable[[int, int, float], None] | None = None) -> SimResult:
        total = self.total
        horizon = self.cfg.horizon_s
        while self.q and self.active > 0:
            if horizon is not None and (self.q.peek_time() or 0.0) > self._start + horizon:
                break
            events = self.q.pop_batch()
            now = self.q.now
            self.account(now)
            for ev in events:
                self.kpi.events += 1
                self.cycles.freed |= self._handle(ev, now)
            self.cycle(now)
            if on_progress is not None:
                on_progress(total - self.active, total, now)
        end = self.q.now
        self.flush_serving()
        for r in list(self.runs.values()):  # whatever is left when the horizon stops the run
            if r.status in (RunStatus.PENDING, RunStatus.RUNNING):
                self._fail(r, "the simulation horizon ended before the job did", end)
        for name, spec in self.workload.items():
            if name not in self.runs:
                self.runs[name] = JobRun(spec, 0.0, status=RunStatus.FAILED, reason="never arrived before the horizon")
        return SimResult(
            policy=self.policy,
            kpis=self.kpi.kpis(
                makespan_s=end - self._start,  # 0 when nothing ran: no makespan
                cluster_gpus=self.cluster.total_gpus,
                price_per_gpu_hour=self.cluster.pricing.per_gpu_hour,
            ),
            jobs=self.runs,
            series=self.series,
            rack_series=self.rack_series,
            fired=self.fired,
            allocated_gpu_s=self.kpi.allocated_gpu_s,
        )

    def _announce_end(self, job: str, end: float, generation: int) -> None:
        self.q.push(end, EventKind.FINISH, job, generation)

    def _handle(self, ev: Event, now: float) -> bool:
        kind = ev.kind
        if kind is EventKind.ARRIVAL:
            self.submit(self.workload[ev.job])
            return False  # an arrival frees nothing: only the new job needs a look
        if kind is EventKind.FINISH:
            r = self.runs.get(ev.job)
            if r is None or r.status is not RunStatus.RUNNING or r.generation != ev.generation:
                return False  # stale: the job was stopped or re-timed since
            self.finish(ev.job, now)
            return True
        if kind is EventKind.FAILURE:
            return self._failure(ev, now)
        if kind is EventKind.REPAIR:
            return self._repair(ev)
        if kind is EventKind.MAINTENANCE:
            return self._maintenance(ev, now)
        if kind is EventKind.SCHEDULE:
            return self._fire_schedules(now)
        if kind is EventKind.AUTOSCALE:
            freed = self._autoscale(now)
            if self.active > 0:
                self.q.push(now + self.cfg.autoscale_every_s, EventKind.AUTOSCALE)
            return freed
        self._sample(now)
        if self.active > 0:
            self.q.push(now + self.cfg.sample_every_s, EventKind.SAMPLE)
        return False

    # ------------------------------------------------------------------ sampling
    def _sample(self, now: float) -> None:
        s = self.series
        s["t"].append(now - self._start)
        s["allocated"].append(self.state.used_milli / MILLI_PER_GPU / max(self.cluster.total_gpus, 1))
        s["queued"].append(float(len(self.pending)))
        s["running"].append(float(len(self.state.running)))
        s.setdefault("replicas", []).append(
            float(sum(rj.placement.units for rj in self.state.running.values() if rj.spec.kind is JobKind.INFERENCE))
        )
        totals = self.monitor.totals()
        s["nvlink_gbps"].append(totals.nvlink_bytes_per_s * 8 / 1e9)
        s.setdefault("rdma_gbps", []).append(totals.rdma_bytes_per_s * 8 / 1e9)
        s.setdefault("backbone_gbps", []).append(totals.backbone_bytes_per_s * 8 / 1e9)
        self.rack_series.append([1.0 - self.state.rack_whole[r.index] / max(r.gpus, 1) for r in self.cluster.racks])
        if self.pending:
            # the typical pending request: the median whole-GPU demand, at most a rack
            cap = self.cluster.max_rack_gpus
            typical = sorted(min(max(whole_demand(j), 1), cap) for j in self.pending)[len(self.pending) // 2]
            free = self.state.free_whole_gpus
            if free > 0:
                stranded = sum(w for w in self.state.rack_whole if w < typical)
                self.kpi.frag_samples.append(stranded / free)


def simulate(cluster: GPUCluster, jobs: Sequence[JobSpec], config: SimConfig | None = None) -> SimResult:
    return Simulator(cluster, jobs, config).run()


__all__ = ["DEFAULT_RUNTIME_S", "JobRun", "SimConfig", "SimResult", "Simulator", "simulate"]
