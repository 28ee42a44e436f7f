"""Failures in the simulation: parts fail and are repaired; the jobs on them restart from a checkpoint.

A mixin of :class:`rackscale.sim.simulator.Simulator` (it stops, re-times and requeues the simulator's jobs).
"""

from __future__ import annotations

from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.sim.engine import Event, EventKind, EventQueue
from rackscale.sim.faults import FaultSource, Part
from rackscale.sim.records import JobRun


class FailuresMixin:
    cluster: GPUCluster
    state: ClusterState
    q: EventQueue
    runs: dict[str, JobRun]
    uplinks_down: list[int]
    multi_rack_by_rack: list[set[str]]
    _faults: FaultSource

    def _set_rate(self, r: JobRun, now: float) -> None:
        raise NotImplementedError

    def _progress(self, r: JobRun, now: float) -> None:
        raise NotImplementedError

    def _lose_since_checkpoint(self, r: JobRun, now: float) -> None:
        raise NotImplementedError

    def _stop(self, r: JobRun, now: float, *, release: bool = True) -> None:
        raise NotImplementedError

    def _requeue(self, r: JobRun, now: float, *, why: str) -> None:
        raise NotImplementedError

    def _schedule_failure(self, part: Part, now: float) -> None:
        gap = self._faults.next_failure_in(part)
        if gap is not None:
            self.q.push(now + gap, EventKind.FAILURE, target=(part.value, -1, -1))

    def _failure(self, ev: Event, now: float) -> bool:
        assert ev.target is not None
        part = Part(ev.target[0])
        self._schedule_failure(part, now)
        hit: set[str] = set()
        if part is Part.GPU:
            g = self._faults.pick(self.cluster.total_gpus)
            node, gpu = self._gpu_at(g)
            if gpu in self.state.gpu_failed[node] or self.state.node_down[node]:
                return False
            hit = self.state.fail_gpu(node, gpu)
            target = (part.value, node, gpu)
        elif part is Part.NODE:
            node = self._faults.pick(len(self.cluster.nodes))
            if self.state.node_down[node]:
                return False
            hit = self.state.fail_node(node)
            target = (part.value, node, -1)
        else:
            rack = self._faults.pick(len(self.cluster.racks))
            self.uplinks_down[rack] += 1
            target = (part.value, rack, -1)
            for name in sorted(self.multi_rack_by_rack[rack]):
                self._set_rate(self.runs[name], now)
        for name in sorted(hit):
            r = self.runs[name]
            self._progress(r, now)
            self._lose_since_checkpoint(r, now)
            self._stop(r, now)
            self._requeue(r, now, why=f"{part.value} failure")
        self.q.push(now + self._faults.repair_in(part), EventKind.REPAIR, target=target)
        return bool(hit)

    def _repair(self, ev: Event) -> bool:
        assert ev.target is not None
        part, index, gpu = Part(ev.target[0]), ev.target[1], ev.target[2]
        if part is Part.GPU:
            self.state.recover_gpu(index, gpu)
        elif part is Part.NODE:
            self.state.recover_node(index)
        else:
            self.uplinks_down[index] = max(0, self.uplinks_down[index] - 1)
            for name in sorted(self.multi_rack_by_rack[index]):
                self._set_rate(self.runs[name], self.q.now)
        return part is not Part.UPLINK

    def _gpu_at(self, g: int) -> tuple[int, int]:
        for n in self.cluster.nodes:  # O(nodes), only on a GPU failure
            if g < n.gpus:
                return n.index, g
            g -= n.gpus
        return len(self.cluster.nodes) - 1, 0
