"""Failures in the simulation: the fault source draws which part fails when; the host marks it and stops the
jobs on it, which restart from a checkpoint (:meth:`rackscale.host.parts.PartsMixin.part_failed`, the path the
service's health reports take too; the simulator keeps the job runs, not the changes it returns).

A mixin of :class:`rackscale.sim.simulator.Simulator` (the event side: failure and repair events).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rackscale.host.changes import Change
from rackscale.host.progress import Progress
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.sim.engine import Event, EventKind, EventQueue
from rackscale.sim.faults import FaultSource, Part


class FailuresMixin:
    cluster: GPUCluster
    state: ClusterState
    q: EventQueue
    progress: Progress
    _faults: FaultSource

    if TYPE_CHECKING:  # the host's (ClusterHost comes after this mixin in the simulator's bases)

        def part_failed(
            self, *, node: str, gpus: Iterable[int] | None = None, now: float, why: str
        ) -> list[Change]: ...

        def part_recovered(self, *, node: str, gpus: Iterable[int] | None = None, now: float) -> None: ...

    def _schedule_failure(self, part: Part, now: float) -> None:
        gap = self._faults.next_failure_in(part)
        if gap is not None:
            self.q.push(now + gap, EventKind.FAILURE, target=(part.value, -1, -1))

    def _failure(self, ev: Event, now: float) -> bool:
        assert ev.target is not None
        part = Part(ev.target[0])
        self._schedule_failure(part, now)
        hit: list[Change] = []
        why = f"{part.value} failure"
        if part is Part.GPU:
            g = self._faults.pick(self.cluster.total_gpus)
            node, gpu = self._gpu_at(g)
            if gpu in self.state.gpu_failed[node] or self.state.node_failed[node]:
                return False
            hit = self.part_failed(node=self.cluster.nodes[node].name, gpus=[gpu], now=now, why=why)
            target = (part.value, node, gpu)
        elif part is Part.NODE:
            node = self._faults.pick(len(self.cluster.nodes))
            if self.state.node_failed[node]:  # (a cordoned node can fail too)
                return False
            hit = self.part_failed(node=self.cluster.nodes[node].name, now=now, why=why)
            target = (part.value, node, -1)
        else:
            rack = self._faults.pick(len(self.cluster.racks))
            target = (part.value, rack, -1)
            self.progress.uplink_failed(rack, now)
        self.q.push(now + self._faults.repair_in(part), EventKind.REPAIR, target=target)
        return bool(hit)

    def _repair(self, ev: Event) -> bool:
        assert ev.target is not None
        part, index, gpu = Part(ev.target[0]), ev.target[1], ev.target[2]
        if part is Part.GPU:
            self.part_recovered(node=self.cluster.nodes[index].name, gpus=[gpu], now=self.q.now)
        elif part is Part.NODE:
            self.part_recovered(node=self.cluster.nodes[index].name, now=self.q.now)
        else:
            self.progress.uplink_repaired(index, self.q.now)
        return part is not Part.UPLINK

    def _gpu_at(self, g: int) -> tuple[int, int]:
        for n in self.cluster.nodes:  # O(nodes), only on a GPU failure
            if g < n.gpus:
                return n.index, g
            g -= n.gpus
        return len(self.cluster.nodes) - 1, 0
