"""The secondary scheduler against the fake API server, through the real ``kubernetes`` client.

No real cluster is involved: see tests/kube/fake_apiserver.py for what the fake covers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest
from kubernetes import client
from tests.kube.conftest import FAST, add_racks, bound_to, events_for, node, pod, rack_of, wait_for
from tests.kube.fake_apiserver import FakeAPIServer

from rackscale.kube.api import call_json
from rackscale.kube.cluster import LabelKeys, build_cluster, topology_signature
from rackscale.kube.scheduler import KubeScheduler

Start = Callable[..., KubeScheduler]


def gang(
    fake: FakeAPIServer, name: str, members: int, *, gpus: int = 8, priority: int | None = None, min_member: int = 0
) -> list[str]:
    keys = []
    for i in range(members):
        mm = min_member or members
        fake.put("pods", pod(f"{name}-{i}", gpus=gpus, group=name, min_member=mm, priority=priority))
        keys.append(f"default/{name}-{i}")
    return keys


def test_topology_from_node_labels() -> None:
    nodes = [node(f"r{r}-n{n}", f"clique-{r}", gpus=8) for r in range(4) for n in range(4)]
    nodes.append(node("loner", None, gpus=4, region="region-b"))
    keys = LabelKeys()
    c = build_cluster(topology_signature(nodes, keys), keys)
    assert len(c.racks) == 5 and c.total_gpus == 4 * 4 * 8 + 4
    assert sorted(r.name for r in c.racks)[:4] == ["clique-0", "clique-1", "clique-2", "clique-3"]
    assert {c.regions[r.region].name for r in c.racks} == {"region-a", "region-b"}
    assert c.gpu_models == ("H100",)
    # Configurable keys: the rack from another label.
    other = LabelKeys(rack="example.com/rack")
    for n in nodes:
        n["metadata"]["labels"]["example.com/rack"] = "one"
    assert len(build_cluster(topology_signature(nodes, other), other).racks) == 2  # "one" in each region


def test_gang_lands_in_one_rack_all_or_nothing(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake)
    keys = gang(fake, "train", 3, min_member=4)  # only 3 of 4 members exist
    s = start_scheduler()
    wait_for(lambda: s.stats.cycles >= 2, what="cycles")
    time.sleep(0.3)
    assert fake.binds == []
    msgs = [e["message"] for e in events_for(fake, "train-0", "FailedScheduling")]
    assert msgs and "3 of 4 members" in msgs[0]
    fake.put("pods", pod("train-3", group="train", min_member=4))
    keys.append("default/train-3")
    wait_for(lambda: all(bound_to(fake, k) for k in keys), what="the gang bound")
    racks = {rack_of(fake, str(bound_to(fake, k))) for k in keys}
    assert len(racks) == 1
    assert len({bound_to(fake, k) for k in keys}) == 4  # 8 GPUs each: one node per pod
    assert len(fake.binds) == 4
    # The Scheduled events follow the last bind of the gang (none is written before the whole gang is bound).
    wait_for(lambda: len(events_for(fake, "train-0", "Scheduled")) == 1, what="the Scheduled event")
    p = fake.get("pods", "default/train-0")
    assert p is not None
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in p["status"]["conditions"])


def test_other_schedulers_pods_ignored_but_count_as_used(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=1, nodes=2)  # 16 GPUs
    fake.put("pods", pod("theirs", gpus=8, scheduler="default-scheduler", node_name="r0-n0"))
    fake.put("pods", pod("theirs-pending", gpus=8, scheduler="default-scheduler"))
    fake.put("pods", pod("mine-a", gpus=8))
    fake.put("pods", pod("mine-b", gpus=8))
    s = start_scheduler()
    wait_for(lambda: len(fake.binds) >= 1 and s.stats.cycles >= 2, what="a bind")
    time.sleep(0.3)
    assert bound_to(fake, "default/theirs-pending") is None  # not ours: left alone
    bound = [k for k in ("default/mine-a", "default/mine-b") if bound_to(fake, k)]
    assert len(bound) == 1 and bound_to(fake, bound[0]) == "r0-n1"  # r0-n0's GPUs are used
    loser = ({"default/mine-a", "default/mine-b"} - set(bound)).pop().split("/")[1]
    assert events_for(fake, loser, "FailedScheduling")
    # The other scheduler's pod finishes: its GPUs come back.
    done = fake.get("pods", "default/theirs")
    assert done is not None
    done["status"]["phase"] = "Succeeded"
    fake.put("pods", done)
    wait_for(lambda: bound_to(fake, f"default/{loser}") == "r0-n0", what="the freed node used")


def test_unschedulable_pod_gets_condition_and_event(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=2, nodes=2)
    fake.put("pods", pod("huge", gpus=16))  # larger than any node
    gang(fake, "toobig", 5)  # 40 GPUs > 32 in the cluster
    start_scheduler()

    def condition(name: str) -> dict[str, str] | None:
        p = fake.get("pods", f"default/{name}")
        assert p is not None
        for c in p["status"].get("conditions", []):
            if c["type"] == "PodScheduled":
                return c  # type: ignore[no-any-return]
        return None

    wait_for(lambda: condition("huge") and condition("toobig-0"), what="PodScheduled conditions")
    for name in ("huge", "toobig-0"):
        c = condition(name)
        assert c is not None and c["status"] == "False" and c["reason"] == "Unschedulable" and c["message"]
        ev = events_for(fake, name, "FailedScheduling")
        assert ev and ev[0]["type"] == "Warning" and ev[0]["message"] == c["message"]
    assert "16 GPUs" in str(condition("huge"))
    assert fake.binds == []


def test_higher_priority_gang_first(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=1, nodes=4)  # room for one 4 x 8 gang
    low = gang(fake, "low", 4, priority=10)
    high = gang(fake, "high", 4, priority=1000)
    start_scheduler()
    wait_for(lambda: len(fake.binds) == 4, what="one gang bound")
    time.sleep(0.3)
    assert all(bound_to(fake, k) for k in high)
    assert not any(bound_to(fake, k) for k in low)
    assert events_for(fake, "low-0", "FailedScheduling")


def test_watch_410_relists_without_duplicate_binds(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=3, nodes=4)
    first = gang(fake, "first", 4)
    s = start_scheduler()
    wait_for(lambda: all(bound_to(fake, k) for k in first), what="first gang")
    lists = dict(s.stats.lists)
    fake.compact(expire_watches=True)  # open watches get a 410 ERROR event
    wait_for(lambda: s.stats.lists["pods"] > lists["pods"] and s.stats.lists["nodes"] > lists["nodes"], what="relist")
    assert s.stats.gone["pods"] >= 1
    second = gang(fake, "second", 4)
    wait_for(lambda: all(bound_to(fake, k) for k in second), what="second gang after the relist")
    # A watch asked for a too-old resourceVersion (the compaction point moves past the watcher) also re-lists.
    fake.compact()

    def away_for_long() -> bool:
        # As if the watcher had been away for long: drop the open watch, so that the next one starts from
        # "1". Tried again until it takes: a bookmark read just before the stream ends can overwrite the "1".
        if s.stats.gone["pods"] < 2:
            s.watchers["pods"].resource_version = "1"
            s.watchers["pods"].stop()
            time.sleep(0.2)
        return s.stats.gone["pods"] >= 2

    wait_for(away_for_long, what="410 on a stale resourceVersion")
    third = [f"default/{n}" for n in ("solo",)]
    fake.put("pods", pod("solo", gpus=8))
    wait_for(lambda: all(bound_to(fake, k) for k in third) and s.stats.binds == 9, what="a pod after the relist")
    time.sleep(0.5)
    assert fake.bind_conflicts == 0
    assert len(fake.binds) == len({k for k, _ in fake.binds}) == 9


def test_bookmarks_update_resource_version(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=1, nodes=1)
    s = start_scheduler(dataclasses.replace(FAST, leader_elect=False))
    wait_for(lambda: s.watchers["pods"].resource_version is not None, what="the first list")
    before = s.watchers["pods"].resource_version
    target = fake.bump()  # a write to another resource: the pod watch sees no event, only bookmarks
    wait_for(lambda: s.watchers["pods"].resource_version == str(target), what="a bookmark")
    assert s.watchers["pods"].resource_version != before
    assert s.stats.bookmarks["pods"] >= 1
    assert s.stats.lists["pods"] == 1  # no relist was needed
    assert any("allowWatchBookmarks=true" in path for _, path in fake.requests)


def test_binding_client_bug_and_workaround(fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]) -> None:
    fake.put("nodes", node("n0", "c0"))
    fake.put("pods", pod("a"))
    fake.put("pods", pod("b"))
    core = client.CoreV1Api(api_client())
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="a"),
        target=client.V1ObjectReference(kind="Node", name="n0", api_version="v1"),
    )
    # The bug: the server answers a v1.Status, the client reads it as a V1Binding and fails on `target`.
    with pytest.raises(ValueError, match="target"):
        core.create_namespaced_pod_binding("a", "default", body)
    assert bound_to(fake, "default/a") == "n0"  # ...although the bind itself went through
    # The workaround the scheduler uses.
    body_b = {"metadata": {"name": "b"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n0"}}
    out = call_json(core.create_namespaced_pod_binding, "b", "default", body_b)
    assert out["kind"] == "Status" and out["status"] == "Success"
    assert bound_to(fake, "default/b") == "n0"


def test_leader_election_one_binds_then_failover(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=2, nodes=4)
    a = start_scheduler(dataclasses.replace(FAST, identity="a"))
    wait_for(lambda: a.is_leader, what="a leads")
    b = start_scheduler(dataclasses.replace(FAST, identity="b"))
    wait_for(lambda: all(b.synced.values()), what="b synced")
    time.sleep(FAST.lease_duration_s + 0.5)  # longer than a lease: b must still wait, a renews
    assert a.is_leader and not b.is_leader
    first = gang(fake, "g1", 2)
    wait_for(lambda: all(bound_to(fake, k) for k in first) and a.stats.binds == 2, what="g1 bound by a")
    assert b.stats.binds == 0
    lease = fake.get("leases", "kube-system/rackscale")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"
    # a hangs: it stops renewing (and, past its renew deadline, stops scheduling); b takes over.
    a.renewing = False
    wait_for(lambda: b.is_leader, timeout=10, what="b takes over")
    assert not a.is_leader
    second = gang(fake, "g2", 2)
    wait_for(lambda: all(bound_to(fake, k) for k in second) and b.stats.binds == 2, what="g2 bound by b")
    assert a.stats.binds == 2
    lease = fake.get("leases", "kube-system/rackscale")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert fake.bind_conflicts == 0


def test_fair_share_between_namespaces_counts_what_each_already_holds(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """
    r0-n0 [a/run-0: 8 GPUs]  r0-n1 [a/run-1: 8 GPUs]  r0-n2 [........]   (one rack of three nodes)

    Namespace a holds 16 GPUs, b none. Two pods of equal priority wait for the last node, a's seen first: b's
    goes there (the lower dominant share), whoever bound a's running pods.
    """
    add_racks(fake, racks=1, nodes=3)
    for i in range(2):
        fake.put("pods", pod(f"run-{i}", scheduler="default-scheduler", node_name=f"r0-n{i}", namespace="a"))
    fake.put("pods", pod("wait", namespace="a"))
    fake.put("pods", pod("wait", namespace="b"))
    start_scheduler()
    wait_for(lambda: fake.binds, what="one of the two bound")
    assert fake.binds == [("b/wait", "r0-n2")]
