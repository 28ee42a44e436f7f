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
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple, Protocol

from rackscale.model.placement import NodeAlloc
from rackscale.model.running import RunningJob
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec
from rackscale.scheduler.budgets import BudgetLedger
from rackscale.scheduler.pending import PendingQueue
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """A queue (tenant). ``weight`` scales its fair share; ``quota_gpus`` caps what it may hold."""

    name: str
    weight: float = 1.0
    quota_gpus: float | None = None


class AttainedService(NamedTuple):
    """What a job got in its *earlier* runs, kept by the host (the current run's share comes from the state:
    ``(now - started_at) * GPUs``). Least-attained-service orders read it (``las.py``); the host replaces a
    job's record when a run stops or starts, so a cycle reads it without rebuilding anything.

    A named tuple, not a dataclass: one is built per stop, and read for every such job a cycle looks at."""

    gpu_s: float = 0.0  # GPU-seconds over the earlier runs (2D-LAS's service: GPUs x time)
    run_s: float = 0.0  # seconds those runs lasted
    waited_s: float = 0.0  # seconds it waited between them (not before its first start)
    stopped_at: float = 0.0  # when the last of them stopped
    runs: int = 0  # how many there were

    def after_run(self, *, started: float, now: float, gpus: float) -> AttainedService:
        """This record with one more run, from ``started`` to ``now`` on ``gpus`` GPUs."""
        run = max(now - started, 0.0)
        return AttainedService(self.gpu_s + run * gpus, self.run_s + run, self.waited_s, now, self.runs + 1)

    def restarted(self, now: float) -> AttainedService:
        """This record when the job starts again at ``now``: the wait since its last stop is added."""
        return self._replace(waited_s=self.waited_s + max(now - self.stopped_at, 0.0))


NO_SERVICE: Mapping[str, AttainedService] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleContext:
    """What plugins may read besides the state: the time, the queue configuration, each job's service in its
    earlier runs (only jobs that ran and stopped are in it; the mapping is the host's, not a copy), and the
    disruption budgets, if the caller gave any (``budgets.py``: the cycle's account, which its stops spend)."""

    now: float
    queues: Mapping[str, QueueConfig]
    models: tuple[str, ...]
    attained: Mapping[str, AttainedService] = field(default_factory=lambda: NO_SERVICE)
    elastic: bool = True  # the profile's ``Profile.elastic``: may a gang start on its minimum (``fewest_units``)?
    budgets: BudgetLedger | None = None  # None: no budgets (the simulator, serve): nothing is held back


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

    def explain(self, job: JobSpec, victim: RunningJob, ctx: CycleContext) -> str:
        """Why ``victim`` is stopped for ``job``, for the victim's owner: no job names (the preemptor may
        be another tenant's)."""
        ...

    def may_take_equal(self, priority: int, state: StateView, ctx: CycleContext) -> bool:
        """Could a waiting job of ``priority`` have a victim of its own priority in this cycle? False must
        be sure: the cycle stops early on it when no lower priority runs (``admission.stop_status``)."""
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
    # Lend reserved GPUs to waiting work and reclaim them for the holder (``loans.py``: lend, reclaim).
    opportunistic_backfill: bool = False
    # Move small running jobs out of a rack so a waiting gang gets it whole, when the wait it is spared
    # outweighs their lost work and restarts (``consolidate.py``, KAI-Scheduler's consolidation action).
    consolidate: bool = False
    # Elastic gangs (minGpus/maxGpus) start smaller, shrink for waiting work and grow into idle GPUs
    # (``elastic.py``: the shrink action, and growth at the end of the cycle); off: they run at their size.
    elastic: bool = False
    # One line on what the profile stands for (the CLI's --help lists the profiles with it).
    summary: str = ""


QUEUE_SORTS: dict[str, Callable[[], QueueSort]] = {}
FILTERS: dict[str, Callable[[], Filter]] = {}
PLACERS: dict[str, Callable[[int], Placer]] = {}
VICTIM_CHOOSERS: dict[str, Callable[[], VictimChooser]] = {}

PROFILES: dict[str, Profile] = {
    "rackscale": Profile(
        name="rackscale",
        # Issue 13: least attained service (Tiresias' 2D-LAS, ``las.py``) within priorities and fair share,
        # with preemption between equal priorities where it pays; -41 % mean JCT on Philly x8 (docs).
        queue_sort="priority-las",
        victims="las-victims",
        opportunistic_backfill=True,
        elastic=True,
        summary="topology-aware: packs each gang into the fewest NVLink racks, lends reserved GPUs (the default)",
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
