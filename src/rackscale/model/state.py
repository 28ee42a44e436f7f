"""The live state of the GPU pool: free, used and failed GPUs, and who holds them.

Every query a placement needs is answered from an index, never from a scan of all GPUs or nodes:

- racks are bucketed by their count of free whole GPUs, per (GPU model, region);
- nodes are bucketed by free whole GPUs, globally per model and inside each rack;
- nodes holding a partly used GPU are indexed per model (for packing fractional requests).

A GPU's capacity is 1000 milli-GPU; a GPU is *whole free* when all 1000 are free and it is healthy.
Mutations go through :meth:`ClusterState.allocate` / :meth:`ClusterState.release`, which validate every
slice first, so a GPU can never be double-allocated; :class:`Transaction` undoes a group of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from rackscale.model.errors import RackscaleError
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobSpec


class AllocationError(RackscaleError, ValueError):
    """A placement asked for capacity that is not there (a bug in the caller: placements are checked)."""


@dataclass(frozen=True, slots=True)
class RunningJob:
    spec: JobSpec
    placement: Placement
    started_at: float
    expected_end: float | None = None
    checkpointed_at: float | None = None
    racks: tuple[int, ...] = ()  # filled in by ClusterState (placements hold node indexes only)


@dataclass(slots=True)
class Usage:
    """Resources held by one queue (for fair share and quota)."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    jobs: int = 0


@dataclass(slots=True)
class _Index:
    """Buckets of integer ids by a count: ``buckets[c]`` is the set of ids whose count is ``c``."""

    buckets: list[set[int]] = field(default_factory=list)

    @classmethod
    def sized(cls, top: int) -> _Index:
        return cls([set() for _ in range(top + 1)])

    def move(self, item: int, old: int | None, new: int | None) -> None:
        if old is not None:
            self.buckets[old].discard(item)
        if new is not None:
            self.buckets[new].add(item)

    def ascending(self, at_least: int) -> Iterator[int]:
        for c in range(max(at_least, 0), len(self.buckets)):
            yield from self.buckets[c]

    def descending(self, at_least: int) -> Iterator[int]:
        for c in range(len(self.buckets) - 1, max(at_least, 0) - 1, -1):
            yield from self.buckets[c]

    def count_at_least(self, at_least: int) -> int:
        return sum(len(self.buckets[c]) for c in range(max(at_least, 0), len(self.buckets)))


