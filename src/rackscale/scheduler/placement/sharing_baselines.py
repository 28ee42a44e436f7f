"""The baselines of the FGD paper (Weng et al., ATC'23) as placers, scored as the authors' simulator does.

github.com/hkust-adsl/kubernetes-scheduler-simulator, ``pkg/simulator/plugin/``: each policy is one
Kubernetes score plugin (weight 1000, no other scorer), its score an integer 0..100 per feasible node; the
framework takes the top score and breaks ties uniformly at random. Inside the node, a shared pod takes the
GPU the plugin names, else the tightest GPU that fits; whole-GPU pods take the first whole free GPUs
(``AllocateExclusiveGpuId``). Resources are normalised by the authors' ``MaxSpecCpu`` (128 cores) and
``MaxSpecGpu`` (8 GPUs), not by the node's capacity. See docs/pack.md for each one's deviations.

Each placer puts the units of a group one after the other (a pod each); a group that must stay in one rack
keeps to the first unit's rack.
"""

from __future__ import annotations

import numpy as np

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.share_view import IntArray, ShareView, alloc, kind_of

MAX_CPU = 128_000  # gpushareutils.MaxSpecCpu
MAX_GPU = 8_000  # gpushareutils.MaxSpecGpu
Choice = tuple[int, tuple[int, ...]]


class ScoringPlacer:
    """Score every feasible node for one unit, take the best (random among equal scores)."""

    name = "?"

    def __init__(self, seed: int = 0) -> None:
        self.view = ShareView()
        self.rng = np.random.default_rng(seed)

    def refresh(self, changed: IntArray | None) -> None:
        """The view re-read ``changed`` nodes (``None``: all); placers with per-node caches update them."""

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        """Node (one of ``cand``, never empty) and GPUs for one unit."""
        raise NotImplementedError

    def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
        view = self.view
        self.refresh(view.sync(state))
        mask = view.allowed(req)
        out: list[NodeAlloc] = []
        touched: list[int] = []
        try:
            for i in range(req.units):
                cand = np.flatnonzero(mask & view.fits(req.unit))
                if not len(cand):
                    return None
                n, gpus = self.choose(req.unit, cand)
                out.append(alloc(n, gpus, req.unit))
                if i + 1 < req.units:  # the next unit sees this one (restored below)
                    view.take(n, gpus, req.unit)
                    touched.append(n)
                    self.refresh(np.asarray([n], dtype=np.int64))
                    if req.one_rack:
                        mask &= view.rack == view.rack[n]
            return out
        finally:
            if touched:
                view.invalidate(touched)

    def pick_top(self, cand: IntArray, score: IntArray) -> int:
        """The candidate with the top score, uniformly at random among equals (``selectHost``)."""
        best = np.flatnonzero(score == score.max())
        return int(cand[best[0] if len(best) == 1 else best[int(self.rng.integers(len(best)))]])


class ShareRandom(ScoringPlacer):
    """``RandomScore``: one feasible node drawn at random gets 100, the others 0."""

    name = "share-random"

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        n = int(cand[int(self.rng.integers(len(cand)))])
        return n, self.view.default_gpus(n, unit)


class DotProd(ScoringPlacer):
    """``DotProductScore`` with ``dimExtMethod: share, normMethod: max`` (the authors' run scripts).

    A node offers one vector per way it could hold the pod: (CPU left, milli left) of each partly used GPU
    that fits a shared pod, and (CPU left, its whole free GPUs) if those hold the pod. The score is
    ``int(100 * (1 - dot / 2))`` of the best vector, both vectors over (128 cores, 8 GPUs): the *smallest*
    alignment wins, i.e. the node with least left (the opposite of Tetris). A pod that asks for no GPU is
    scored the same way, so it packs onto nodes with little CPU left."""

    name = "dot-prod"

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        v = self.view
        demand = unit.gpu_demand_milli
        cpu_term = (v.cpu[cand] / MAX_CPU) * (unit.cpu_milli / MAX_CPU)
        per_gpu = np.full((len(cand), v.free.shape[1]), np.inf)
        if demand < MILLI_PER_GPU:
            # Partly used GPUs that hold the pod (a CPU-only pod "fits" every partly used GPU, as there).
            rows = v.free[cand]
            on = (rows < MILLI_PER_GPU) & (rows >= demand) & (np.arange(rows.shape[1]) < v.gpus[cand, None])
            per_gpu = np.where(on, cpu_term[:, None] + (rows / MAX_GPU) * (demand / MAX_GPU), np.inf)
        idle = v.whole[cand] * MILLI_PER_GPU
        exclusive = np.where(idle >= demand, cpu_term + (idle / MAX_GPU) * (demand / MAX_GPU), np.inf)
        dots = np.concatenate([per_gpu, exclusive[:, None]], axis=1)
        best = dots.min(axis=1)
        score = np.where(np.isfinite(best), (100.0 * (1.0 - best / 2.0)).astype(np.int64), 0)
        n = self.pick_top(cand, score)
        j = int(np.flatnonzero(cand == n)[0])
        k = int(np.argmin(dots[j]))  # the first vector with the best score names the GPU
        if unit.is_fractional and k < per_gpu.shape[1]:
            return n, (k,)
        return n, v.default_gpus(n, unit)


