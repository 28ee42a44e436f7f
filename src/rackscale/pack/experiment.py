"""The static-packing experiment of the FGD paper: pods arrive one at a time and never leave; the GPU
allocation ratio is recorded each time the arrived GPU demand crosses a whole percent of capacity.

Every policy is a scheduler profile (:data:`rackscale.scheduler.framework.PROFILES`): the pods go through the
product's path, ``placement_groups`` and the profile's placer, into a :class:`ClusterState`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np

from rackscale.model.placement import Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.pack.trace import Trace, inflate
from rackscale.scheduler.filters import allowed_models
from rackscale.scheduler.framework import PLACERS, PROFILES, CycleContext, Placer
from rackscale.scheduler.groups import placement_groups
from rackscale.scheduler.placement.fgd import Workload
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.topology_pack import TopologyPack
from rackscale.scheduler.scheduler import ResourceScheduler

DEFAULT_SEEDS = tuple(range(42, 52))
INFLATION = 1.3
CHECKPOINTS = (80, 90, 100, 130)
# The paper's name of each policy -> the scheduler profile that runs it.
PROFILE_OF: dict[str, str] = {
    "rackscale": "rackscale",
    "Random": "share-random",
    "DotProd": "dot-prod",
    "GpuClustering": "gpu-clustering",
    "GpuPacking": "gpu-packing",
    "BestFit": "share-best-fit",
    "FGD": "fgd",
}
ALL_POLICIES = tuple(PROFILE_OF)
DEFAULT_POLICIES = ALL_POLICIES

# GPU allocation ratio (%) on openb_pod_list_default, mean of seeds 42..51 (Weng et al., ATC'23).
PUBLISHED: dict[str, dict[str, float]] = {
    "Random": {"80": 78.66, "90": 85.02, "100": 86.30, "130": 87.47, "unallocated_gpus_130": 778.4},
    "DotProd": {"80": 80.02, "90": 89.98, "100": 90.62, "130": 90.85, "unallocated_gpus_130": 568.4},
    "GpuClustering": {"80": 80.02, "90": 89.98, "100": 91.65, "130": 91.88, "unallocated_gpus_130": 504.4},
    "GpuPacking": {"80": 80.02, "90": 89.98, "100": 91.78, "130": 92.00, "unallocated_gpus_130": 497.0},
    "BestFit": {"80": 80.02, "90": 89.99, "100": 92.86, "130": 93.08, "unallocated_gpus_130": 429.9},
    "FGD": {"80": 80.02, "90": 89.98, "100": 95.23, "130": 95.39, "unallocated_gpus_130": 286.4},
}


@runtime_checkable
class TakesWorkload(Protocol):
    def set_workload(self, workload: Workload) -> None: ...


def make_placer(policy: str, *, trace: Trace, seed: int) -> Placer:
    """The profile's placer, told the trace's pod-type mix (the paper measures fragmentation against it)."""
    if policy not in PROFILE_OF:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(ALL_POLICIES)}")
    placer = PLACERS[PROFILES[PROFILE_OF[policy]].placer](seed)
    give_workload(placer, trace.workload())
    return placer


def give_workload(placer: Placer | ResourceScheduler, workload: Workload) -> None:
    """Tell a placer (or a scheduler's placer) the pod-type mix, where it measures fragmentation."""
    if isinstance(placer, ResourceScheduler):
        placer = placer.placer
    target = placer.sharing if isinstance(placer, TopologyPack) else placer
    if isinstance(target, TakesWorkload):
        target.set_workload(workload)


def requests(trace: Trace, state: ClusterState) -> list[GroupRequest]:
    """The one placement group of each pod, as the scheduler builds it."""
    ctx = CycleContext(now=0.0, queues={}, models=trace.cluster.gpu_models)
    out: list[GroupRequest] = []
    for job in trace.pods:
        groups = placement_groups(
            job, state, allowed_models(job, ctx), 1, exclude=frozenset(), only=None, allow_split=lambda: True
        )
        out.append(groups[0][0])
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    policy: str
    seed: int
    capacity_gpus: int
    curve: tuple[float, ...]  # allocation ratio (%) when arrived demand crossed 1, 2, ... percent
    arrived: int
    placed: int
    failed: int

    def at(self, percent: int) -> float:
        return self.curve[percent - 1]


def run(*, trace: Trace, policy: str, seed: int, ratio: float = INFLATION) -> RunResult:
    """One seed of one policy: inflate the trace, then offer each pod once, in order."""
    capacity = trace.capacity_gpus
    demand_of = trace.demand_milli
    arrivals = inflate(demand=demand_of, capacity_gpus=capacity, ratio=ratio, seed=seed)
    state = ClusterState(trace.cluster)
    placer = make_placer(policy, trace=trace, seed=seed)
    reqs = requests(trace, state)
    cumulative = np.cumsum(demand_of[arrivals.order])
    top = int(ratio * 100 + 1e-9)
    # marks[p-1]: the arrival after which demand first reached p % of capacity (p = 1 .. top).
    marks = np.searchsorted(cumulative, np.arange(1, top + 1) * capacity * MILLI_PER_GPU / 100.0, side="left")
    curve: list[float] = []
    placed = failed = 0
    for i, pod in enumerate(arrivals.order.tolist()):
        allocs = placer.place(state, reqs[pod])
        if allocs:
            job = trace.pods[pod]
            job = replace(job, name=f"{job.name}#{i}")  # inflation copies are separate pods
            state.allocate(job, Placement(job.name, tuple(allocs), 1), now=0.0)
            placed += 1
        else:
            failed += 1
        while len(curve) < len(marks) and marks[len(curve)] == i:
            curve.append(100.0 * state.used_milli / (capacity * MILLI_PER_GPU))
    return RunResult(
        policy=policy,
        seed=seed,
        capacity_gpus=capacity,
        curve=tuple(curve),
        arrived=len(arrivals.order),
        placed=placed,
        failed=failed,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One (policy, seed) run, picklable so a process pool can take it."""

    trace: Trace
    policy: str
    seed: int


def run_job(job: Job) -> RunResult:
    return run(trace=job.trace, policy=job.policy, seed=job.seed)


Mapper = Callable[[Callable[[Job], RunResult], Iterable[Job]], Iterator[RunResult]]


def run_experiment(
    *,
    trace: Trace,
    policies: Iterable[str] = DEFAULT_POLICIES,
    seeds: Iterable[int] = DEFAULT_SEEDS,
    mapper: Mapper | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Every policy on every seed. ``mapper`` runs the jobs (e.g. a process pool's unordered map); the
    default runs them here, one after the other."""
    names = list(policies)
    for name in names:
        if name not in ALL_POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(ALL_POLICIES)}")
    # Slow policies first, so a pool does not end on one long straggler.
    order = sorted(names, key=lambda p: p not in ("rackscale", "FGD"))
    jobs = [Job(trace=trace, policy=p, seed=s) for p in order for s in seeds]
    results: list[RunResult] = []
    for res in (mapper or map)(run_job, jobs):
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results


def summarize(results: Iterable[RunResult]) -> dict[str, dict[str, float]]:
    """Mean over seeds per policy: allocation ratio (%) at each checkpoint and unallocated GPUs at 130 %."""
    by_policy: dict[str, list[RunResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    out: dict[str, dict[str, float]] = {}
    for name, runs in by_policy.items():
        row = {str(p): round(float(np.mean([r.at(p) for r in runs])), 2) for p in CHECKPOINTS}
        unallocated = np.mean([r.capacity_gpus * (1 - r.at(130) / 100) for r in runs])
        row["unallocated_gpus_130"] = round(float(unallocated), 1)
        row["failed_pods"] = round(float(np.mean([r.failed for r in runs])), 1)
        out[name] = row
    return out
