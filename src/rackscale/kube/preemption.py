"""Stopping running gangs under Kubernetes: which pods may be stopped, stopping them, and the wait.

What kube-scheduler's DefaultPreemption does for a pod, done for a gang; KAI-Scheduler's consolidation (the
core's ``consolidate`` action moves small gangs out of a rack for a waiting one); and, with ``--las-preemption``,
least attained service between equal priorities (``las-victims``, as in the simulator: docs/scheduler-las.md),
all stopped the same way:

- **Victims** are the pods of rackscale's own running gangs, a gang's pods together (stopping one member stops
  the gang's work; :func:`victim_job`). Pods of other schedulers are never victims: their scheduler would put
  their replacements straight back on the freed GPUs (kube-scheduler honours the ``nominatedNodeName`` of its
  own pods only), and which of them may go is its business. Nor are pods already being deleted, pods a
  DaemonSet owns (recreated on the same node whatever any scheduler says) and static pods (their kubelet
  recreates them). The core chooses among them: the fewest and cheapest of lower priority, rack by rack
  (:class:`rackscale.scheduler.preemption.CheapestVictims`); with ``--las-preemption`` also one of the same
  priority that has had more GPU time (:class:`rackscale.scheduler.las.LasVictims`, its earlier runs read from
  :mod:`rackscale.kube.attained`, which ``carry_out``'s caller tells of every stop); consolidation moves only
  gangs whose every pod has a controller (``JobSpec.movable``, read in :mod:`rackscale.kube.snapshot`).
- **PodDisruptionBudgets** (:mod:`rackscale.kube.budgets`, watched as nodes and pods are): the core gets, per
  budget, the disruptions it allows, and per gang its pods each budget selects. As kube-scheduler's
  DefaultPreemption, it takes victims within their budgets first, a victim past its budget only when no others
  free the room (``Preemption.over_budget``: counted in ``Stats.pdb_violations`` and told to the victim), and
  ranks the racks by the fewest disruptions past a budget first; consolidation moves nothing past one. Without
  RBAC for them (a 403), or with ``--no-preemption``, none are read.
- **Stopping** one (:class:`Evictor`): its ``DisruptionTarget`` condition (reason ``PreemptionByScheduler``,
  what a Job's ``podFailurePolicy`` matches), then a DELETE with its UID as precondition and no grace period of
  ours, so the pod gets its own ``terminationGracePeriodSeconds`` to save its work on SIGTERM; then a
  ``Preempted`` event saying why, without the preemptor's name (it may be another tenant's). A DELETE, not an
  Eviction: a PodDisruptionBudget orders the victims but does not hold back a preemption, as under kube-scheduler.
- **The wait** (:class:`EvictionBook`): the victims hold their GPUs until they are gone, so nothing is bound
  that cycle where they ran; each preemptor pod is nominated to its planned node (``status.nominatedNodeName``)
  and told why it waits. While a victim deleted for it is still there, the gang is placed nowhere else (for at
  most the victims' grace period and :data:`HOLD_MARGIN_S`) and preempts no one else (a second cycle would
  otherwise stop more pods for the same room). Meanwhile the room it is nominated to is kept from every other
  job (:meth:`EvictionBook.owed`, a placeholder in the snapshot); once its victims are gone it is placed
  first, on its own (:meth:`EvictionBook.ready`), and may preempt again only if the room went to someone else
  meanwhile. A new leader reads a preemption in flight back from the pods (:meth:`EvictionBook.adopt`), as
  kube-scheduler does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kubernetes import client

from rackscale.kube.binding import assignments, delete_pod
from rackscale.kube.config import Stats
from rackscale.kube.pods import (
    Gang,
    is_terminated,
    live_member,
    node_name,
    pod_annotations,
    priority,
)
from rackscale.kube.report import Reporter
from rackscale.kube.snapshot import Victim
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, PreemptionPolicy
from rackscale.scheduler.decisions import Decisions, Preemption, PreemptionCause

log = logging.getLogger("rackscale.kube")

Obj = Mapping[str, Any]

MIRROR = "kubernetes.io/config.mirror"  # the annotation of a static pod's mirror in the API


def victim_job(pod: Obj, *, scheduler: str) -> str | None:
    """The running job a bound pod is stopped with (its gang, or itself), or None when no preemption may
    delete it (see the module's docstring)."""
    member = live_member(pod, scheduler=scheduler)
    if member is None or MIRROR in pod_annotations(pod):
        return None
    md = pod.get("metadata") or {}
    owners = md.get("ownerReferences")
    if isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners):
        return None
    ns, group = member
    return f"running-group:{ns}/{group}" if group else f"running-pod:{ns}/{md.get('name')}"