class ClusterState:
    """Mutable allocation state over an immutable :class:`GPUCluster`."""

    def __init__(self, cluster: GPUCluster) -> None:
        self.cluster = cluster
        nodes = cluster.nodes
        self.gpu_free: list[list[int]] = [[MILLI_PER_GPU] * n.gpus for n in nodes]
        self.gpu_failed: list[set[int]] = [set() for _ in nodes]
        self.node_down: list[bool] = [False] * len(nodes)
        self.cpu_free: list[int] = [n.cpu_milli for n in nodes]
        self.mem_free: list[int] = [n.memory_mib for n in nodes]
        self.node_whole: list[int] = [n.gpus for n in nodes]
        self.node_shared: list[bool] = [False] * len(nodes)
        self.rack_whole: list[int] = [r.gpus for r in cluster.racks]
        max_node = max(n.gpus for n in nodes)
        self.max_node_gpus = max_node
        max_rack = max(r.gpus for r in cluster.racks)
        self.rack_index: dict[tuple[str, int], _Index] = {}  # per (model, region)
        self.rack_index_all: dict[str, _Index] = {}  # per model, every region (the common query)
        all_models = sorted({n.gpu_model for n in nodes})  # includes CPU-only nodes' model, if any
        self.node_index: dict[str, _Index] = {m: _Index.sized(max_node) for m in all_models}
        self.rack_node_index: list[_Index] = [_Index.sized(r.gpus_per_node) for r in cluster.racks]
        self.shared_nodes: dict[str, set[int]] = {m: set() for m in all_models}
        self.model_free_whole: dict[str, int] = dict.fromkeys(all_models, 0)
        # The largest rack per (model, region): its bucket holds the fully free racks.
        self.rack_capacity_of: dict[tuple[str, int], int] = {}
        for r in cluster.racks:
            key = (r.gpu_model, r.region)
            self.rack_capacity_of[key] = max(self.rack_capacity_of.get(key, 0), r.gpus)
        for r in cluster.racks:
            ix = self.rack_index.setdefault((r.gpu_model, r.region), _Index.sized(max_rack))
            ix.move(r.index, None, r.gpus)
            self.rack_index_all.setdefault(r.gpu_model, _Index.sized(max_rack)).move(r.index, None, r.gpus)
            self.model_free_whole[r.gpu_model] += r.gpus
        for n in nodes:
            self.node_index[n.gpu_model].move(n.index, None, n.gpus)
            self.rack_node_index[n.rack].move(n.index, None, n.gpus)
        self.running: dict[str, RunningJob] = {}
        self.rack_jobs: list[set[str]] = [set() for _ in cluster.racks]
        self.node_jobs: list[set[str]] = [set() for _ in nodes]
        self.queue_usage: dict[str, Usage] = {}
        self.used_milli = 0
        self.failed_gpus_count = 0  # GPUs failed or on a down node (kept up to date, O(1) to read)
        # How many running preemptible jobs hold each priority: a preemptor with no lower priority
        # among them skips the victim search entirely.
        self.preemptible_priorities: Counter[int] = Counter()
        # Expected ends of running jobs, kept sorted (backfill and the split decision read them in order).
        self._ends: SortedList = SortedList()

    # ------------------------------------------------------------------ per-node bookkeeping
    def _refresh(self, n: int) -> None:
        """Recompute node ``n``'s whole-free count and shared flag and move it in every index."""
        node = self.cluster.nodes[n]
        failed = self.gpu_failed[n]
        down = self.node_down[n]
        whole = 0
        shared = False
        if not down:
            for g, free in enumerate(self.gpu_free[n]):
                if g in failed:
                    continue
                if free == MILLI_PER_GPU:
                    whole += 1
                elif free > 0:
                    shared = True
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
        capacity only: a job being restored held its slices before the hardware failed."""
        n = a.node
        if health and self.node_down[n]:
            return f"node {self.cluster.nodes[n].name} is down"
        free = self.gpu_free[n]
        failed = self.gpu_failed[n] if health else ()
        gpus = a.gpus
        if len(gpus) > 1 and len(set(gpus)) != len(gpus):
            return "a GPU is listed twice in one slice"
        for g in gpus:
            if g >= len(free):
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

    # ------------------------------------------------------------------ jobs
    def allocate(
        self,
        spec: JobSpec,
        placement: Placement,
        *,
        now: float,
        expected_end: float | None = None,
        checkpointed_at: float | None = None,
        health: bool = True,
    ) -> RunningJob:
        """Admit a job on its placement. Raises :class:`AllocationError` (state unchanged) if any slice
        does not fit or the job already runs. ``health=False`` is for restoring a job exactly as it was
        (a rollback): failed hardware it held then does not stop it."""
        if spec.name in self.running:
            raise AllocationError(f"job {spec.name!r} already holds resources")
        done: list[NodeAlloc] = []
        for a in placement.allocs:
            why = self.fits(a, health=health)
            if why is not None:
                for b in reversed(done):
                    self._give(b)
                raise AllocationError(f"cannot place job {spec.name!r}: {why}")
            self._take(a)
            done.append(a)
        racks = tuple(sorted({self.cluster.nodes[a.node].rack for a in placement.allocs}))
        rj = RunningJob(
            spec=spec,
            placement=placement,
            started_at=now,
            expected_end=expected_end,
            checkpointed_at=now if checkpointed_at is None else checkpointed_at,
            racks=racks,
        )
        self.running[spec.name] = rj
        for r in racks:
            self.rack_jobs[r].add(spec.name)
        for a in placement.allocs:
            self.node_jobs[a.node].add(spec.name)
        if spec.preemptible:
            self.preemptible_priorities[spec.priority] += 1
        if expected_end is not None:
            self._ends.add((expected_end, spec.name))
        u = self.queue_usage.setdefault(spec.queue, Usage())
        for a in placement.allocs:
            u.gpu_milli += a.milli * len(a.gpus)
            u.cpu_milli += a.cpu_milli
            u.memory_mib += a.memory_mib
        u.jobs += 1
        return rj

    def release(self, name: str) -> RunningJob:
        """Free everything job ``name`` holds. Raises ``KeyError`` if it holds nothing."""
        rj = self.running.pop(name)
        for a in rj.placement.allocs:
            self._give(a)
            self.node_jobs[a.node].discard(name)
        for r in rj.racks:
            self.rack_jobs[r].discard(name)
        if rj.expected_end is not None:
            self._ends.discard((rj.expected_end, name))
        if rj.spec.preemptible:
            self.preemptible_priorities[rj.spec.priority] -= 1
            if not self.preemptible_priorities[rj.spec.priority]:
                del self.preemptible_priorities[rj.spec.priority]
        u = self.queue_usage[rj.spec.queue]
        for a in rj.placement.allocs:
            u.gpu_milli -= a.milli * len(a.gpus)
            u.cpu_milli -= a.cpu_milli
            u.memory_mib -= a.memory_mib
        u.jobs -= 1
        return rj

    def extend(self, name: str, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        """Add slices (e.g. inference replicas) to a running job. Validated like :meth:`allocate`."""
        rj = self.running[name]
        done: list[NodeAlloc] = []
        for a in allocs:
            why = self.fits(a)
            if why is not None:
                for b in reversed(done):
                    self._give(b)
                raise AllocationError(f"cannot extend job {name!r}: {why}")
            self._take(a)
            done.append(a)
        return self._replace_placement(rj, rj.placement.allocs + allocs, rj.placement.units + units)

    def retract(self, name: str, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        """Remove slices from a running job (scale-down, or undoing :meth:`extend`)."""
        rj = self.running[name]
        remaining = list(rj.placement.allocs)
        for a in allocs:
            remaining.remove(a)  # ValueError if the job does not hold it
        for a in allocs:
            self._give(a)
        return self._replace_placement(rj, tuple(remaining), rj.placement.units - units)

    def _replace_placement(self, rj: RunningJob, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        from dataclasses import replace

        name = rj.spec.name
        old = rj.placement
        for r in rj.racks:
            self.rack_jobs[r].discard(name)
        for a in old.allocs:
            self.node_jobs[a.node].discard(name)
        placement = Placement(name, allocs, units)
        racks = tuple(sorted({self.cluster.nodes[a.node].rack for a in allocs}))
        for r in racks:
            self.rack_jobs[r].add(name)
        for a in allocs:
            self.node_jobs[a.node].add(name)
        u = self.queue_usage[rj.spec.queue]
        u.gpu_milli += placement.gpu_milli - old.gpu_milli
        u.cpu_milli += sum(a.cpu_milli for a in allocs) - sum(a.cpu_milli for a in old.allocs)
        u.memory_mib += sum(a.memory_mib for a in allocs) - sum(a.memory_mib for a in old.allocs)
        new = replace(rj, placement=placement, racks=racks)
        self.running[name] = new
        return new

    def note_checkpoint(self, name: str, now: float) -> None:
        from dataclasses import replace

        self.running[name] = replace(self.running[name], checkpointed_at=now)

    # ------------------------------------------------------------------ failures
    def fail_gpu(self, node: int, gpu: int) -> set[str]:
        """Mark a GPU failed; returns the jobs that held it (the caller restarts them)."""
        if not self.node_down[node] and gpu not in self.gpu_failed[node]:
            self.failed_gpus_count += 1
        self.gpu_failed[node].add(gpu)
        self._refresh(node)
        return {j for j in self.node_jobs[node] if self._holds_gpu(j, node, gpu)}

    def recover_gpu(self, node: int, gpu: int) -> None:
        if not self.node_down[node] and gpu in self.gpu_failed[node]:
            self.failed_gpus_count -= 1
        self.gpu_failed[node].discard(gpu)
        self._refresh(node)

    def fail_node(self, node: int) -> set[str]:
        """Mark a whole node down; returns the jobs running on it."""
        if not self.node_down[node]:
            self.failed_gpus_count += self.cluster.nodes[node].gpus - len(self.gpu_failed[node])
        self.node_down[node] = True
        self._refresh(node)
        return set(self.node_jobs[node])

    def recover_node(self, node: int) -> None:
        if self.node_down[node]:
            self.failed_gpus_count -= self.cluster.nodes[node].gpus - len(self.gpu_failed[node])
        self.node_down[node] = False
        self._refresh(node)

    def _holds_gpu(self, job: str, node: int, gpu: int) -> bool:
        return any(a.node == node and gpu in a.gpus for a in self.running[job].placement.allocs)

    # ------------------------------------------------------------------ index queries (no scans)
    def _rack_index_for(self, model: str, region: int | None) -> _Index | None:
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
    def ends_in_order(self) -> Iterator[tuple[float, str]]:
        """Running jobs with an expected end, soonest first. A snapshot: the state may change while the
        caller reads it (O(running jobs) to take, then O(1) per job read)."""
        return iter(list(self._ends))

    def has_preemptible_below(self, priority: int) -> bool:
        """Is any running preemptible job of lower priority? (O(distinct priorities))"""
        return any(p < priority for p in self.preemptible_priorities)

    @property
    def total_gpus(self) -> int:
        return self.cluster.total_gpus

    @property
    def free_whole_gpus(self) -> int:
        return sum(self.model_free_whole.values())

    @property
    def failed_gpus(self) -> int:
        """Recounted from scratch (O(nodes)); :attr:`failed_gpus_count` is the kept-up-to-date value."""
        down = sum(self.cluster.nodes[n].gpus for n, d in enumerate(self.node_down) if d)
        return down + sum(len(f) for n, f in enumerate(self.gpu_failed) if not self.node_down[n])

    def snapshot(self) -> dict[str, object]:
        """Every field and index as plain values, for comparing a state with itself later (tests: a
        cycle or a rolled-back transaction must leave it exactly as it was). A drained queue's all-zero
        usage counts as absent, as ``release`` leaves it."""
        return {
            "gpu_free": [list(f) for f in self.gpu_free],
            "gpu_failed": [sorted(f) for f in self.gpu_failed],
            "node_down": list(self.node_down),
            "cpu_free": list(self.cpu_free),
            "mem_free": list(self.mem_free),
            "node_whole": list(self.node_whole),
            "node_shared": list(self.node_shared),
            "rack_whole": list(self.rack_whole),
            "model_free_whole": dict(self.model_free_whole),
            "used_milli": self.used_milli,
            "failed_gpus_count": self.failed_gpus_count,
            "rack_index": {k: [sorted(b) for b in ix.buckets] for k, ix in self.rack_index.items()},
            "rack_index_all": {k: [sorted(b) for b in ix.buckets] for k, ix in self.rack_index_all.items()},
            "node_index": {k: [sorted(b) for b in ix.buckets] for k, ix in self.node_index.items()},
            "rack_node_index": [[sorted(b) for b in ix.buckets] for ix in self.rack_node_index],
            "shared_nodes": {k: sorted(v) for k, v in self.shared_nodes.items()},
            "running": {
                k: (rj.spec, rj.placement, rj.started_at, rj.expected_end, rj.checkpointed_at, rj.racks)
                for k, rj in self.running.items()
            },
            "ends": list(self._ends),
            "preemptible_priorities": {p: c for p, c in self.preemptible_priorities.items() if c},
            "rack_jobs": [sorted(s) for s in self.rack_jobs],
            "node_jobs": [sorted(s) for s in self.node_jobs],
            "queue_usage": {
                q: (u.gpu_milli, u.cpu_milli, u.memory_mib, u.jobs)
                for q, u in self.queue_usage.items()
                if (u.gpu_milli, u.cpu_milli, u.memory_mib, u.jobs) != (0, 0, 0, 0)
            },
        }

    def check_invariants(self) -> None:
        """Recompute every index from scratch and compare (for tests; O(cluster))."""
        c = self.cluster
        for n, node in enumerate(c.nodes):
            held = [0] * node.gpus
            cpu = mem = 0
            for j in self.node_jobs[n]:
                for a in self.running[j].placement.allocs:
                    if a.node == n:
                        for g in a.gpus:
                            held[g] += a.milli
                        cpu += a.cpu_milli
                        mem += a.memory_mib
            for g in range(node.gpus):
                assert 0 <= held[g] <= MILLI_PER_GPU, f"GPU {g} of node {node.name} oversubscribed"
                assert self.gpu_free[n][g] == MILLI_PER_GPU - held[g], "gpu_free out of sync"
            assert self.cpu_free[n] == node.cpu_milli - cpu >= 0, "cpu_free out of sync"
            assert self.mem_free[n] == node.memory_mib - mem >= 0, "mem_free out of sync"
            whole = (
                0
                if self.node_down[n]
                else sum(1 for g in range(node.gpus) if held[g] == 0 and g not in self.gpu_failed[n])
            )
            assert self.node_whole[n] == whole, f"node_whole out of sync on {node.name}"
            assert n in self.node_index[node.gpu_model].buckets[whole]
            assert n in self.rack_node_index[node.rack].buckets[whole]
        for r, rack in enumerate(c.racks):
            whole = sum(self.node_whole[n] for n in rack.nodes)
            assert self.rack_whole[r] == whole, f"rack_whole out of sync on {rack.name}"
            assert r in self.rack_index[(rack.gpu_model, rack.region)].buckets[whole]
            assert r in self.rack_index_all[rack.gpu_model].buckets[whole]
        assert self.failed_gpus_count == self.failed_gpus, "failed_gpus_count out of sync"


class Transaction:
    """A group of admissions and releases that is committed together or undone together.

    The scheduler places a gang's units one by one inside a transaction; if any unit cannot be placed,
    :meth:`rollback` restores the state exactly (every index included).
    """

    __slots__ = ("_log", "state")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._log: list[tuple[str, RunningJob | Placement]] = []

    def allocate(
        self, spec: JobSpec, placement: Placement, *, now: float, expected_end: float | None = None
    ) -> RunningJob:
        rj = self.state.allocate(spec, placement, now=now, expected_end=expected_end)
        self._log.append(("allocated", rj))
        return rj

    def release(self, name: str) -> RunningJob:
        rj = self.state.release(name)
        self._log.append(("released", rj))
        return rj

    def extend(self, name: str, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        rj = self.state.extend(name, allocs, units)
        self._log.append(("extended", Placement(name, allocs, units)))
        return rj

    def rollback(self) -> None:
        while self._log:
            op, item = self._log.pop()
            if isinstance(item, Placement):
                self.state.retract(item.job, item.allocs, item.units)
                continue
            rj = item
            if op == "allocated":
                self.state.release(rj.spec.name)
            else:
                self.state.allocate(
                    rj.spec,
                    rj.placement,
                    now=rj.started_at,
                    expected_end=rj.expected_end,
                    checkpointed_at=rj.checkpointed_at,
                    health=False,
                )

    def commit(self) -> None:
        self._log.clear()

    def __len__(self) -> int:
        return len(self._log)
