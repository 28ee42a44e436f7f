"""Hostile pods: fields of a wrong type or out of range are refused with a reason naming the field, on the
pod's event and PodScheduled condition; the scheduling loop keeps going and the other pods are placed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from tests.kube.conftest import add_racks, bound_to, events_for, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer

from rackscale.kube.planning import plan
from rackscale.kube.pods import gangs
from rackscale.kube.scheduler import KubeScheduler

Obj = dict[str, Any]
Start = Callable[..., KubeScheduler]


def _spec(**kw: Any) -> Callable[[Obj], None]:
    return lambda p: p["spec"].update(kw)


def _limit(v: object, key: str = "nvidia.com/gpu", kind: str = "limits") -> Callable[[Obj], None]:
    return lambda p: p["spec"]["containers"][0]["resources"][kind].__setitem__(key, v)


def _meta(**kw: Any) -> Callable[[Obj], None]:
    return lambda p: p["metadata"].update(kw)


def _container(**kw: Any) -> Callable[[Obj], None]:
    return lambda p: p["spec"]["containers"][0].update(kw)


def _ann(key: str, v: object) -> Callable[[Obj], None]:
    return lambda p: p["metadata"]["annotations"].__setitem__(key, v)


ELASTIC = "elastic gangs are off under Kubernetes"
# (id, what is done to the pod, what its reason must say)
HOSTILE: list[tuple[str, Callable[[Obj], None], str]] = [
    ("priority-a-string", _spec(priority="high"), "spec.priority='high' is not an integer"),
    ("priority-a-float", _spec(priority=2.5), "spec.priority=2.5 is not an integer"),
    ("priority-a-bool", _spec(priority=True), "spec.priority=True is not an integer"),
    ("priority-beyond-int32", _spec(priority=2**40), "spec.priority=1099511627776 is not an integer from"),
    ("priority-below-int32", _spec(priority=-(2**31) - 1), "spec.priority=-2147483649"),
    ("gpus-negative", _limit("-8"), "resources.limits['nvidia.com/gpu']='-8' is not a Kubernetes quantity"),
    ("gpus-no-quantity", _limit("eight"), "resources.limits['nvidia.com/gpu']='eight'"),
    ("gpus-non-ascii-digit", _limit("８"), "resources.limits['nvidia.com/gpu']='８'"),
    ("gpus-huge", _limit("1e400"), "resources.limits['nvidia.com/gpu']='1e400'"),
    ("gpus-two-dots", _limit("1.2.3"), "resources.limits['nvidia.com/gpu']='1.2.3'"),
    ("cpu-no-quantity", _limit("lots", "cpu", "requests"), "resources.requests['cpu']='lots'"),
    ("memory-negative", _limit(-1, "memory", "requests"), "resources.requests['memory']=-1"),
    ("resources-a-string", _container(resources="8 GPUs"), "spec.containers[0] ('main').resources is not a mapping"),
    ("annotations-a-list", _meta(annotations=["a"]), "metadata.annotations=['a'] is not a mapping"),
    ("huge-value-cut", _spec(priority="x" * 10_000), "characters)"),
    # Annotations: min-member strictly, and every rackscale.io/ key that is not read is refused by name.
    ("min-member-spaces", _ann("rackscale.io/min-member", " 2"), "min-member=' 2' is not a whole number of pods"),
    ("min-member-non-ascii", _ann("rackscale.io/min-member", "２"), "min-member='２' is not a whole number of pods"),
    ("min-member-underscore", _ann("rackscale.io/min-member", "1_0"), "min-member='1_0' is not a whole number"),
    ("min-member-negative", _ann("rackscale.io/min-member", "-1"), "min-member='-1' is not a whole number"),
    ("min-member-zero", _ann("rackscale.io/min-member", "0"), "min-member='0' must be from 1 to 2097152"),
    ("min-member-huge", _ann("rackscale.io/min-member", "9" * 5000), "(5002 characters) must be from 1 to"),
    ("min-member-a-number", _ann("rackscale.io/min-member", 2), "min-member=2 is not a whole number of pods"),
    (
        "min-gpus",
        _ann("rackscale.io/min-gpus", "8"),
        f"'rackscale.io/min-gpus'='8' is not read under Kubernetes: {ELASTIC}",
    ),
    (
        "max-gpus-huge",
        _ann("rackscale.io/max-gpus", "1e99"),
        f"'rackscale.io/max-gpus'='1e99' is not read under Kubernetes: {ELASTIC}",
    ),
    (
        "min-gpus-negative",
        _ann("rackscale.io/minGpus", "-8"),
        f"'rackscale.io/minGpus'='-8' is not read under Kubernetes: {ELASTIC}",
    ),
    (
        "min-above-max",
        lambda p: p["metadata"]["annotations"].update({"rackscale.io/max-gpus": "8", "rackscale.io/min-gpus": "16"}),
        f"'rackscale.io/max-gpus'='8' is not read under Kubernetes: {ELASTIC}",
    ),
    ("checkpoint-on-preempt", _ann("rackscale.io/checkpoint-on-preempt", "yes"), "save the work on SIGTERM"),
    (
        "priority-annotation",
        _ann("rackscale.io/priority", "ünïcode"),
        "'rackscale.io/priority'='ünïcode' is not read under Kubernetes: the priority is spec.priority",
    ),
    (
        "typo-of-pod-group",
        _ann("rackscale.io/pod-grop", "t"),
        "rackscale reads rackscale.io/pod-group, rackscale.io/min-member, rackscale.io/topology; correct the key",
    ),
    ("non-ascii-key", _ann("rackscale.io/grüppe", "t"), "'rackscale.io/grüppe'='t' is not read"),
    ("topology-huge", _ann("rackscale.io/topology", "rack" * 1000), "(4002 characters): expected 'rack' or 'region'"),
]


@pytest.mark.parametrize(("change", "needle"), [pytest.param(c, n, id=i) for i, c, n in HOSTILE])
def test_a_hostile_field_is_named_and_refused(change: Callable[[Obj], None], needle: str) -> None:
    bad = pod("bad")
    change(bad)
    others = [pod("good")]
    gs = gangs([bad, *others], "rackscale")
    p = plan(gs, gpu_resource="nvidia.com/gpu", max_node_gpus=8, submitted={g.job: 0.0 for g in gs}, held={})
    assert set(p.jobs) == {"pod:default/good"}
    ((g, why),) = p.rejected
    assert g.job == "pod:default/bad" and needle in why and len(why) < 400


def test_a_hostile_member_refuses_its_gang_only() -> None:
    members = [pod(f"t-{i}", group="t", min_member=2) for i in range(2)]
    members[1]["spec"]["priority"] = "urgent"
    gs = gangs([*members, pod("good")], "rackscale")
    p = plan(gs, gpu_resource="nvidia.com/gpu", max_node_gpus=8, submitted={g.job: 0.0 for g in gs}, held={})
    assert set(p.jobs) == {"pod:default/good"}
    ((g, why),) = p.rejected
    assert len(g.pending) == 2 and "spec.priority='urgent'" in why


@pytest.mark.parametrize(
    ("topologies", "refused"),
    [(("rack", "rack"), False), (("rack", None), True), (("rack", "region"), True)],
    ids=["agree", "one-unset", "rack-and-region"],
)
def test_a_gangs_pods_must_agree_on_their_topology(topologies: tuple[str | None, ...], refused: bool) -> None:
    """Read from the first pending pod only, a gang's constraint depended on the pods' order."""
    members = [pod(f"t-{i}", group="t", min_member=2) for i in range(2)]
    for m, topo in zip(members, topologies, strict=True):
        if topo is not None:
            m["metadata"]["annotations"]["rackscale.io/topology"] = topo
    gs = gangs(members, "rackscale")
    p = plan(gs, gpu_resource="nvidia.com/gpu", max_node_gpus=8, submitted={g.job: 0.0 for g in gs}, held={})
    if refused:
        ((_, why),) = p.rejected
        assert "its pods disagree on annotation rackscale.io/topology" in why, why
    else:
        assert set(p.jobs) == {"group:default/t"} and not p.rejected


def test_hostile_pods_never_stop_the_loop(
    fake: FakeAPIServer, start_scheduler: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Every hostile pod at once, and another scheduler's bound pod whose requests cannot be read: each bad
    pod says what is wrong, the node of the unreadable pod gets nothing more, the good pod is bound."""
    add_racks(fake, racks=1, nodes=2)
    theirs = pod("theirs", scheduler="default-scheduler", node_name="r0-n0")
    theirs["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "a lot"
    fake.put("pods", theirs)
    for name, change, _ in HOSTILE:
        p = pod(name)
        change(p)
        fake.put("pods", p)
    fake.put("pods", pod("good"))
    with caplog.at_level(logging.WARNING, logger="rackscale.kube"):
        s = start_scheduler()
        wait_for(lambda: bound_to(fake, "default/good") is not None, what="the good pod bound")
        for name, _, needle in HOSTILE:
            wait_for(lambda n=name: events_for(fake, n, "FailedScheduling"), what=f"{name} told")  # type: ignore[misc]
            (ev,) = events_for(fake, name, "FailedScheduling")
            assert needle in ev["message"], name
            cond = next(c for c in (fake.get("pods", f"default/{name}") or {})["status"]["conditions"])
            assert (cond["type"], cond["status"], cond["message"]) == ("PodScheduled", "False", ev["message"])
    assert bound_to(fake, "default/good") == "r0-n1"  # r0-n0 counts as full
    assert fake.binds == [("default/good", "r0-n1")]
    assert s.stats.cycles >= 1
    assert not any("scheduling cycle failed" in r.getMessage() for r in caplog.records)
    assert any("bound pod default/theirs" in r.getMessage() for r in caplog.records)
