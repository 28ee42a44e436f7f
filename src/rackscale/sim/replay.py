"""Replay a workload: arrivals and finishes drive scheduling cycles of the real ResourceScheduler.

This first replay runs jobs for their duration estimate (no performance model yet: placement does not
change speed here). It measures what placement alone decides: allocation, waiting, how many gangs stay
inside one NVLink domain, and the share of collective traffic their placements keep on NVLink.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobKind, JobSpec
from rackscale.network.traffic import traffic_for
from rackscale.scheduler import PendingQueue, ResourceScheduler, apply_decisions
from rackscale.sim.engine import EventKind, EventQueue


@dataclass(slots=True)
class ReplayResult:
    policy: str
    jobs: int = 0
    completed: int = 0
    never_started: int = 0
    preemptions: int = 0
    cycles: int = 0
    allocated_gpu_s: float = 0.0
    available_gpu_s: float = 0.0
    waits: list[float] = field(default_factory=list)
    jcts: list[float] = field(default_factory=list)
    multi_gpu_gangs: int = 0
    single_rack_gangs: int = 0
    nvlink_bytes: float = 0.0
    all_bytes: float = 0.0
    makespan_s: float = 0.0

    def kpis(self) -> dict[str, float | int]:
        return {
            "jobs": self.jobs,
            "completed": self.completed,
            "never_started": self.never_started,
            "preemptions": self.preemptions,
            "allocation_ratio": self.allocated_gpu_s / self.available_gpu_s if self.available_gpu_s else 0.0,
            "single_rack_share": self.single_rack_gangs / self.multi_gpu_gangs if self.multi_gpu_gangs else 1.0,
            "intra_rack_traffic_share": self.nvlink_bytes / self.all_bytes if self.all_bytes else 1.0,
            "mean_wait_s": statistics.fmean(self.waits) if self.waits else 0.0,
            "p99_wait_s": _p(self.waits, 0.99),
            "mean_jct_s": statistics.fmean(self.jcts) if self.jcts else 0.0,
            "p99_jct_s": _p(self.jcts, 0.99),
            "makespan_s": self.makespan_s,
            "cycles": self.cycles,
        }


def _p(xs: Sequence[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def replay(
    cluster: GPUCluster,
    jobs: Sequence[JobSpec],
    *,
    policy: str = "rackscale",
    seed: int = 0,
    on_cycle: Callable[[float], None] | None = None,
) -> ReplayResult:
    """Run ``jobs`` on ``cluster`` under ``policy`` until every job has finished or can never start."""
    state = ClusterState(cluster)
    sched = ResourceScheduler(profile=policy, seed=seed)
    specs = {j.name: j for j in jobs}
    pending = PendingQueue()
    started: dict[str, float] = {}
    generation: dict[str, int] = {}
    res = ReplayResult(policy=policy, jobs=len(jobs))
    q = EventQueue()
    for j in jobs:
        q.push(j.submit_time, EventKind.ARRIVAL, j.name)
    last = jobs[0].submit_time if jobs else 0.0
    total = cluster.total_gpus
    while q:
        events = q.pop_batch()
        now = q.now
        dt = now - last
        res.allocated_gpu_s += dt * state.used_milli / MILLI_PER_GPU
        res.available_gpu_s += dt * total
        last = now
        for ev in events:
            if ev.kind is EventKind.ARRIVAL:
                pending.add(specs[ev.job])
            elif generation.get(ev.job) == ev.generation and ev.job in state.running:
                state.release(ev.job)
                res.completed += 1
                res.jcts.append(now - specs[ev.job].submit_time)
        if not pending:
            continue
        decisions = sched.schedule(state, pending, now)
        res.cycles += 1
        if on_cycle is not None:
            on_cycle(now)
        for pre in decisions.preemptions:
            victim = state.running[pre.victim].spec
            pending.add(victim)  # back to the queue; it restarts from scratch here
            res.preemptions += 1
        apply_decisions(state, decisions, now=now)
        for p in decisions.placed:
            spec = p.spec
            pending.discard(spec.name)
            if spec.name not in started:
                started[spec.name] = now
                res.waits.append(now - spec.submit_time)
            gen = generation.get(spec.name, -1) + 1
            generation[spec.name] = gen
            q.push(now + _duration(spec), EventKind.FINISH, spec.name, gen)
            _account_traffic(res, cluster, spec, p.placement)
    res.never_started = len(pending)
    res.makespan_s = last - (jobs[0].submit_time if jobs else 0.0)
    return res


def _account_traffic(res: ReplayResult, cluster: GPUCluster, spec: JobSpec, placement: Placement) -> None:
    if spec.kind is JobKind.TRAINING and spec.total_gpus > 1:
        res.multi_gpu_gangs += 1
        if len({cluster.nodes[a.node].rack for a in placement.allocs}) == 1:
            res.single_rack_gangs += 1
    t = traffic_for(cluster, spec=spec, placement=placement)
    steps = _duration(spec) / max(spec.comm.compute_s_per_step, 1e-9)
    res.nvlink_bytes += t.nvlink * steps
    res.all_bytes += (t.nvlink + t.rdma + t.backbone) * steps


def _duration(spec: JobSpec) -> float:
    """Run time in this replay: the estimate (0 is a valid estimate), an hour when there is none."""
    return spec.duration_estimate_s if spec.duration_estimate_s is not None else 3600.0
