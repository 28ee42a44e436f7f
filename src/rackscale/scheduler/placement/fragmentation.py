"""rackscale's placement of GPU-sharing workloads: FGD with a fragmentation measure that counts how much of
a node's free GPU a pod type can *really* use, given the node's free CPU. :class:`TopologyPack` hands it
shared-GPU units, and, once the workload shares GPUs, the one-node units without a topology preference.

FGD (Weng et al., ATC'23) calls a node's free GPU usable by a pod type as soon as one pod of the type fits.
When CPU is the scarce second resource (on the Alibaba openb trace arrived CPU demand passes capacity before
GPU demand does) FGD strands GPUs on nodes whose CPU runs out first. Here a type ``t`` that fits ``gpu_pods``
times by GPU but only ``cpu_pods = floor(cpu_free / cpu_t)`` times by CPU finds only the share
``min(1, cpu_pods / gpu_pods)`` of the node's usable GPU really usable; the rest is fragmentation. So nodes
rich in CPU per free GPU attract CPU-heavy pods, and CPU-lean nodes are kept for CPU-lean pods.

Two further changes from FGD:

- Types are weighted by popularity x scarcity (cluster GPUs / GPUs on nodes that could ever host the type),
  so a rare type only a few nodes can host (8-GPU pods asking for 120 cores) still protects those nodes.
- The growth is compared exactly (no integer sigmoid score); equal growth goes to the node left with the
  smallest share of free GPU (best fit), then the lowest node index: deterministic, no random draw.

The pod-type mix is the one given by :meth:`FragmentAware.set_workload` (a trace replayed as a whole), else
the last :data:`WINDOW` distinct jobs the placer was asked about.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources
from rackscale.scheduler.placement.fgd import PodType, Workload, pod_type, shared_options
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.share_view import BoolArray, FloatArray, IntArray, ShareView
from rackscale.scheduler.placement.sharing_baselines import Choice, ScoringPlacer

TIE = 1e-6  # milli-GPU: growths closer than this are equal (they differ by float rounding only)
MANY = 1_000_000  # pods of a type that ask for no CPU: never the binding count
WINDOW = 4096  # distinct jobs the online pod-type mix remembers
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
    def of(cls, workload: Workload, *, view: ShareView) -> PodTypes:
        merged: dict[tuple[int, int, int, tuple[str, ...]], float] = {}
        total_gpus = int(view.gpus.sum())
        for (cpu, mem, k, m, models), n in workload.items():
            spec = tuple(sorted(models)) if models else ()
            # Scarcity: how much of the cluster could host this type at all (idle nodes, every constraint).
            able = (view.cpu_cap >= cpu) & (view.mem_cap >= mem) & (view.gpus >= k)
            if k and spec:
                able &= view.model_mask(spec)
            reach = int(view.gpus[able].sum())
            key = (cpu, k, m, spec)
            merged[key] = merged.get(key, 0.0) + (n * total_gpus / reach if reach else 0.0)
        types = sorted(t for t, w in merged.items() if w > 0) or [(0, 0, 0, ())]
        shapes = sorted({(k, m, s) for _, k, m, s in types})
        index = {sh: i for i, sh in enumerate(shapes)}
        weight = np.asarray([merged.get(t, 1.0) for t in types], dtype=np.float64)
        accessible = np.ones((len(shapes), len(view.models)), dtype=np.bool_)
        for i, (k, _, s) in enumerate(shapes):
            if k > 0 and s:
                accessible[i] = [m in s for m in view.models]
        return cls(
            cpu=np.asarray([c for c, _, _, _ in types], dtype=np.int64),
            shape=np.asarray([index[(k, m, s)] for _, k, m, s in types], dtype=np.int64),
            weight=weight / weight.sum(),
            gpus=np.asarray([k for k, _, _ in shapes], dtype=np.int64),
            milli=np.asarray([m for _, m, _ in shapes], dtype=np.int64),
            accessible=accessible,
        )


class FragmentAware(ScoringPlacer):
    """Capacity-aware fragmentation gradient descent (see the module docstring)."""

    name = "fragment-aware"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._given: Workload | None = None
        self._jobs: OrderedDict[str, PodType] = OrderedDict()  # the online window, oldest first
        self._seen: dict[PodType, float] = {}
        self._built_at = 0
        self._sharing = 0  # jobs (or, for a given mix, types) that ask for a shared GPU
        self.types: PodTypes | None = None

    # ------------------------------------------------------------------ the pod-type mix
    def set_workload(self, workload: Workload) -> None:
        """Measure fragmentation against this pod-type mix (e.g. a whole trace) instead of learning it."""
        self._given = dict(workload)
        self._sharing = sum(1 for (_, _, _, m, _) in workload if 0 < m < MILLI_PER_GPU)
        self.types = None

    def observe(self, req: GroupRequest) -> None:
        """Count the job's unit once in the online mix (the scheduler asks again for a job that waits)."""
        if self._given is not None or req.job in self._jobs:
            return
        t = pod_type(req.unit)
        self._jobs[req.job] = t
        self._seen[t] = self._seen.get(t, 0.0) + 1.0
        self._sharing += _shared(t)
        if len(self._jobs) > WINDOW:
            _, old = self._jobs.popitem(last=False)
            self._seen[old] -= 1.0
            self._sharing -= _shared(old)
            if not self._seen[old]:
                del self._seen[old]
        # Rebuild the model when the mix has moved enough (a new type, or 10 % more jobs since the last one).
        if self._seen[t] == 1.0 or len(self._jobs) >= 1.1 * self._built_at:
            self.types = None

    @property
    def shares_gpus(self) -> bool:
        """Does the workload ask for shared GPUs at all? (Only then whole-GPU pods come here too.)"""
        return self._sharing > 0

    def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
        self.observe(req)
        return super().place(state, req)

    # ------------------------------------------------------------------ per-node caches
    def refresh(self, changed: IntArray | None) -> None:
        v = self.view
        if self.types is None:
            self.types = PodTypes.of(self._given if self._given is not None else self._seen, view=v)
            self._built_at = len(self._jobs)
            t = self.types
            self._shared = ((t.gpus == 1) & (t.milli > 0) & (t.milli < MILLI_PER_GPU))[:, None]
            self._whole = ((t.gpus > 0) & ~self._shared[:, 0])[:, None]
            self._unit = np.maximum(t.milli[:, None], 1)  # divisor for "pods of the shape per GPU"
            self._cpu_div = np.maximum(t.cpu, 1)[:, None]
            self._cpu_free = (t.cpu == 0)[:, None]
            changed = None
        if changed is None:
            self.holds, self.small, self.slots = self._stats(v.free)
            every = np.arange(v.count)
            self.frag = self._fragmentation(every, v.gpu_free, self.holds, self.small, self.slots, v.cpu)
        elif len(changed):
            holds, small, slots = self._stats(v.free[changed])
            self.holds[:, changed], self.small[:, changed], self.slots[:, changed] = holds, small, slots
            self.frag[changed] = self._fragmentation(changed, v.gpu_free[changed], holds, small, slots, v.cpu[changed])

    def _stats(self, free: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        assert self.types is not None
        ms = self.types.milli[:, None, None]
        fits = free[None, :, :] >= ms
        slots = (free[None, :, :] // self._unit[:, :, None]).sum(axis=2)
        return fits.sum(axis=2), np.where(fits, 0, free[None, :, :]).sum(axis=2), slots

    def _fragmentation(
        self, nodes: IntArray, total: IntArray, holds: IntArray, small: IntArray, slots: IntArray, cpu: IntArray
    ) -> FloatArray:
        """Expected free milli-GPU that the weighted pod types cannot use, per candidate (columns)."""
        t = self.types
        assert t is not None
        served = (holds >= t.gpus[:, None]) & t.accessible[:, self.view.model[nodes]]
        usable = np.where(served, total - small, 0)  # (S, P): FGD's non-fragmented milli
        # Pods of each shape the GPUs can take: shared shapes count slots, whole shapes whole-GPU groups.
        gpu_pods = np.where(self._shared, slots, np.where(self._whole, holds // np.maximum(t.gpus, 1)[:, None], 1))
        cpu_pods = np.where(self._cpu_free, MANY, cpu[None, :] // self._cpu_div)
        share = np.minimum(1.0, cpu_pods / np.maximum(gpu_pods[t.shape], 1))
        frag: FloatArray = total - (t.weight[:, None] * usable[t.shape] * share).sum(axis=0)
        return frag

    # ------------------------------------------------------------------ the choice
    def growth(self, unit_gpus: int, milli: int, cpu: int, demand: int, cand: IntArray) -> Scored:
        """Candidate placements, the free milli of the GPU a shared pod would take there, and the growth."""
        assert self.types is not None
        v = self.view
        ms = self.types.milli[:, None]
        free: IntArray | None = None
        if 0 < milli < MILLI_PER_GPU:
            nodes, f = shared_options(v, milli, cand)
            after = f - milli
            holds = self.holds[:, nodes] - (f >= ms) + (after >= ms)
            small = self.small[:, nodes] - np.where(f < ms, f, 0) + np.where(after < ms, after, 0)
            slots = self.slots[:, nodes] - f // self._unit + after // self._unit
            free = f
        else:
            nodes = cand
            # Whole free GPUs hold every shape: taking k of them lowers each count by k (slots by k x per-GPU).
            holds = self.holds[:, nodes] - unit_gpus * (ms > 0)
            small = self.small[:, nodes]
            slots = self.slots[:, nodes] - unit_gpus * (MILLI_PER_GPU // self._unit) * (ms > 0)
        total = v.gpu_free[nodes] - demand
        new = self._fragmentation(nodes, total, holds, small, slots, v.cpu[nodes] - cpu)
        return nodes, free, new - self.frag[nodes]

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        v = self.view
        nodes, free, delta = self.growth(unit.gpus, unit.gpu_milli, unit.cpu_milli, unit.gpu_demand_milli, cand)
        tied = np.flatnonzero(delta <= delta.min() + TIE)
        left = (v.gpu_free[nodes[tied]] - unit.gpu_demand_milli) / np.maximum(v.gpu_cap[nodes[tied]], 1)
        j = int(tied[np.lexsort((nodes[tied], left))[0]])
        n = int(nodes[j])
        if free is None:
            return n, v.whole_gpus(n, unit.gpus) if unit.gpus else ()
        return n, (int(np.flatnonzero(v.free[n] == int(free[j]))[0]),)


def _shared(t: PodType) -> int:
    return 1 if 0 < t[3] < MILLI_PER_GPU else 0
