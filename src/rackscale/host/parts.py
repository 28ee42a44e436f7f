"""Failed parts in the host, under both clocks: a node or GPU fails, the jobs on it stop, lose the work since
their last checkpoint and go back to the queue (up to ``HostOptions.max_restarts``), as the simulator's
failures do (:meth:`rackscale.host.host.ClusterHost.stop_hit`); here each such job also gets a
:class:`Change` (PREEMPTED with the part's reason, or FAILED at the restart limit) that the service persists.

A mixin of :class:`rackscale.host.host.ClusterHost`. The service's runner feeds it what its backend says of
the nodes (:class:`NodeHealth`, which backends import from :mod:`rackscale.backends.health`) through
:meth:`PartsMixin.apply_health`, which diffs each report against the parts the reports have marked so far:
a part failed by anyone else is never recovered here. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.runs import JobRun, RunStatus
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.scheduler.cycles import CycleDriver


class NodeState(StrEnum):
    """Why a node takes no work (Slurm's node states and Kubernetes' conditions, mapped to one set).

    Two kinds, as Slurm's sinfo(1) "NODE STATE CODES" tells them apart: a node that is *gone* (DOWN, FAIL:
    its jobs are lost, so the host stops and requeues them) and one that is *closed* (DRAIN, NOT_RESPONDING,
    TAINTED: "will not be allocated additional jobs", but the jobs on it go on)."""

    OK = "ok"  # healthy as a whole; ``failed_gpus`` may still name some GPUs
    DOWN = "down"  # Slurm DOWN; Kubernetes Ready=False or a NoExecute taint
    FAIL = "fail"  # Slurm FAIL: an admin declared it failed ("unavailable for use")
    DRAIN = "drain"  # Slurm DRAIN/DRAINING/DRAINED/FAILING; Kubernetes spec.unschedulable (a cordon)
    NOT_RESPONDING = "not-responding"  # Slurm's ``*`` suffix (DOWN after SlurmdTimeout); Kubernetes Ready=Unknown
    TAINTED = "tainted"  # Kubernetes NoSchedule taint

    @property
    def failed(self) -> bool:
        """The node takes no new work."""
        return self is not NodeState.OK

    @property
    def stops_jobs(self) -> bool:
        """The node is gone: the jobs on it have lost their GPUs."""
        return self in (NodeState.DOWN, NodeState.FAIL)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHealth:
    """One node that is not fully healthy: its state, the GPUs (indexes on the node) that failed while the
    node itself is up, and the backend's reason (e.g. Slurm's ``Not responding``, an XID error)."""

    node: str
    state: NodeState = NodeState.OK
    failed_gpus: tuple[int, ...] = ()
    reason: str = ""

    def describe(self) -> str:
        """``node n07 DOWN (Not responding)`` or ``GPU 2 of node n07 failed (XID 79)``: for the job's event."""
        why = f" ({self.reason})" if self.reason else ""
        if self.state.failed:
            return f"node {self.node} {self.state.name}{why}"
        gpus = ", ".join(str(g) for g in self.failed_gpus)
        return f"GPU {gpus} of node {self.node} failed{why}"


def merged(reports: Iterable[NodeHealth]) -> dict[str, NodeHealth]:
    """One report per node (a backend may read two sources): the graver state wins (gone over closed over
    OK), the failed GPUs add up, the reasons join."""
    out: dict[str, NodeHealth] = {}
    for h in reports:
        old = out.get(h.node)
        if old is None:
            out[h.node] = h
            continue
        state = max(old.state, h.state, key=_gravity)
        gpus = tuple(sorted(set(old.failed_gpus) | set(h.failed_gpus)))
        reason = "; ".join(r for r in (old.reason, h.reason) if r)
        out[h.node] = NodeHealth(node=h.node, state=state, failed_gpus=gpus, reason=reason)
    return out


def _gravity(s: NodeState) -> int:
    return 2 if s.stops_jobs else 1 if s.failed else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthMarks:
    """What the health reports have failed on one node: the node itself, and GPUs (named failed, or free
    GPUs of a closed node: a drained node takes no new work while its jobs go on)."""

    down: bool = False
    gpus: frozenset[int] = field(default_factory=frozenset)

    @property
    def empty(self) -> bool:
        return not self.down and not self.gpus


