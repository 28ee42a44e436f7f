"""Where a job runs: the slices of nodes it holds."""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.model.topology import MILLI_PER_GPU


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
