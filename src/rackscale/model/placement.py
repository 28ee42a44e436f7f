"""Where a job runs: the slices of nodes it holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rackscale.model.topology import MILLI_PER_GPU

if TYPE_CHECKING:
    from rackscale.model.workload import Resources


@dataclass(frozen=True, slots=True)
class NodeAlloc:
    """A slice of one node: ``milli`` thousandths of each listed GPU, plus CPU and memory.

    Whole-GPU slices have ``milli == 1000``; a shared-GPU slice lists one GPU with ``milli < 1000``.
    A CPU-only slice lists no GPU.
    """

    node: int
    gpus: tuple[int, ...]
    milli: int = MILLI_PER_GPU
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def gpu_milli(self) -> int:
        return self.milli * len(self.gpus)

    @property
    def whole_gpus(self) -> int:
        return len(self.gpus) if self.milli == MILLI_PER_GPU else 0


@dataclass(frozen=True, slots=True)
class Placement:
    """The slices a job holds. ``units`` is how many of the job's units this placement carries.

    ``opportunistic``: the job was backfilled onto GPUs a reservation holds for a blocked gang, and runs
    there on loan: the scheduler stops it (the *reclaim* action) when the gang can start.
    """

    job: str
    allocs: tuple[NodeAlloc, ...]
    units: int
    opportunistic: bool = False

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(a.node for a in self.allocs)

    @property
    def gpu_milli(self) -> int:
        return sum(a.gpu_milli for a in self.allocs)

    @property
    def whole_gpus(self) -> int:
        return sum(a.whole_gpus for a in self.allocs)


def units_in(a: NodeAlloc, unit: Resources) -> int:
    """How many units of a job a slice of it carries: whole-GPU units placed on one node share a slice
    (and CPU-only units likewise); a shared-GPU unit has a slice of its own."""
    if unit.gpus and a.gpus and a.milli == MILLI_PER_GPU:
        return max(1, len(a.gpus) // unit.gpus)
    if unit.is_fractional:
        return 1
    if unit.cpu_milli:
        return max(1, a.cpu_milli // unit.cpu_milli)
    if unit.memory_mib:
        return max(1, a.memory_mib // unit.memory_mib)
    return 1


def split_units(a: NodeAlloc, unit: Resources, units: int) -> tuple[NodeAlloc, NodeAlloc]:
    """``(what stays, what goes)`` when ``units`` of the units a slice carries leave it: the last GPUs
    go, with the units' CPU and memory. Only for a slice carrying more than ``units`` units."""
    return _cut(a, unit.gpus * units if a.gpus else 0, unit.cpu_milli * units, unit.memory_mib * units)


def _cut(a: NodeAlloc, gpus: int, cpu: int, mem: int) -> tuple[NodeAlloc, NodeAlloc]:
    """``(what stays, what goes)`` when a slice's last ``gpus`` GPUs leave it with ``cpu`` and ``mem``."""
    cut = len(a.gpus) - gpus
    stays = NodeAlloc(a.node, a.gpus[:cut], a.milli, a.cpu_milli - cpu, a.memory_mib - mem)
    return stays, NodeAlloc(a.node, a.gpus[cut:], a.milli, cpu, mem)


def shed_slices(
    placement: Placement, unit: Resources, units: int
) -> tuple[tuple[NodeAlloc, ...], tuple[NodeAlloc, ...], int]:
    """``(slices kept, slices given back, units shed)`` when ``units`` units leave a placement, the last
    placed first, at least one staying.

    A slice can carry several units (whole-GPU replicas on one node are merged into one slice): the last
    slice is split when it carries more units than are left to give back. A unit larger than a node (a
    replica over several nodes, placed as single GPUs in one rack) goes as the placement's last
    ``unit.gpus`` GPUs, each with the CPU and memory the placer gave it, the boundary slice split: slices
    on one node are merged, so which GPUs made which replica is not kept, and what stays is counted
    into replicas again by whoever reads it (``llm.jobs.replica_layouts``: rack by rack). A placement
    whose GPUs are not ``units`` x ``unit.gpus`` keeps its units."""
    allocs = list(placement.allocs)
    left = asked = max(0, min(units, placement.units - 1))
    gone: list[NodeAlloc] = []
    if unit.gpus and allocs and any(len(a.gpus) < unit.gpus for a in allocs):
        if sum(len(a.gpus) for a in allocs) != placement.units * unit.gpus:
            return placement.allocs, (), 0
        # What the placer gave each GPU of such a replica (``scheduler.groups``: a unit of one GPU each).
        cpu, mem = -(-unit.cpu_milli // unit.gpus), -(-unit.memory_mib // unit.gpus)
        gpus = left * unit.gpus
        while gpus > 0:
            last = allocs[-1]
            if len(last.gpus) <= gpus:
                gone.append(allocs.pop())
                gpus -= len(last.gpus)
                continue
            allocs[-1], part = _cut(last, gpus, min(last.cpu_milli, cpu * gpus), min(last.memory_mib, mem * gpus))
            gone.append(part)
            gpus = 0
        return tuple(allocs), tuple(gone), asked
    while left > 0 and allocs:
        last = allocs[-1]
        k = units_in(last, unit)
        if k > left:
            allocs[-1], part = split_units(last, unit, left)
            gone.append(part)
            left = 0
        elif len(allocs) == 1:
            break  # the only slice: it stays whole
        else:
            gone.append(allocs.pop())
            left -= k
    return tuple(allocs), tuple(gone), asked - left
