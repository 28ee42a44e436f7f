"""The scheduling framework: narrow plugin Protocols, a registry by name, and profiles that pick them.

Extension points, in the order a cycle uses them:

- ``QueueSort``   orders the pending jobs (priority, fair share, submit time);
- ``Filter``      rejects a job before any search, with a reason (model, size, quota);
- ``Placer``      scores and picks nodes for one group of units (the topology-aware part);
- ``VictimChooser`` picks preemption victims when a job cannot be placed.

Baselines are placers behind the same interface, so a comparison changes one name in a profile.

Every plugin reads the state through a :class:`StateView`, which has no mutating method and whose fields
are read-only types: mypy rejects a plugin that writes. Only the cycle's transaction (``actions.py``,
``gang.py``) changes the state, so that rolling it back undoes everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rackscale.model.placement import NodeAlloc
from rackscale.model.running import RunningJob
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """A queue (tenant). ``weight`` scales its fair share; ``quota_gpus`` caps what it may hold."""

    name: str
    weight: float = 1.0
    quota_gpus: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleContext:
    """What plugins may read besides the state: the time and the queue configuration."""

    now: float
    queues: Mapping[str, QueueConfig]
    models: tuple[str, ...]


class QueueSort(Protocol):
    name: str

    def order(self, pending: PendingQueue, state: StateView, ctx: CycleContext) -> Iterator[JobSpec]:
        """Yield pending jobs in the order to try them. May read ``state`` between yields: placements
        made earlier in the cycle are already in it (progressive fair share)."""
        ...


class Filter(Protocol):
    """``static`` filters look only at the job's shape and the (immutable) cluster, so the scheduler may
    remember their answer per shape instead of asking again for every pending job of every cycle."""

    name: str
    static: bool

    def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status: ...


class Placer(Protocol):
    name: str

    def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
        """Slices for the group, or ``None`` if it cannot be placed now. The scheduler checks the slices
        (a placer that raises, or returns slices that do not fit, gives the job a ``Code.ERROR`` status)."""
        ...


@dataclass(frozen=True, slots=True)
class VictimChoice:
    victims: tuple[RunningJob, ...]
    racks: frozenset[int]  # where the preemptor must then be placed


class VictimChooser(Protocol):
    name: str

    def choose(
        self,
        job: JobSpec,
        state: StateView,
        ctx: CycleContext,
        *,
        exclude_racks: frozenset[int],
        protected: frozenset[str] = frozenset(),
    ) -> Sequence[VictimChoice]:
        """Candidate victim sets among running jobs, best first (the scheduler tries them in order and
        keeps the first that lets the job run); never a job in ``protected`` (placed this cycle)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A named set of plugins. ``victims=""`` disables preemption."""

    name: str
    queue_sort: str = "priority-fairshare"
    filters: tuple[str, ...] = ("gpu-model", "fits-ever", "quota")
    placer: str = "topology-pack"
    victims: str = "cheapest-victims"
    backfill: bool = True
    # How long a gang that prefers one rack waits for one before it may be split over racks ...
    split_wait_s: float = 0.0
    # ... and whether it then splits at once ("eager") or only when waiting would cost more ("cost").
    split_policy: str = "cost"
    # One line on what the profile stands for (the CLI's --help lists the profiles with it).
    summary: str = ""


QUEUE_SORTS: dict[str, Callable[[], QueueSort]] = {}
FILTERS: dict[str, Callable[[], Filter]] = {}
PLACERS: dict[str, Callable[[int], Placer]] = {}
VICTIM_CHOOSERS: dict[str, Callable[[], VictimChooser]] = {}

PROFILES: dict[str, Profile] = {
    "rackscale": Profile(
        name="rackscale", summary="topology-aware: packs each gang into the fewest NVLink racks (the default)"
    ),
    "first-fit": Profile(
        name="first-fit",
        placer="first-fit",
        summary="the default Kubernetes scheduler: LeastAllocated, spreads over the emptiest nodes",
    ),
    "best-fit": Profile(name="best-fit", placer="best-fit", summary="the fullest node that fits, blind to racks"),
    "random": Profile(
        name="random", placer="random", summary="any node that fits, at random (a floor to compare with)"
    ),
    "slurm-tree": Profile(
        name="slurm-tree", placer="slurm-tree", summary="Slurm's topology/tree: best fit under one switch (rack)"
    ),
    # The FGD paper's policies for GPU-sharing pods (Weng et al., ATC'23), as its authors' simulator scores.
    "fgd": Profile(name="fgd", placer="fgd", summary="FGD: the node where expected GPU fragmentation grows least"),
    "gpu-packing": Profile(
        name="gpu-packing", placer="gpu-packing", summary="partly used GPUs first, then used nodes, then idle"
    ),
    "gpu-clustering": Profile(
        name="gpu-clustering", placer="gpu-clustering", summary="nodes running pods of the same GPU shape first"
    ),
    "dot-prod": Profile(
        name="dot-prod", placer="dot-prod", summary="the smallest dot product of free and asked CPU and GPU"
    ),
    "share-best-fit": Profile(
        name="share-best-fit", placer="share-best-fit", summary="the least CPU and GPU left after placing"
    ),
    "share-random": Profile(name="share-random", placer="share-random", summary="a random node that fits"),
}


def unknown(kind: str, name: str, known: Mapping[str, object]) -> ValueError:
    return ValueError(f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(known))}")
