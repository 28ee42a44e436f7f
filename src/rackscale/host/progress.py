"""How fast each running job goes, and how far it got: the performance model applied over time.

A training job's speed depends on its placement (:mod:`rackscale.host.perf`) and on the contention on the
rack uplinks it crosses, which changes whenever a neighbour crossing the same racks starts or stops, or an
uplink fails. So every change re-times the jobs it affects: their progress is brought up to date at the old
rate, a new rate is set, and a new end is announced through ``on_end(job, end, generation)``. The
simulator turns an announced end into a FINISH event; the simulated backend into the exit its ``poll``
reports; the service's host ignores it (its backend says when a job ends). An end announced before a
later re-timing carries an older generation: stale.

Bytes moved are added to the KPIs as progress is made (bytes per step x steps), so a slower job moves its
bytes later, not more of them. A job that names its model (``spec.llm``) is timed by the LLM model, and the
network sees the bytes that model says it moves (:func:`rackscale.llm.jobs.traffic_profile`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, replace

from rackscale.host.kpis import KpiAccumulator
from rackscale.host.perf import Layout, job_ideal_step, job_step
from rackscale.host.runs import JobRun, RunStatus, RuntimeDefaults
from rackscale.llm import jobs as llm_jobs
from rackscale.model.placement import Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.network.monitor import NetworkMonitor

EndSink = Callable[[str, float, int], None]
"""Told ``(job, end, generation)`` whenever a running job's end moves."""


def ignore_ends(job: str, end: float, generation: int) -> None:
    """The sink of a host whose backend says when jobs end."""


@dataclass(frozen=True, slots=True)
class BytesMoved:
    nvlink: float
    rdma: float
    backbone: float

    @property
    def total(self) -> float:
        return self.nvlink + self.rdma + self.backbone


