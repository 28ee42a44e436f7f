"""Cordon, drain and uncordon nodes: an operator takes hardware out of service (a firmware update, a reboot
for ``nvidia-smi -pm 1``), under either clock.

kubectl's semantics (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/, and
``kubectl cordon``): a *cordoned* node takes no new work and what runs there goes on; a *drain* cordons it,
then evicts what runs there, each pod after its termination grace period, and is done when the node is
empty; ``uncordon`` makes it schedulable again (a drained node stays cordoned until then). Slurm's
``scontrol update NodeName=... State=DRAIN`` is the same idea there: no new jobs, the running ones finish
(https://slurm.schedmd.com/scontrol.html, "DRAIN").

Here: the cordon is a flag of the cluster state (:meth:`rackscale.model.state.ClusterState.cordon_node`),
so every placer honours it through ``node_down`` and the free-GPU indexes, with no code of its own. A drain's
jobs are told to stop when it starts (the checkpoint signal: :meth:`drain_notices` lists them for a backend
that can send it) and, once the grace has passed, stopped and requeued: a PREEMPTED change whose reason says
``drained: <reason>``, losing the work since their last checkpoint (nothing with ``checkpointOnPreempt``:
they saved on the signal), as a preemption does. Each running job whose stop time a verb moves gets a
NOTICE change for its event log: ``Draining`` (when it will be stopped) or ``DrainCalledOff``; a stop at
once (grace 0) has only its PREEMPTED change. The host calls :meth:`drains_due` at the start of every
cycle, so the simulator and the service's runner stop drained jobs at the same point of their step.

A mixin of :class:`rackscale.host.host.ClusterHost` (it uses the host's ``_stop``/``_requeue``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.kpis import KpiAccumulator
from rackscale.host.progress import Progress
from rackscale.host.runs import JobRun
from rackscale.model.errors import RackscaleError
from rackscale.model.state import ClusterState
from rackscale.scheduler.cycles import CycleDriver
from rackscale.scheduler.status import duration_words


class NodeMode(StrEnum):
    """What an operator made of a node (a node in none of these is schedulable)."""

    CORDONED = "cordoned"  # no new placements; what runs there goes on
    DRAINING = "draining"  # cordoned, and its jobs are being stopped (the grace runs, or has just run out)
    DRAINED = "drained"  # a drain that is done: cordoned and empty


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHold:
    """An operator's cordon or drain of one node. ``deadline``: when a drain stops what still runs there
    (its start plus the grace); None for a plain cordon."""

    reason: str
    since: float
    deadline: float | None = None

    @property
    def drain(self) -> bool:
        return self.deadline is not None


class DrainError(RackscaleError, ValueError):
    """A request that makes no sense (a negative or infinite grace): the caller's 4xx."""


class HoldVerb(StrEnum):
    CORDON = "cordon"
    DRAIN = "drain"
    UNCORDON = "uncordon"


def merged(old: NodeHold | None, verb: HoldVerb, *, now: float, reason: str, grace_s: float) -> NodeHold | None:
    """A node's hold after ``verb`` (None: schedulable). A cordon leaves an existing hold as it is; a drain of
    a cordoned node keeps its ``since`` and takes the drain's reason; a second drain keeps the earlier
    deadline (a drain is never put off by asking again). Raises :class:`DrainError` for a bad grace."""
    if verb is HoldVerb.UNCORDON:
        return None
    if verb is HoldVerb.CORDON:
        return old if old is not None else NodeHold(reason=reason, since=now)
    if not (math.isfinite(grace_s) and grace_s >= 0):
        raise DrainError(f"the grace must be a finite number of seconds >= 0, not {grace_s!r}")
    deadline = now + grace_s
    if old is None:
        return NodeHold(reason=reason, since=now, deadline=deadline)
    if old.deadline is None or deadline < old.deadline:
        return replace(old, reason=reason, deadline=deadline)
    return old


MAX_GRACE_S = 7 * 86400.0  # a longer grace is a typo, not a plan
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def grace_seconds(value: str | float | int) -> float:
    """A grace as seconds: a number, or text such as ``90``, ``90s``, ``10m``, ``1h30m``, ``2d`` (at most
    :data:`MAX_GRACE_S`). Raises :class:`DrainError` with the fix for anything else."""
    if isinstance(value, bool):
        raise DrainError("the grace must be a duration such as 90s, 10m or 1h30m, not a boolean")
    if isinstance(value, int | float):
        secs = float(value)
    else:
        text = value.strip().lower()
        m = _DURATION.fullmatch(text)
        if not text or m is None or not any(m.groups()):
            try:
                secs = float(text)
            except ValueError:
                raise DrainError(f"the grace {value[:40]!r} is not a duration (e.g. 90s, 10m, 1h30m)") from None
        else:
            d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
            secs = d * 86400 + h * 3600 + mi * 60 + sec
    if not (math.isfinite(secs) and 0 <= secs <= MAX_GRACE_S):
        raise DrainError(f"the grace must be between 0 and {MAX_GRACE_S / 86400:g} days, not {secs:g} s")
    return secs


