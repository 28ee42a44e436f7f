"""The free capacity of the GPU pool, and the indexes over it that every placement query reads.

Every query a placement needs is answered from an index, never from a scan of all GPUs or nodes:

- racks are bucketed by their count of free whole GPUs, per (GPU model, region);
- nodes are bucketed by free whole GPUs, globally per model and inside each rack;
- nodes holding a partly used GPU are indexed per model (for packing fractional requests).

A GPU's capacity is 1000 milli-GPU; a GPU is *whole free* when all 1000 are free and it is healthy.
This layer knows slices, not jobs: :class:`rackscale.model.state.ClusterState` adds who holds what, and
is the only writer (its ``allocate``/``release`` validate every slice with :meth:`CapacityState.fits`).
"""

from __future__ import annotations

from collections.abc import Iterator

from rackscale.model.buckets import BucketIndex
from rackscale.model.errors import RackscaleError
from rackscale.model.placement import NodeAlloc
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster


class AllocationError(RackscaleError, ValueError):
    """A placement asked for capacity that is not there (a bug in the caller: placements are checked)."""


class CapacityState:
    """Free GPUs (in milli), CPU and memory per node, failed hardware, and the bucket indexes over them."""

    def __init__(self, cluster: GPUCluster) -> None:
        self.cluster = cluster
        nodes = cluster.nodes
        self.gpu_free: list[list[int]] = [[MILLI_PER_GPU] * n.gpus for n in nodes]
        self.gpu_failed: list[set[int]] = [set() for _ in nodes]
        # ``node_down``: the node offers nothing to placement, because it failed (``node_failed``) or an
        # operator cordoned it (``node_cordoned``). Placers read only ``node_down`` and the indexes, so a
        # cordon needs no code path of its own in any of them; the KPIs read the two causes apart.
        self.node_down: list[bool] = [False] * len(nodes)
        self.node_failed: list[bool] = [False] * len(nodes)
        self.node_cordoned: list[bool] = [False] * len(nodes)
        # Whole-free healthy GPUs of each cordoned (not failed) node, and their sum: out of service but
        # not failed, so the idle rate leaves them out of the GPUs available (O(1) to read).
        self.cordoned_idle: list[int] = [0] * len(nodes)
        self.cordoned_idle_count = 0
        self.cpu_free: list[int] = [n.cpu_milli for n in nodes]
        self.mem_free: list[int] = [n.memory_mib for n in nodes]
        self.node_whole: list[int] = [n.gpus for n in nodes]
        self.node_shared: list[bool] = [False] * len(nodes)
        # Bumped on every change to a node (placement, release, failure): placers that keep their own
        # arrays (the fragmentation-aware ones) re-read only the nodes whose version moved.
        self.node_version: list[int] = [0] * len(nodes)
        self.rack_whole: list[int] = [r.gpus for r in cluster.racks]
        max_node = max(n.gpus for n in nodes)
        self.max_node_gpus = max_node
        max_rack = max(r.gpus for r in cluster.racks)
        self.rack_index: dict[tuple[str, int], BucketIndex] = {}  # per (model, region)
        self.rack_index_all: dict[str, BucketIndex] = {}  # per model, every region (the common query)
        all_models = sorted({n.gpu_model for n in nodes})  # includes CPU-only nodes' model, if any
        self.node_index: dict[str, BucketIndex] = {m: BucketIndex.sized(max_node) for m in all_models}
        self.rack_node_index: list[BucketIndex] = [BucketIndex.sized(r.gpus_per_node) for r in cluster.racks]
        self.shared_nodes: dict[str, set[int]] = {m: set() for m in all_models}
        self.model_free_whole: dict[str, int] = dict.fromkeys(all_models, 0)
        # Their sum, kept with them: a backlog cycle reads it for every job it examines (``free_whole_gpus``).
        self.free_whole_total = 0
        # The largest rack per (model, region): its bucket holds the fully free racks.
        self.rack_capacity_of: dict[tuple[str, int], int] = {}
        for r in cluster.racks:
            key = (r.gpu_model, r.region)
            self.rack_capacity_of[key] = max(self.rack_capacity_of.get(key, 0), r.gpus)
        for r in cluster.racks:
            ix = self.rack_index.setdefault((r.gpu_model, r.region), BucketIndex.sized(max_rack))
            ix.move(r.index, None, r.gpus)
            self.rack_index_all.setdefault(r.gpu_model, BucketIndex.sized(max_rack)).move(r.index, None, r.gpus)
            self.model_free_whole[r.gpu_model] += r.gpus
            self.free_whole_total += r.gpus
        for n in nodes:
            self.node_index[n.gpu_model].move(n.index, None, n.gpus)
            self.rack_node_index[n.rack].move(n.index, None, n.gpus)
        self.used_milli = 0
        self.failed_gpus_count = 0  # GPUs failed or on a down node (kept up to date, O(1) to read)

    # ------------------------------------------------------------------ per-node bookkeeping
    def _refresh(self, n: int) -> None:
        """Recompute node ``n``'s whole-free count and shared flag and move it in every index."""
        self.node_version[n] += 1
        node = self.cluster.nodes[n]
        failed = self.gpu_failed[n]
        down = self.node_down[n]
        whole = 0
        shared = False
        if not down or not self.node_failed[n]:  # (a cordoned node is counted for ``cordoned_idle``)
            for g, free in enumerate(self.gpu_free[n]):
                if g in failed:
                    continue
                if free == MILLI_PER_GPU:
                    whole += 1
                elif free > 0:
                    shared = True
        idle = 0
        if down:  # failed or cordoned: nothing to offer
            idle = 0 if self.node_failed[n] else whole
            whole, shared = 0, False
        if idle != self.cordoned_idle[n]:
            self.cordoned_idle_count += idle - self.cordoned_idle[n]
            self.cordoned_idle[n] = idle
        old = self.node_whole[n]
        if whole != old:
            self.node_whole[n] = whole
            self.node_index[node.gpu_model].move(n, old, whole)
            self.rack_node_index[node.rack].move(n, old, whole)
            r = node.rack
            rack = self.cluster.racks[r]
            ix = self.rack_index[(rack.gpu_model, rack.region)]
            old_r = self.rack_whole[r]
            self.rack_whole[r] = old_r + whole - old
            ix.move(r, old_r, self.rack_whole[r])
            self.rack_index_all[rack.gpu_model].move(r, old_r, self.rack_whole[r])
            self.model_free_whole[node.gpu_model] += whole - old
            self.free_whole_total += whole - old
        if shared != self.node_shared[n]:
            self.node_shared[n] = shared
            if shared:
                self.shared_nodes[node.gpu_model].add(n)
            else:
                self.shared_nodes[node.gpu_model].discard(n)

    def usable_free(self, n: int, g: int) -> int:
        if self.node_down[n] or g in self.gpu_failed[n]:
            return 0
        return self.gpu_free[n][g]

    def whole_free_gpus(self, n: int, k: int) -> tuple[int, ...]:
        """The first ``k`` whole-free GPUs of node ``n`` (caller knows there are enough)."""
        failed = self.gpu_failed[n]
        out = [g for g, f in enumerate(self.gpu_free[n]) if f == MILLI_PER_GPU and g not in failed]
        return tuple(out[:k])

    def fits(self, a: NodeAlloc, *, health: bool = True) -> str | None:
        """``None`` if the slice fits now, else why not (for error messages). ``health=False`` checks
        capacity only: a job being restored held its slices before the hardware failed.

        A slice that names no node or GPU of the cluster, or a negative amount, is refused too: it comes
        from a placer plugin, and a negative index would silently wrap to another node or GPU."""
        n = a.node
        if not 0 <= n < len(self.gpu_free):
            return f"the cluster has no node {n}"
        if (a.gpus and not 0 < a.milli <= MILLI_PER_GPU) or a.cpu_milli < 0 or a.memory_mib < 0:
            return f"a slice of node {self.cluster.nodes[n].name} asks for a negative or impossible amount"
        if health and self.node_down[n]:
            return f"node {self.cluster.nodes[n].name} is " + ("down" if self.node_failed[n] else "cordoned")
        free = self.gpu_free[n]
        failed = self.gpu_failed[n] if health else ()
        gpus = a.gpus
        if len(gpus) > 1 and len(set(gpus)) != len(gpus):
            return "a GPU is listed twice in one slice"
        for g in gpus:
            if not 0 <= g < len(free):
                return f"node {self.cluster.nodes[n].name} has no GPU {g}"
            have = 0 if g in failed else free[g]
            if have < a.milli:
                return f"GPU {g} of node {self.cluster.nodes[n].name} has {have} milli free"
        if a.cpu_milli > self.cpu_free[n]:
            return f"node {self.cluster.nodes[n].name} has {self.cpu_free[n]} milli-CPU free"
        if a.memory_mib > self.mem_free[n]:
            return f"node {self.cluster.nodes[n].name} has {self.mem_free[n]} MiB free"
        return None

    def _take(self, a: NodeAlloc) -> None:
        n = a.node
        free = self.gpu_free[n]
        for g in a.gpus:
            free[g] -= a.milli
        self.cpu_free[n] -= a.cpu_milli
        self.mem_free[n] -= a.memory_mib
        self.used_milli += a.gpu_milli
        self._refresh(n)

    def _give(self, a: NodeAlloc) -> None:
        n = a.node
        free = self.gpu_free[n]
        for g in a.gpus:
            free[g] += a.milli
        self.cpu_free[n] += a.cpu_milli
        self.mem_free[n] += a.memory_mib
        self.used_milli -= a.gpu_milli
        self._refresh(n)

    def _take_all(self, allocs: tuple[NodeAlloc, ...], *, health: bool, job: str, verb: str) -> None:
        """Take every slice, or none: on a slice that does not fit (``AllocationError``: "cannot ``verb``
        job ``job``"), or on any error a malformed slice raises, the slices taken so far are given back."""
        taken = 0
        try:
            for a in allocs:
                why = self.fits(a, health=health)
                if why is not None:
                    raise AllocationError(f"cannot {verb} job {job!r}: {why}")
                self._take(a)
                taken += 1
        except BaseException:
            for b in reversed(allocs[:taken]):
                self._give(b)
            raise

    # ------------------------------------------------------------------ index queries (no scans)
    def _rack_index_for(self, model: str, region: int | None) -> BucketIndex | None:
        return self.rack_index_all.get(model) if region is None else self.rack_index.get((model, region))

    def racks_ascending(self, model: str, at_least: int, region: int | None = None) -> Iterator[int]:
        """Racks of ``model`` with at least ``at_least`` whole free GPUs, fewest free first (best fit)."""
        ix = self._rack_index_for(model, region)
        return ix.ascending(at_least) if ix is not None else iter(())

    def racks_descending(self, model: str, at_least: int, region: int | None = None) -> Iterator[int]:
        """Racks of ``model`` with at least ``at_least`` whole free GPUs, most free first (spread)."""
        ix = self._rack_index_for(model, region)
        return ix.descending(at_least) if ix is not None else iter(())

    def rack_free_whole(self, rack: int) -> int:
        return self.rack_whole[rack]

    def rack_capacity(self, rack: int) -> int:
        """Healthy GPUs of a rack (what it holds when every job in it has ended)."""
        total = 0
        for n in self.cluster.racks[rack].nodes:
            if not self.node_down[n]:
                total += len(self.gpu_free[n]) - len(self.gpu_failed[n])
        return total

    # ------------------------------------------------------------------ totals
    @property
    def total_gpus(self) -> int:
        return self.cluster.total_gpus

    @property
    def free_whole_gpus(self) -> int:
        return self.free_whole_total

    @property
    def failed_gpus(self) -> int:
        """Recounted from scratch (O(nodes)); :attr:`failed_gpus_count` is the kept-up-to-date value. A
        cordoned node's GPUs are not failed (only its failed GPUs are)."""
        down = sum(self.cluster.nodes[n].gpus for n, d in enumerate(self.node_failed) if d)
        return down + sum(len(f) for n, f in enumerate(self.gpu_failed) if not self.node_failed[n])
