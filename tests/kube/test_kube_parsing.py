"""Pods and nodes (JSON) -> rackscale jobs and the cluster model: pure functions, no server."""

from __future__ import annotations

from decimal import Decimal

import pytest
from tests.kube.conftest import node, pod

from rackscale.kube.cluster import node_available, parse_quantity
from rackscale.kube.pods import gang_spec, gangs, pod_request
from rackscale.model.workload import JobKind, PreemptionPolicy


def test_quantities() -> None:
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("16Gi") == 16 * 2**30
    assert parse_quantity(8) == 8
    assert parse_quantity("1e3") == 1000
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_gangs_group_and_gate_on_min_member() -> None:
    pods = [pod(f"t-{i}", group="t", min_member=4, priority=5) for i in range(3)]
    pods.append(pod("bound", group="t", min_member=4, node_name="n0"))  # a bound member counts
    pods.append(pod("alone", gpus=2))
    pods.append(pod("other", scheduler="default-scheduler"))
    out = {g.job: g for g in gangs(pods, "rackscale")}
    assert set(out) == {"group:default/t", "pod:default/alone"}
    t = out["group:default/t"]
    assert t.ready and len(t.pending) == 3 and t.bound == 1 and t.priority == 5
    spec = gang_spec(t, "nvidia.com/gpu", submit_time=0.0)
    assert not isinstance(spec, str)
    assert spec.kind is JobKind.TRAINING and spec.units == 3 and spec.unit.gpus == 8
    assert spec.preemption_policy is PreemptionPolicy.PREEMPT_LOWER_PRIORITY  # spec.preemptionPolicy's default
    t.pending[1]["spec"]["preemptionPolicy"] = "Never"  # one member that may not preempt holds the gang back
    never = gang_spec(t, "nvidia.com/gpu", submit_time=0.0)
    assert not isinstance(never, str) and never.preemption_policy is PreemptionPolicy.NEVER
    alone = gang_spec(out["pod:default/alone"], "nvidia.com/gpu", submit_time=0.0)
    assert not isinstance(alone, str) and alone.units == 1 and alone.unit.gpus == 2


@pytest.mark.parametrize(
    ("bound_member_deleting", "ready"),
    [pytest.param(False, True, id="a-bound-member-counts"), pytest.param(True, False, id="one-being-deleted-does-not")],
)
def test_a_bound_member_being_deleted_is_no_member(bound_member_deleting: bool, ready: bool) -> None:
    """A member rackscale deleted to undo a failed gang bind may linger bound (graceful deletion): counting
    it would make the gang look complete, and its siblings would be placed without it, in any rack."""
    pods = [pod(f"t-{i}", group="t", min_member=4) for i in range(3)]
    leaving = pod("t-3", group="t", min_member=4, node_name="n0")
    if bound_member_deleting:
        leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    (g,) = gangs([*pods, leaving], "rackscale")
    assert g.ready is ready and len(g.pending) == 3 and g.bound == (0 if bound_member_deleting else 1)


def test_mixed_group_is_refused_with_a_reason() -> None:
    pods = [pod("a", gpus=8, group="m"), pod("b", gpus=4, group="m")]
    (g,) = gangs(pods, "rackscale")
    assert "mixes requests" in str(gang_spec(g, "nvidia.com/gpu", submit_time=0.0))


def test_requests_and_node_readiness() -> None:
    p = pod("x", gpus=4)
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "16"}}}]
    r = pod_request(p, "nvidia.com/gpu")
    assert (r.gpus, r.cpu_milli, r.memory_mib) == (4, 16000, 32 * 1024)
    n = node("n", "c")
    assert node_available(n)
    n["spec"]["unschedulable"] = True
    assert not node_available(n)
