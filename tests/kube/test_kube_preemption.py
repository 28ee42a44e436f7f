"""Priority preemption under Kubernetes (docs/kubernetes.md, "Preemption"): a waiting gang of higher priority
deletes the pods of lower-priority rackscale gangs, each with its grace period, waits for them to go (nominated,
preempting no one else meanwhile), then is bound where they ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from tests.kube.conftest import FAST, add_racks, bound_to, events_for, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault, pod_path

from rackscale.cli.kube_metrics import kube_registry
from rackscale.kube.preemption import HOLD_MARGIN_S, EvictionBook, grace_s, started_wall, victim_job
from rackscale.kube.scheduler import KubeScheduler
from rackscale.kube.snapshot import Victim
from rackscale.scheduler.decisions import PreemptionCause

Start = Callable[..., KubeScheduler]
Obj = dict[str, Any]


def _with(p: Obj, **md: Any) -> Obj:
    p["metadata"].update(md)
    return p


@pytest.mark.parametrize(
    ("p", "job"),
    [
        pytest.param(pod("a", group="g", node_name="n"), "running-group:default/g", id="a-gang-member"),
        pytest.param(pod("a", node_name="n", namespace="t"), "running-pod:t/a", id="a-lone-pod"),
        pytest.param(pod("a", node_name="n", scheduler="default-scheduler"), None, id="another-schedulers"),
        pytest.param(_with(pod("a", node_name="n"), deletionTimestamp="2026-01-01T00:00:00Z"), None, id="leaving"),
        pytest.param(
            _with(pod("a", node_name="n"), ownerReferences=[{"kind": "DaemonSet", "name": "d"}]), None, id="daemonset"
        ),
        pytest.param(
            _with(pod("a", node_name="n"), annotations={"kubernetes.io/config.mirror": "x"}), None, id="static-pod"
        ),
    ],
)
def test_which_running_pods_may_be_victims(p: Obj, job: str | None) -> None:
    assert victim_job(p, scheduler="rackscale") == job


@pytest.mark.parametrize(
    ("grace", "want"),
    [(None, 30.0), (0, 0.0), (600, 600.0), (-1, 30.0), ("60", 30.0), (True, 30.0), (10**400, 30.0), (2**63, 30.0)],
    ids=["default", "zero", "long", "negative", "a-string", "a-bool", "400-digits", "past-int64"],
)
def test_the_grace_period_read_from_a_victim(grace: object, want: float) -> None:
    p = pod("v", node_name="n")
    if grace is not None:
        p["spec"]["terminationGracePeriodSeconds"] = grace
    assert grace_s(p) == want


@pytest.mark.parametrize(
    ("start", "want"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("x\x00", None),
        ("\ud800", None),
        (12345, None),
        ("9" * 5000, None),
        ("9999-12-31T23:59:59+00:00", 253402300799.0),
    ],
    ids=["a-time", "nul", "surrogate", "a-number", "huge", "the-last-second"],
)
def test_a_victims_start_time_read_from_hostile_values(start: object, want: float | None) -> None:
    p = pod("v", node_name="n")
    p["status"]["startTime"] = start
    p["metadata"].pop("creationTimestamp", None)
    assert started_wall(p) == want


def test_a_preemptor_is_held_while_its_victims_terminate_and_no_longer() -> None:
    """Held while a victim it deleted is there, up to the longest grace period and the margin; never once the
    victims are gone, replaced by a pod of the same name (another UID), or terminated."""
    v = pod("v", node_name="n")
    v["metadata"]["uid"] = "u1"
    v["spec"]["terminationGracePeriodSeconds"] = 60
    book = EvictionBook()
    book.record("group:default/high", [Victim(key="default/v", uid="u1", node="n", pod=v)], now=100.0)
    pods = {"default/v": v}
    until = 100.0 + 60 + HOLD_MARGIN_S
    assert book.held(pods, now=until - 1) == {"group:default/high": "waiting for 1 pod(s) stopped for it to terminate"}
    assert book.held(pods, now=until) == {}  # placed elsewhere if it can: it still preempts no one
    assert book.waiting_for("group:default/high", pods) == 1
    replaced = {"default/v": {**v, "metadata": {**v["metadata"], "uid": "u2"}}}
    done = {"default/v": {**v, "status": {"phase": "Failed"}}}
    for gone in ({}, replaced, done):
        assert book.held(gone, now=101.0) == {} and book.waiting_for("group:default/high", gone) == 0
    assert book.ready({}) == ["group:default/high"] and book.ready(pods) == []  # its victims gone: placed first
    book.prune(pending={"group:default/high"})
    assert list(book.by_preemptor) == ["group:default/high"]  # still waits: kept until placed or gone
    book.prune(pending=set())
    assert book.by_preemptor == {}


def _samples(s: KubeScheduler) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(x.name, frozenset(x.labels.items())): x.value for f in kube_registry(s).collect() for x in f.samples}


def _cycles(s: KubeScheduler, n: int) -> None:
    at = s.stats.cycles
    wait_for(lambda: s.stats.cycles >= at + n, what=f"{n} more cycles")


def _low_and_mid(fake: FakeAPIServer, start_scheduler: Start) -> KubeScheduler:
    """Two racks of two 8-GPU nodes, the fake deleting gracefully: gang "low" (2 x 8, priority 10) bound on one
    rack, then pod "mid" (8, priority 20) on the other; the scheduler that bound them."""
    fake.graceful_deletes = True
    add_racks(fake, racks=2, nodes=2)
    for i in range(2):
        fake.put("pods", pod(f"low-{i}", group="low", min_member=2, priority=10))
    s = start_scheduler()
    wait_for(lambda: len(fake.binds) == 2, what="low bound")
    fake.put("pods", pod("mid-0", priority=20))
    wait_for(lambda: len(fake.binds) == 3, what="mid bound")
    return s


def test_a_higher_priority_gang_preempts_the_cheapest_gang_waits_for_it_then_runs_there(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """
    rack clique-0: r0-n0 [low-0 ........] r0-n1 [low-1 ........]   gang "low", priority 10
    rack clique-1: r1-n0 [mid-0 ........] r1-n1 [free  ........]   pod "mid", priority 20

    gang "high" (2 x 8 GPUs, priority 1000) fits no rack: it preempts the cheaper of the two (low: lower priority),
    both its pods at once, waits while they terminate (their grace period) and preempts no one else meanwhile,
    then is bound on r0-n0 and r0-n1.
    """
    s = _low_and_mid(fake, start_scheduler)
    assert bound_to(fake, "default/mid-0") in ("r1-n0", "r1-n1")  # low took one rack whole
    low = {k: fake.get("pods", k) for k in ("default/low-0", "default/low-1")}
    for i in range(2):
        fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000, namespace="tenant-b"))
    wait_for(lambda: len(fake.deletes) == 2, what="the low gang's pods deleted")
    assert sorted(fake.deletes) == sorted(low)
    # Each DELETE names the pod's UID (a replacement of the same name is never deleted) and no grace of ours.
    assert sorted(b["preconditions"]["uid"] for b in fake.delete_bodies) == sorted(
        p["metadata"]["uid"] for p in low.values() if p is not None
    )
    assert all("gracePeriodSeconds" not in b for b in fake.delete_bodies)
    for k in low:
        victim = fake.get("pods", k)
        assert victim is not None and victim["metadata"]["deletionTimestamp"]  # terminating: still on its node
        (cond,) = [c for c in victim["status"].get("conditions", []) if c["type"] == "DisruptionTarget"]
        assert cond["reason"] == "PreemptionByScheduler" and cond["status"] == "True"
    told = wait_for(lambda: events_for(fake, "low-0", "Preempted"), what="the victim told")
    assert isinstance(told, list)
    msg = told[0]["message"]
    assert "priority 1000 > 10" in msg and "high-" not in msg and "tenant-b" not in msg  # no other tenant's names
    # The preemptor's pods are nominated to the nodes the victims hold, and told why they wait.
    wait_for(
        lambda: all(
            (fake.get("pods", f"tenant-b/high-{i}") or {}).get("status", {}).get("nominatedNodeName") for i in range(2)
        ),
        what="the preemptor nominated",
    )
    nominated = {fake.get("pods", f"tenant-b/high-{i}")["status"]["nominatedNodeName"] for i in range(2)}  # type: ignore[index]
    assert nominated == {"r0-n0", "r0-n1"}
    assert any("preempting 2 pod(s)" in e["message"] for e in events_for(fake, "high-0", "FailedScheduling"))
    # While the victims terminate: nothing bound on their nodes, and nobody else preempted for the same room.
    _cycles(s, 4)
    assert len(fake.binds) == 3 and len(fake.deletes) == 2 and bound_to(fake, "default/mid-0")
    assert s.stats.preemptions == 1
    # One victim gone: the gang still waits for the other (r0-n0 and r1-n1 would fit it, over two racks).
    fake.delete("pods", "default/low-0")
    _cycles(s, 3)
    assert not bound_to(fake, "tenant-b/high-0") and not bound_to(fake, "tenant-b/high-1")
    assert s.evictions.held(dict(s.pods), now=s.clock()) == {
        "group:tenant-b/high": "waiting for 1 pod(s) stopped for it to terminate"
    }
    # The other one's kubelet reports its containers stopped: the high gang is bound where they ran.
    fake.delete("pods", "default/low-1")
    wait_for(lambda: all(bound_to(fake, f"tenant-b/high-{i}") for i in range(2)), what="the high gang bound")
    assert {bound_to(fake, f"tenant-b/high-{i}") for i in range(2)} == nominated
    st = s.stats
    assert (st.preemptions, st.victims[PreemptionCause.PRIORITY], st.preempted_pods, st.preemption_errors) == (
        1,
        1,
        2,
        0,
    )
    got = _samples(s)
    assert got[("rackscale_preemption_victims_total", frozenset({("cause", "priority")}))] == 1
    assert got[("rackscale_kube_preempted_pods_total", frozenset())] == 2


@pytest.mark.parametrize(
    ("setup", "high_priority", "edit"),
    [
        pytest.param("equal", 1000, None, id="equal-priority-is-no-victim"),
        pytest.param("other-scheduler", 1000, None, id="another-schedulers-pod-is-no-victim"),
        pytest.param("low", 1000, {"preemptionPolicy": "Never"}, id="preemption-policy-never"),
    ],
)
def test_a_gang_that_may_preempt_no_one_waits(
    fake: FakeAPIServer, start_scheduler: Start, setup: str, high_priority: int, edit: Obj | None
) -> None:
    """One rack of two nodes, full; the waiting gang needs both nodes and may stop nothing there."""
    add_racks(fake, racks=1, nodes=2)
    if setup == "other-scheduler":
        for i in range(2):
            fake.put("pods", pod(f"x-{i}", scheduler="default-scheduler", priority=0, node_name=f"r0-n{i}"))
    else:
        prio = 1000 if setup == "equal" else 10
        for i in range(2):
            fake.put("pods", pod(f"run-{i}", group="run", min_member=2, priority=prio))
    s = start_scheduler()
    if setup != "other-scheduler":
        wait_for(lambda: len(fake.binds) == 2, what="the running gang bound")
    for i in range(2):
        p = pod(f"high-{i}", group="high", min_member=2, priority=high_priority)
        p["spec"].update(edit or {})
        fake.put("pods", p)
    wait_for(lambda: events_for(fake, "high-0", "FailedScheduling"), what="the gang told why it waits")
    _cycles(s, 3)
    assert fake.deletes == [] and s.stats.preemptions == 0 and not bound_to(fake, "default/high-0")


def test_a_victim_whose_delete_fails_is_deleted_on_a_later_cycle(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """A 500 on one victim's DELETE: counted, and the preemption is made again (its sibling is gone already)."""
    add_racks(fake, racks=1, nodes=2)
    for i in range(2):
        fake.put("pods", pod(f"low-{i}", group="low", min_member=2, priority=10))
    s = start_scheduler(dataclasses.replace(FAST, retry_interval_s=0.2))
    wait_for(lambda: len(fake.binds) == 2, what="the low gang bound")
    fake.inject(Fault(method="DELETE", path=pod_path("low-0"), status=500, message="etcdserver: timeout"))
    for i in range(2):
        fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000))
    wait_for(lambda: all(bound_to(fake, f"default/high-{i}") for i in range(2)), what="the high gang bound")
    assert sorted(fake.deletes) == ["default/low-0", "default/low-1"]
    assert s.stats.preemption_errors == 1 and s.stats.preempted_pods == 2 and s.stats.preemptions == 2


