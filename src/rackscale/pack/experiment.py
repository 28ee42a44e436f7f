"""The static-packing experiment of the FGD paper: pods arrive one at a time and never leave; the GPU
allocation ratio is recorded each time the arrived GPU demand crosses a whole percent of capacity."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from rackscale.pack.fgd import FGDPolicy, TargetWorkload
from rackscale.pack.policies import (
    BestFitPolicy,
    DotProdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    Policy,
    RandomPolicy,
)
from rackscale.pack.rackscale_policy import PodTypes, RackscalePolicy
from rackscale.pack.state import PackState, requests_of
from rackscale.pack.trace import MILLI, Nodes, Pods, inflate

DEFAULT_SEEDS = tuple(range(42, 52))
INFLATION = 1.3
CHECKPOINTS = (80, 90, 100, 130)
BASELINES = ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit")
DEFAULT_POLICIES = ("rackscale", *BASELINES)
ALL_POLICIES = (*DEFAULT_POLICIES, "FGD")

# GPU allocation ratio (%) on openb_pod_list_default, mean of seeds 42..51 (Weng et al., ATC'23).
PUBLISHED: dict[str, dict[str, float]] = {
    "Random": {"80": 78.66, "90": 85.02, "100": 86.30, "130": 87.47, "unallocated_gpus_130": 778.4},
    "DotProd": {"80": 80.02, "90": 89.98, "100": 90.62, "130": 90.85, "unallocated_gpus_130": 568.4},
    "GpuClustering": {"80": 80.02, "90": 89.98, "100": 91.65, "130": 91.88, "unallocated_gpus_130": 504.4},
    "GpuPacking": {"80": 80.02, "90": 89.98, "100": 91.78, "130": 92.00, "unallocated_gpus_130": 497.0},
    "BestFit": {"80": 80.02, "90": 89.99, "100": 92.86, "130": 93.08, "unallocated_gpus_130": 429.9},
    "FGD": {"80": 80.02, "90": 89.98, "100": 95.23, "130": 95.39, "unallocated_gpus_130": 286.4},
}


def make_policy(name: str, *, nodes: Nodes, pods: Pods) -> Policy:
    """A fresh policy; the FGD family measures fragmentation against the trace's own pod-type mix."""
    simple: dict[str, Callable[[], Policy]] = {
        "Random": RandomPolicy,
        "DotProd": DotProdPolicy,
        "GpuClustering": GpuClusteringPolicy,
        "GpuPacking": GpuPackingPolicy,
        "BestFit": BestFitPolicy,
    }
    if name in simple:
        return simple[name]()
    if name == "FGD":
        return FGDPolicy(workload=TargetWorkload.of(pods=pods, models=nodes.models))
    if name == "rackscale":
        return RackscalePolicy(types=PodTypes.of(pods=pods, nodes=nodes))
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(ALL_POLICIES)}")


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


def run(*, nodes: Nodes, pods: Pods, policy: str, seed: int, ratio: float = INFLATION) -> RunResult:
    """One seed of one policy: inflate the trace, then offer each pod once, in order."""
    capacity = nodes.total_gpus
    arrivals = inflate(pods=pods, capacity_gpus=capacity, ratio=ratio, seed=seed)
    requests = requests_of(pods=pods, nodes=nodes)
    state = PackState(nodes)
    chosen = make_policy(policy, nodes=nodes, pods=pods)
    chosen.reset(state)
    # Tie-breaks draw from their own stream, so every policy sees the same arrivals for a seed.
    rng = np.random.default_rng([seed, 1])
    demand = pods.demand_milli[arrivals.order]
    cumulative = np.cumsum(demand)
    top = int(ratio * 100 + 1e-9)
    # marks[p-1]: the arrival after which demand first reached p % of capacity (p = 1 .. top).
    marks = np.searchsorted(cumulative, np.arange(1, top + 1) * capacity * MILLI / 100.0, side="left").tolist()
    curve: list[float] = []
    placed = failed = 0
    for i, pod in enumerate(arrivals.order.tolist()):
        req = requests[pod]
        feasible = state.feasible(req)
        if feasible.any():
            node, gpus = chosen.choose(state, req, feasible, rng)
            state.place(node, gpus, req)
            chosen.update(state, node)
            placed += 1
        else:
            failed += 1
        while len(curve) < len(marks) and marks[len(curve)] == i:
            curve.append(100.0 * state.allocated_milli / (capacity * MILLI))
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

    nodes: Nodes
    pods: Pods
    policy: str
    seed: int


def run_job(job: Job) -> RunResult:
    return run(nodes=job.nodes, pods=job.pods, policy=job.policy, seed=job.seed)


Mapper = Callable[[Callable[[Job], RunResult], Iterable[Job]], Iterator[RunResult]]


def run_experiment(
    *,
    nodes: Nodes,
    pods: Pods,
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
    jobs = [Job(nodes=nodes, pods=pods, policy=p, seed=s) for p in order for s in seeds]
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
