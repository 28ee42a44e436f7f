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
from typing import NamedTuple

from sortedcontainers import SortedList

from rackscale.model import state_checks
from rackscale.model.capacity import AllocationError, CapacityState
from rackscale.model.placement import NodeAlloc, Placement, shed_slices
from rackscale.model.running import RunningJob, Usage
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.transaction import Checkpoint, CheckpointError, Transaction
from rackscale.model.view import BucketView, StateView, UsageView
from rackscale.model.workload import JobKind, JobSpec

_INFERENCE = JobKind.INFERENCE


class _NodeIndexes(NamedTuple):
    """The buckets one node's whole-free count is kept in: its model's nodes, its rack's nodes, and its
    rack's (in its region, and in every region), with its rack and model."""

    node: list[set[int]]
    rack_node: list[set[int]]
    rack: int
    rack_region: list[set[int]]
    rack_all: list[set[int]]
    model: str


class ClusterState(CapacityState):
    """Mutable allocation state over an immutable :class:`GPUCluster`: capacity, and who holds it."""

    def __init__(self, cluster: GPUCluster) -> None:
        super().__init__(cluster)
        self.running: dict[str, RunningJob] = {}
        # Moves whenever an inference job's RunningJob is added, replaced or removed: what a reader derived
        # from the running services (the simulator's serving table, read at every instant) is still valid
        # while it stays the same, which a walk over the services would otherwise have to show.
        self.inference_version = 0
        self.rack_jobs: list[set[str]] = [set() for _ in cluster.racks]
        self.node_jobs: list[set[str]] = [set() for _ in cluster.nodes]
        self.queue_usage: dict[str, Usage] = {}
        # How many running preemptible jobs hold each priority: a preemptor with no lower priority
        # among them skips the victim search entirely.
        self.preemptible_priorities: Counter[int] = Counter()
        # Jobs running on loan in a reservation's GPUs (``Placement.opportunistic``): the reservation
        # counts their GPUs as its own, and the reclaim action stops them when its holder can start.
        self.opportunistic: set[str] = set()
        # Running elastic gangs that may be resized (``JobSpec.is_elastic``, preemptible): the scheduler's
        # shrink and growth visit these, never every running job.
        self.elastic: set[str] = set()
        # Expected ends of running jobs, sorted (backfill and the split decision read them in order). Changes
        # wait in ``_ends_in`` / ``_ends_out`` until the next read: a cycle allocates and rolls back every
        # placement it tries, and such an add and its discard cancel there, in a set, where the sorted
        # list takes 2.8 us for the pair (5 % of a 10,000-job backlog cycle at 100,000 GPUs).
        self._ends: SortedList = SortedList()
        self._ends_in: set[tuple[float, str]] = set()  # not in ``_ends`` yet
        self._ends_out: set[tuple[float, str]] = set()  # in ``_ends``, gone
        # Per node, the buckets its whole-free count moves in (``_whole_moved``), looked up once here
        # rather than through nine lookups for every slice a cycle places and rolls back.
        racks = cluster.racks
        self._one_rack: list[tuple[int]] = [(r,) for r in range(len(racks))]
        self._indexes_of: list[_NodeIndexes] = [
            _NodeIndexes(
                self.node_index[n.gpu_model].buckets,
                self.rack_node_index[n.rack].buckets,
                n.rack,
                self.rack_index[(racks[n.rack].gpu_model, racks[n.rack].region)].buckets,
                self.rack_index_all[racks[n.rack].gpu_model].buckets,
                n.gpu_model,
            )
            for n in cluster.nodes
        ]

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
        name = spec.name
        if name in self.running:
            raise AllocationError(f"job {name!r} already holds resources")
        allocs = placement.allocs
        self._take_all(allocs, health=health, job=name, verb="place")
        nodes = self.cluster.nodes
        # Most placements are one slice: no set of racks to build and sort, nor a tuple (one per rack, kept).
        racks = (
            self._one_rack[nodes[allocs[0].node].rack]
            if len(allocs) == 1
            else tuple(sorted({nodes[a.node].rack for a in allocs}))
        )
        # (spec, placement, started_at, expected_end, checkpointed_at, racks), by position: no keywords
        # to match for every placement a cycle tries
        rj = RunningJob(spec, placement, now, expected_end, now if checkpointed_at is None else checkpointed_at, racks)
        self.running[name] = rj
        if spec.kind is _INFERENCE:
            self.inference_version += 1
        rack_jobs, node_jobs = self.rack_jobs, self.node_jobs
        for r in racks:
            rack_jobs[r].add(name)
        gpu_milli = cpu_milli = memory_mib = 0
        for a in allocs:
            node_jobs[a.node].add(name)
            gpu_milli += a.milli * len(a.gpus)
            cpu_milli += a.cpu_milli
            memory_mib += a.memory_mib
        if placement.opportunistic:
            self.opportunistic.add(name)
        if spec.preemptible and spec.is_elastic:
            self.elastic.add(name)
        if spec.preemptible:
            self.preemptible_priorities[spec.priority] += 1
        if expected_end is not None:
            end = (expected_end, name)
            if end in self._ends_out:
                self._ends_out.discard(end)  # back as it was (a rollback's restore)
            else:
                self._ends_in.add(end)
        u = self.queue_usage.get(spec.queue)
        if u is None:  # (not ``setdefault(queue, Usage())``: that builds a Usage per call)
            u = self.queue_usage[spec.queue] = Usage()
        u.gpu_milli += gpu_milli
        u.cpu_milli += cpu_milli
        u.memory_mib += memory_mib
        u.jobs += 1
        return rj

    def release(self, name: str) -> RunningJob:
        """Free everything job ``name`` holds. Raises ``KeyError`` if it holds nothing."""
        rj = self.running.pop(name)
        if rj.spec.kind is _INFERENCE:
            self.inference_version += 1
        node_jobs, rack_jobs = self.node_jobs, self.rack_jobs
        gpu_milli = cpu_milli = memory_mib = 0
        for a in rj.placement.allocs:
            self._give(a)
            node_jobs[a.node].discard(name)
            gpu_milli += a.milli * len(a.gpus)
            cpu_milli += a.cpu_milli
            memory_mib += a.memory_mib
        for r in rj.racks:
            rack_jobs[r].discard(name)
        if rj.expected_end is not None:
            end = (rj.expected_end, name)
            if end in self._ends_in:
                self._ends_in.discard(end)  # never read: the sorted list never had it
            else:
                self._ends_out.add(end)
        self.opportunistic.discard(name)
        self.elastic.discard(name)
        spec = rj.spec
        if spec.preemptible:
            held = self.preemptible_priorities
            held[spec.priority] -= 1
            if not held[spec.priority]:
                del held[spec.priority]
        u = self.queue_usage[spec.queue]
        u.gpu_milli -= gpu_milli
        u.cpu_milli -= cpu_milli
        u.memory_mib -= memory_mib
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

    def shed(self, name: str, units: int) -> RunningJob:
        """Give back ``units`` of a running job's units, the last placed first (a service's scale-down);
        at least one unit stays. Which slices go, or which part of one: :func:`shed_slices`."""
        rj = self.running[name]
        kept, gone, shed = shed_slices(rj.placement, rj.spec.unit, units)
        if not shed:
            return rj  # nothing leaves: the indexes stay as they are (their sets' order decides placements)
        for a in gone:
            self._give(a)
        return self._replace_placement(rj, kept, rj.placement.units - shed)

    def _replace_placement(self, rj: RunningJob, allocs: tuple[NodeAlloc, ...], units: int) -> RunningJob:
        name = rj.spec.name
        old = rj.placement
        for r in rj.racks:
            self.rack_jobs[r].discard(name)
        for a in old.allocs:
            self.node_jobs[a.node].discard(name)
        placement = Placement(name, allocs, units, opportunistic=old.opportunistic)
        racks = tuple(sorted({self.cluster.nodes[a.node].rack for a in allocs}))
        for r in racks:
            self.rack_jobs[r].add(name)
        for a in allocs:
            self.node_jobs[a.node].add(name)
        u = self.queue_usage[rj.spec.queue]
        u.gpu_milli += placement.gpu_milli - old.gpu_milli
        u.cpu_milli += sum(a.cpu_milli for a in allocs) - sum(a.cpu_milli for a in old.allocs)
        u.memory_mib += sum(a.memory_mib for a in allocs) - sum(a.memory_mib for a in old.allocs)
        # (spec, placement, started_at, expected_end, checkpointed_at, racks), by position: ``replace``
        # costs as much again (it collects every field by name), and scale-ups call this three times
        new = RunningJob(rj.spec, placement, rj.started_at, rj.expected_end, rj.checkpointed_at, racks)
        self.running[name] = new
        if rj.spec.kind is _INFERENCE:
            self.inference_version += 1
        return new

    def note_checkpoint(self, name: str, now: float) -> None:
        rj = self.running[name] = replace(self.running[name], checkpointed_at=now)
        if rj.spec.kind is _INFERENCE:
            self.inference_version += 1

    # ------------------------------------------------------------------ whole-GPU slices, without a recount
    def _take(self, a: NodeAlloc) -> None:
        """``CapacityState._take`` without the node's recount for a slice of whole GPUs on healthy
        hardware (nearly every slice a cycle places and rolls back): its GPUs were whole free (the slice
        fits), so the node loses exactly that many whole GPUs and its shared flag stays as it was."""
        n = a.node
        if a.milli != MILLI_PER_GPU or self.gpu_failed[n] or self.node_down[n]:
            super()._take(a)  # shared GPUs, failed hardware: the full recount
            return
        free = self.gpu_free[n]
        gpus = a.gpus
        for g in gpus:
            free[g] -= MILLI_PER_GPU
        self.cpu_free[n] -= a.cpu_milli
        self.mem_free[n] -= a.memory_mib
        self.used_milli += MILLI_PER_GPU * len(gpus)
        self._whole_moved(n, -len(gpus))

    def _give(self, a: NodeAlloc) -> None:
        """``CapacityState._give``, the same way: a held whole GPU has 0 free, so it comes back whole."""
        n = a.node
        free = self.gpu_free[n]
        gpus = a.gpus
        if a.milli == MILLI_PER_GPU and not self.gpu_failed[n] and not self.node_down[n]:
            for g in gpus:
                if free[g]:
                    break  # not as a whole slice leaves it: the full recount
            else:
                for g in gpus:
                    free[g] += MILLI_PER_GPU
                self.cpu_free[n] += a.cpu_milli
                self.mem_free[n] += a.memory_mib
                self.used_milli -= MILLI_PER_GPU * len(gpus)
                self._whole_moved(n, len(gpus))
                return
        super()._give(a)

    def _whole_moved(self, n: int, delta: int) -> None:
        """What ``CapacityState._refresh`` does when node ``n``'s whole-free count moves by ``delta`` and
        its shared flag does not: the same index moves in the same order. The order matters: which node
        or rack of a bucket a placer meets first is the sets' iteration order, which follows the history
        of adds and discards, so a different sequence would change decisions."""
        self.node_version[n] += 1
        if not delta:
            return
        node_buckets, rack_node_buckets, r, rack_buckets, rack_all_buckets, model = self._indexes_of[n]
        old = self.node_whole[n]
        whole = self.node_whole[n] = old + delta
        node_buckets[old].discard(n)
        node_buckets[whole].add(n)
        rack_node_buckets[old].discard(n)
        rack_node_buckets[whole].add(n)
        old_r = self.rack_whole[r]
        new_r = self.rack_whole[r] = old_r + delta
        rack_buckets[old_r].discard(r)
        rack_buckets[new_r].add(r)
        rack_all_buckets[old_r].discard(r)
        rack_all_buckets[new_r].add(r)
        self.model_free_whole[model] += delta
        self.free_whole_total += delta

    # ------------------------------------------------------------------ failures
    def fail_gpu(self, node: int, gpu: int) -> set[str]:
        """Mark a GPU failed; returns the jobs that held it (the caller restarts them)."""
        if not self.node_failed[node] and gpu not in self.gpu_failed[node]:
            self.failed_gpus_count += 1
        self.gpu_failed[node].add(gpu)
        self._refresh(node)
        return {j for j in self.node_jobs[node] if self._holds_gpu(j, node, gpu)}

    def recover_gpu(self, node: int, gpu: int) -> None:
        if not self.node_failed[node] and gpu in self.gpu_failed[node]:
            self.failed_gpus_count -= 1
        self.gpu_failed[node].discard(gpu)
        self._refresh(node)

    def fail_node(self, node: int) -> set[str]:
        """Mark a whole node down; returns the jobs running on it."""
        if not self.node_failed[node]:
            self.failed_gpus_count += self.cluster.nodes[node].gpus - len(self.gpu_failed[node])
        self.node_failed[node] = self.node_down[node] = True
        self._refresh(node)
        return set(self.node_jobs[node])

    def recover_node(self, node: int) -> None:
        if self.node_failed[node]:
            self.failed_gpus_count -= self.cluster.nodes[node].gpus - len(self.gpu_failed[node])
        self.node_failed[node] = False
        self.node_down[node] = self.node_cordoned[node]  # a cordon outlives the repair
        self._refresh(node)

    # ------------------------------------------------------------------ cordons (an operator's, not a failure)
    def cordon_node(self, node: int) -> set[str]:
        """No new placement on ``node`` (kubectl's cordon): what runs there goes on. Returns those jobs (a
        drain stops them). Its GPUs are not failed: ``failed_gpus_count`` does not move."""
        self.node_cordoned[node] = self.node_down[node] = True
        self._refresh(node)
        return set(self.node_jobs[node])

    def uncordon_node(self, node: int) -> None:
        self.node_cordoned[node] = False
        self.node_down[node] = self.node_failed[node]
        self._refresh(node)

    def _holds_gpu(self, job: str, node: int, gpu: int) -> bool:
        return any(a.node == node and gpu in a.gpus for a in self.running[job].placement.allocs)

    # ------------------------------------------------------------------ running jobs, in order
    def ends_in_order(self) -> Iterator[tuple[float, str]]:
        """Running jobs with an expected end, soonest first. A snapshot: the state may change while the
        caller reads it (O(running jobs) to take, then O(1) per job read)."""
        ends = self._ends
        if self._ends_out:
            for end in self._ends_out:
                ends.remove(end)
            self._ends_out.clear()
        if self._ends_in:
            ends.update(self._ends_in)
            self._ends_in.clear()
        return iter(list(ends))

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
