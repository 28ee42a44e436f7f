"""Kubernetes node health (kube/health.py): conditions, cordon, taints and GPU capacity above allocatable,
mapped to NodeHealth; the snapshot fails those nodes and GPUs; the scheduler, against the fake API server,
places no pod on a node that went NotReady, is tainted, or lost GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.kube.conftest import Obj, bound_to, node, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer

from rackscale.kube.cluster import LabelKeys, build_cluster, topology_signature
from rackscale.kube.health import node_health
from rackscale.kube.scheduler import KubeScheduler
from rackscale.kube.snapshot import build_snapshot

GPU = "nvidia.com/gpu"
Start = Callable[..., KubeScheduler]


def ready(status: str, reason: str = "") -> Callable[[dict[str, Any]], None]:
    def edit(n: dict[str, Any]) -> None:
        n["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": reason}]

    return edit


def cordon(n: dict[str, Any]) -> None:
    n["spec"]["unschedulable"] = True


def taint(key: str, effect: str) -> Callable[[dict[str, Any]], None]:
    def edit(n: dict[str, Any]) -> None:
        n["spec"].setdefault("taints", []).append({"key": key, "effect": effect})

    return edit


def allocatable(gpus: int) -> Callable[[dict[str, Any]], None]:
    def edit(n: dict[str, Any]) -> None:
        n["status"]["allocatable"][GPU] = str(gpus)

    return edit


def no_conditions(n: dict[str, Any]) -> None:
    n["status"]["conditions"] = []


@pytest.mark.parametrize(
    ("edit", "state", "failed", "says"),
    [
        (None, None, (), ""),
        (ready("False", "KubeletNotReady"), "down", (), "Ready=False (KubeletNotReady)"),
        (ready("Unknown", "NodeStatusUnknown"), "not-responding", (), "Ready=Unknown"),
        (no_conditions, "not-responding", (), "no Ready condition"),
        (cordon, "drain", (), "cordoned"),
        (taint("node.kubernetes.io/unreachable", "NoExecute"), "down", (), "unreachable:NoExecute"),
        (taint("example.com/maintenance", "NoSchedule"), "tainted", (), "maintenance:NoSchedule"),
        (taint("node.kubernetes.io/unschedulable", "NoSchedule"), "drain", (), "unschedulable"),
        (taint(GPU, "NoSchedule"), None, (), ""),  # tolerated by every GPU pod (ExtendedResourceToleration)
        (taint("example.com/soft", "PreferNoSchedule"), None, (), ""),
        (allocatable(6), "ok", (6, 7), "2 of 8 GPUs not allocatable"),
    ],
    ids=[
        "healthy",
        "not-ready",
        "unknown",
        "no-ready-condition",
        "cordoned",
        "no-execute",
        "no-schedule",
        "cordon-taint",
        "gpu-taint",
        "prefer-no-schedule",
        "gpus-not-allocatable",
    ],
)
def test_node_objects_map_to_health(
    edit: Callable[[dict[str, Any]], None] | None, state: str | None, failed: tuple[int, ...], says: str
) -> None:
    n = node("a", "clique-0")
    if edit is not None:
        edit(n)
    h = node_health(n, GPU)
    if state is None:
        assert h is None
        return
    assert h is not None and (h.node, str(h.state), h.failed_gpus) == ("a", state, failed)
    assert says in h.reason


def snapshot(nodes: list[Obj]) -> tuple[Any, Any]:
    keys = LabelKeys()
    c = build_cluster(topology_signature(nodes, keys), keys)
    return c, build_snapshot(
        c, nodes={n["metadata"]["name"]: n for n in nodes}, pods={}, where=lambda k, p: None, labels=keys
    ).state


def test_the_snapshot_fails_unhealthy_nodes_and_unallocatable_gpus_without_shrinking_the_model() -> None:
    """a [........] healthy; b [######..] 2 not allocatable -> #; c NotReady -> all #."""
    b, c_ = node("b", "clique-0"), node("c", "clique-0")
    allocatable(6)(b)
    ready("False")(c_)
    cluster, state = snapshot([node("a", "clique-0"), b, c_])
    assert [n.gpus for n in cluster.nodes] == [8, 8, 8]  # from capacity: a GPU that comes back rebuilds nothing
    assert state.failed_gpus_count == 2 + 8
    assert state.used_milli == 0 and state.gpu_failed[1] == {6, 7} and state.node_down[2]


def test_the_scheduler_avoids_a_node_that_went_not_ready(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """Two nodes of one rack; ``a`` goes NotReady before the pod arrives: the pod lands on ``b``."""
    fake.put("nodes", node("a", "clique-0"))
    fake.put("nodes", node("b", "clique-0"))
    bad = node("a", "clique-0")
    ready("False", "KubeletNotReady")(bad)
    fake.put("nodes", bad)
    s = start_scheduler()
    wait_for(lambda: s.stats.cycles >= 1, what="a cycle")
    fake.put("pods", pod("p1", gpus=8))
    wait_for(lambda: bound_to(fake, "default/p1"), what="p1 bound")
    assert bound_to(fake, "default/p1") == "b"