def test_nothing_is_bound_on_the_victims_gpus_while_they_terminate(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """
    r0-n0 [low-0 ........] priority 10, one node of 8 GPUs
    waiting: high-0 (4 GPUs, priority 1000), then small-0 (4 GPUs, priority 500)

    high preempts low; whatever the cycle placed on the GPUs low still holds waits until low is gone, then both
    run there: at no moment does the node hold more than its 8 GPUs.
    """
    fake.graceful_deletes = True
    add_racks(fake, racks=1, nodes=1)
    fake.put("pods", pod("low-0", priority=10))
    s = start_scheduler()
    wait_for(lambda: bound_to(fake, "default/low-0"), what="low bound")
    fake.put("pods", pod("high-0", gpus=4, priority=1000))
    fake.put("pods", pod("small-0", gpus=4, priority=500))
    wait_for(lambda: fake.deletes == ["default/low-0"], what="low preempted")
    _cycles(s, 3)
    assert [k for k, _ in fake.binds] == ["default/low-0"]
    fake.delete("pods", "default/low-0")
    wait_for(lambda: bound_to(fake, "default/high-0") and bound_to(fake, "default/small-0"), what="both bound")
    assert s.stats.preemptions == 1


def test_a_new_leader_reads_a_preemption_in_flight_back_and_preempts_no_more(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """The leader preempts the low gang and stops while its pods terminate. The next leader knows nothing of
    it but what the API shows (the victims' DisruptionTarget, the preemptor's nominated nodes): it must not
    preempt the mid pod for the same room, and binds the high gang once the victims are gone.

    rack clique-0: r0-n0 [low-0] r0-n1 [low-1]   (priority 10, terminating)
    rack clique-1: r1-n0 [mid-0] r1-n1 [free]    (priority 20)
    """
    first = _low_and_mid(fake, start_scheduler)
    for i in range(2):
        fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000))
    wait_for(lambda: len(fake.deletes) == 2, what="low preempted")
    wait_for(
        lambda: all(
            (fake.get("pods", f"default/high-{i}") or {}).get("status", {}).get("nominatedNodeName") for i in range(2)
        ),
        what="the preemptor nominated",
    )
    first.stop(release=True)
    second = start_scheduler()
    wait_for(lambda: second.evictions.by_preemptor, what="the preemption read back")
    _cycles(second, 4)
    assert len(fake.deletes) == 2 and bound_to(fake, "default/mid-0") and second.stats.preemptions == 0
    assert not bound_to(fake, "default/high-0")
    for i in range(2):
        fake.delete("pods", f"default/low-{i}")
    wait_for(lambda: all(bound_to(fake, f"default/high-{i}") for i in range(2)), what="the high gang bound")
    assert {bound_to(fake, f"default/high-{i}") for i in range(2)} == {"r0-n0", "r0-n1"}


