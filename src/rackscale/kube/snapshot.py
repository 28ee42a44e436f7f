"""The allocation a cycle starts from, rebuilt from the caches: pure functions, no I/O."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rackscale.host.parts import NodeState
from rackscale.kube.cluster import LabelKeys
from rackscale.kube.health import node_health
from rackscale.kube.pods import PodRequest, has_controller, is_terminated, pod_request, priority
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import batch

Obj = Mapping[str, Any]

log = logging.getLogger("rackscale.kube")


def node_key(node: Obj) -> str:
    return str(node["metadata"]["name"])


def cluster_index(cluster: GPUCluster, node: str) -> int:
    for n in cluster.nodes:
        if n.name == node:
            return n.index
    raise KeyError(node)


def with_node(pod: Obj, node: str) -> dict[str, Any]:
    """The pod as it will look once the watch shows the bind we made."""
    out = dict(pod)
    out["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    """A pod that a preemption would delete: the DELETE's UID precondition, where it runs, what it was."""

    key: str
    uid: str
    node: str
    pod: Obj


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningGang:
    """A running gang of rackscale's (a pod group): the GPUs its live pods hold on each node, by node index.
    What the traffic model reads (:mod:`rackscale.kube.traffic`)."""

    job: str
    gpus: tuple[tuple[int, int], ...]  # (node index, GPUs), ascending node


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The allocation, the pods each preemptible running job in it stands for (by job name), and rackscale's
    running gangs (by job name)."""

    state: ClusterState
    holders: dict[str, tuple[Victim, ...]] = field(default_factory=dict)
    gangs: tuple[RunningGang, ...] = ()


@dataclass(slots=True)
class _Running:
    """A preemptible job being gathered from its pods: per node (GPUs, CPU, memory), and its pods."""

    unit_gpus: int
    priority: int
    queue: str
    started: float
    movable: bool  # every pod has a controller (a Job, a StatefulSet...) that recreates it once deleted
    saves: bool  # every pod saves its work on the stop signal (``saves``: its grace period, --las-preemption)
    per_node: dict[int, list[int]] = field(default_factory=dict)
    pods: list[Victim] = field(default_factory=list)


def build_snapshot(
    cluster: GPUCluster,
    *,
    nodes: Mapping[str, Obj],
    pods: Mapping[str, Obj],
    where: Callable[[str, Obj], str | None],
    labels: LabelKeys,
    victim_job: Callable[[str, Obj], str | None] = lambda key, pod: None,
    started: Callable[[Obj], float] = lambda pod: 0.0,
    gang_of: Callable[[str, Obj], str | None] = lambda key, pod: None,
    saves: Callable[[Obj], bool] = lambda pod: False,
) -> Snapshot:
    """Every live pod that holds a node (``where`` says which: its nodeName, or one we bound or are undoing
    that the watch has not shown yet) holds its requests there, in its namespace's queue. A node that takes no
    new pods (:func:`rackscale.kube.health.node_health`) is cordoned (``spec.unschedulable``) or failed (not
    Ready, tainted), and so are the GPUs its capacity counts above its allocatable.

    ``victim_job`` names the preemptible running job a pod belongs to (a gang's pods are one job: a preemption
    deletes all of them), or None for a pod that no preemption may delete; such a pod is a job of its own
    that nobody stops. A preemptible job runs at its highest pod priority, in its namespace's queue, since
    its earliest pod's ``started`` (the core's clock), and saves its work on the stop signal (the core's
    ``checkpoint_on_preempt``, which least-attained-service preemption asks of a victim) when every pod
    ``saves``.

    ``gang_of`` names the running gang of rackscale's a pod is a member of (None: none); the GPUs each gang's
    pods hold per node make :attr:`Snapshot.gangs`, whether or not a preemption may stop it."""
    state = ClusterState(cluster)
    index = {n.name: n.index for n in cluster.nodes}
    gathering: dict[str, _Running] = {}
    running: dict[str, dict[int, int]] = {}
    for key, pod in pods.items():
        at = where(key, pod)
        if at is None or is_terminated(pod) or at not in index:
            continue
        n = index[at]
        job = victim_job(key, pod)
        try:
            req = pod_request(pod, labels.gpu_resource)
        except ValueError as e:
            # Unreadable (a real API server validates requests): it takes all that is left on its node, so that
            # nothing is placed on top of it, and no preemption counts on what it holds.
            log.warning("bound pod %s: %s; counting its node %s as full", key, e, at)
            req, job = PodRequest(state.node_whole[n], state.cpu_free[n], state.mem_free[n]), None
        else:
            if req.gpus and (gang := gang_of(key, pod)) is not None:
                per = running.setdefault(gang, {})
                per[n] = per.get(n, 0) + req.gpus
        if job is not None:
            r = gathering.get(job)
            began = started(pod)
            if r is None:
                md = pod.get("metadata") or {}
                r = gathering[job] = _Running(
                    unit_gpus=req.gpus,
                    priority=priority(pod),
                    queue=str(md.get("namespace", "default")),
                    started=began,
                    movable=True,
                    saves=True,
                )
            r.priority, r.started = max(r.priority, priority(pod)), min(r.started, began)
            r.movable = r.movable and has_controller(pod)
            r.saves = r.saves and saves(pod)
            held = r.per_node.setdefault(n, [0, 0, 0])
            held[0] += req.gpus
            held[1] += req.cpu_milli
            held[2] += req.memory_mib
            r.pods.append(Victim(key=key, uid=str((pod.get("metadata") or {}).get("uid") or ""), node=at, pod=pod))
            continue
        alloc = _alloc(state, n, req.gpus, req.cpu_milli, req.memory_mib)
        if alloc is not None:
            # In its namespace's queue, whoever scheduled it: fair share between namespaces reads what each holds.
            spec = batch(
                f"bound:{key}",
                gpus=alloc.whole_gpus,
                cpu_milli=alloc.cpu_milli,
                memory_mib=alloc.memory_mib,
                preemptible=False,
                queue=str((pod.get("metadata") or {}).get("namespace", "default")),
            )
            state.allocate(spec, Placement(spec.name, (alloc,), 1), now=0.0, health=False)
    holders: dict[str, tuple[Victim, ...]] = {}
    for job, r in gathering.items():
        allocs = tuple(a for n, (g, c, m) in sorted(r.per_node.items()) if (a := _alloc(state, n, g, c, m)) is not None)
        if not allocs:
            continue
        spec = batch(
            job,
            gpus=r.unit_gpus,
            tasks=len(r.pods),
            priority=r.priority,
            queue=r.queue,
            preemptible=True,
            movable=r.movable,  # consolidation stops only what its controller brings back
            checkpoint_on_preempt=r.saves,
        )
        state.allocate(spec, Placement(job, allocs, len(r.pods)), now=r.started, health=False)
        holders[job] = tuple(r.pods)
    for node in nodes.values():
        h = node_health(node, labels.gpu_resource)
        at_index = index.get(node_key(node))
        if h is None or at_index is None:
            continue
        for g in h.failed_gpus:
            if g < cluster.nodes[at_index].gpus:
                state.fail_gpu(at_index, g)
        if h.state is NodeState.DRAIN:
            state.cordon_node(at_index)  # an operator's hold: its GPUs are out of service, not failed
        elif h.state.failed:
            state.fail_node(at_index)
    gangs = tuple(RunningGang(job=job, gpus=tuple(sorted(per.items()))) for job, per in sorted(running.items()))
    return Snapshot(state=state, holders=holders, gangs=gangs)


def _alloc(state: ClusterState, n: int, gpus: int, cpu_milli: int, memory_mib: int) -> NodeAlloc | None:
    """What a pod (or a gang's pods) on node ``n`` holds, within what is left there (another scheduler may have
    over-committed the node); None when that is nothing."""
    g = min(gpus, state.node_whole[n])
    cpu, mem = min(cpu_milli, state.cpu_free[n]), min(memory_mib, state.mem_free[n])
    if g == 0 and cpu == 0 and mem == 0:
        return None
    return NodeAlloc(n, state.whole_free_gpus(n, g) if g else (), cpu_milli=cpu, memory_mib=mem)


def reserve_nominated(state: ClusterState, job: str, nominated: Iterable[tuple[str, int]]) -> None:
    """Keep the free whole GPUs of ``nominated`` (node name, GPUs) from any other job: a placeholder that nobody
    may stop holds what is free there now, up to what the waiting gang ``job`` is owed on each node (as its
    victims terminate, later snapshots hold their GPUs too)."""
    index = {n.name: n.index for n in state.cluster.nodes}
    per: dict[int, int] = {}
    for node, gpus in nominated:
        if node in index:
            per[index[node]] = per.get(index[node], 0) + gpus
    allocs = tuple(a for n, g in sorted(per.items()) if (a := _alloc(state, n, g, 0, 0)) is not None)
    if allocs:
        spec = batch(f"nominated:{job}", gpus=sum(len(a.gpus) for a in allocs), preemptible=False)
        state.allocate(spec, Placement(spec.name, allocs, 1), now=0.0, health=False)
