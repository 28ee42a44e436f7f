"""The cluster during a static-packing run: free milli-GPU per GPU, free CPU and memory per node.

State is kept as arrays over all nodes so a policy can score every node in a handful of numpy operations.
GPUs a node does not have are padding columns with 0 free, which no request can fit and no sum notices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackscale.model.errors import RackscaleError
from rackscale.pack.trace import MILLI, BoolArray, IntArray, Nodes, Pods


class OversubscribedError(RackscaleError, ValueError):
    """A policy chose a node or GPU that cannot hold the pod (a policy bug: choices are validated)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What one pod asks for. ``milli`` is per GPU: 1000 for whole GPUs, below for a shared GPU, 0 if none."""

    cpu: int
    mem: int
    gpus: int
    milli: int
    allowed: BoolArray  # nodes whose GPU model the pod accepts

    @property
    def shared(self) -> bool:
        return self.gpus == 1 and 0 < self.milli < MILLI

    @property
    def demand(self) -> int:
        """GPU demand in milli-GPU."""
        return self.gpus * self.milli

    @property
    def kind(self) -> tuple[int, int]:
        """The GPU shape of the request, which GpuClustering groups by."""
        return (self.gpus, self.milli)


def requests_of(*, pods: Pods, nodes: Nodes) -> list[Request]:
    """One :class:`Request` per pod of the trace (model masks shared between pods with the same spec)."""
    masks: dict[str, BoolArray] = {}
    out: list[Request] = []
    for i in range(pods.count):
        spec = pods.spec[i]
        if spec not in masks:
            masks[spec] = nodes.model_mask(spec)
        out.append(
            Request(
                cpu=int(pods.cpu_milli[i]),
                mem=int(pods.memory_mib[i]),
                gpus=int(pods.num_gpu[i]),
                milli=int(pods.gpu_milli[i]),
                allowed=masks[spec],
            )
        )
    return out


class PackState:
    """Free resources of every node and GPU; :meth:`place` is the only mutation and validates first."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        width = max(int(nodes.gpus.max()), 1)
        self.exists: BoolArray = np.arange(width)[None, :] < nodes.gpus[:, None]
        self.free: IntArray = np.where(self.exists, MILLI, 0).astype(np.int64)
        # Each row of ``free`` sorted high to low: GPU identity does not matter to fragmentation, and sorted
        # rows make "the distinct free amounts of a node" a cheap neighbour comparison.
        self.sorted_free: IntArray = self.free.copy()
        self.cpu: IntArray = nodes.cpu_milli.copy()
        self.mem: IntArray = nodes.memory_mib.copy()
        self.cpu_cap: IntArray = nodes.cpu_milli.copy()
        self.mem_cap: IntArray = nodes.memory_mib.copy()
        self.gpu_cap: IntArray = nodes.gpus * MILLI
        self.whole: IntArray = nodes.gpus.copy()  # GPUs with all 1000 milli free
        self.max_free: IntArray = np.where(nodes.gpus > 0, MILLI, 0).astype(np.int64)
        self.gpu_free: IntArray = self.gpu_cap.copy()  # free milli-GPU per node
        self.allocated_milli = 0
        # Pods per GPU shape per node, and the shapes sharing each GPU (GpuClustering looks at both).
        self.kind_count: dict[tuple[int, int], IntArray] = {}
        self.gpu_kinds: dict[tuple[int, int], set[int]] = {}

    @property
    def capacity_milli(self) -> int:
        return int(self.gpu_cap.sum())

    def feasible(self, req: Request) -> BoolArray:
        """Nodes that can hold ``req`` now: model, CPU, memory and GPU all fit."""
        ok = req.allowed & (self.cpu >= req.cpu) & (self.mem >= req.mem)
        if req.shared:
            ok &= self.max_free >= req.milli
        elif req.gpus > 0:
            ok &= self.whole >= req.gpus
        return ok

    def whole_gpus(self, node: int, count: int) -> tuple[int, ...]:
        """The first ``count`` whole free GPUs of ``node``."""
        idx = np.flatnonzero(self.free[node] == MILLI)
        return tuple(int(g) for g in idx[:count])

    def tightest_gpu(self, node: int, milli: int) -> int:
        """The GPU of ``node`` with the least free milli that still holds ``milli`` (lowest index on ties)."""
        row = self.free[node]
        fits = row >= milli
        return int(np.argmin(np.where(fits, row, MILLI + 1)))

    def gpu_with_free(self, node: int, amount: int) -> int:
        """The first GPU of ``node`` with exactly ``amount`` milli free."""
        return int(np.flatnonzero(self.free[node] == amount)[0])

    def check(self, node: int, gpus: tuple[int, ...], req: Request) -> str | None:
        """``None`` if ``req`` fits on ``gpus`` of ``node``, else why not."""
        if not bool(req.allowed[node]):
            return f"node {node} has a GPU model the pod does not accept"
        if self.cpu[node] < req.cpu or self.mem[node] < req.mem:
            return f"node {node} lacks CPU or memory"
        if len(gpus) != req.gpus or len(set(gpus)) != len(gpus):
            return f"the pod needs {req.gpus} distinct GPU(s), got {gpus}"
        for g in gpus:
            if not (0 <= g < self.free.shape[1]) or not bool(self.exists[node, g]):
                return f"node {node} has no GPU {g}"
            if self.free[node, g] < req.milli:
                return f"GPU {g} of node {node} has {self.free[node, g]} milli free, the pod needs {req.milli}"
        return None

    def place(self, node: int, gpus: tuple[int, ...], req: Request) -> None:
        why = self.check(node, gpus, req)
        if why is not None:
            raise OversubscribedError(why)
        row = self.free[node]
        for g in gpus:
            row[g] -= req.milli
            if req.shared:
                self.gpu_kinds.setdefault((node, g), set()).add(req.milli)
        self.cpu[node] -= req.cpu
        self.mem[node] -= req.mem
        self.gpu_free[node] -= req.demand
        self.allocated_milli += req.demand
        self.whole[node] = int((row == MILLI).sum())
        self.max_free[node] = int(row.max())
        self.sorted_free[node] = -np.sort(-row)
        counts = self.kind_count.get(req.kind)
        if counts is None:
            counts = self.kind_count[req.kind] = np.zeros(self.nodes.count, dtype=np.int64)
        counts[node] += 1
