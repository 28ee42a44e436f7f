"""rackscale's packing policy: FGD with a fragmentation measure that counts how much of a node's free GPU a
pod type can *really* use, given the node's free CPU.

FGD (Weng et al., ATC'23) calls a node's free GPU usable by a pod type as soon as one pod of the type fits.
On this trace CPU is the scarce second resource (arrived CPU demand passes cluster capacity before GPU
demand does), and FGD strands GPUs on nodes whose CPU runs out first. Here a type ``t`` that fits
``gpu_pods`` times by GPU but only ``cpu_pods = floor(cpu_free / cpu_t)`` times by CPU finds only the share
``min(1, cpu_pods / gpu_pods)`` of the node's usable GPU really usable; the rest is fragmentation. So nodes
rich in CPU per free GPU attract CPU-heavy pods, and CPU-lean nodes are kept for CPU-lean pods.

Two further changes from FGD:

- Types are weighted by popularity x scarcity (cluster GPUs / GPUs on nodes that could ever host the type),
  so a rare type only a few nodes can host (8-GPU pods asking for 120 cores fit only the G3 nodes) still
  protects those nodes.
- The fragmentation growth is compared exactly (no integer sigmoid score); equal growth goes to the node left
  with the smallest share of free GPU (best fit), then the lowest node index: deterministic, no RNG.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from rackscale.pack.fgd import shared_options
from rackscale.pack.policies import Choice
from rackscale.pack.state import PackState, Request
from rackscale.pack.trace import MILLI, BoolArray, FloatArray, IntArray, Nodes, Pods

TIE = 1e-6  # milli-GPU: growths closer than this are equal (they differ by float rounding only)
MANY = 1_000_000  # pods of a type that ask for no CPU: never the binding count
Scored = tuple[IntArray, IntArray | None, FloatArray]  # candidate nodes, free milli of the GPU taken, growth


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTypes:
    """Pod types (distinct CPU x GPU shape x allowed models) and their GPU shapes."""

    cpu: IntArray  # (T,) CPU per pod
    shape: IntArray  # (T,) index of the type's GPU shape
    weight: FloatArray  # (T,) popularity x scarcity, summing to 1
    gpus: IntArray  # (S,) GPUs per pod of the shape
    milli: IntArray  # (S,) milli per GPU (1000 whole, less shared, 0 CPU-only)
    accessible: BoolArray  # (S, models)

    @classmethod
    def of(cls, *, pods: Pods, nodes: Nodes) -> PodTypes:
        columns = (pods.cpu_milli.tolist(), pods.memory_mib.tolist(), pods.num_gpu.tolist(), pods.gpu_milli.tolist())
        counts = Counter(zip(*columns, pods.spec, strict=True))
        merged: dict[tuple[int, int, int, str], float] = {}
        total_gpus = nodes.total_gpus
        for (cpu, mem, k, m, spec), n in counts.items():
            # Scarcity: how much of the cluster could host this type at all (idle nodes, every constraint).
            able = nodes.model_mask(spec) & (nodes.cpu_milli >= cpu) & (nodes.memory_mib >= mem) & (nodes.gpus >= k)
            reach = int(nodes.gpus[able].sum())
            key = (cpu, k, m, spec)
            merged[key] = merged.get(key, 0.0) + (n * total_gpus / reach if reach else 0.0)
        types = sorted(t for t, w in merged.items() if w > 0)
        shapes = sorted({(k, m, s) for _, k, m, s in types})
        index = {sh: i for i, sh in enumerate(shapes)}
        weight = np.asarray([merged[t] for t in types], dtype=np.float64)
        accessible = np.ones((len(shapes), len(nodes.models)), dtype=np.bool_)
        for i, (k, _, s) in enumerate(shapes):
            if k > 0 and s:
                accessible[i] = [m in s.split("|") for m in nodes.models]
        return cls(
            cpu=np.asarray([c for c, _, _, _ in types], dtype=np.int64),
            shape=np.asarray([index[(k, m, s)] for _, k, m, s in types], dtype=np.int64),
            weight=weight / weight.sum(),
            gpus=np.asarray([k for k, _, _ in shapes], dtype=np.int64),
            milli=np.asarray([m for _, m, _ in shapes], dtype=np.int64),
            accessible=accessible,
        )


class RackscalePolicy:
    """Capacity-aware fragmentation gradient descent (see the module docstring)."""

    name = "rackscale"

    def __init__(self, *, types: PodTypes) -> None:
        self.types = types
        ms = types.milli[:, None]
        self._shared = ((types.gpus == 1) & (types.milli > 0) & (types.milli < MILLI))[:, None]
        self._whole = ((types.gpus > 0) & ~self._shared[:, 0])[:, None]
        self._unit = np.maximum(ms, 1)  # divisor for "pods of the shape per GPU" (CPU-only shapes: unused)
        self._cpu_div = np.maximum(types.cpu, 1)[:, None]
        self._cpu_free = (types.cpu == 0)[:, None]
        # Cached per shape and node: GPUs holding the shape, free milli on smaller GPUs, shared pods that fit.
        self.holds: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.small: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.slots: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.frag: FloatArray = np.zeros(0)

    def _stats(self, free: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        ms = self.types.milli[:, None, None]
        fits = free[None, :, :] >= ms
        slots = (free[None, :, :] // self._unit[:, :, None]).sum(axis=2)
        return fits.sum(axis=2), np.where(fits, 0, free[None, :, :]).sum(axis=2), slots

    def reset(self, state: PackState) -> None:
        self.holds, self.small, self.slots = self._stats(state.free)
        everyone = np.arange(state.nodes.count)
        self.frag = self._fragmentation(state, everyone, state.gpu_free, self.holds, self.small, self.slots, state.cpu)

    def update(self, state: PackState, node: int) -> None:
        holds, small, slots = self._stats(state.free[node : node + 1])
        self.holds[:, node], self.small[:, node], self.slots[:, node] = holds[:, 0], small[:, 0], slots[:, 0]
        at = np.asarray([node])
        self.frag[node] = self._fragmentation(state, at, state.gpu_free[at], holds, small, slots, state.cpu[at])[0]

    def _fragmentation(
        self,
        state: PackState,
        nodes: IntArray,
        total: IntArray,
        holds: IntArray,
        small: IntArray,
        slots: IntArray,
        cpu: IntArray,
    ) -> FloatArray:
        """Expected free milli-GPU that the weighted pod types cannot use, per candidate (columns)."""
        t = self.types
        served = (holds >= t.gpus[:, None]) & t.accessible[:, state.nodes.model[nodes]]
        usable = np.where(served, total - small, 0)  # (S, P): FGD's non-fragmented milli
        # Pods of each shape the GPUs can take: shared shapes count slots, whole shapes whole-GPU groups.
        gpu_pods = np.where(self._shared, slots, np.where(self._whole, holds // np.maximum(t.gpus, 1)[:, None], 1))
        cpu_pods = np.where(self._cpu_free, MANY, cpu[None, :] // self._cpu_div)
        share = np.minimum(1.0, cpu_pods / np.maximum(gpu_pods[t.shape], 1))
        frag: FloatArray = total - (t.weight[:, None] * usable[t.shape] * share).sum(axis=0)
        return frag

    def options(self, state: PackState, req: Request, feasible: BoolArray) -> Scored:
        """Candidate nodes, the free milli of the GPU a shared pod would take there, and the growth."""
        ms = self.types.milli[:, None]
        if req.shared:
            nodes, f = shared_options(state, req, feasible)
            after = f - req.milli
            holds = self.holds[:, nodes] - (f >= ms) + (after >= ms)
            small = self.small[:, nodes] - np.where(f < ms, f, 0) + np.where(after < ms, after, 0)
            slots = self.slots[:, nodes] - f // self._unit + after // self._unit
            free: IntArray | None = f
        else:
            nodes = np.flatnonzero(feasible)
            # Whole free GPUs hold every shape: taking k of them lowers each count by k (slots by k x per-GPU).
            holds = self.holds[:, nodes] - req.gpus * (ms > 0)
            small = self.small[:, nodes]
            slots = self.slots[:, nodes] - req.gpus * (MILLI // self._unit) * (ms > 0)
            free = None
        total = state.gpu_free[nodes] - req.demand
        new = self._fragmentation(state, nodes, total, holds, small, slots, state.cpu[nodes] - req.cpu)
        return nodes, free, new - self.frag[nodes]

    def choose(self, state: PackState, req: Request, feasible: BoolArray, rng: np.random.Generator) -> Choice:
        nodes, free, delta = self.options(state, req, feasible)
        tied = np.flatnonzero(delta <= delta.min() + TIE)
        left = (state.gpu_free[nodes[tied]] - req.demand) / np.maximum(state.gpu_cap[nodes[tied]], 1)
        j = int(tied[np.lexsort((nodes[tied], left))[0]])
        node = int(nodes[j])
        if free is None:
            return node, state.whole_gpus(node, req.gpus)
        return node, (state.gpu_with_free(node, int(free[j])),)