class PartsMixin:
    cluster: GPUCluster
    state: ClusterState
    runs: dict[str, JobRun]
    cycles: CycleDriver
    # Per node name, what the health reports marked (``apply_health``); set lazily: the simulator has none.
    _health_marks: dict[str, HealthMarks]

    if TYPE_CHECKING:  # the host's

        def stop_hit(self, names: set[str], now: float, *, why: str) -> None: ...

    # ------------------------------------------------------------------ one part
    def part_failed(self, *, node: str, gpus: Iterable[int] | None = None, now: float, why: str) -> list[Change]:
        """Node ``node`` (``gpus`` None) or some of its GPUs failed: mark them, stop and requeue the jobs that
        held them. One change per job stopped. Failing what is failed already stops nothing."""
        n = self._node_index(node)
        if gpus is None:
            hit = self.state.fail_node(n)  # a node failed already holds no job: stops nothing
        else:
            hit = set()
            for g in sorted(set(gpus)):
                self._check_gpu(n, g)
                if g not in self.state.gpu_failed[n]:
                    hit |= self.state.fail_gpu(n, g)
        return self.stop_for_part(hit, now, why=why)

    def part_recovered(self, *, node: str, gpus: Iterable[int] | None = None, now: float) -> None:
        """The node (``gpus`` None) or those GPUs work again: the next cycle may place on them."""
        n = self._node_index(node)
        if gpus is None:
            self.state.recover_node(n)
        else:
            for g in sorted(set(gpus)):
                self._check_gpu(n, g)
                self.state.recover_gpu(n, g)
        self.cycles.freed = True

    def stop_for_part(self, hit: set[str], now: float, *, why: str) -> list[Change]:
        """The simulator's stop (``stop_hit``) of the jobs a failed part hit, with a change for each."""
        runs = {name: self.runs[name] for name in hit if name in self.runs}
        self.stop_hit(set(runs), now, why=why)
        out: list[Change] = []
        for name, r in sorted(runs.items()):
            if r.status is RunStatus.FAILED:  # stopped more often than max_restarts
                out.append(Change(name, ChangeKind.FAILED, now, "RestartLimit", r.reason))
            else:
                msg = f"{why}; requeued (the work since its last checkpoint is lost)"
                out.append(Change(name, ChangeKind.PREEMPTED, now, "NodeFailed", msg))
        return out

    # ------------------------------------------------------------------ a backend's report
    def apply_health(self, reports: Iterable[NodeHealth], now: float) -> list[Change]:
        """Make the host agree with a full report (a node absent from it is healthy): fail what it newly
        names, recover what it no longer names. Nodes this cluster does not have are ignored."""
        marks = self.__dict__.setdefault("_health_marks", {})
        want = merged(reports)
        index = {nd.name: nd.index for nd in self.cluster.nodes}
        out: list[Change] = []
        for name in sorted((set(want) | set(marks)) & set(index)):
            n = index[name]
            h = want.get(name) or NodeHealth(node=name)
            old = marks.get(name, HealthMarks())
            named = {g for g in h.failed_gpus if 0 <= g < self.cluster.nodes[n].gpus}
            if h.state.failed and not h.state.stops_jobs:
                named |= self._free_gpus(n)  # closed: no new work here, the jobs on it go on
            new = named - old.gpus - self.state.gpu_failed[n]  # never take over a part failed by another
            if new:
                only = NodeHealth(node=name, failed_gpus=tuple(sorted(new)), reason=h.reason)
                out += self.part_failed(node=name, gpus=new, now=now, why=only.describe())
            down = old.down
            if h.state.stops_jobs and not old.down and not self._node_failed(n):
                out += self.part_failed(node=name, now=now, why=h.describe())
                down = True
            back = old.gpus - named
            if back:
                self.part_recovered(node=name, gpus=back, now=now)
            if old.down and not h.state.stops_jobs:
                self.part_recovered(node=name, now=now)
                down = False
            mark = HealthMarks(down=down, gpus=frozenset((old.gpus & named) | new))
            if mark.empty:
                marks.pop(name, None)
            else:
                marks[name] = mark
        return out

    def health_marks(self) -> dict[str, HealthMarks]:
        """What the health reports have failed, by node name (for the API and the tests)."""
        return dict(self.__dict__.get("_health_marks", {}))

    # ------------------------------------------------------------------ internals
    def _node_index(self, node: str) -> int:
        for nd in self.cluster.nodes:  # O(nodes), only when a part fails or recovers
            if nd.name == node:
                return nd.index
        raise KeyError(f"no node {node!r} in cluster {self.cluster.name!r}")

    def _node_failed(self, n: int) -> bool:
        # ``node_failed`` where the state tells a failure from a cordon (both set ``node_down``).
        return bool(getattr(self.state, "node_failed", self.state.node_down)[n])

    def _check_gpu(self, n: int, gpu: int) -> None:
        if not 0 <= gpu < self.cluster.nodes[n].gpus:
            raise ValueError(f"node {self.cluster.nodes[n].name} has no GPU {gpu}")

    def _free_gpus(self, n: int) -> set[int]:
        running = self.state.running
        held = {g for j in self.state.node_jobs[n] for a in running[j].placement.allocs if a.node == n for g in a.gpus}
        return set(range(self.cluster.nodes[n].gpus)) - held - self.state.gpu_failed[n]


__all__ = ["HealthMarks", "NodeHealth", "NodeState", "PartsMixin", "merged"]