def started_wall(pod: Obj) -> float | None:
    """When the pod started (``status.startTime``, else its creation), in seconds of the API server's wall clock;
    None when neither can be read."""
    for raw in ((pod.get("status") or {}).get("startTime"), (pod.get("metadata") or {}).get("creationTimestamp")):
        if isinstance(raw, str):
            try:
                return datetime.fromisoformat(raw).timestamp()
            except (ValueError, OverflowError):  # not a time; or one no timestamp holds
                continue
    return None


def nominated_node(pod: Obj) -> str | None:
    n = (pod.get("status") or {}).get("nominatedNodeName")
    return n if isinstance(n, str) and n else None


def terminating_by_preemption(pod: Obj) -> bool:
    """Being deleted, and marked as a preemption's victim (by rackscale or kube-scheduler)."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp") or is_terminated(pod):
        return False
    conds = (pod.get("status") or {}).get("conditions")
    return isinstance(conds, list) and any(
        isinstance(c, Mapping)
        and c.get("type") == "DisruptionTarget"
        and c.get("reason") == "PreemptionByScheduler"
        and c.get("status") == "True"
        for c in conds
    )


def _present(v: Victim, pods: Mapping[str, Obj]) -> bool:
    p = pods.get(v.key)
    return p is not None and str((p.get("metadata") or {}).get("uid") or "") == v.uid and not is_terminated(p)


# How long past its victims' longest grace period a preemptor waits for them before it may be placed elsewhere
# (a kubelet's last SIGKILL and the watch's report take a moment; a finaliser may hold a pod for ever).
HOLD_MARGIN_S = 30.0
DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when it gives none (the API server's default)
INT64_MAX = 2**63 - 1  # the field's type: beyond it (hostile JSON), float() would overflow mid-cycle


def grace_s(pod: Obj) -> float:
    """The pod's ``terminationGracePeriodSeconds`` (a wrong type, or a value no int64 holds as the API server's
    field does: the default)."""
    g = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    ok = isinstance(g, int) and not isinstance(g, bool) and 0 <= g <= INT64_MAX
    return float(g) if ok else float(DEFAULT_GRACE_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class Eviction:
    """The pods deleted for one waiting gang, until when it waits for them (placed nowhere else), and the room
    it is owed meanwhile: whole GPUs per node name, where its pods are nominated."""

    victims: tuple[Victim, ...]
    since: float
    hold_until: float
    nominated: tuple[tuple[str, int], ...] = ()


class EvictionBook:
    """Per waiting gang (job name), the victims deleted for it that may still hold their GPUs."""

    def __init__(self) -> None:
        self.by_preemptor: dict[str, Eviction] = {}

    def record(
        self, job: str, victims: Iterable[Victim], *, now: float, nominated: Iterable[tuple[str, int]] = ()
    ) -> None:
        got = tuple(victims)
        if got:
            until = now + max(grace_s(v.pod) for v in got) + HOLD_MARGIN_S
            self.by_preemptor[job] = Eviction(victims=got, since=now, hold_until=until, nominated=tuple(nominated))

    def adopt(
        self, pending: Iterable[Gang], pods: Mapping[str, Obj], *, now: float, gpus_of: Callable[[Obj], int]
    ) -> list[str]:
        """Record, for each waiting gang this book knows nothing of, the victims a preemption made for it before
        (by another leader, or this one before a restart), as kube-scheduler reads them: pods of lower priority
        (or equal: consolidation moves those, least attained service stops them) terminating by preemption
        (``DisruptionTarget``, ``PreemptionByScheduler``) on the nodes its pods are nominated to. Without this, a
        new leader's first cycle would preempt again for the same room. Returns the gangs adopted."""
        waiting = [g for g in pending if g.job not in self.by_preemptor]
        nominated = {g.job: {n for p in g.pending if (n := nominated_node(p))} for g in waiting}
        if not any(nominated.values()):
            return []
        by_node: dict[str, list[tuple[str, Obj]]] = {}
        for key, p in pods.items():
            node = node_name(p)
            if node is not None and terminating_by_preemption(p):
                by_node.setdefault(node, []).append((key, p))
        adopted = []
        for g in waiting:
            victims = [
                Victim(key=key, uid=str((p.get("metadata") or {}).get("uid") or ""), node=n, pod=p)
                for n in sorted(nominated[g.job])
                for key, p in by_node.get(n, ())
                if priority(p) <= g.priority  # (<: a preemption's; =: a move's, or LAS')
            ]
            if victims:
                owed = [(n, gpus_of(p)) for p in g.pending if (n := nominated_node(p))]
                self.record(g.job, victims, now=now, nominated=owed)
                adopted.append(g.job)
        return adopted

    def prune(self, *, pending: Collection[str]) -> None:
        """Forget a gang that no longer waits (bound, deleted)."""
        for job in [j for j in self.by_preemptor if j not in pending]:
            del self.by_preemptor[job]

    def ready(self, pods: Mapping[str, Obj]) -> list[str]:
        """The gangs whose victims are all gone: each is placed before any other job once (the room it made is
        its own), then forgotten (:meth:`forget`)."""
        return [j for j, ev in self.by_preemptor.items() if not any(_present(v, pods) for v in ev.victims)]

    def forget(self, job: str) -> None:
        self.by_preemptor.pop(job, None)

    def owed(self, held: Collection[str]) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
        """The room the ``held`` gangs are owed, (job, its nominated GPUs per node): the snapshot keeps the free
        GPUs there from any other job (kube-scheduler counts a nominated pod on its node for pods of no higher
        priority; a recreated victim or mover would otherwise take the room back)."""
        return [(j, ev.nominated) for j, ev in self.by_preemptor.items() if j in held and ev.nominated]

    def held(self, pods: Mapping[str, Obj], *, now: float) -> dict[str, str]:
        """The gangs that wait for their victims, placed nowhere else meanwhile (a gang placed on the first
        GPUs to free would be split over racks, where waiting a grace period gets it the room it preempted
        for), with why; past ``hold_until`` a gang may be placed elsewhere, but still preempts no one."""
        out = {}
        for job, ev in self.by_preemptor.items():
            n = sum(1 for v in ev.victims if _present(v, pods))
            if n and now < ev.hold_until:
                out[job] = f"waiting for {n} pod(s) stopped for it to terminate"
        return out

    def waiting_for(self, job: str, pods: Mapping[str, Obj]) -> int:
        """How many of the pods deleted for ``job`` are still there (0: it may preempt again)."""
        ev = self.by_preemptor.get(job)
        return 0 if ev is None else sum(1 for v in ev.victims if _present(v, pods))


