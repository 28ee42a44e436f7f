"""Fragmentation Gradient Descent (Weng et al., ATC'23) as its authors' simulator scores it (``fgd`` placer).

The fragmentation of a node for one pod type (``utils.NodeGpuShareFragAmount``, ``GetNodePodFrag``) is all
of its free milli-GPU when the type cannot run there (no GPU model access, too few GPUs that hold it, CPU
lacking), and for a pod type that asks for no GPU always (its cases XL and XR both count, only Q3 is
excluded); else the free milli on GPUs with less free than the type asks per GPU. A node's fragmentation is
the frequency-weighted sum over the *typical* pod types (``GetTypicalPods``: types of (CPU, milli per
GPU, GPUs, model), CPU-only ones included as the run scripts' ``isInvolvedCpuPods: true`` has it;
:data:`TYPICAL_SHARE`: the popularity cut).

Score (``fgd_score.go``): ``int(100 * sigmoid(-delta / 1000))`` for the growth ``delta`` in milli-GPU; the top
score wins, ties at random; a shared pod takes the first GPU with the node's top score.

Types sharing a GPU shape (GPUs, milli per GPU, models) differ only in CPU, so they are merged into one group
whose weight is a step function of the node's free CPU. Per node and group we cache the GPUs that hold the
shape and the free milli on GPUs too small for it; a hypothetical placement is a cheap correction of that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.share_view import BoolArray, FloatArray, IntArray, ShareView
from rackscale.scheduler.placement.sharing_baselines import Choice, ScoringPlacer

# (CPU milli, memory MiB, GPUs, milli per GPU: 1000 whole / less shared / 0 none, allowed models or None)
PodType = tuple[int, int, int, int, frozenset[str] | None]
Workload = Mapping[PodType, float]  # pod type -> how many pods of it (or any weight)
# The authors' runs cut the typical pods at 95 % of the pods; on openb_pod_list_default that keeps 35 of 91
# types, drops the rare 8-GPU and big-CPU ones and costs FGD 5 points at 100 % (89.6 vs 94.9, seed 42), far
# below the published 95.23, so the cut as we read it cannot be what produced the paper's table: keep all.
TYPICAL_SHARE = 1.0


def pod_type(unit: Resources) -> PodType:
    if unit.is_fractional:
        return (unit.cpu_milli, unit.memory_mib, 1, unit.gpu_milli, unit.gpu_models)
    return (unit.cpu_milli, unit.memory_mib, unit.gpus, MILLI_PER_GPU if unit.gpus else 0, unit.gpu_models)


def typical(
    workload: Workload, share: float = TYPICAL_SHARE
) -> dict[tuple[int, int, int, frozenset[str] | None], float]:
    """The authors' typical pods: types keyed without memory, most frequent first until ``share`` of all."""
    counts: dict[tuple[int, int, int, frozenset[str] | None], float] = {}
    for (cpu, _, k, m, models), n in workload.items():
        key = (cpu, k, m, models)
        counts[key] = counts.get(key, 0.0) + n
    total = sum(counts.values())
    order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][:3], sorted(kv[0][3] or ())))
    out: dict[tuple[int, int, int, frozenset[str] | None], float] = {}
    covered = 0.0
    for key, n in order:
        if covered >= share * total:
            break
        out[key] = n
        covered += n
    return {key: n / covered for key, n in out.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetWorkload:
    """The typical pod types, merged into GPU-shape groups with a CPU step function as weight."""

    gpus: IntArray  # (G,) GPUs per pod of the group
    milli: IntArray  # (G,) milli per GPU (0 for CPU-only)
    accessible: BoolArray  # (G, models): may the group ever be satisfied on a node of this model
    cpu_levels: IntArray  # (L,) the distinct CPU requests, ascending
    weight: FloatArray  # (G, L+1): frequency of the group's types asking at most cpu_levels[j-1] CPU

    @classmethod
    def of(cls, workload: Workload, *, models: tuple[str, ...]) -> TargetWorkload:
        types = typical(workload)
        shapes: list[tuple[int, int, tuple[str, ...]]] = sorted(
            {(k, m, tuple(sorted(s)) if s else ()) for _, k, m, s in types}
        )
        index = {shape: g for g, shape in enumerate(shapes)}
        levels = np.asarray(sorted({c for c, _, _, _ in types}), dtype=np.int64)
        density = np.zeros((len(shapes), len(levels) + 1))
        for (c, k, m, s), f in types.items():
            density[index[(k, m, tuple(sorted(s)) if s else ())], int(np.searchsorted(levels, c)) + 1] += f
        accessible = np.ones((len(shapes), len(models)), dtype=np.bool_)
        for g, (k, _, spec) in enumerate(shapes):
            if k == 0:
                accessible[g] = False  # a CPU-only type counts all free GPU as fragment (XL / XR)
            elif spec:
                accessible[g] = [m in spec for m in models]
        return cls(
            gpus=np.asarray([k for k, _, _ in shapes], dtype=np.int64),
            milli=np.asarray([m for _, m, _ in shapes], dtype=np.int64),
            accessible=accessible,
            cpu_levels=levels,
            weight=np.cumsum(density, axis=1),
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
        frag: FloatArray = total * self.weight[:, -1].sum() - (w * served * (total - small)).sum(axis=0)
        return frag


def shared_options(view: ShareView, milli: int, cand: IntArray) -> tuple[IntArray, IntArray]:
    """Where a shared pod can go: one (node, free milli of the GPU) pair per distinct free amount that fits on
    each candidate node. GPUs of a node with equal free are interchangeable, so scoring one of them suffices."""
    sf = view.sorted_free[cand]
    ok = sf >= milli
    ok[:, 1:] &= sf[:, 1:] != sf[:, :-1]
    r, c = np.nonzero(ok)
    return cand[r], sf[r, c]


class FGD(ScoringPlacer):
    """The authors' FGD. Without :meth:`set_workload` the target workload is every request seen so far."""

    name = "fgd"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._given: Workload | None = None
        self._seen: dict[PodType, float] = {}
        self._built_at = -1.0
        self.workload: TargetWorkload | None = None
        self.holds: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.small: IntArray = np.zeros((0, 0), dtype=np.int64)
        self.frag: FloatArray = np.zeros(0)

    def set_workload(self, workload: Workload) -> None:
        """Measure fragmentation against this pod-type mix (the trace's, as in the paper)."""
        self._given = dict(workload)
        self.workload = None

    def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
        if self._given is None:  # learn the mix online: every 10 % more requests rebuild the model
            t = pod_type(req.unit)
            self._seen[t] = self._seen.get(t, 0.0) + 1.0
            seen = sum(self._seen.values())
            if self.workload is None or seen >= 1.1 * self._built_at:
                self.workload, self._built_at = None, seen
        return super().place(state, req)

    def refresh(self, changed: IntArray | None) -> None:
        v = self.view
        if self.workload is None:
            self.workload = TargetWorkload.of(self._given or self._seen, models=v.models)
            changed = None
        if changed is None:
            self.holds, self.small = self.workload.stats(v.free)
            every = np.arange(v.count)
            self.frag = self._frag(every, v.gpu_free, self.holds, self.small, v.cpu)
        elif len(changed):
            holds, small = self.workload.stats(v.free[changed])
            self.holds[:, changed], self.small[:, changed] = holds, small
            self.frag[changed] = self._frag(changed, v.gpu_free[changed], holds, small, v.cpu[changed])

    def _frag(self, nodes: IntArray, total: IntArray, holds: IntArray, small: IntArray, cpu: IntArray) -> FloatArray:
        assert self.workload is not None
        return self.workload.fragmentation(total=total, holds=holds, small=small, cpu=cpu, model=self.view.model[nodes])

    def growth(self, unit: Resources, cand: IntArray) -> tuple[IntArray, IntArray | None, FloatArray]:
        """Every distinct placement of ``unit`` on ``cand`` and the fragmentation growth it causes."""
        assert self.workload is not None
        v = self.view
        mg = self.workload.milli[:, None]
        free: IntArray | None = None
        if unit.is_fractional:
            nodes, f = shared_options(v, unit.gpu_milli, cand)
            after = f - unit.gpu_milli
            holds = self.holds[:, nodes] - (f >= mg) + (after >= mg)
            small = self.small[:, nodes] - np.where(f < mg, f, 0) + np.where(after < mg, after, 0)
            free = f
        else:
            nodes = cand
            # Whole free GPUs hold every shape, so taking k of them lowers every GPU group's count by k.
            holds = self.holds[:, nodes] - unit.gpus * (mg > 0)
            small = self.small[:, nodes]
        total = v.gpu_free[nodes] - unit.gpu_demand_milli
        new = self._frag(nodes, total, holds, small, v.cpu[nodes] - unit.cpu_milli)
        return nodes, free, new - self.frag[nodes]

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        nodes, free, delta = self.growth(unit, cand)
        score = np.floor(100.0 / (1.0 + np.exp(delta / MILLI_PER_GPU))).astype(np.int64)
        top = score == score.max()
        best = np.unique(nodes[top])
        n = int(best[0] if len(best) == 1 else best[int(self.rng.integers(len(best)))])
        if free is None:
            return n, self.view.default_gpus(n, unit)
        amounts = free[top & (nodes == n)]
        return n, (int(np.flatnonzero(np.isin(self.view.free[n], amounts))[0]),)
