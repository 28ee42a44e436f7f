"""Kubernetes Pods (as JSON dicts) -> rackscale jobs: gangs of pods, one pod per unit.

Pure functions over the API server's JSON: no client library, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from rackscale.kube.cluster import parse_quantity
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
PREFIX = "rackscale.io/"
KNOWN = (POD_GROUP, MIN_MEMBER, TOPOLOGY)
# One pod per GPU of the largest cluster the model takes (262,144 nodes of 8 GPUs): more members than this
# can never exist, and a gang asking for them would wait for ever under a reason showing a 30-digit count.
MAX_MIN_MEMBER = 2**21
TERMINATED = ("Succeeded", "Failed")

# The job spec's fields that a pod's annotations cannot set (keys compared without "-", "_" and case), with
# the fix: ignoring one would leave a job that does not behave as asked, and no word why.
_ELASTIC = (
    "elastic gangs are off under Kubernetes (a scheduler creates no pods to grow a gang, and a pod it deleted "
    "to shrink one would be recreated); size the gang with its controller's pod count and remove the annotation"
)
_UNSUPPORTED = {
    "mingpus": _ELASTIC,
    "maxgpus": _ELASTIC,
    "checkpointonpreempt": "a preempted pod is deleted with its own terminationGracePeriodSeconds: save the work "
    "on SIGTERM within it, and remove the annotation",
    "priority": "the priority is spec.priority: set spec.priorityClassName and remove the annotation",
    "priorityclass": "the priority is spec.priority: set spec.priorityClassName and remove the annotation",
    "preemptible": "a running gang may be preempted by a waiting one of higher priority: keep it running with a "
    "higher PriorityClass, and remove the annotation",
    "preemptionpolicy": "the preemption policy is spec.preemptionPolicy: set it in the PriorityClass and remove the "
    "annotation",
}


def pod_key(pod: Obj) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace', 'default')}/{md['name']}"


def is_terminated(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINATED


def has_controller(pod: Obj) -> bool:
    """An ownerReference with ``controller: true`` (a Job, ReplicaSet, StatefulSet...): deleted, the pod is
    recreated; without one it is gone for good."""
    owners = (pod.get("metadata") or {}).get("ownerReferences")
    return isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("controller") is True for o in owners)


# Controllers whose pods run until they are deleted (services, not work that ends): least attained service is for
# work that runs to completion and comes back after a stop, never for a long-running replica (its "service" grows
# for ever, so it would always be the first victim).
SERVING_CONTROLLERS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet", "LeaderWorkerSet", "DaemonSet"})


def comes_back_to_finish(pod: Obj) -> bool:
    """A member of a pod group whose controller recreates it after a delete and whose work ends (a Job, a JobSet,
    a training operator's job): what ``--las-preemption`` may stop for a gang of the same priority. Not a lone pod
    (its controller recreates it under another name, so its service cannot be kept), a bare pod (deleted, it is
    gone for good), nor the pod of a serving controller (:data:`SERVING_CONTROLLERS`)."""
    if POD_GROUP not in pod_annotations(pod):
        return False
    owners = (pod.get("metadata") or {}).get("ownerReferences")
    if not isinstance(owners, list):
        return False
    kinds = [o.get("kind") for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
    # (A kind that is no string, which a real API server refuses, is no controller we know: not stopped.)
    return bool(kinds) and all(isinstance(k, str) and k not in SERVING_CONTROLLERS for k in kinds)


def live_member(pod: Obj, *, scheduler: str) -> tuple[str, str | None] | None:
    """(namespace, pod group or None for a lone pod) of a pod ``scheduler`` placed that is not being deleted;
    None for another scheduler's pod or one being deleted. What a running gang is made of, for preemption's
    victims (:func:`rackscale.kube.preemption.victim_job`) and the traffic model's gangs
    (:func:`rackscale.kube.traffic.running_gang`)."""
    if scheduler_name(pod) != scheduler:
        return None
    md = pod.get("metadata") or {}
    if md.get("deletionTimestamp"):
        return None
    return str(md.get("namespace", "default")), pod_annotations(pod).get(POD_GROUP)


def node_name(pod: Obj) -> str | None:
    n = (pod.get("spec") or {}).get("nodeName")
    return str(n) if n else None


def scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


# What the API server accepts (spec.priority is an int32; a quantity's value an int64): anything beyond is
# hostile input (a non-conformant server, a test) and is refused, never a crash of the cycle.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_QUANTITY = Decimal(2**63 - 1)


def shown(value: object, *, limit: int = 60) -> str:
    """``value`` as a message quotes it: its repr, cut to ``limit`` characters (a pod's field may be huge)."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r)} characters)"


def _is_int32(p: object) -> bool:
    return isinstance(p, int) and not isinstance(p, bool) and INT32_MIN <= p <= INT32_MAX


def priority(pod: Obj) -> int:
    """``spec.priority`` (0 when absent; and when it is no int32, which :func:`pod_problem` reports)."""
    p = (pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and _is_int32(p) else 0


def pod_annotations(pod: Obj) -> Mapping[str, Any]:
    """The pod's annotations ({} when they are no mapping, which :func:`pod_problem` reports)."""
    ann = (pod.get("metadata") or {}).get("annotations")
    return ann if isinstance(ann, Mapping) else {}


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks of its node: the effective request (max of the containers' sum and any init container)."""

    gpus: int
    cpu_milli: int
    memory_mib: int


def _amount(res: Obj, first: str, then: str, key: str, *, per_unit: Decimal, where: str) -> int:
    """``res[first][key]``, else ``res[then][key]``, else 0, in units of ``1/per_unit``, rounded up.
    Raises ``ValueError`` naming the field when it is no quantity, negative or beyond an int64."""
    for kind in (first, then):
        table = res.get(kind) or {}
        if not isinstance(table, Mapping):
            raise ValueError(f"{where}.resources.{kind} is not a mapping")
        if key not in table:
            continue
        v = table[key]
        try:
            d = parse_quantity(v)
        except (ValueError, ArithmeticError):
            d = None
        if d is None or not d.is_finite() or not 0 <= d <= MAX_QUANTITY:
            raise ValueError(
                f"{where}.resources.{kind}[{key!r}]={shown(v)} is not a Kubernetes quantity from 0 to 2^63-1 "
                "(e.g. 8, 500m, 16Gi)"
            )
        return int((d * per_unit).to_integral_value(rounding=ROUND_CEILING))
    return 0


def _container_request(c: Obj, gpu_resource: str, where: str) -> PodRequest:
    if not isinstance(c, Mapping):
        raise ValueError(f"{where} is not a container")
    where = f"{where} ({shown(c.get('name'), limit=40)})"
    res = c.get("resources") or {}
    if not isinstance(res, Mapping):
        raise ValueError(f"{where}.resources is not a mapping")
    # Extended resources (GPUs) must have request == limit; a limit alone implies the request.
    gpus = _amount(res, "limits", "requests", gpu_resource, per_unit=Decimal(1), where=where)
    cpu = _amount(res, "requests", "limits", "cpu", per_unit=Decimal(1000), where=where)
    mem = _amount(res, "requests", "limits", "memory", per_unit=Decimal(1) / (1 << 20), where=where)
    return PodRequest(gpus, cpu, mem)


def _containers(spec: Obj, key: str, gpu_resource: str) -> list[PodRequest]:
    cs = spec.get(key) or []
    if not isinstance(cs, list):
        raise ValueError(f"spec.{key} is not a list")
    return [_container_request(c, gpu_resource, f"spec.{key}[{i}]") for i, c in enumerate(cs)]


def pod_request(pod: Obj, gpu_resource: str) -> PodRequest:
    """The pod's effective request. Raises ``ValueError`` naming the field that cannot be read."""
    spec = pod.get("spec") or {}
    main = _containers(spec, "containers", gpu_resource)
    init = _containers(spec, "initContainers", gpu_resource)
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
    raw = pod_annotations(pod).get(MIN_MEMBER)
    if raw is None:
        return 1, None
    # ASCII digits only: int() would also take " 4", "+4", "1_0" and other scripts' digits ("４").
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit():
        return 1, f"annotation {MIN_MEMBER}={shown(raw)} is not a whole number of pods (ASCII digits, e.g. '4')"
    if len(raw.lstrip("0")) > 7 or not 1 <= (n := int(raw)) <= MAX_MIN_MEMBER:
        return 1, f"annotation {MIN_MEMBER}={shown(raw)} must be from 1 to {MAX_MIN_MEMBER}"
    return n, None


def _annotation_problem(ann: Mapping[str, Any]) -> str | None:
    """An annotation under ``rackscale.io/`` that rackscale does not read: refused, naming the key and the fix
    (a typo of ``pod-group`` or ``min-member`` would otherwise place a gang's pods one by one)."""
    for key in sorted(str(k) for k in ann):
        if not key.startswith(PREFIX) or key in KNOWN:
            continue
        fix = _UNSUPPORTED.get(key[len(PREFIX) :].replace("-", "").replace("_", "").lower())
        if fix is None:
            fix = f"rackscale reads {', '.join(KNOWN)}; correct the key or remove it"
        return f"annotation {shown(key)}={shown(ann[key], limit=40)} is not read under Kubernetes: {fix}"
    return None


def pod_problem(pod: Obj) -> str | None:
    """Why a pending pod's fields (other than its requests and annotations' values, read later) make it no
    part of a job: a wrong type or a value out of range, named with the fix. None: nothing wrong."""
    md = pod.get("metadata") or {}
    if not isinstance(md.get("annotations") or {}, Mapping):
        return f"metadata.annotations={shown(md.get('annotations'))} is not a mapping of strings"
    if (why := _annotation_problem(pod_annotations(pod))) is not None:
        return why
    p = (pod.get("spec") or {}).get("priority")
    if p is not None and not _is_int32(p):
        return (
            f"spec.priority={shown(p)} is not an integer from {INT32_MIN} to {INT32_MAX}; "
            "set spec.priorityClassName and let the API server fill it in"
        )
    return None


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
        group = pod_annotations(pod).get(POD_GROUP)
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
        g.problem = g.problem or problem or (pod_problem(pod) if node_name(pod) is None else None)
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
    try:
        reqs = {pod_request(p, gpu_resource) for p in g.pending}
    except ValueError as e:
        return str(e)
    if len(reqs) > 1:
        sizes = ", ".join(f"{r.gpus} GPU" for r in sorted(reqs, key=lambda r: r.gpus))
        return f"pod group {g.group!r} mixes requests ({sizes}); rackscale places a group as identical units"
    (req,) = reqs
    # Every member's: read from one, a member asking for one rack beside one that did not would be placed
    # as whichever came first.
    given = [pod_annotations(p).get(TOPOLOGY) for p in g.pending]
    topo = given[0]
    if any(t != topo for t in given):
        said = ", ".join(sorted({shown(t) for t in given}))
        return f"pod group {g.group!r}: its pods disagree on annotation {TOPOLOGY} ({said}); give every pod the same"
    if topo not in (None, "rack", "region"):
        return f"annotation {TOPOLOGY}={shown(topo)}: expected 'rack' or 'region'"
    # spec.preemptionPolicy (from the PriorityClass): one member that may not preempt keeps the gang from it.
    never = any((p.get("spec") or {}).get("preemptionPolicy") == PreemptionPolicy.NEVER for p in g.pending)
    common: dict[str, Any] = {
        "priority": g.priority,
        "preemption_policy": PreemptionPolicy.NEVER if never else PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
        "preemptible": True,
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