@dataclass(frozen=True, slots=True)
class HoldOrder:
    """Node holds the store has committed (an operator's cordon, drain or uncordon, or those found after a
    restart), as the service's runner takes them from its inbox: each node's new hold (None: none)."""

    holds: tuple[tuple[int, NodeHold | None], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _StopAt:
    """When the drains of a running job's nodes stop it: the soonest deadline, the nodes whose drain has
    it, and that drain's reason."""

    deadline: float
    nodes: tuple[int, ...]
    reason: str


class DrainsMixin:
    state: ClusterState
    runs: dict[str, JobRun]
    progress: Progress
    kpi: KpiAccumulator
    cycles: CycleDriver

    if TYPE_CHECKING:  # the host's

        def _stop(self, r: JobRun, now: float, *, release: bool = True) -> None: ...
        def _requeue(self, r: JobRun, now: float, *, why: str) -> None: ...
        def _gpus_of(self, r: JobRun) -> float: ...

    @property
    def holds(self) -> dict[int, NodeHold]:
        """Every cordoned or draining node's hold, by node index (created on first use: a mixin has no
        ``__init__`` of its own)."""
        got: dict[int, NodeHold] | None = self.__dict__.get("_holds")
        if got is None:
            got = self.__dict__["_holds"] = {}
        return got

    @property
    def drain_stops(self) -> int:
        """Jobs stopped by drains so far (not counted as preemptions: no job asked for their GPUs)."""
        got: int = self.__dict__.get("drain_stops", 0)
        return got

    # ------------------------------------------------------------------ the operator's verbs
    def cordon(self, nodes: Iterable[int], *, now: float, reason: str) -> list[Change]:
        """No new placements on ``nodes``. A node already cordoned or draining keeps its hold."""
        return self._verb(nodes, HoldVerb.CORDON, now=now, reason=reason, grace_s=0.0)

    def drain(self, nodes: Iterable[int], *, now: float, reason: str, grace_s: float) -> list[Change]:
        """Cordon ``nodes`` and stop what runs there once ``grace_s`` has passed (0: now); see :func:`merged`."""
        return self._verb(nodes, HoldVerb.DRAIN, now=now, reason=reason, grace_s=grace_s)

    def uncordon(self, nodes: Iterable[int], *, now: float) -> list[Change]:
        """Schedulable again (a drain in its grace is called off: its jobs go on)."""
        return self._verb(nodes, HoldVerb.UNCORDON, now=now, reason="", grace_s=0.0)

    def put_holds(self, holds: Iterable[tuple[int, NodeHold | None]], now: float) -> list[Change]:
        """Set each node's hold as it is given (None: none), e.g. as the store has them after a restart;
        then stop what a drain whose grace has run out still finds there. A running job whose stop time
        this moves (a drain starts, comes sooner, is called off) gets a NOTICE change saying so first."""
        holds = list(holds)
        jobs = sorted({job for n, _ in holds for job in self.state.node_jobs[n]})
        before = {job: self._stop_at(job) for job in jobs}
        for n, hold in holds:
            if hold is None:
                if self.holds.pop(n, None) is not None:
                    self.state.uncordon_node(n)
                    self.cycles.freed = True  # its free GPUs are back: the next cycle looks at every job
            else:
                if n not in self.holds:
                    self.state.cordon_node(n)
                self.holds[n] = hold
        notices = [c for job in jobs if (c := self._notice(job, before[job], now)) is not None]
        return notices + self.drains_due(now)

    def _stop_at(self, job: str) -> _StopAt | None:
        """When the drains of the nodes ``job`` runs on stop it (the soonest), and which nodes say so."""
        soonest: _StopAt | None = None
        for n in sorted(set(self.state.running[job].placement.nodes)):
            hold = self.holds.get(n)
            if hold is None or hold.deadline is None:
                continue
            if soonest is None or hold.deadline < soonest.deadline:
                soonest = _StopAt(deadline=hold.deadline, nodes=(n,), reason=hold.reason)
            elif hold.deadline == soonest.deadline:
                soonest = replace(soonest, nodes=(*soonest.nodes, n))
        return soonest

    def _notice(self, job: str, before: _StopAt | None, now: float) -> Change | None:
        """The NOTICE for a job whose drain stop time moved (None: it did not, or the stop is now: the
        PREEMPTED change that follows at once says it)."""
        after = self._stop_at(job)
        # Only the stop time counts (an uncordon may leave another node's drain saying the same time).
        if (None if after is None else after.deadline) == (None if before is None else before.deadline):
            return None
        if after is not None and after.deadline <= now:
            return None
        if after is None:
            assert before is not None
            if before.deadline <= now:
                return None  # its grace had run out: it was stopped (or is, this instant)
            msg = f"the drain of {self._names(before.nodes)} was called off: it goes on"
            return Change(job, ChangeKind.NOTICE, now, "DrainCalledOff", msg)
        why = f" ({after.reason})" if after.reason else ""
        left = duration_words(after.deadline - now)
        msg = f"draining {self._names(after.nodes)}{why}: stopped and requeued in {left} unless it ends first"
        return Change(job, ChangeKind.NOTICE, now, "Draining", msg)

    def _names(self, nodes: tuple[int, ...]) -> str:
        names = [self.state.cluster.nodes[n].name for n in nodes]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return ("node " if len(names) == 1 else "nodes ") + shown

    def _verb(self, nodes: Iterable[int], verb: HoldVerb, *, now: float, reason: str, grace_s: float) -> list[Change]:
        holds = self.holds
        new = [(n, merged(holds.get(n), verb, now=now, reason=reason, grace_s=grace_s)) for n in nodes]
        return self.put_holds(new, now)

    # ------------------------------------------------------------------ reads
    def node_mode(self, n: int) -> NodeMode | None:
        hold = self.holds.get(n)
        if hold is None:
            return None
        if hold.deadline is None:
            return NodeMode.CORDONED
        return NodeMode.DRAINING if self.state.node_jobs[n] else NodeMode.DRAINED

    def hold_fields(self, n: int) -> dict[str, object]:
        """Node ``n``'s hold as the API shows it (mode, reason, since, deadline); empty when it has none."""
        hold = self.holds.get(n)
        if hold is None:
            return {}
        return {"mode": self.node_mode(n), "reason": hold.reason, "since": hold.since, "deadline": hold.deadline}

    def drain_notices(self) -> dict[str, str]:
        """The running jobs that a drain in its grace has told to stop (job -> reason): a backend that can
        send the checkpoint signal sends it to these."""
        out: dict[str, str] = {}
        for n, hold in sorted(self.holds.items()):
            if hold.deadline is not None:
                for job in sorted(self.state.node_jobs[n]):
                    out.setdefault(job, hold.reason)
        return out

    def next_drain_deadline(self, after: float) -> float | None:
        """The soonest deadline later than ``after`` of a drain whose nodes still hold jobs (the simulator
        wakes up then)."""
        due = [h.deadline for n, h in self.holds.items() if h.deadline is not None and h.deadline > after]
        return min(due, default=None)

    # ------------------------------------------------------------------ the step
    def drains_due(self, now: float) -> list[Change]:
        """Stop and requeue the jobs on the draining nodes whose grace has run out: one PREEMPTED change
        each. O(held nodes) when none is due."""
        holds = self.holds
        if not holds:  # (every cycle of every host comes here)
            return []
        why: dict[str, str] = {}
        for n, hold in sorted(holds.items()):
            if hold.deadline is not None and hold.deadline <= now:
                for job in sorted(self.state.node_jobs[n]):
                    why.setdefault(job, hold.reason)
        out: list[Change] = []
        for job, reason in sorted(why.items()):
            r = self.runs.get(job)
            if r is None:  # a job the host does not run (cannot happen: the state holds only the host's)
                continue
            self.progress.advance(r, now)
            # Told to stop at the drain's start: one that checkpoints on the signal keeps its progress.
            self.progress.lose_since_checkpoint(r, now, gpus=self._gpus_of(r), told=True)
            self._stop(r, now)
            self.__dict__["drain_stops"] = self.drain_stops + 1
            message = f"drained: {reason}" if reason else "drained"
            out.append(Change(job, ChangeKind.PREEMPTED, now, "Drained", message + "; requeued"))
            self._requeue(r, now, why=message)
        return out


__all__ = [
    "MAX_GRACE_S",
    "DrainError",
    "DrainsMixin",
    "HoldOrder",
    "HoldVerb",
    "NodeHold",
    "NodeMode",
    "grace_seconds",
    "merged",
]
