"""Binding a gang, all pods or none.

Kubernetes binds one pod per request and a Binding cannot be taken back: ``spec.nodeName`` is immutable
once set. So "none" has to be made after the fact, and the transaction is ordered to make that rare:

1. **Validate** every pod before the first bind (a GET each: it still exists, has the UID the cache showed,
   is not being deleted and is bound to no node). A gang that changed is not touched at all; the next cycle
   sees the change through the watch and decides again.
2. **Bind** the pods in order. Each Binding carries the pod's UID, so the API server refuses a pod replaced
   under the same name (409) instead of binding the newcomer.
3. On the first refusal, **undo**: delete every pod this attempt bound (newest first), each with a UID
   precondition so that a replacement of the same name is never deleted. Their owner (a Job, JobSet,
   StatefulSet...) recreates them as pending pods, and the gang is placed again, whole, on a later cycle.
   This is what KAI-Scheduler's stale-gang eviction does to a gang left below its min-member, and what
   kube-scheduler's preemption does to a victim: a DELETE, not an Eviction (a PodDisruptionBudget must not
   keep a half-bound gang alive). A pod no controller owns is not recreated: it is gone.

A bind that failed without an answer (a 5xx, a dropped connection) may have happened anyway, so that pod is
read back, and undone too if it was bound to our node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kubernetes import client

from rackscale.kube.api import KubeApiError, call_json
from rackscale.kube.pods import node_name, pod_key
from rackscale.model.errors import RackscaleError
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec

log = logging.getLogger("rackscale.kube")

Obj = Mapping[str, Any]


class FailureKind(StrEnum):
    STALE = "stale"  # validation: the pod changed since the cache showed it; nothing was bound
    CONFLICT = "conflict"  # 409: bound meanwhile by someone else, or replaced (the UID precondition failed)
    GONE = "gone"  # 404: the pod was deleted
    ERROR = "error"  # any other failure: the bind may or may not have happened


class GangBindError(RackscaleError):
    """Why a gang's bind stopped: which pod, to which node, and what the API server said."""

    def __init__(self, *, pod: str, node: str, kind: FailureKind, detail: str) -> None:
        super().__init__(f"binding {pod} to {node}: {detail}")
        self.pod, self.node, self.kind, self.detail = pod, node, kind, detail


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """One pod of the gang and the node the placement gives it."""

    pod: Obj  # as the cache showed it when the cycle started
    node: str

    @property
    def key(self) -> str:
        return pod_key(self.pod)

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace", "default"))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"].get("uid") or "")


@dataclass(frozen=True, slots=True, kw_only=True)
class BindOutcome:
    """``bound`` is the whole gang when ``failure`` is None; otherwise ``undone`` were bound, then deleted,
    and ``stuck`` were bound but their deletion failed (to be retried)."""

    bound: tuple[Assignment, ...] = ()
    failure: GangBindError | None = None
    undone: tuple[Assignment, ...] = ()
    stuck: tuple[Assignment, ...] = ()


def assignments(cluster: GPUCluster, spec: JobSpec, placement: Placement, pods: Sequence[Obj]) -> list[Assignment]:
    """One node per pod, in the placement's order: each alloc holds ``len(gpus) // unit`` pods.

    Raises :class:`ValueError` when the placement's units do not match the pods (a bug, not a cluster state).
    """
    per_unit = spec.unit.gpus
    nodes: list[str] = []
    for a in placement.allocs:
        units = len(a.gpus) // per_unit if per_unit else 1
        nodes.extend([cluster.nodes[a.node].name] * units)
    if len(nodes) != len(pods):
        raise ValueError(f"placement of {spec.name} has {len(nodes)} unit(s) for {len(pods)} pod(s)")
    return [Assignment(pod=p, node=n) for p, n in zip(pods, nodes, strict=True)]


