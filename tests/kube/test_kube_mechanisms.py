"""The scheduler's mechanisms (issue 13) under Kubernetes: which run, and that the adapter never carries out a
decision it cannot make true on the pods (docs/kubernetes.md, "Scheduler mechanisms")."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from tests.kube.conftest import FAST, add_racks, bound_to, events_for, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.kube.mechanisms import Mechanism, refusal
from rackscale.kube.scheduler import KubeScheduler
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.workload import training
from rackscale.scheduler.decisions import (
    Decisions,
    Placed,
    Preemption,
    PreemptionCause,
    Resized,
    ResizeKind,
)

Start = Callable[..., KubeScheduler]
M = Mechanism
ALL_OFF = {"opportunistic_backfill": False, "elastic": False}


@pytest.mark.parametrize(
    ("policy", "preemption", "victims", "off"),
    [
        pytest.param("rackscale", True, "cheapest-victims", (M.LAS_PREEMPTION, M.LOANS, M.ELASTIC), id="default"),
        pytest.param("rackscale", False, "", (M.PREEMPTION, M.LOANS, M.ELASTIC), id="default-no-preemption"),
        pytest.param(
            "rackscale-consolidate", True, "cheapest-victims", (M.LAS_PREEMPTION, M.LOANS, M.ELASTIC), id="consolidate"
        ),
        pytest.param(
            "rackscale-consolidate",
            False,
            "",
            (M.PREEMPTION, M.LOANS, M.ELASTIC, M.CONSOLIDATION),
            id="consolidate-no-preemption",
        ),
        pytest.param("tiresias", True, "cheapest-victims", (M.LAS_PREEMPTION,), id="tiresias-las"),
        pytest.param("first-fit", True, "cheapest-victims", (), id="baseline"),
        pytest.param("first-fit", False, "", (M.PREEMPTION,), id="baseline-no-preemption"),
    ],
)
def test_the_profile_keeps_priority_preemption_and_drops_what_resizes_or_moves_pods(
    api_client: Callable[[], client.ApiClient],
    caplog: pytest.LogCaptureFixture,
    policy: str,
    preemption: bool,
    victims: str,
    off: tuple[M, ...],
) -> None:
    with caplog.at_level(logging.INFO, logger="rackscale.kube"):
        s = KubeScheduler(api_client(), dataclasses.replace(FAST, policy=policy, preemption=preemption))
    p = s.sched.profile
    assert {k: getattr(p, k) for k in ALL_OFF} == ALL_OFF and p.victims == victims
    consolidates = preemption and policy == "rackscale-consolidate"
    assert p.consolidate is consolidates and (s.sched.victims is not None) is preemption
    assert [a.name for a in s.sched.actions] == [
        "allocate",
        "backfill",
        *(["preempt"] if preemption else []),
        *(["consolidate"] if consolidates else []),
    ]
    assert s.disabled == off
    logged = [r.getMessage() for r in caplog.records if "is off under Kubernetes" in r.getMessage()]
    assert [m.split(": ")[1].split(" is off")[0] for m in logged] == [str(m) for m in off]


def _placement(job: str) -> Placement:
    return Placement(job, (NodeAlloc(0, (0, 1, 2, 3, 4, 5, 6, 7)),), 1)


_SPEC = training("group:default/g", 8, gpus_per_worker=8)
_PLACED = Placed(_SPEC, _placement(_SPEC.name), None)
_STOP = Preemption(victim="v", preemptor=_SPEC.name, reason="r", cause=PreemptionCause.PRIORITY)


@pytest.mark.parametrize(
    ("decisions", "needle"),
    [
        pytest.param(Decisions(placed=(_PLACED,)), None, id="placements-only"),
        pytest.param(
            Decisions(placed=(_PLACED,), preemptions=(_STOP,)), "stops 1 running job(s) (priority)", id="stop"
        ),
        pytest.param(
            Decisions(resized=(Resized(_SPEC, _placement(_SPEC.name), 2, ResizeKind.SHRUNK, "r"),)),
            "resizes 1 running gang(s) (shrunk)",
            id="shrink",
        ),
        pytest.param(Decisions(placed=(dataclasses.replace(_PLACED, moved=True),)), "moves", id="a-move-of-no-stop"),
        pytest.param(Decisions(placed=(dataclasses.replace(_PLACED, scale_up=True),)), "grows", id="grow"),
        pytest.param(
            Decisions(placed=(dataclasses.replace(_PLACED, placement=Placement(_SPEC.name, (), 1, True)),)),
            "lends reserved GPUs",
            id="loan",
        ),
    ],
)
def test_refusal_names_what_the_adapter_cannot_do(decisions: Decisions, needle: str | None) -> None:
    why = refusal(decisions)
    assert why is None if needle is None else (why is not None and needle in why)


_LAS = dataclasses.replace(_STOP, cause=PreemptionCause.ATTAINED_SERVICE)
_MOVE = dataclasses.replace(_STOP, cause=PreemptionCause.CONSOLIDATION)


@pytest.mark.parametrize(
    ("preemption", "stop", "holders", "needle"),
    [
        pytest.param(True, _STOP, {"v"}, None, id="priority-stop-of-a-known-gang"),
        pytest.param(False, _STOP, {"v"}, "stops 1 running job(s) (priority)", id="preemption-off"),
        pytest.param(True, _STOP, set(), "which is no gang of rackscale's running pods", id="unknown-victim"),
        pytest.param(True, _LAS, {"v"}, "(attained-service)", id="between-equals"),
        pytest.param(True, dataclasses.replace(_STOP, cause=PreemptionCause.RECLAIM), {"v"}, "(reclaim)", id="reclaim"),
        pytest.param(True, _MOVE, {"v"}, None, id="a-move-of-a-known-gang"),
        pytest.param(False, _MOVE, {"v"}, "(consolidation)", id="a-move-without-preemption"),
    ],
)
def test_refusal_of_a_stop(preemption: bool, stop: Preemption, holders: set[str], needle: str | None) -> None:
    placed: tuple[Placed, ...] = (_PLACED,)
    if stop.cause is PreemptionCause.CONSOLIDATION:  # the moved gang's new place comes with its stop
        v = training("v", 8, gpus_per_worker=8)
        placed = (Placed(v, _placement("v"), None, moved=True), _PLACED)
    why = refusal(Decisions(placed=placed, preemptions=(stop,)), preemption=preemption, holders=holders)
    assert why is None if needle is None else (why is not None and needle in why)


def test_a_decision_that_stops_a_running_job_binds_nothing(
    fake: FakeAPIServer, start_scheduler: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Should the core decide a stop the adapter cannot make (here of a job that is no gang of its pods), the
    placement that counts on the GPUs it frees must not be bound on top of the pods still running there."""
    add_racks(fake, racks=1, nodes=1)
    s = start_scheduler()
    wait_for(lambda: all(s.synced.values()), what="synced")
    real = s.sched.schedule

    def with_a_stop(*args: Any, **kw: Any) -> Decisions:
        d = real(*args, **kw)
        return dataclasses.replace(d, preemptions=(dataclasses.replace(_STOP, preemptor="x"),))

    s.sched.schedule = with_a_stop  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="rackscale.kube"):
        cycles = s.stats.cycles
        fake.put("pods", pod("new", gpus=8))
        wait_for(lambda: s.stats.cycles >= cycles + 2 or fake.binds, what="cycles over the new pod")
        time.sleep(0.3)
    assert fake.binds == [] and fake.deletes == []
    assert s.stats.refused_cycles >= 1
    assert any("not carrying out" in r.getMessage() for r in caplog.records)


def test_without_preemption_a_higher_priority_gang_waits_and_deletes_no_running_pod(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """--no-preemption: the running gang keeps its pods, the higher-priority one says why it waits."""
    add_racks(fake, racks=1, nodes=2)
    low = [f"default/low-{i}" for i in range(2)]
    for i in range(2):
        fake.put("pods", pod(f"low-{i}", group="low", min_member=2, priority=10))
    s = start_scheduler(dataclasses.replace(FAST, preemption=False))
    wait_for(lambda: all(bound_to(fake, k) for k in low), what="the low gang bound")
    for i in range(2):
        fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000))
    wait_for(lambda: events_for(fake, "high-0", "FailedScheduling"), what="the high gang told why it waits")
    cycles = s.stats.cycles
    wait_for(lambda: s.stats.cycles >= cycles + 2, what="more cycles")
    assert fake.deletes == [] and len(fake.binds) == 2 and all(bound_to(fake, k) for k in low)


def test_an_unknown_policy_is_refused_before_connecting() -> None:
    r = CliRunner().invoke(app, ["kube-scheduler", "--policy", "nope", "--kubeconfig", "/nonexistent/kubeconfig"])
    assert r.exit_code == 2
    assert "--policy: unknown profile 'nope'" in r.output
