"""Fragmentation Gradient Descent (Weng et al., ATC'23): place each pod where the node's expected GPU
fragmentation, measured against the target workload, grows least.

The fragmentation of a node for one pod type is the free milli-GPU that type cannot use: all of the node's
free GPU if the type does not fit at all (model, CPU or GPU count lacking), else the free milli on GPUs with
less free than the type asks per GPU. A node's fragmentation is the popularity-weighted sum over the types.

Pod types sharing a GPU shape (GPUs, milli per GPU, allowed models) differ only in CPU, so they are merged
into one *group* whose weight is a step function of the node's free CPU (the popularity of the group's types
that still fit). Per node and group we cache two numbers, the GPUs that hold the shape and the free milli on
GPUs too small for it; any hypothetical placement is then a cheap correction of the cache.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from rackscale.pack.policies import Choice
from rackscale.pack.state import PackState, Request
from rackscale.pack.trace import MILLI, BoolArray, FloatArray, IntArray, Pods


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetWorkload:
    """The pod-type distribution fragmentation is measured against, merged into GPU-shape groups."""

    gpus: IntArray  # (G,) GPUs per pod of the group
    milli: IntArray  # (G,) milli per GPU (0 for CPU-only)
    accessible: BoolArray  # (G, models): may the group run on a node of this model
    cpu_levels: IntArray  # (L,) the distinct CPU requests, ascending
    weight: FloatArray  # (G, L+1): popularity of the group's types asking at most cpu_levels[j-1] CPU
    popularity: float  # all types together (1.0)

    @classmethod
    def of(cls, *, pods: Pods, models: tuple[str, ...], cpu_aware: bool = True) -> TargetWorkload:
        """Types are the distinct (CPU, GPUs, milli, spec) requests of ``pods``, weighted by how often they occur
        (the authors' simulator keys its typical pods the same way). Without ``cpu_aware`` CPU is ignored."""
        cpu = pods.cpu_milli if cpu_aware else np.zeros(pods.count, dtype=np.int64)
        types = Counter(
            (int(cpu[i]), int(pods.num_gpu[i]), int(pods.gpu_milli[i]), pods.spec[i]) for i in range(pods.count)
        )
        shapes = sorted({(k, m, s) for _, k, m, s in types})
        index = {shape: g for g, shape in enumerate(shapes)}
        levels = np.asarray(sorted({c for c, _, _, _ in types}), dtype=np.int64)
        density = np.zeros((len(shapes), len(levels) + 1))
        for (c, k, m, s), n in types.items():
            density[index[(k, m, s)], int(np.searchsorted(levels, c)) + 1] += n / pods.count
        accessible = np.ones((len(shapes), len(models)), dtype=np.bool_)
        for g, (k, _, s) in enumerate(shapes):
            if k > 0 and s:
                accessible[g] = [m in s.split("|") for m in models]
        return cls(
            gpus=np.asarray([k for k, _, _ in shapes], dtype=np.int64),
            milli=np.asarray([m for _, m, _ in shapes], dtype=np.int64),
            accessible=accessible,
            cpu_levels=levels,
            weight=np.cumsum(density, axis=1),
            popularity=float(density.sum()),
        )

    def stats(self, free: IntArray) -> tuple[IntArray, IntArray]:
        """Per group and node (rows of ``free``): GPUs that hold the group's milli, free milli on smaller GPUs."""
        mg = self.milli[:, None, None]
        fits = free[None, :, :] >= mg
        return fits.sum(axis=2), np.where(fits, 0, free[None, :, :]).sum(axis=2)

    def fragmentation(
        self, *, total: IntArray, holds: IntArray, small: IntArray, cpu: IntArray, model: IntArray
    ) -> FloatArray:
        """Expected fragmented milli-GPU of nodes given their free GPU total, cached group stats and free CPU."""
        w = self.weight[:, np.searchsorted(self.cpu_levels, cpu, side="right")]
        served = (holds >= self.gpus[:, None]) & self.accessible[:, model]
        frag: FloatArray = total * self.popularity - (w * served * (total - small)).sum(axis=0)
        return frag


def shared_options(state: PackState, req: Request, feasible: BoolArray) -> tuple[IntArray, IntArray]:
    """Where a shared pod can go: one (node, free milli of the GPU) pair per distinct free amount that fits on
    each feasible node. GPUs of a node with equal free are interchangeable, so scoring one of them suffices."""
    rows = np.flatnonzero(feasible)
    sf = state.sorted_free[rows]
    ok = sf >= req.milli
    ok[:, 1:] &= sf[:, 1:] != sf[:, :-1]
    r, c = np.nonzero(ok)
    return rows[r], sf[r, c]


@dataclass(frozen=True, slots=True)
class Options:
    """Where a scored placement may go: node ``nodes[i]``, on a GPU with ``free[i]`` milli free (shared pods)."""

    nodes: IntArray
    free: IntArray | None
    delta: FloatArray  # growth of the node's fragmentation if the pod goes there


class FGDPolicy:
    """FGD as the authors' simulator runs it: the score is ``int(100 * sigmoid(-delta / 1000))`` (delta in
    milli-GPU), nodes with the top score tie and one is drawn at random; inside the node, the lowest-numbered
    GPU with the top score."""

    name = "FGD"

    def __init__(self, *, workload: TargetWorkload) -> None:
        self.workload = workload
        self.holds: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.small: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.frag: FloatArray = np.zeros(0)

    def reset(self, state: PackState) -> None:
        self.holds, self.small = self.workload.stats(state.free)
        self.frag = self._frag(state, np.arange(state.nodes.count), state.gpu_free, self.holds, self.small, state.cpu)

    def update(self, state: PackState, node: int) -> None:
        holds, small = self.workload.stats(state.free[node : node + 1])
        self.holds[:, node] = holds[:, 0]
        self.small[:, node] = small[:, 0]
        at = np.asarray([node])
        self.frag[node] = self._frag(state, at, state.gpu_free[at], holds, small, state.cpu[at])[0]

    def _frag(
        self, state: PackState, nodes: IntArray, total: IntArray, holds: IntArray, small: IntArray, cpu: IntArray
    ) -> FloatArray:
        model = state.nodes.model[nodes]
        return self.workload.fragmentation(total=total, holds=holds, small=small, cpu=cpu, model=model)

    def options(self, state: PackState, req: Request, feasible: BoolArray) -> Options:
        """Every distinct placement of ``req`` and the fragmentation growth it causes."""
        mg = self.workload.milli[:, None]
        if req.shared:
            nodes, f = shared_options(state, req, feasible)
            after = f - req.milli
            holds = self.holds[:, nodes] - (f >= mg) + (after >= mg)
            small = self.small[:, nodes] - np.where(f < mg, f, 0) + np.where(after < mg, after, 0)
            free: IntArray | None = f
        else:
            nodes = np.flatnonzero(feasible)
            # Whole free GPUs hold every shape, so taking k of them lowers every GPU group's count by k.
            holds = self.holds[:, nodes] - req.gpus * (mg > 0)
            small = self.small[:, nodes]
            free = None
        total = state.gpu_free[nodes] - req.demand
        new = self._frag(state, nodes, total, holds, small, state.cpu[nodes] - req.cpu)
        return Options(nodes=nodes, free=free, delta=new - self.frag[nodes])

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        opt = self.options(state, req, feasible)
        score = np.floor(100.0 / (1.0 + np.exp(opt.delta / MILLI)))
        top = score == score.max()
        nodes = np.unique(opt.nodes[top])
        node = int(nodes[0] if len(nodes) == 1 else nodes[int(rng.integers(len(nodes)))])
        return node, self._gpus(state, req, node, opt, top)

    @staticmethod
    def _gpus(state: PackState, req: Request, node: int, opt: Options, top: BoolArray) -> tuple[int, ...]:
        if opt.free is None:
            return state.whole_gpus(node, req.gpus)
        amounts = opt.free[top & (opt.nodes == node)]
        return (int(np.flatnonzero(np.isin(state.free[node], amounts))[0]),)
