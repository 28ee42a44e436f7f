"""The discrete-event simulator: a workload on a modelled cluster, driven by the real ResourceScheduler.

One heap of events (:mod:`rackscale.sim.engine`) in virtual time. At each instant: account the interval
just ended (KPIs), handle the instant's events (arrivals, finishes, failures, repairs, autoscaling ticks,
samples), and run a scheduling cycle only if something changed that could let a waiting job run.
Training and batch jobs carry *work* (steps): their speed depends on their placement and on contention
(:mod:`rackscale.sim.perf`), so a worse placement finishes later. A job stopped by preemption or a
failure loses the work done since its last checkpoint and waits again. Every job ends completed, or
failed with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.network.monitor import NetworkMonitor
from rackscale.scheduler import Code, Decisions, PendingQueue, ResourceScheduler, apply_decisions
from rackscale.scheduler.cycles import CycleDriver
from rackscale.scheduler.pending import whole_demand
from rackscale.sim.engine import Event, EventKind, EventQueue
from rackscale.sim.failures import FailuresMixin
from rackscale.sim.faults import FaultSource, Part
from rackscale.sim.kpis import KpiAccumulator
from rackscale.sim.perf import Layout, ideal_step, samples_per_step, training_step
from rackscale.sim.records import JobRun, SimConfig, SimResult
from rackscale.sim.services import ServicesMixin

DEFAULT_RUNTIME_S = 3600.0  # a job without a duration estimate runs an hour at its best placement


class Simulator(ServicesMixin, FailuresMixin):
    def __init__(self, cluster: GPUCluster, jobs: Sequence[JobSpec], config: SimConfig | None = None) -> None:
        self.cfg = config or SimConfig()
        self.cluster = cluster
        self.state = ClusterState(cluster)
        self.sched = ResourceScheduler(profile=self.cfg.policy, seed=self.cfg.seed)
        self.policy = self.sched.profile.name
        self.monitor = NetworkMonitor(cluster)
        self.q = EventQueue()
        self.pending = PendingQueue()
        self.waiting_milli = 0  # GPU demand of the queued jobs (for the idle rate)
        self.kpi = KpiAccumulator()
        self.runs: dict[str, JobRun] = {}
        self.specs = {j.name: j for j in jobs}
        self.active = len(self.specs)
        self.uplinks_down = [0] * len(cluster.racks)
        self.multi_rack_by_rack: list[set[str]] = [set() for _ in cluster.racks]
        self.serving_jobs: set[str] = set()  # running inference services (the per-instant accounting visits only these)
        # What the next scheduling cycle must look at (everything, or only the jobs queued since).
        self.cycles = CycleDriver()
        self.series: dict[str, list[float]] = {k: [] for k in ("t", "allocated", "queued", "running", "nvlink_gbps")}
        self.rack_series: list[list[float]] = []
        self._faults = FaultSource(
            self.cfg.faults,
            seed=self.cfg.seed,
            counts={Part.GPU: cluster.total_gpus, Part.NODE: len(cluster.nodes), Part.UPLINK: len(cluster.racks)},
        )
        if len(self.specs) != len(jobs):
            raise ValueError("job names must be unique in a workload")
        for j in jobs:
            self.q.push(j.submit_time, EventKind.ARRIVAL, j.name)
        start = min((j.submit_time for j in jobs), default=0.0)
        self.q.now = start
        self._last = start
        self._start = start
        for part in Part:
            self._schedule_failure(part, start)
        if self.cfg.record_series:
            self.q.push(start, EventKind.SAMPLE)
        if any(j.kind is JobKind.INFERENCE for j in jobs):
            self.q.push(start + self.cfg.autoscale_every_s, EventKind.AUTOSCALE)

    # ------------------------------------------------------------------ the loop
    def run(self, *, on_progress: Callable[[int, int, float], None] | None = None) -> SimResult:
        total = len(self.specs)
        horizon = self.cfg.horizon_s
        while self.q and self.active > 0:
            if horizon is not None and (self.q.peek_time() or 0.0) > self._start + horizon:
                break
            events = self.q.pop_batch()
            now = self.q.now
            self._account(now)
            for ev in events:
                self.kpi.events += 1
                self.cycles.freed |= self._handle(ev, now)
            self._schedule(now)
            if on_progress is not None:
                on_progress(total - self.active, total, now)
        end = self.q.now
        for r in self.runs.values():  # whatever is left when the horizon stops the run
            if r.status in ("pending", "running"):
                self._fail(r, "the simulation horizon ended before the job did", end)
        for name, spec in self.specs.items():
            if name not in self.runs:
                self.runs[name] = JobRun(spec, 0.0, status="failed", reason="never arrived before the horizon")
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
        )

    def _handle(self, ev: Event, now: float) -> bool:
        kind = ev.kind
        if kind is EventKind.ARRIVAL:
            spec = self.specs[ev.job]
            self.runs[spec.name] = JobRun(spec, self._work_of(spec))
            self._enqueue(spec)
            self.cycles.arrived(spec.name)
            return False  # an arrival frees nothing: only the new job needs a look
        if kind is EventKind.FINISH:
            r = self.runs.get(ev.job)
            if r is None or r.status != "running" or r.generation != ev.generation:
                return False  # stale: the job was stopped and restarted since
            self._progress(r, now)
            self._stop(r, now)
            r.status, r.end = "completed", now
            self.active -= 1
            self.kpi.finished(r.spec.kind, jct=now - r.spec.submit_time)
            if r.spec.kind is JobKind.TRAINING and r.layout is not None:
                self.kpi.samples += r.work * samples_per_step(r.spec, r.layout.gpus)
            return True
        if kind is EventKind.FAILURE:
            return self._failure(ev, now)
        if kind is EventKind.REPAIR:
            return self._repair(ev)
        if kind is EventKind.AUTOSCALE:
            freed = self._autoscale(now)
            if self.active > 0:
                self.q.push(now + self.cfg.autoscale_every_s, EventKind.AUTOSCALE)
            return freed
        self._sample(now)
        if self.active > 0:
            self.q.push(now + self.cfg.sample_every_s, EventKind.SAMPLE)
        return False

    # ------------------------------------------------------------------ scheduling
    def _schedule(self, now: float) -> None:
        d = self.cycles.run(self.sched, self.state, self.pending, now)
        if d is not None:
            self._apply(d, now)

    def _apply(self, d: Decisions, now: float) -> None:
        self.kpi.cycles += 1
        for pre in d.preemptions:
            r = self.runs[pre.victim]
            self._progress(r, now)
            self._lose_since_checkpoint(r, now)
            self._stop(r, now, release=False)  # apply_decisions releases it from the state
            self.kpi.preemptions += 1
            self._requeue(r, now, why="preempted")
        apply_decisions(self.state, d, now=now)
        for p in d.placed:
            r = self.runs[p.spec.name]
            if p.scale_up:
                self._dequeue(p.spec.name)
                self._rescale(r, now)
                continue
            self._dequeue(p.spec.name)
            self._start_run(r, p.placement, now)
        for w in d.pending:
            if w.status.code is Code.UNRESOLVABLE and w.spec.name not in self.state.running:
                self._dequeue(w.spec.name)
                self._fail(self.runs[w.spec.name], f"{w.status.reason.value}: {w.status.message}", now)

    def _enqueue(self, spec: JobSpec) -> None:
        old = self.pending.get(spec.name)
        if old is not None:
            self.waiting_milli -= _demand_milli(old)
        self.pending.add(spec)
        self.waiting_milli += _demand_milli(spec)

    def _dequeue(self, name: str) -> None:
        spec = self.pending.get(name)
        if spec is not None:
            self.pending.remove(name)
            self.waiting_milli -= _demand_milli(spec)

    # ------------------------------------------------------------------ running jobs
    def _work_of(self, spec: JobSpec) -> float:
        runtime = spec.duration_estimate_s if spec.duration_estimate_s is not None else DEFAULT_RUNTIME_S
        if spec.kind is JobKind.TRAINING:
            return runtime / max(ideal_step(self.cluster, spec).total_s, 1e-9)
        return runtime  # batch and inference: seconds (their speed does not depend on placement here)

    def _start_run(self, r: JobRun, placement: Placement, now: float) -> None:
        spec = r.spec
        r.status, r.run_start, r.since = "running", now, now
        if r.first_start is None:
            r.first_start = now
            self.kpi.started(spec.kind, wait=now - spec.submit_time)
        r.layout = Layout.of(self.cluster, placement)
        r.speed = self.cluster.speed_of(self.cluster.nodes[placement.allocs[0].node].gpu_model)
        if spec.kind is JobKind.TRAINING and r.layout.gpus > 1:
            self.kpi.multi_gpu_starts += 1
            self.kpi.single_rack_starts += r.layout.racks == 1
        uncontended = self._uncontended_rate(r)
        r.traffic = self.monitor.add_job(spec, placement, steps_per_s=uncontended)
        if r.traffic.inter_rack > 0:
            for rack in r.traffic.racks:
                self.multi_rack_by_rack[rack].add(spec.name)
        if spec.kind is JobKind.INFERENCE:
            self.serving_jobs.add(spec.name)
            self._rescale(r, now)
        self._set_rate(r, now)
        if r.traffic.inter_rack > 0:
            self._refresh_neighbours(r, now)

    def _uncontended_rate(self, r: JobRun) -> float:
        if r.spec.kind is JobKind.TRAINING and r.layout is not None:
            return 1.0 / max(training_step(self.cluster, r.spec, r.layout, speed=r.speed).total_s, 1e-9)
        return r.speed / max(r.spec.comm.compute_s_per_step, 1e-9)

    def _slowdown(self, r: JobRun) -> float:
        """Contention on the rack uplinks the job crosses (failed uplinks shrink their capacity)."""
        if r.traffic is None or r.traffic.inter_rack <= 0:
            return 1.0
        worst = 1.0
        for rack in r.traffic.racks:
            util = self.monitor.uplink_utilisation(rack)
            links = self.cluster.racks[rack].uplinks
            alive = max(links - self.uplinks_down[rack], 0) / links
            worst = max(worst, util / alive if alive > 0 else math.inf)
        return min(worst, 1e6)

    def _set_rate(self, r: JobRun, now: float) -> None:
        """Bring progress up to date, then set the speed for the current placement and contention."""
        self._progress(r, now)
        spec = r.spec
        if spec.kind is JobKind.TRAINING and r.layout is not None:
            step = training_step(self.cluster, spec, r.layout, slowdown=self._slowdown(r), speed=r.speed)
            r.rate = 1.0 / max(step.total_s, 1e-9)
        elif spec.kind is JobKind.BATCH:
            r.rate = r.speed  # its work is seconds at the estimate's speed
        else:
            r.rate = 1.0  # a service runs for its lifetime whatever its speed
        r.generation += 1
        remaining = max(r.work - r.done, 0.0)
        self.q.push(now + remaining / r.rate, EventKind.FINISH, spec.name, r.generation)

    def _refresh_neighbours(self, r: JobRun, now: float) -> None:
        """A job crossing racks changed: re-time the other cross-rack jobs that share those racks."""
        if r.traffic is None:
            return
        seen = {r.spec.name}
        for rack in r.traffic.racks:
            for name in sorted(self.multi_rack_by_rack[rack] - seen):
                seen.add(name)
                other = self.runs[name]
                if other.status == "running" and other.spec.kind is JobKind.TRAINING:
                    self._set_rate(other, now)

    def _progress(self, r: JobRun, now: float) -> None:
        if r.status != "running":
            return
        dt = now - r.since
        if dt > 0 and r.rate > 0:
            steps = min(r.rate * dt, max(r.work - r.done, 0.0))
            r.done += steps
            if r.traffic is not None and r.spec.kind is JobKind.TRAINING:
                self.kpi.bytes_nvlink += r.traffic.nvlink * steps
                self.kpi.bytes_rdma += r.traffic.rdma * steps
                self.kpi.bytes_backbone += r.traffic.backbone * steps
        r.since = now

    def _stop(self, r: JobRun, now: float, *, release: bool = True) -> None:
        name = r.spec.name
        if release and name in self.state.running:
            self.state.release(name)
        if name in self.monitor:
            traffic = self.monitor.remove_job(name)
            if traffic.inter_rack > 0:
                for rack in traffic.racks:
                    self.multi_rack_by_rack[rack].discard(name)
                self._refresh_neighbours(r, now)
        self.serving_jobs.discard(name)
        r.status = "stopped"
        r.generation += 1

    def _lose_since_checkpoint(self, r: JobRun, now: float) -> None:
        """Progress since the last checkpoint is lost (all of this run's, without checkpoints)."""
        interval = r.spec.checkpoint_interval_s
        since_ckpt = now - r.run_start if not interval else (now - r.run_start) % interval
        lost = min(since_ckpt * r.rate, r.done) if r.spec.kind is JobKind.TRAINING else min(since_ckpt, r.done)
        r.done -= lost
        gpus = (
            (self.state.running[r.spec.name].placement.gpu_milli / MILLI_PER_GPU)
            if r.spec.name in (self.state.running)
            else (r.layout.gpus if r.layout else 0)
        )
        self.kpi.lost_gpu_s += since_ckpt * gpus

    def _requeue(self, r: JobRun, now: float, *, why: str) -> None:
        r.restarts += 1
        self.kpi.restarts += 1
        if r.restarts > self.cfg.faults.max_restarts:
            self._fail(r, f"stopped {r.restarts} times (last: {why}); gave up", now)
            return
        r.status = "pending"
        self._enqueue(r.spec)

    def _fail(self, r: JobRun, reason: str, now: float) -> None:
        if r.status in ("completed", "failed"):
            return
        if r.status == "running":
            self._stop(r, now)
        self._dequeue(r.spec.name)
        r.status, r.reason, r.end = "failed", reason, now
        self.active -= 1
        self.kpi.failed += 1

    # ------------------------------------------------------------------ accounting
    def _account(self, now: float) -> None:
        dt = now - self._last
        if dt <= 0:
            return
        healthy = self.cluster.total_gpus - self.state.failed_gpus_count
        self.kpi.interval(
            dt=dt,
            healthy=healthy,
            allocated=self.state.used_milli / MILLI_PER_GPU,
            waiting_demand=self.waiting_milli / MILLI_PER_GPU,
        )
        self._serve(dt, (now + self._last) / 2)
        self._last = now

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


def _demand_milli(spec: JobSpec) -> int:
    return spec.unit.gpu_demand_milli * spec.required_units


def simulate(cluster: GPUCluster, jobs: Sequence[JobSpec], config: SimConfig | None = None) -> SimResult:
    return Simulator(cluster, jobs, config).run()


__all__ = ["JobRun", "SimConfig", "SimResult", "Simulator", "simulate"]