def _owned(p: Obj, job: str) -> Obj:
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}]
    return p


@pytest.mark.parametrize("controlled", [True, False], ids=["job-owned-pods-move", "a-bare-pod-never-moves"])
def test_consolidation_moves_a_small_gang_to_free_a_rack_for_a_waiting_one(
    fake: FakeAPIServer, start_scheduler: Start, controlled: bool
) -> None:
    """--policy rackscale-consolidate (KAI-Scheduler's consolidation), all at priority 0:

    rack clique-0: r0-n0 [a-0 ........] r0-n1 [........]
    rack clique-1: r1-n0 [b-0 ........] r1-n1 [........]

    "llm" (2 x 8 GPUs, one rack required) fits no rack, though 16 GPUs are free. One small pod is deleted
    (moved); its Job recreates it and rackscale places the new pod on the other rack's free node; once the old
    one has terminated, llm is bound on the freed rack. A pod no controller owns is never moved: deleting it
    would lose it, so llm waits.
    """
    fake.graceful_deletes = True
    add_racks(fake, racks=2, nodes=2)
    s = start_scheduler(dataclasses.replace(FAST, policy="rackscale-consolidate"))
    for name, node in (("a-0", "r0-n0"), ("b-0", "r1-n0")):
        p = pod(name, node_name=node)
        fake.put("pods", _owned(p, name[0]) if controlled else p)
    wait_for(lambda: all(s.synced.values()), what="synced")
    for i in range(2):
        p = pod(f"llm-{i}", group="llm", min_member=2)
        p["metadata"]["annotations"]["rackscale.io/topology"] = "rack"
        fake.put("pods", p)
    if not controlled:
        wait_for(lambda: events_for(fake, "llm-0", "FailedScheduling"), what="llm told why it waits")
        _cycles(s, 3)
        assert fake.deletes == [] and not bound_to(fake, "default/llm-0")
        return
    wait_for(lambda: fake.deletes, what="a small pod moved")
    (gone,) = fake.deletes
    node = bound_to(fake, gone)
    assert node is not None
    freed, other = ("clique-0", "r1-n1") if node.startswith("r0") else ("clique-1", "r0-n1")
    victim = fake.get("pods", gone)
    assert victim is not None
    (cond,) = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert "moving it to free a rack whole" in cond["message"]
    told = wait_for(lambda: events_for(fake, gone.split("/")[1], "Preempted"), what="the mover told")
    assert isinstance(told, list) and told[0]["message"].startswith("Moved by rackscale to free a rack whole")
    # Its Job recreates it (a new pod): placed on the other rack's free node, not back on the rack being freed.
    name = gone.split("/")[1]
    fake.put("pods", _owned(pod(f"{name[0]}-1"), name[0]))
    wait_for(lambda: bound_to(fake, f"default/{name[0]}-1"), what="the recreated pod placed")
    assert bound_to(fake, f"default/{name[0]}-1") == other
    assert not bound_to(fake, "default/llm-0")  # the old pod still terminates there
    # Another namespace's pod of the same priority, first by fair share (its namespace holds nothing): it must
    # take neither the room llm is nominated to now nor the room its mover leaves.
    fake.put("pods", pod("c-0", namespace="z"))
    _cycles(s, 3)
    assert not bound_to(fake, "z/c-0")
    fake.delete("pods", gone)
    wait_for(lambda: all(bound_to(fake, f"default/llm-{i}") for i in range(2)), what="llm bound")
    assert {bound_to(fake, f"default/llm-{i}") for i in range(2)} == {f"r{freed[-1]}-n0", f"r{freed[-1]}-n1"}
    assert not bound_to(fake, "z/c-0")  # (the cluster is full)
    assert s.stats.victims[PreemptionCause.CONSOLIDATION] == 1 and s.stats.victims[PreemptionCause.PRIORITY] == 0
