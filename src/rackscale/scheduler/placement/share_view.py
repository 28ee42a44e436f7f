"""A numpy mirror of :class:`ClusterState` for placers that score every node at once (GPU sharing).

Kubernetes-style scorers (FGD and the baselines of its paper) rate each feasible node for one pod. Over the
state's Python lists that is a loop per node and GPU; here the free milli-GPU of every GPU is an
``(nodes, max GPUs)`` array, so a score is a handful of vector operations. The mirror is kept in sync
through ``ClusterState.node_version``: each call re-reads only the nodes whose version moved (one or two per
placement), never the whole cluster. GPUs a node lacks, failed GPUs and down nodes read as 0 free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.model.workload import Resources
from rackscale.scheduler.placement.request import GroupRequest

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]
Kind = tuple[int, int]  # (whole GPUs, 1 if shared): the GPU affinity tag GpuClustering groups pods by


def kind_of(unit: Resources) -> Kind:
    return (0, 1) if unit.is_fractional else (unit.gpus, 0)  # every shared size is one tag ("share-gpu")


class ShareView:
    """Free resources of every node and GPU as arrays; :meth:`sync` brings them up to date."""

    def __init__(self) -> None:
        self._of: StateView | None = None  # the state mirrored (held, so its identity cannot be reused)
        self.version: IntArray = np.zeros(0, dtype=np.int64)

    def sync(self, state: StateView) -> IntArray | None:
        """Re-read what changed since the last call: the changed nodes, or ``None`` after a full rebuild."""
        if self._of is not state:
            self._build(state)
            return None
        now = np.fromiter(state.node_version, dtype=np.int64, count=self.count)
        changed = np.flatnonzero(now != self.version)
        for n in changed.tolist():
            self._read(state, n)
        self.version = now
        return changed

    def _build(self, state: StateView) -> None:
        c = state.cluster
        self._of = state
        self.count = len(c.nodes)
        self.models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in c.nodes}))
        lookup = {m: i for i, m in enumerate(self.models)}
        self.model = np.asarray([lookup[n.gpu_model] for n in c.nodes], dtype=np.int64)
        self.rack = np.asarray([n.rack for n in c.nodes], dtype=np.int64)
        self.gpus = np.asarray([n.gpus for n in c.nodes], dtype=np.int64)
        self.cpu_cap = np.asarray([n.cpu_milli for n in c.nodes], dtype=np.int64)
        self.mem_cap = np.asarray([n.memory_mib for n in c.nodes], dtype=np.int64)
        self.gpu_cap = self.gpus * MILLI_PER_GPU
        width = max(int(self.gpus.max()), 1)
        self.free = np.zeros((self.count, width), dtype=np.int64)
        self.sorted_free = np.zeros((self.count, width), dtype=np.int64)  # each row high to low
        self.cpu = np.zeros(self.count, dtype=np.int64)
        self.mem = np.zeros(self.count, dtype=np.int64)
        self.whole = np.zeros(self.count, dtype=np.int64)
        self.max_free = np.zeros(self.count, dtype=np.int64)
        self.gpu_free = np.zeros(self.count, dtype=np.int64)
        self.up = np.ones(self.count, dtype=np.bool_)
        # Pods per GPU shape on each node, and the shared-GPU sizes on each (node, GPU) (GpuClustering).
        self.kinds: list[Counter[Kind]] = [Counter() for _ in range(self.count)]
        self._model_masks: dict[tuple[str, ...], BoolArray] = {}
        for n in range(self.count):
            self._read(state, n)
        self.version = np.fromiter(state.node_version, dtype=np.int64, count=self.count)

    def _read(self, state: StateView, n: int) -> None:
        down = state.node_down[n]
        failed = state.gpu_failed[n]
        row = [0 if down or g in failed else f for g, f in enumerate(state.gpu_free[n])]
        k = len(row)
        self.free[n, :k] = row
        self.sorted_free[n, :k] = sorted(row, reverse=True)
        self.cpu[n] = state.cpu_free[n]
        self.mem[n] = state.mem_free[n]
        self.whole[n] = row.count(MILLI_PER_GPU)
        self.max_free[n] = max(row, default=0)
        self.gpu_free[n] = sum(row)
        self.up[n] = not down
        kinds: Counter[Kind] = Counter()
        for j in state.node_jobs[n]:
            rj = state.running.get(j)
            if rj is not None:
                kinds[kind_of(rj.spec.unit)] += sum(1 for a in rj.placement.allocs if a.node == n)
        self.kinds[n] = kinds

    def invalidate(self, nodes: Sequence[int]) -> None:
        """Forget tentative changes to ``nodes`` (the next :meth:`sync` re-reads them)."""
        self.version[list(nodes)] = -1

    # ------------------------------------------------------------------ requests
    def model_mask(self, models: tuple[str, ...]) -> BoolArray:
        mask = self._model_masks.get(models)
        if mask is None:
            allowed = [i for i, m in enumerate(self.models) if m in models]
            mask = self._model_masks[models] = np.isin(self.model, np.asarray(allowed, dtype=np.int64))
        return mask

    def allowed(self, req: GroupRequest) -> BoolArray:
        """Nodes the group may use at all: model, racks (reservations, preemption), node up."""
        ok = self.model_mask(req.models) & self.up
        if req.unit.gpus == 0 and req.unit.gpu_milli == 0:
            ok = self.up.copy()  # CPU-only units may go to any node, CPU-only nodes included
        if req.exclude_racks:
            ok &= ~np.isin(self.rack, np.fromiter(req.exclude_racks, dtype=np.int64))
        if req.only_racks is not None:
            ok &= np.isin(self.rack, np.fromiter(req.only_racks, dtype=np.int64))
        return ok

    def fits(self, unit: Resources) -> BoolArray:
        """Nodes that hold one ``unit`` now (CPU, memory and GPU)."""
        ok = (self.cpu >= unit.cpu_milli) & (self.mem >= unit.memory_mib)
        if unit.gpus:
            ok &= self.whole >= unit.gpus
        elif unit.gpu_milli:
            ok &= self.max_free >= unit.gpu_milli
        return ok

    def tightest_gpu(self, n: int, milli: int) -> int:
        """The GPU of ``n`` with the least free that still holds ``milli`` (lowest index on ties)."""
        row = self.free[n]
        return int(np.argmin(np.where(row >= milli, row, MILLI_PER_GPU + 1)))

    def whole_gpus(self, n: int, k: int) -> tuple[int, ...]:
        """The first ``k`` whole free GPUs of ``n`` (the authors' ``AllocateExclusiveGpuId``)."""
        return tuple(int(g) for g in np.flatnonzero(self.free[n] == MILLI_PER_GPU)[:k])

    def default_gpus(self, n: int, unit: Resources) -> tuple[int, ...]:
        if unit.is_fractional:
            return (self.tightest_gpu(n, unit.gpu_milli),)
        return self.whole_gpus(n, unit.gpus) if unit.gpus else ()

    def take(self, n: int, gpus: tuple[int, ...], unit: Resources) -> None:
        """Apply one unit tentatively (for the next unit of the same group); undo with :meth:`invalidate`."""
        milli = unit.gpu_milli if unit.is_fractional else MILLI_PER_GPU
        for g in gpus:
            self.free[n, g] -= milli
        row = self.free[n]
        self.sorted_free[n] = -np.sort(-row)
        self.cpu[n] -= unit.cpu_milli
        self.mem[n] -= unit.memory_mib
        self.whole[n] = int((row == MILLI_PER_GPU).sum())
        self.max_free[n] = int(row.max())
        self.gpu_free[n] = int(row.sum())
        self.kinds[n] = self.kinds[n] + Counter({kind_of(unit): 1})


def alloc(n: int, gpus: tuple[int, ...], unit: Resources) -> NodeAlloc:
    milli = unit.gpu_milli if unit.is_fractional else MILLI_PER_GPU
    return NodeAlloc(n, gpus, milli, unit.cpu_milli, unit.memory_mib)
