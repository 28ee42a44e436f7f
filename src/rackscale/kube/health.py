"""A Kubernetes node's health as rackscale reads it (pure: the node object the watch cached), in the
backend-neutral :class:`NodeHealth`:

- ``Ready`` condition ``False`` -> DOWN, ``Unknown`` or missing -> NOT_RESPONDING (the kubelet stopped
  posting status: https://kubernetes.io/docs/reference/node/node-status/#condition);
- ``spec.unschedulable`` (``kubectl cordon``) -> DRAIN;
- taints (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/): ``NoExecute`` ->
  DOWN (its pods are evicted), ``NoSchedule`` -> TAINTED; ``PreferNoSchedule`` is ignored, and so is a taint
  whose key is the GPU resource (``nvidia.com/gpu``: the ExtendedResourceToleration admission plugin gives
  every pod that asks for GPUs a toleration of it);
- ``status.capacity`` GPUs above ``status.allocatable`` -> that many failed GPUs (the NVIDIA device plugin
  takes an unhealthy GPU out of allocatable; capacity keeps counting it).

The cluster model counts a node's GPUs from its capacity (``rackscale.kube.cluster.node_decl``), so a GPU
that fails and comes back never rebuilds the model; the snapshot fails the missing ones instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rackscale.host.parts import NodeHealth, NodeState
from rackscale.kube.cluster import gpu_counts

Obj = Mapping[str, Any]
_CORDON_TAINT = "node.kubernetes.io/unschedulable"  # the taint a cordon adds: DRAIN, like spec.unschedulable


def node_health(node: Obj, gpu_resource: str) -> NodeHealth | None:
    """What is wrong with the node, None when nothing is (every state found; the gravest wins)."""
    name = str((node.get("metadata") or {}).get("name", ""))
    found: list[tuple[NodeState, str]] = []
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    if not ready:
        found.append((NodeState.NOT_RESPONDING, "no Ready condition"))
    elif ready[0].get("status") != "True":
        state = NodeState.DOWN if ready[0].get("status") == "False" else NodeState.NOT_RESPONDING
        found.append((state, f"Ready={ready[0].get('status')}" + _why(ready[0])))
    if (node.get("spec") or {}).get("unschedulable"):
        found.append((NodeState.DRAIN, "cordoned (spec.unschedulable)"))
    for t in (node.get("spec") or {}).get("taints") or []:
        key, effect = str(t.get("key", "")), t.get("effect")
        if key == gpu_resource or effect not in ("NoExecute", "NoSchedule"):
            continue
        state = NodeState.DOWN if effect == "NoExecute" else NodeState.TAINTED
        found.append((NodeState.DRAIN if key == _CORDON_TAINT else state, f"taint {key}:{effect}"))
    cap, alloc = gpu_counts(node, gpu_resource)
    failed = tuple(range(alloc, cap))  # which device failed is the kubelet's; rackscale's indexes are its own
    if not found and not failed:
        return None
    rank = {s: (2 if s.stops_jobs else 1) for s, _ in found}
    state = max((s for s, _ in found), key=lambda s: rank[s], default=NodeState.OK)
    reasons = [r for _, r in found] + ([f"{len(failed)} of {cap} GPUs not allocatable"] if failed else [])
    return NodeHealth(node=name, state=state, failed_gpus=failed, reason="; ".join(reasons))


def _why(cond: Obj) -> str:
    msg = cond.get("reason") or cond.get("message")
    return f" ({msg})" if msg else ""


__all__ = ["node_health"]