class Evictor:
    """The API calls of a preemption: mark and delete a victim, nominate a preemptor's pods."""

    def __init__(self, core: client.CoreV1Api, reporter: Reporter) -> None:
        self.core, self.reporter = core, reporter

    def evict(self, v: Victim, *, why: str, moved: bool = False, equal: bool = False) -> bool:
        """Stop ``v`` (``moved``: consolidation's, else a preemption; ``equal``: least attained service's, for a
        gang of the same priority): its DisruptionTarget condition, then the DELETE. True when it is being
        deleted (or already gone, or replaced: the name holds another pod); False when the API server refused
        (retried on a later cycle, as the victim still holds its GPUs)."""
        md = v.pod.get("metadata") or {}
        name, ns = str(md.get("name")), str(md.get("namespace", "default"))
        doing = (
            "moving it to free a rack whole for a waiting gang"
            if moved
            else "preempting for a waiting gang of the same priority that has had less GPU time"
            if equal
            else "preempting to accommodate a higher priority gang"
        )
        self.reporter.disruption(v.pod, f"{self.reporter.component}: {doing}")
        if not delete_pod(self.core, name=name, namespace=ns, uid=v.uid, key=v.key, doing="preempting"):
            return False
        self.reporter.preempted(v.pod, why)
        return True

    def nominate(self, pods: Iterable[tuple[Obj, str]], *, message: str) -> None:
        """Each pending pod's planned node as its ``nominatedNodeName``, and why it waits."""
        for pod, node in pods:
            self.reporter.nominate(pod, node, message)


