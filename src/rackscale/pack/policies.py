"""The five baselines of the FGD paper, as its authors' simulator scores nodes, vectorised over all nodes.

Every policy answers ``choose(state, req, feasible, rng) -> (node, gpus)`` for a pod that fits somewhere.
Nodes with equal scores are broken uniformly at random (``rng``), as the Kubernetes scheduler's
``selectHost`` does; scores are kept as floats, so only truly equal nodes tie.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from rackscale.pack.state import PackState, Request
from rackscale.pack.trace import MILLI, BoolArray, FloatArray, IntArray

Choice = tuple[int, tuple[int, ...]]


class Policy(Protocol):
    name: str

    def reset(self, state: PackState) -> None:
        """Called once before the first pod (policies with caches build them here)."""

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        """Node and GPUs for ``req``; ``feasible`` has at least one True."""
        ...

    def update(self, state: PackState, node: int) -> None:
        """Called after a pod was placed on ``node``."""


def pick_max(candidates: IntArray, score: FloatArray, rng: np.random.Generator) -> int:
    """The candidate with the highest score, uniformly at random among equals."""
    best = np.flatnonzero(score == score.max())
    j = best[0] if len(best) == 1 else best[int(rng.integers(len(best)))]
    return int(candidates[j])


def default_gpus(state: PackState, node: int, req: Request) -> tuple[int, ...]:
    """The usual choice inside a node: the tightest GPU for a shared pod, the first whole GPUs otherwise."""
    if req.shared:
        return (state.tightest_gpu(node, req.milli),)
    return state.whole_gpus(node, req.gpus)


class _Stateless:
    name = "?"

    def reset(self, state: PackState) -> None:
        return None

    def update(self, state: PackState, node: int) -> None:
        return None


class RandomPolicy(_Stateless):
    """A random feasible node; a random GPU that fits for a shared pod."""

    name = "Random"

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        cand = np.flatnonzero(feasible)
        node = int(cand[int(rng.integers(len(cand)))])
        if req.shared:
            fits = np.flatnonzero(state.free[node] >= req.milli)
            return node, (int(fits[int(rng.integers(len(fits)))]),)
        if req.gpus:
            whole = np.flatnonzero(state.free[node] == MILLI)
            return node, tuple(int(g) for g in np.sort(rng.choice(whole, size=req.gpus, replace=False)))
        return node, ()


class DotProdPolicy(_Stateless):
    """Tetris-style alignment: the dot product of the node's free (CPU, memory, GPU) and the pod's request,
    each dimension normalised by the node's capacity; the best-aligned node wins."""

    name = "DotProd"

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        cand = np.flatnonzero(feasible)
        cpu_cap = np.maximum(state.cpu_cap[cand], 1)
        mem_cap = np.maximum(state.mem_cap[cand], 1)
        gpu_cap = np.maximum(state.gpu_cap[cand], 1)
        score = (
            (state.cpu[cand] / cpu_cap) * (req.cpu / cpu_cap)
            + (state.mem[cand] / mem_cap) * (req.mem / mem_cap)
            + (state.gpu_free[cand] / gpu_cap) * (req.demand / gpu_cap)
        )
        node = pick_max(cand, score, rng)
        return node, default_gpus(state, node, req)


class GpuClusteringPolicy(_Stateless):
    """Cluster pods of one GPU shape: nodes already running pods of the same (GPUs, milli) request first, then
    other nodes in use, then idle nodes (random among equals); inside a node, a GPU already shared by
    same-size pods first, else the tightest GPU."""

    name = "GpuClustering"

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        cand = np.flatnonzero(feasible)
        same = state.kind_count.get(req.kind)
        score = (state.gpu_free[cand] < state.gpu_cap[cand]).astype(np.float64)
        if same is not None:
            score += 2.0 * (same[cand] > 0)
        node = pick_max(cand, score, rng)
        if req.shared:
            row = state.free[node]
            for g in np.argsort(row, kind="stable").tolist():  # tightest first
                if row[g] >= req.milli and req.milli in state.gpu_kinds.get((node, g), ()):
                    return node, (g,)
        return node, default_gpus(state, node, req)


class GpuPackingPolicy(_Stateless):
    """Pack onto GPUs already in use: a shared pod goes to a node with a partly used GPU that fits, else to a
    node with GPUs in use, else to an idle node; whole-GPU pods go to nodes with GPUs in use first. Inside a
    tier, the node with the fewest whole free GPUs; inside the node, the tightest GPU."""

    name = "GpuPacking"

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        cand = np.flatnonzero(feasible)
        used = state.gpu_free[cand] < state.gpu_cap[cand]
        tier = used.astype(np.float64)
        if req.shared:
            rows = state.free[cand]
            partly = ((rows >= req.milli) & (rows < MILLI)).any(axis=1)
            tier += 2.0 * partly
        # Tiers dominate; inside one, fewer whole free GPUs is better (at most 8 per node, so 100 separates).
        score = 100.0 * tier - state.whole[cand]
        node = pick_max(cand, score, rng)
        return node, default_gpus(state, node, req)


class BestFitPolicy(_Stateless):
    """The node with the least free resources left after placing the pod: CPU and GPU, each as a share of
    the node's capacity, weighted equally."""

    name = "BestFit"

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        cand = np.flatnonzero(feasible)
        left_cpu = (state.cpu[cand] - req.cpu) / np.maximum(state.cpu_cap[cand], 1)
        left_gpu = (state.gpu_free[cand] - req.demand) / np.maximum(state.gpu_cap[cand], 1)
        node = pick_max(cand, -(left_cpu + left_gpu), rng)
        return node, default_gpus(state, node, req)
