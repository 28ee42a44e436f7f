"""The allocation a cycle starts from, rebuilt from the caches: pure functions, no I/O."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from rackscale.kube.cluster import LabelKeys
from rackscale.kube.health import node_health
from rackscale.kube.pods import PodRequest, is_terminated, pod_request
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


def build_state(
    cluster: GPUCluster,
    *,
    nodes: Mapping[str, Obj],
    pods: Mapping[str, Obj],
    where: Callable[[str, Obj], str | None],
    labels: LabelKeys,
) -> ClusterState:
    """Every live pod that holds a node (``where`` says which: its nodeName, or one we bound or are undoing
    that the watch has not shown yet) holds its requests there. A node that takes no new pods
    (:func:`rackscale.kube.health.node_health`: not Ready, cordoned, tainted) is failed, and so are the
    GPUs its capacity counts above its allocatable."""
    state = ClusterState(cluster)
    index = {n.name: n.index for n in cluster.nodes}
    for key, pod in pods.items():
        at = where(key, pod)
        if at is None or is_terminated(pod) or at not in index:
            continue
        n = index[at]
        try:
            req = pod_request(pod, labels.gpu_resource)
        except ValueError as e:
            # Unreadable (a real API server validates requests): it takes all that is left on its node, so that
            # nothing is placed on top of it.
            log.warning("bound pod %s: %s; counting its node %s as full", key, e, at)
            req = PodRequest(state.node_whole[n], state.cpu_free[n], state.mem_free[n])
        g = min(req.gpus, state.node_whole[n])  # another scheduler may have over-committed the node
        cpu, mem = min(req.cpu_milli, state.cpu_free[n]), min(req.memory_mib, state.mem_free[n])
        if g == 0 and cpu == 0 and mem == 0:
            continue
        alloc = NodeAlloc(n, state.whole_free_gpus(n, g) if g else (), cpu_milli=cpu, memory_mib=mem)
        spec = batch(f"bound:{key}", gpus=g, cpu_milli=cpu, memory_mib=mem, preemptible=False)
        state.allocate(spec, Placement(spec.name, (alloc,), 1), now=0.0, health=False)
    for node in nodes.values():
        h = node_health(node, labels.gpu_resource)
        at_index = index.get(node_key(node))
        if h is None or at_index is None:
            continue
        for g in h.failed_gpus:
            if g < cluster.nodes[at_index].gpus:
                state.fail_gpu(at_index, g)
        if h.state.failed:
            state.fail_node(at_index)
    return state