def core_time(
    wall_started: Callable[[Obj], float | None], *, wall_now: float, core_now: float
) -> Callable[[Obj], float]:
    """A pod's start on the core's clock (seconds since the scheduler started): its wall start mapped over, never
    after ``core_now`` (a clock skew must not make a run younger than nothing); ``core_now`` when unknown."""

    def started(pod: Obj) -> float:
        w = wall_started(pod)
        return core_now if w is None else core_now - max(0.0, wall_now - w)

    return started


def carry_out(
    d: Decisions,
    jobs: Mapping[str, tuple[Gang, JobSpec]],
    holders: Mapping[str, tuple[Victim, ...]],
    cluster: GPUCluster,
    *,
    evictor: Evictor,
    book: EvictionBook,
    stats: Stats,
    component: str,
    now: float,
    stopped: Callable[[Preemption], None] = lambda s: None,
) -> tuple[set[str], set[str]]:
    """Delete the victims of the cycle's stops ``d.preemptions`` (by priority, least attained service between
    equal priorities, or consolidation's moves), record them for their waiting gang (``jobs``: the cycle's, by
    name) and nominate its pods to their planned nodes; ``stopped`` is told of each stop that deleted a pod.
    Returns the nodes the victims ran on (nothing is bound there this cycle) and the waiting gangs."""
    stops: dict[str, list[Preemption]] = {}
    for s in d.preemptions:
        stops.setdefault(s.preemptor, []).append(s)
    placed = {x.spec.name: x for x in d.placed}
    held: set[str] = set()
    for job, victims in stops.items():
        deleted: list[Victim] = []
        for s in victims:
            stats.victims[s.cause] = stats.victims.get(s.cause, 0) + 1
            moved = s.cause is PreemptionCause.CONSOLIDATION
            equal = s.cause is PreemptionCause.ATTAINED_SERVICE
            if moved:
                why = (
                    f"Moved by {component} to free a rack whole for a waiting gang: its controller recreates it, "
                    f"and it is placed again ({s.reason})"
                )
            elif equal:
                why = (
                    f"Preempted by {component}: a waiting gang of the same priority that has had less GPU time "
                    f"needs its GPUs ({s.reason})"
                )
            else:
                why = f"Preempted by {component}: a waiting gang of higher priority needs its GPUs ({s.reason})"
            if s.over_budget:
                # Made anyway, as kube-scheduler does: a budget orders the victims, it never blocks a preemption.
                stats.pdb_violations += s.over_budget
                why += (
                    ". Its PodDisruptionBudget allowed no more disruptions: no other victims within their budgets "
                    "would free the room"
                )
                log.info("%s: %d disruption(s) past PodDisruptionBudgets, for %s", s.victim, s.over_budget, job)
            before = len(deleted)
            for v in holders[s.victim]:
                held.add(v.node)
                if evictor.evict(v, why=why, moved=moved, equal=equal):
                    deleted.append(v)
                    stats.preempted_pods += 1
                else:
                    stats.preemption_errors += 1
            if len(deleted) > before:
                stopped(s)
        stats.preemptions += 1
        g, spec = jobs[job]
        x = placed.get(job)
        plan = assignments(cluster, spec, x.placement, g.pending) if x is not None else []
        book.record(job, deleted, now=now, nominated=[(a.node, spec.unit.gpus) for a in plan])
        log.info("%s preempts %d gang(s), %d pod(s) deleted", job, len(victims), len(deleted))
        doing = "moving" if victims[0].cause is PreemptionCause.CONSOLIDATION else "preempting"
        # (Least attained service's reason gives the victim's GPU time: not for another tenant's eyes.)
        reason = (
            "of a gang of the same priority that has had more GPU time"
            if victims[0].cause is PreemptionCause.ATTAINED_SERVICE
            else f"({victims[0].reason})"
        )
        evictor.nominate(
            ((a.pod, a.node) for a in plan),
            message=f"{doing} {len(deleted)} pod(s) {reason}; waiting for them to terminate",
        )
    return held, set(stops)


def may_preempt(spec: JobSpec, *, allowed: bool) -> JobSpec:
    """``spec`` as the cycle takes it: kept from preempting (``preemptionPolicy: Never``) unless ``allowed``."""
    if allowed or spec.preemption_policy is PreemptionPolicy.NEVER:
        return spec
    return replace(spec, preemption_policy=PreemptionPolicy.NEVER)
