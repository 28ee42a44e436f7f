"""The live state of the GPU pool: free, used and failed GPUs, and who holds them.

The layers, each in its own module (all re-exported here, where callers import them from):

- :mod:`rackscale.model.capacity`: free capacity per GPU, node and rack, and the bucket indexes every
  placement query reads (never a scan of all GPUs or nodes);
- this module: :class:`ClusterState`, which adds the running jobs, the queues' usage and hardware failures;
- :mod:`rackscale.model.transaction`: :class:`Transaction`, a group of changes undone together;
- :mod:`rackscale.model.view`: :class:`StateView`, the read-only face that plugins are given.

Mutations go through :meth:`ClusterState.allocate` / :meth:`ClusterState.release`, which validate every
slice first, so a GPU can never be double-allocated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from sortedcontainers import SortedList

from rackscale.model import state_checks
from rackscale.model.capacity import AllocationError, CapacityState
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.running import RunningJob, Usage
from rackscale.model.topology import GPUCluster
from rackscale.model.transaction import Checkpoint, CheckpointError, Transaction
from rackscale.model.view import BucketView, StateView, UsageView
from rackscale.model.workload import JobSpec


class ClusterState(CapacityState):
    """Mutable allocation state over an immutable :class:`GPUCluster`: capacity, and who holds it."""

    def __init__(self, cluster: GPUCluster) -> None:
        super().__init__(cluster)
        self.running: dict[str, RunningJob] = {}
        self.rack_jobs: list[set[str]] = [set() for _ in cluster.racks]
        self.node_jobs: list[set[str]] = [set() for _ in cluster.nodes]
        self.queue_usage: dict[str, Usage] = {}
        # How many running preemptible jobs hold each priority: a preemptor with no lower priority
        # among them skips the victim search entirely.
        self.preemptible_priorities: Counter[int] = Counter()
        # Expected ends of running jobs, kept sorted (backfill and the split decision read them in order).
        self._ends: SortedList = SortedList()

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
        self._take_all(placement.allocs, health=health, job=spec.name, verb="place")
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
        self._take_all(allocs, health=True, job=name, verb="extend")
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

    # ------------------------------------------------------------------ running jobs, in order
    def ends_in_order(self) -> Iterator[tuple[float, str]]:
        """Running jobs with an expected end, soonest first. A snapshot: the state may change while the
        caller reads it (O(running jobs) to take, then O(1) per job read)."""
        return iter(list(self._ends))

    def has_preemptible_below(self, priority: int) -> bool:
        """Is any running preemptible job of lower priority? (O(distinct priorities))"""
        return any(p < priority for p in self.preemptible_priorities)

    # ------------------------------------------------------------------ for tests
    def snapshot(self) -> dict[str, object]:
        """Every field and index as plain values (see :func:`rackscale.model.state_checks.snapshot`)."""
        return state_checks.snapshot(self)

    def check_invariants(self) -> None:
        """Recompute every index from scratch and compare (for tests; O(cluster))."""
        state_checks.check_invariants(self)


__all__ = [
    "AllocationError",
    "BucketView",
    "CapacityState",
    "Checkpoint",
    "CheckpointError",
    "ClusterState",
    "RunningJob",
    "StateView",
    "Transaction",
    "Usage",
    "UsageView",
]