class Progress:
    """The running jobs' speeds and progress on one cluster, with the network they load.

    ``runs`` is the caller's map of job runs (shared, not copied): neighbours are looked up there.
    """

    def __init__(
        self,
        cluster: GPUCluster,
        *,
        runs: MutableMapping[str, JobRun],
        kpi: KpiAccumulator,
        on_end: EndSink = ignore_ends,
        defaults: RuntimeDefaults | None = None,
    ) -> None:
        self.cluster = cluster
        self.runs = runs
        self.kpi = kpi
        self.on_end = on_end
        self.defaults = defaults or RuntimeDefaults()
        self.monitor = NetworkMonitor(cluster)
        self.uplinks_down = [0] * len(cluster.racks)
        self.multi_rack_by_rack: list[set[str]] = [set() for _ in cluster.racks]
        # The attached training runs that move bytes: what ``bytes_moved`` reads at scrape time (of 12,700
        # running jobs at 1,389 racks, the single-GPU ones and the services move none).
        self.movers: set[str] = set()

    # ------------------------------------------------------------------ work
    def work_of(self, spec: JobSpec) -> float:
        """What the job must do: steps for training (its estimate at the ideal step), seconds otherwise
        (infinite for a service that serves until cancelled)."""
        llm_jobs.check_job(self.cluster, spec)  # an LLM job this cluster cannot run is refused on arrival
        runtime: float | None = spec.duration_estimate_s
        if runtime is None:
            runtime = self.defaults.service_s if spec.kind is JobKind.INFERENCE else self.defaults.runtime_s
        if runtime is None:
            return math.inf
        if spec.kind is JobKind.TRAINING:
            return runtime / max(job_ideal_step(self.cluster, spec).total_s, 1e-9)
        return runtime  # batch and inference: seconds (their speed does not depend on placement here)

    # ------------------------------------------------------------------ starting and stopping
    def place(self, r: JobRun, placement: Placement) -> None:
        """Where it runs and how fast its GPUs compute (before ``attach``)."""
        r.layout = Layout.of(self.cluster, placement)
        r.speed = self.cluster.speed_of(self.cluster.nodes[placement.allocs[0].node].gpu_model)

    def attach(self, r: JobRun, placement: Placement) -> None:
        """Put its traffic on the network (at its uncontended rate)."""
        spec = r.spec
        if llm_jobs.is_llm(spec):  # the bytes the LLM model moves, not the spec's generic CommProfile
            spec = replace(spec, comm=llm_jobs.traffic_profile(self.cluster, spec))
        r.traffic = self.monitor.add_job(spec, placement, steps_per_s=self.uncontended_rate(r))
        if spec.kind is JobKind.TRAINING and (r.traffic.nvlink or r.traffic.rdma or r.traffic.backbone):
            self.movers.add(spec.name)
        if r.traffic.inter_rack > 0:
            for rack in r.traffic.racks:
                self.multi_rack_by_rack[rack].add(r.spec.name)

    def detach(self, r: JobRun, now: float) -> None:
        """Take its traffic off the network; the cross-rack jobs it shared racks with speed up."""
        name = r.spec.name
        self.movers.discard(name)
        if name in self.monitor:
            traffic = self.monitor.remove_job(name)
            if traffic.inter_rack > 0:
                for rack in traffic.racks:
                    self.multi_rack_by_rack[rack].discard(name)
                self.refresh_neighbours(r, now)

    # ------------------------------------------------------------------ speed
    def uncontended_rate(self, r: JobRun) -> float:
        """Steps per second on its placement without contention (an LLM service: decode steps)."""
        if r.spec.kind is JobKind.TRAINING and r.layout is not None:
            return 1.0 / max(job_step(self.cluster, r.spec, r.layout, speed=r.speed).total_s, 1e-9)
        if llm_jobs.is_llm(r.spec):
            return 1.0 / max(llm_jobs.traffic_profile(self.cluster, r.spec).compute_s_per_step, 1e-9)
        return r.speed / max(r.spec.comm.compute_s_per_step, 1e-9)

    def slowdown(self, r: JobRun) -> float:
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

    def set_rate(self, r: JobRun, now: float) -> None:
        """Bring progress up to date, then set the speed for the current placement and contention, and
        announce the new end."""
        self.advance(r, now)
        spec = r.spec
        if spec.kind is JobKind.TRAINING and r.layout is not None:
            step = job_step(self.cluster, spec, r.layout, slowdown=self.slowdown(r), speed=r.speed)
            r.rate = 1.0 / max(step.total_s, 1e-9)
        elif spec.kind is JobKind.BATCH:
            r.rate = r.speed  # its work is seconds at the estimate's speed
        else:
            r.rate = 1.0  # a service runs for its lifetime whatever its speed
        r.generation += 1
        remaining = max(r.work - r.done, 0.0)
        self.on_end(spec.name, now + remaining / r.rate, r.generation)

    def refresh_neighbours(self, r: JobRun, now: float) -> None:
        """A job crossing racks changed: re-time the other cross-rack jobs that share those racks."""
        if r.traffic is None:
            return
        seen = {r.spec.name}
        for rack in r.traffic.racks:
            for name in sorted(self.multi_rack_by_rack[rack] - seen):
                seen.add(name)
                other = self.runs[name]
                if other.status is RunStatus.RUNNING and other.spec.kind is JobKind.TRAINING:
                    self.set_rate(other, now)

    def uplink_failed(self, rack: int, now: float) -> None:
        self.uplinks_down[rack] += 1
        self._retime_rack(rack, now)

    def uplink_repaired(self, rack: int, now: float) -> None:
        self.uplinks_down[rack] = max(0, self.uplinks_down[rack] - 1)
        self._retime_rack(rack, now)

    def _retime_rack(self, rack: int, now: float) -> None:
        for name in sorted(self.multi_rack_by_rack[rack]):
            self.set_rate(self.runs[name], now)

    # ------------------------------------------------------------------ progress
    def advance(self, r: JobRun, now: float) -> None:
        """Add the work done since ``r.since`` at the current rate (and the bytes it moved)."""
        if r.status is not RunStatus.RUNNING:
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

    def lose_since_checkpoint(self, r: JobRun, now: float, *, gpus: float, told: bool = False) -> None:
        """Progress since the last checkpoint is lost (all of this run's, without checkpoints); the GPU-time
        it cost is counted as lost. ``told``: the job was told to stop (a preemption, not a failed part), so
        one that checkpoints on the stop signal (``checkpoint_on_preempt``) keeps its progress and loses
        only the time its save takes (``RuntimeDefaults.save_s``), counted as lost GPU-time."""
        interval = r.spec.checkpoint_interval_s
        since_ckpt = now - r.run_start if not interval else (now - r.run_start) % interval
        if told and r.spec.checkpoint_on_preempt:
            self.kpi.lost_gpu_s += min(since_ckpt, self.defaults.save_s) * gpus
            return
        lost = min(since_ckpt * r.rate, r.done) if r.spec.kind is JobKind.TRAINING else min(since_ckpt, r.done)
        r.done -= lost
        self.kpi.lost_gpu_s += since_ckpt * gpus

    def resize(self, r: JobRun, placement: Placement, now: float) -> None:
        """An elastic gang goes on at another size: its progress so far is kept (it saved on the signal), it
        restarts on ``placement``, and the restart costs ``RuntimeDefaults.resize_s`` of its time there
        (counted as lost GPU-time); then it is re-timed, and so are the cross-rack neighbours it left or met."""
        self.advance(r, now)
        self.detach(r, now)
        self.place(r, placement)
        self.attach(r, placement)
        cost = self.defaults.resize_s
        r.done = max(r.done - cost * self.uncontended_rate(r), 0.0)
        self.kpi.lost_gpu_s += cost * placement.gpu_milli / MILLI_PER_GPU
        self.set_rate(r, now)
        if r.traffic is not None and r.traffic.inter_rack > 0:
            self.refresh_neighbours(r, now)

    def bytes_moved(self, now: float, running: Iterator[JobRun]) -> BytesMoved:
        """The bytes counted so far plus those the ``running`` jobs moved since their last update, without
        changing anything (a read at scrape time). ``running`` may be limited to :attr:`movers`: the
        others add nothing."""
        nv, rd, bb = self.kpi.bytes_nvlink, self.kpi.bytes_rdma, self.kpi.bytes_backbone
        for r in running:
            if r.status is not RunStatus.RUNNING or r.traffic is None or r.spec.kind is not JobKind.TRAINING:
                continue
            steps = min(r.rate * max(now - r.since, 0.0), max(r.work - r.done, 0.0))
            nv += r.traffic.nvlink * steps
            rd += r.traffic.rdma * steps
            bb += r.traffic.backbone * steps
        return BytesMoved(nv, rd, bb)


__all__ = ["BytesMoved", "EndSink", "Progress", "ignore_ends"]