class GangBinder:
    """The three API calls of the transaction: read a pod back, bind it, delete it."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core

    def transact(self, gang: Sequence[Assignment]) -> BindOutcome:
        """Bind all of ``gang`` or, as far as the API server lets us, none of it."""
        try:
            for a in gang:
                self.validate(a)
        except GangBindError as e:
            return BindOutcome(failure=e)
        done: list[Assignment] = []
        for a in gang:
            try:
                self.bind(a)
            except GangBindError as e:
                if e.kind is FailureKind.ERROR and self.bound_here(a):
                    done.append(a)  # the answer was lost, not the bind
                return self.undo(done, e)
            done.append(a)
        return BindOutcome(bound=tuple(done))

    def undo(self, done: Sequence[Assignment], failure: GangBindError) -> BindOutcome:
        undone: list[Assignment] = []
        stuck: list[Assignment] = []
        for a in reversed(done):
            (undone if self.delete(a) else stuck).append(a)
        return BindOutcome(failure=failure, undone=tuple(undone), stuck=tuple(stuck))

    def validate(self, a: Assignment) -> None:
        def stale(why: str) -> GangBindError:
            return GangBindError(pod=a.key, node=a.node, kind=FailureKind.STALE, detail=why)

        try:
            pod = call_json(self.core.read_namespaced_pod, a.name, a.namespace)
        except KubeApiError as e:
            raise stale("deleted" if e.status == 404 else f"cannot read it back ({e})") from e
        except OSError as e:
            raise stale(f"cannot read it back ({e})") from e
        md = pod.get("metadata") or {}
        if a.uid and str(md.get("uid") or "") != a.uid:
            raise stale(f"replaced by a pod of the same name (uid {md.get('uid')}, was {a.uid})")
        if md.get("deletionTimestamp"):
            raise stale("being deleted")
        if node_name(pod) is not None:
            raise stale(f"already bound to {node_name(pod)}")

    def bind(self, a: Assignment) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The UID is a precondition: a pod recreated under this name since the cache saw it is refused.
            "metadata": {"name": a.name, "namespace": a.namespace, "uid": a.uid or None},
            "target": {"apiVersion": "v1", "kind": "Node", "name": a.node},
        }
        try:
            # _preload_content=False (inside call_json): the client cannot read the Status the server answers.
            call_json(self.core.create_namespaced_pod_binding, a.name, a.namespace, body)
        except KubeApiError as e:
            kind = {409: FailureKind.CONFLICT, 404: FailureKind.GONE}.get(e.status, FailureKind.ERROR)
            raise GangBindError(pod=a.key, node=a.node, kind=kind, detail=str(e)) from e
        except OSError as e:
            raise GangBindError(pod=a.key, node=a.node, kind=FailureKind.ERROR, detail=str(e)) from e

    def bound_here(self, a: Assignment) -> bool:
        """After a bind without an answer: is the pod (this UID) bound to our node? Unknown counts as yes,
        because deleting a pod its owner recreates costs less than leaving a gang half bound."""
        try:
            pod = call_json(self.core.read_namespaced_pod, a.name, a.namespace)
        except KubeApiError as e:
            return e.status != 404
        except OSError:
            return True
        same = not a.uid or str((pod.get("metadata") or {}).get("uid") or "") == a.uid
        return same and node_name(pod) == a.node

    def delete(self, a: Assignment) -> bool:
        """Delete the pod we bound. True when it is gone: deleted now, already gone, or replaced."""
        return delete_pod(
            self.core, name=a.name, namespace=a.namespace, uid=a.uid, key=a.key, doing="undoing the bind of"
        )


def delete_pod(core: client.CoreV1Api, *, name: str, namespace: str, uid: str, key: str, doing: str) -> bool:
    """DELETE the pod ``uid`` (a precondition: a pod recreated under the name is never touched), with its own
    grace period. True when it is going: deleted now, already gone (404), or replaced (409: the name holds
    another pod). False, with a warning naming ``doing``, when the API server refused or did not answer."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid or None}}
    try:
        call_json(core.delete_namespaced_pod, name, namespace, body=body)
    except KubeApiError as e:
        if e.status in (404, 409):
            return True
        log.warning("%s %s (deleting it): %s", doing, key, e)
        return False
    except OSError as e:
        log.warning("%s %s (deleting it): %s", doing, key, e)
        return False
    return True
