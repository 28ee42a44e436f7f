"""Least attained service between equal priorities under Kubernetes (``--las-preemption``, docs/kubernetes.md,
"Attained service"): a waiting gang stops a running gang of its own priority that has had much more GPU time, as
a priority preemption is carried out; the gangs' earlier service is kept in a ConfigMap that outlives the pods
and the leader (its own tests: test_kube_attained.py); without the flag nothing changes."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from tests.kube.conftest import FAST, add_racks, bound_to, events_for, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.test_kube_attained import CM, seed, stored

from rackscale.cli.kube_metrics import kube_registry
from rackscale.kube.attained import Entry
from rackscale.kube.mechanisms import Mechanism
from rackscale.kube.pods import comes_back_to_finish
from rackscale.kube.scheduler import KubeScheduler
from rackscale.scheduler.decisions import PreemptionCause
from rackscale.scheduler.framework import AttainedService

Start = Callable[..., KubeScheduler]
Obj = dict[str, Any]

LAS = dataclasses.replace(FAST, las_preemption=True)


def _stamp(ago_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))


def _owned(kind: str, name: str) -> list[Obj]:
    return [{"apiVersion": "batch/v1" if kind == "Job" else "apps/v1", "kind": kind, "name": name, "controller": True}]


def _running(
    fake: FakeAPIServer,
    group: str,
    *,
    ago_s: float,
    nodes: list[str],
    namespace: str = "default",
    owner: str | None = "Job",
    grouped: bool = True,
) -> None:
    """A gang of rackscale's, one 8-GPU pod per node, bound and started ``ago_s`` seconds ago (its kubelet's
    ``status.startTime``), its pods owned by a controller of kind ``owner`` (None: bare pods); ``grouped=False``:
    lone pods (no pod group)."""
    for i, n in enumerate(nodes):
        if grouped:
            p = pod(f"{group}-{i}", group=group, min_member=len(nodes), node_name=n, namespace=namespace)
        else:
            p = pod(f"{group}-{i}", node_name=n, namespace=namespace)
        p["status"] = {"phase": "Running", "startTime": _stamp(ago_s)}
        if owner is not None:
            p["metadata"]["ownerReferences"] = _owned(owner, group)
        fake.put("pods", p)


def _waiting(fake: FakeAPIServer, group: str, *, n: int = 2, namespace: str = "default") -> None:
    for i in range(n):
        fake.put("pods", pod(f"{group}-{i}", group=group, min_member=n, namespace=namespace))


def _cycles(s: KubeScheduler, n: int) -> None:
    at = s.stats.cycles
    wait_for(lambda: s.stats.cycles >= at + n, what=f"{n} more cycles")


def _samples(s: KubeScheduler) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(x.name, frozenset(x.labels.items())): x.value for f in kube_registry(s).collect() for x in f.samples}


@pytest.mark.parametrize("las", [True, False], ids=["las-preemption", "without-the-flag"])
def test_a_waiting_gang_stops_an_equal_gang_that_had_much_more_gpu_time(
    fake: FakeAPIServer, start_scheduler: Start, las: bool
) -> None:
    """
    rack clique-0: r0-n0 [old-0 ........] r0-n1 [old-1 ........]   gang "old" (tenant-a), priority 0, ran 2 h

    gang "new" (tenant-b, 2 x 8 GPUs, priority 0, no service yet) fits only in old's room. With --las-preemption,
    old (16 GPUs x 2 h = 32 GPU-h: the last LAS queue) is stopped as a preemption is (DisruptionTarget, DELETE
    with its grace period, told without new's names), new is nominated there, and bound once old is gone; old's
    service is written to the record. Without the flag, nothing is deleted and nothing is written.
    """
    fake.graceful_deletes = True
    add_racks(fake, racks=1, nodes=2)
    _running(fake, "old", ago_s=7200, nodes=["r0-n0", "r0-n1"], namespace="tenant-a")
    s = start_scheduler(LAS if las else FAST)
    wait_for(lambda: all(s.synced.values()), what="synced")
    _waiting(fake, "new", namespace="tenant-b")
    if not las:
        wait_for(lambda: events_for(fake, "new-0", "FailedScheduling"), what="new told why it waits")
        _cycles(s, 3)
        assert fake.deletes == [] and not bound_to(fake, "tenant-b/new-0")
        assert fake.get("configmaps", CM) is None and not any(
            m == "GET" and "configmaps" in p for m, p in fake.requests
        )
        assert PreemptionCause.ATTAINED_SERVICE not in s.stats.victims
        return
    old = [f"tenant-a/old-{i}" for i in range(2)]
    wait_for(lambda: sorted(fake.deletes) == old, what="old's pods deleted")
    assert all("gracePeriodSeconds" not in b for b in fake.delete_bodies)  # its own grace period
    for k in old:
        victim = fake.get("pods", k)
        assert victim is not None and victim["metadata"]["deletionTimestamp"]
        (cond,) = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert cond["reason"] == "PreemptionByScheduler" and cond["status"] == "True"
        assert "same priority that has had less GPU time" in cond["message"]
    told = wait_for(lambda: events_for(fake, "old-0", "Preempted"), what="old told")
    assert isinstance(told, list)
    msg = told[0]["message"]
    assert msg.startswith("Preempted by rackscale: a waiting gang of the same priority that has had less GPU time")
    assert "new" not in msg and "tenant-b" not in msg
    wait_for(
        lambda: all(
            (fake.get("pods", f"tenant-b/new-{i}") or {}).get("status", {}).get("nominatedNodeName") for i in (0, 1)
        ),
        what="new nominated",
    )
    waits = [e["message"] for e in events_for(fake, "new-0", "FailedScheduling")]
    assert any("same priority that has had more GPU time" in m for m in waits)
    assert not any("GPU-h" in m or "old" in m or "tenant-a" in m for m in waits)  # nothing of the other tenant's
    # Old's service so far is on record, for its next run and the next leader.
    (rec,) = stored(fake).items()
    assert rec[0] == "tenant-a/old" and rec[1].service.runs == 1
    assert 7200 * 16 <= rec[1].service.gpu_s < 7260 * 16 and 7200 <= rec[1].service.run_s < 7260
    assert s.stats.victims[PreemptionCause.ATTAINED_SERVICE] == 1 and s.stats.victims[PreemptionCause.PRIORITY] == 0
    got = _samples(s)
    assert got[("rackscale_preemption_victims_total", frozenset({("cause", "attained-service")}))] == 1
    # While old terminates nothing else is stopped or bound; a new leader reads the stop in flight back from the
    # pods (old's DisruptionTarget, new's nominated nodes), as it does a priority preemption's.
    _cycles(s, 3)
    assert len(fake.deletes) == 2 and fake.binds == [] and s.stats.preemptions == 1
    s.stop(release=True)
    second = start_scheduler(LAS)
    wait_for(lambda: "group:tenant-b/new" in second.evictions.by_preemptor, what="the stop read back")
    # Once old's kubelet is done, new runs in its room.
    for k in old:
        fake.delete("pods", k)
    wait_for(lambda: all(bound_to(fake, f"tenant-b/new-{i}") for i in (0, 1)), what="new bound")
    assert len(fake.deletes) == 2 and second.stats.preemptions == 0
    assert {bound_to(fake, f"tenant-b/new-{i}") for i in (0, 1)} == {"r0-n0", "r0-n1"}


@pytest.mark.parametrize(
    ("ago_s", "runs", "grace", "stopped"),
    [
        pytest.param(60, 1, None, False, id="just-restarted-is-kept"),
        pytest.param(900, 1, None, False, id="within-its-doubled-minimum-run-is-kept"),
        pytest.param(900, 0, None, True, id="past-its-first-minimum-run-is-stopped"),
        pytest.param(1300, 1, None, True, id="past-its-doubled-minimum-run-is-stopped"),
        pytest.param(7200, 0, 0, False, id="no-grace-period-saves-nothing-and-is-kept"),
    ],
)
def test_the_minimum_run_and_the_save_protect_a_gang_that_had_more(
    fake: FakeAPIServer, start_scheduler: Start, ago_s: float, runs: int, grace: int | None, stopped: bool
) -> None:
    """Gang "old" (2 x 8 GPUs) had 20 GPU-h in ``runs`` earlier runs (the last LAS queue whatever its current run)
    and restarted ``ago_s`` ago; "new" of the same priority has had nothing. Old may be stopped only once it has
    run the core's minimum (600 s, doubled per earlier run: docs/scheduler-las.md), and only if its pods have a
    grace period to save their work in (``terminationGracePeriodSeconds: 0`` saves nothing)."""
    fake.graceful_deletes = True
    add_racks(fake, racks=1, nodes=2)
    start = time.time() - ago_s
    svc = AttainedService(20 * 3600.0, 4500.0, 0.0, start - 60, runs)
    seed(fake, {"default/old": Entry(service=svc, seen=start - 60, last_start=start - 4560)})
    _running(fake, "old", ago_s=ago_s, nodes=["r0-n0", "r0-n1"])
    if grace is not None:
        for i in range(2):
            p = fake.get("pods", f"default/old-{i}")
            assert p is not None
            p["spec"]["terminationGracePeriodSeconds"] = grace
            fake.put("pods", p)
    s = start_scheduler(LAS)
    wait_for(lambda: s.record is not None and s.record.loaded, what="the record read")
    _waiting(fake, "new")
    if stopped:
        wait_for(lambda: len(fake.deletes) == 2, what="old stopped")
        wait_for(lambda: stored(fake)["default/old"].service.runs == runs + 1, what="the stop recorded")
        assert stored(fake)["default/old"].service.gpu_s >= 20 * 3600 + ago_s * 16
        return
    wait_for(lambda: events_for(fake, "new-0", "FailedScheduling"), what="new told why it waits")
    _cycles(s, 3)
    assert fake.deletes == [] and s.stats.preemptions == 0 and s.stats.cycle_errors == 0


@pytest.mark.parametrize(
    ("owner", "grouped", "stopped"),
    [
        pytest.param("Job", True, True, id="a-job-comes-back-to-finish-and-is-stopped"),
        pytest.param("JobSet", True, True, id="a-jobset-too"),
        pytest.param("StatefulSet", True, False, id="a-statefulset-serves-and-is-kept"),
        pytest.param("LeaderWorkerSet", True, False, id="a-leaderworkerset-serves-and-is-kept"),
        pytest.param(None, True, False, id="bare-pods-would-be-gone-for-good-and-are-kept"),
        pytest.param("ReplicaSet", False, False, id="a-deployments-lone-replicas-are-kept"),
    ],
)
def test_only_work_that_comes_back_to_finish_is_stopped_for_an_equal(
    fake: FakeAPIServer, start_scheduler: Start, owner: str | None, grouped: bool, stopped: bool
) -> None:
    """
    rack clique-0: r0-n0 [old-0 ........] r0-n1 [old-1 ........]   "old", priority 0, ran 2 h (32 GPU-h)

    "new" (2 x 8 GPUs, priority 0, no service) fits only in old's room. Least attained service stops work that its
    controller brings back to finish later (a Job's pods). A service's replicas run until deleted, so their service
    grows for ever and they would always be the first victims; bare pods deleted are gone for good: those are kept,
    and new waits.
    """
    fake.graceful_deletes = True
    add_racks(fake, racks=1, nodes=2)
    _running(fake, "old", ago_s=7200, nodes=["r0-n0", "r0-n1"], owner=owner, grouped=grouped)
    s = start_scheduler(LAS)
    wait_for(lambda: all(s.synced.values()), what="synced")
    _waiting(fake, "new", namespace="tenant-b")
    if stopped:
        wait_for(lambda: len(fake.deletes) == 2, what="old stopped")
        assert s.stats.victims[PreemptionCause.ATTAINED_SERVICE] == 1
        return
    wait_for(lambda: events_for(fake, "new-0", "FailedScheduling"), what="new told why it waits")
    _cycles(s, 3)
    assert fake.deletes == [] and s.stats.preemptions == 0 and s.stats.cycle_errors == 0


def _member(owners: object, *, grouped: bool = True) -> Obj:
    p = pod("m-0", group="g" if grouped else None, node_name="r0-n0")
    p["metadata"]["ownerReferences"] = owners
    return p


@pytest.mark.parametrize(
    ("p", "want"),
    [
        pytest.param(_member(_owned("Job", "g")), True, id="a-job"),
        pytest.param(_member(_owned("PyTorchJob", "g")), True, id="a-training-operators-job"),
        pytest.param(_member(_owned("StatefulSet", "g")), False, id="a-statefulset"),
        pytest.param(_member(_owned("ReplicaSet", "g")), False, id="a-replicaset"),
        pytest.param(_member(_owned("Job", "g"), grouped=False), False, id="a-lone-pod"),
        pytest.param(_member(None), False, id="no-owner"),
        pytest.param(_member([{"kind": "Job", "name": "g"}]), False, id="an-owner-that-is-no-controller"),
        pytest.param(_member([{"kind": ["Job"], "controller": True}]), False, id="hostile-a-list-kind"),
        pytest.param(_member([{"kind": {"a": 1}, "controller": True}]), False, id="hostile-a-map-kind"),
        pytest.param(_member([{"kind": "Job\x00", "controller": True}]), True, id="hostile-nul-in-kind"),
        pytest.param(_member("Job"), False, id="hostile-owners-a-string"),
        pytest.param(_member([None, 7, "x"]), False, id="hostile-owners-not-objects"),
    ],
)
def test_what_comes_back_to_finish(p: Obj, want: bool) -> None:
    """Only a pod group whose controller recreates it and whose work ends may be stopped for an equal; hostile
    owner references (which a real API server refuses) decide nothing and raise nothing."""
    assert comes_back_to_finish(p) is want


def test_a_stopped_gang_keeps_its_service_when_recreated_and_under_a_new_leader(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """Old (tenant-a, ran 2 h) is stopped for new (tenant-b); its leader goes away. Its Job recreates old's pods,
    pending. A fresh scheduler (the next leader) reads old's 32 GPU-h from the record: once old's room is free
    again, new, first by least attained service, is bound there, and old waits. Without the record the two are
    equals (no service, both namespaces hold nothing) and old, first by name, would be bound."""
    fake.graceful_deletes = True
    add_racks(fake, racks=1, nodes=2)
    _running(fake, "old", ago_s=7200, nodes=["r0-n0", "r0-n1"], namespace="tenant-a")
    first = start_scheduler(LAS)
    wait_for(lambda: all(first.synced.values()), what="synced")
    _waiting(fake, "new", namespace="tenant-b")
    wait_for(lambda: len(fake.deletes) == 2, what="old stopped")
    assert set(stored(fake)) == {"tenant-a/old"}
    first.stop(release=True)
    for i in range(2):
        fake.delete("pods", f"tenant-a/old-{i}")  # its kubelet is done
    _waiting(fake, "old", namespace="tenant-a")  # its Job recreates it: new pods, pending
    second = start_scheduler(LAS)
    wait_for(lambda: all(bound_to(fake, f"tenant-b/new-{i}") for i in (0, 1)), what="new bound")
    _cycles(second, 2)
    assert not bound_to(fake, "tenant-a/old-0") and not bound_to(fake, "tenant-a/old-1")
    assert second.record is not None and second.record.entries["tenant-a/old"].service.gpu_s >= 7200 * 16
    assert second.stats.preemptions == 0  # old had more: it may not stop new
    waits = [e["message"] for e in events_for(fake, "old-0", "FailedScheduling")]
    assert waits, "old told why it waits"


def test_a_replica_that_leads_again_reads_the_record_again(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """A leader that lost the lease (here: it stopped renewing) and wins it back reads the record afresh: another
    leader may have recorded stops meanwhile."""
    add_racks(fake, racks=1, nodes=1)
    s = start_scheduler(LAS)
    rec = s.record
    assert rec is not None
    wait_for(lambda: s.is_leader and rec.loaded, what="leading, the record read")
    assert rec.entries == {}
    s.renewing = False
    wait_for(lambda: not s.is_leader, what="the lease lost")
    svc = AttainedService(3600.0, 450.0, 0.0, time.time() - 60, 1)
    seed(fake, {"default/theirs": Entry(service=svc, seen=time.time() - 60)})  # another leader's stop
    s.renewing = True
    wait_for(lambda: s.is_leader and "default/theirs" in rec.entries, what="leading again, the record re-read")


GOOD = {"gpuS": 3600.0, "runS": 450.0, "waitedS": 0.0, "stoppedAt": 1.7e9, "runs": 1, "seen": 1.7e9}


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        pytest.param("{not json", set(), id="not-json"),
        pytest.param(
            json.dumps({"entries": {"default/good": GOOD, "default/x": {**GOOD, "gpuS": float("nan")}}}),
            {"default/good"},
            id="nan-entry",
        ),
        pytest.param("[" * 100_000, set(), id="deep"),
    ],
)
def test_a_corrupt_record_is_survived_and_replaced(
    fake: FakeAPIServer, start_scheduler: Start, caplog: pytest.LogCaptureFixture, text: str, kept: set[str]
) -> None:
    """The scheduler reads it (one warning naming the ConfigMap), schedules on, and its next write is valid and
    keeps what was readable."""
    add_racks(fake, racks=1, nodes=1)
    seed(fake, text=text)
    with caplog.at_level(logging.WARNING, logger="rackscale.kube"):
        s = start_scheduler(LAS)
        fake.put("pods", pod("p"))
        wait_for(lambda: bound_to(fake, "default/p"), what="a pod bound as ever")
    assert s.stats.cycle_errors == 0 and s.record is not None and s.record.loaded
    said = [r.getMessage() for r in caplog.records if "rackscale-attained-service" in r.getMessage()]
    assert len(said) == 1 and "ignored" in said[0]
    assert set(s.record.entries) == kept
    s.stop(release=False)  # (the record is its loop thread's: written here once that is done)
    s.record.record("default/g", started=1.7e9, stopped=1.7e9 + 100, gpus=8)
    assert s.record.flush(now=1.7e9 + 100)
    after = stored(fake)
    assert set(after) == kept | {"default/g"} and after["default/g"].service.gpu_s == 800


@pytest.mark.parametrize(
    ("policy", "preemption", "las", "victims", "on", "off"),
    [
        pytest.param("rackscale", True, True, "las-victims", True, False, id="default-profile-with-the-flag"),
        pytest.param("tiresias", True, True, "las-victims", True, False, id="tiresias-with-the-flag"),
        pytest.param("rackscale", True, False, "cheapest-victims", False, True, id="without-the-flag"),
        pytest.param("rackscale", False, True, "", False, False, id="with-no-preemption"),
        pytest.param("rackscale-fairshare", True, True, "cheapest-victims", False, False, id="a-profile-without-las"),
    ],
)
def test_the_flag_keeps_las_victims_where_the_profile_has_them(
    api_client: Callable[[], client.ApiClient],
    caplog: pytest.LogCaptureFixture,
    policy: str,
    preemption: bool,
    las: bool,
    victims: str,
    on: bool,
    off: bool,
) -> None:
    """With the flag, a profile whose victims are ``las-victims`` keeps them (and the record, and its series);
    without it, or where there is nothing to keep, the profile is as before, and the log says which."""
    with caplog.at_level(logging.INFO, logger="rackscale.kube"):
        cfg = dataclasses.replace(FAST, policy=policy, preemption=preemption, las_preemption=las)
        s = KubeScheduler(api_client(), cfg)
    assert s.sched.profile.victims == victims and s.las is on and (s.record is not None) is on
    logged = [r.getMessage() for r in caplog.records]
    assert any("least-attained-service preemption is on (--las-preemption)" in m for m in logged) is on
    assert any("least-attained-service preemption is off" in m for m in logged) is off
    assert (Mechanism.LAS_PREEMPTION in s.disabled) is off
    assert any("--las-preemption changes nothing" in m for m in logged) is (las and not on)
    assert (PreemptionCause.ATTAINED_SERVICE in s.stats.victims) is on


def test_the_cli_flag_reaches_the_scheduler(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--las-preemption`` (off by default) is passed on: the scheduler is built with it, then stopped at once."""
    from typer.testing import CliRunner

    import rackscale.kube.scheduler as kube_scheduler
    from rackscale.cli.app import app

    made: list[Any] = []

    class Stub:
        def __init__(self, api: Any, config: Any, **kw: Any) -> None:
            import threading

            made.append(config)
            self.stopping = threading.Event()
            self.stopping.set()

        def start(self) -> Stub:
            return self

        def stop(self, **kw: Any) -> None:
            pass

    monkeypatch.setattr(kube_scheduler, "KubeScheduler", Stub)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    for args, want in (([], False), (["--las-preemption"], True)):
        r = CliRunner().invoke(app, ["kube-scheduler", "--kubeconfig", str(kubeconfig), *args])
        assert r.exit_code == 0, r.output
        assert made[-1].las_preemption is want
