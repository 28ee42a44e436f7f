"""Kubernetes Pods (as JSON dicts) -> rackscale jobs: gangs of pods, one pod per unit.

Pure functions over the API server's JSON: no client library, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rackscale.kube.cluster import mib, milli, whole
from rackscale.model.workload import (
    JobSpec,
    Level,
    PreemptionPolicy,
    TopologyConstraint,
    batch,
    training,
)

Obj = Mapping[str, Any]

POD_GROUP = "rackscale.io/pod-group"
MIN_MEMBER = "rackscale.io/min-member"
TOPOLOGY = "rackscale.io/topology"  # "rack" or "region": a required constraint (default: rack preferred)
TERMINATED = ("Succeeded", "Failed")


def pod_key(pod: Obj) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace', 'default')}/{md['name']}"


def is_terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINATED


def node_name(pod: Obj) -> str | None:
    n = (pod.get("spec") or {}).get("nodeName")
    return str(n) if n else None


def scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def priority(pod: Obj) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return int(p) if p is not None else 0


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks of its node: the effective request (max of the containers' sum and any init container)."""

    gpus: int
    cpu_milli: int
    memory_mib: int


def _container_request(c: Obj, gpu_resource: str) -> PodRequest:
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    # Extended resources (GPUs) must have request == limit; a limit alone implies the request.
    gpus = whole(lim.get(gpu_resource, req.get(gpu_resource, 0)))
    cpu = milli(req.get("cpu", lim.get("cpu", 0)))
    mem = mib(req.get("memory", lim.get("memory", 0)))
    return PodRequest(gpus, cpu, mem)


def pod_request(pod: Obj, gpu_resource: str) -> PodRequest:
    spec = pod.get("spec") or {}
    main = [_container_request(c, gpu_resource) for c in spec.get("containers") or []]
    init = [_container_request(c, gpu_resource) for c in spec.get("initContainers") or []]
    g = sum(r.gpus for r in main)
    cpu = sum(r.cpu_milli for r in main)
    mem = sum(r.memory_mib for r in main)
    for r in init:
        g, cpu, mem = max(g, r.gpus), max(cpu, r.cpu_milli), max(mem, r.memory_mib)
    return PodRequest(g, cpu, mem)


@dataclass(slots=True)
class Gang:
    """Pods scheduled together, all or none. ``job`` is the rackscale job name."""

    job: str
    namespace: str
    group: str | None  # the pod-group annotation; None for a lone pod
    min_member: int
    pending: list[Obj] = field(default_factory=list)
    bound: int = 0  # members already bound (by an earlier cycle)
    problem: str | None = None  # why the gang cannot become a job (bad annotation, mixed requests)

    @property
    def ready(self) -> bool:
        return self.bound + len(self.pending) >= self.min_member

    @property
    def priority(self) -> int:
        return max((priority(p) for p in self.pending), default=0)


def _min_member(pod: Obj) -> tuple[int, str | None]:
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    raw = ann.get(MIN_MEMBER)
    if raw is None:
        return 1, None
    try:
        n = int(raw)
    except ValueError:
        return 1, f"annotation {MIN_MEMBER}={raw!r} is not an integer"
    if n < 1:
        return 1, f"annotation {MIN_MEMBER}={raw!r} must be at least 1"
    return n, None


def gangs(pods: Iterable[Obj], scheduler: str) -> list[Gang]:
    """The pending gangs of ``scheduler``'s pods (pods of other schedulers are not looked at).

    A pod is pending when it is not bound, not terminated and not being deleted. Bound, live members of a
    group count towards its ``min-member``; a bound member being deleted does not (it is leaving, e.g. one
    that rackscale deleted to undo a failed gang bind, and counting it would let its siblings be placed as
    if the gang were complete).
    """
    out: dict[str, Gang] = {}
    for pod in pods:
        if scheduler_name(pod) != scheduler or is_terminated(pod):
            continue
        md = pod.get("metadata") or {}
        if md.get("deletionTimestamp"):
            continue
        ns = str(md.get("namespace", "default"))
        group = (md.get("annotations") or {}).get(POD_GROUP)
        if group:
            job = f"group:{ns}/{group}"
        elif node_name(pod) is None:
            job = f"pod:{ns}/{md['name']}"
        else:
            continue
        g = out.get(job)
        if g is None:
            g = out[job] = Gang(job=job, namespace=ns, group=str(group) if group else None, min_member=1)
        n, problem = _min_member(pod)
        g.min_member = max(g.min_member, n)
        g.problem = g.problem or problem
        if node_name(pod) is not None:
            g.bound += 1
        else:
            g.pending.append(pod)
    result = [g for g in out.values() if g.pending]
    for g in result:
        g.pending.sort(key=lambda p: str((p.get("metadata") or {}).get("name")))
    return result


def gang_spec(g: Gang, gpu_resource: str, *, submit_time: float) -> JobSpec | str:
    """The rackscale job for a ready gang, or a sentence saying why it cannot be one."""
    if g.problem:
        return g.problem
    reqs = {pod_request(p, gpu_resource) for p in g.pending}
    if len(reqs) > 1:
        shown = ", ".join(f"{r.gpus} GPU" for r in sorted(reqs, key=lambda r: r.gpus))
        return f"pod group {g.group!r} mixes requests ({shown}); rackscale places a group as identical units"
    (req,) = reqs
    ann = (g.pending[0].get("metadata") or {}).get("annotations") or {}
    topo = ann.get(TOPOLOGY)
    if topo not in (None, "rack", "region"):
        return f"annotation {TOPOLOGY}={topo!r}: expected 'rack' or 'region'"
    common: dict[str, Any] = {
        "priority": g.priority,
        "preemption_policy": PreemptionPolicy.NEVER,  # rackscale does not evict pods (yet)
        "preemptible": False,
        "submit_time": submit_time,
        "queue": g.namespace,
    }
    units = len(g.pending)
    if req.gpus > 0 and (units > 1 or g.group is not None):
        constraint = TopologyConstraint(required=Level(topo), preferred=Level(topo)) if topo else None
        return training(
            g.job,
            req.gpus * units,
            gpus_per_worker=req.gpus,
            cpu_milli=req.cpu_milli,
            memory_mib=req.memory_mib,
            topology=constraint,
            **common,
        )
    if units > 1:
        return f"pod group {g.group!r} asks for no GPUs; rackscale places CPU-only pods one by one only"
    return batch(g.job, gpus=req.gpus, tasks=1, cpu_milli=req.cpu_milli, memory_mib=req.memory_mib, **common)