class GpuClustering(ScoringPlacer):
    """``GpuClusteringScore``: 25 x (8 GPUs - the node's free GPU) / 8 GPUs, plus 75 if the node runs only
    pods of the same GPU shape, 50 if also others, 25 if it runs no GPU pod, 0 if only other shapes. A pod
    that asks for no GPU scores 0 everywhere (a random node)."""

    name = "gpu-clustering"

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        v = self.view
        if not unit.gpu_demand_milli:
            n = int(cand[int(self.rng.integers(len(cand)))])
            return n, ()
        kind = kind_of(unit)
        tier = np.empty(len(cand), dtype=np.int64)
        for i, n in enumerate(cand.tolist()):
            shapes = [k for k, c in v.kinds[n].items() if c and k != (0, 0)]  # CPU-only pods carry no affinity
            if kind in shapes:
                tier[i] = 75 if len(shapes) == 1 else 50
            else:
                tier[i] = 25 if not shapes else 0
        score = 25 * (MAX_GPU - v.gpu_free[cand]) // MAX_GPU + tier
        n = self.pick_top(cand, score)
        return n, v.default_gpus(n, unit)


class GpuPacking(ScoringPlacer):
    """``GpuPackingScore``: a pod that fits on partly used GPUs only scores 100 - (their free %)/10 (>= 50);
    one that needs whole GPUs of a node in use 50 - their count (>= 33); on an idle node
    ``max(33 - GPUs, GPUs)``. GPUs are taken tightest first. A pod that asks for no GPU scores 0 everywhere."""

    name = "gpu-packing"

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        v = self.view
        if not unit.gpu_demand_milli:
            n = int(cand[int(self.rng.integers(len(cand)))])
            return n, ()
        whole = v.whole[cand]
        idle = whole == v.gpus[cand]
        if unit.is_fractional:
            rows = v.free[cand]
            tight = np.where(rows >= unit.gpu_milli, rows, MILLI_PER_GPU + 1).min(axis=1)
            shared = tight < MILLI_PER_GPU
            used = np.where(shared, np.maximum(100 - (tight * 100 // MILLI_PER_GPU) // 10, 50), 49)
        else:
            used = np.full(len(cand), max(50 - unit.gpus, 33), dtype=np.int64)
        score = np.where(idle, np.maximum(33 - whole, whole), used)
        n = self.pick_top(cand, score)
        return n, v.default_gpus(n, unit)


class ShareBestFit(ScoringPlacer):
    """``BestFitScore``: ``int(100 x (1 - (CPU left / 128 cores + GPU left / 8 GPUs) / 2))`` after placing,
    then min-max normalised over the feasible nodes (which keeps the same ties)."""

    name = "share-best-fit"

    def choose(self, unit: Resources, cand: IntArray) -> Choice:
        v = self.view
        left = (
            0.5 * (v.cpu[cand] - unit.cpu_milli) / MAX_CPU + 0.5 * (v.gpu_free[cand] - unit.gpu_demand_milli) / MAX_GPU
        )
        score = ((1.0 - left) * 100.0).astype(np.int64)
        n = self.pick_top(cand, score)
        return n, v.default_gpus(n, unit)
