"""The fake API server's vocabulary: the resources it serves, a ``v1.Status``, one change of its history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "events": "Event",
    "leases": "Lease",
    "deployments": "Deployment",
    "poddisruptionbudgets": "PodDisruptionBudget",
    "configmaps": "ConfigMap",
}
API_VERSION = {
    "nodes": "v1",
    "configmaps": "v1",
    "pods": "v1",
    "events": "v1",
    "leases": "coordination.k8s.io/v1",
    "deployments": "apps/v1",
    "poddisruptionbudgets": "policy/v1",
}
NAMESPACED = {
    "nodes": False,
    "pods": True,
    "events": True,
    "leases": True,
    "deployments": True,
    "poddisruptionbudgets": True,
    "configmaps": True,
}


def status(code: int, reason: str, message: str, st: str = "Failure") -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": st,
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class Change:
    rv: int
    kind: str
    type: str
    obj: Obj
