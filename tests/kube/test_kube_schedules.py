"""Deployment schedules (``rackscale kube-scheduler --schedule FILE``) against the fake API server, through the
real ``kubernetes`` client: the scale subresource is PATCHed with a JSON merge patch when a step's time comes
on the (injected) wall clock, an Event lands on the Deployment, a failed PATCH is retried, and only the
leader scales.

The plan's schedule (section 8.1), UTC::

    00:00        02:00 (step 0: replicas 0)        08:00 (step 1: replicas 4)        24:00
      |--- 4 ------|------------ 0 ----------------|------------- 4 ----------------|
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client
from tests.kube.conftest import FAST, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault

from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind
from rackscale.kube.api import call_json
from rackscale.kube.scheduler import KubeScheduler
from rackscale.kube.schedules import MERGE_PATCH, SCALE_REASON, DeploymentScaler, ScheduleTargetError

DAY = 1_767_571_200.0  # Monday 2026-01-05 00:00 UTC
H = 3600.0
SCALE_PATH = "/apis/apps/v1/namespaces/default/deployments/trainer/scale"


def nights(
    target: str = "default/trainer", kind: TargetKind = TargetKind.DEPLOYMENT, name: str = "training-nights"
) -> ScalingSchedule:
    return ScalingSchedule(
        name=name,
        time_zone="UTC",
        target_kind=kind,
        target=target,
        steps=(ScheduleStep(cron="0 2 * * *", replicas=0), ScheduleStep(cron="0 8 * * *", replicas=4)),
    )


def deployment(name: str = "trainer", replicas: int = 4, namespace: str = "default") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"replicas": replicas}, "status": {}}


class Wall:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def replicas(fake: FakeAPIServer, key: str = "default/trainer") -> int:
    d = fake.get("deployments", key)
    assert d is not None
    return int(d["spec"]["replicas"])


@pytest.mark.parametrize(
    ("start_h", "want"),
    [(1.0, 4), (3.0, 0), (9.0, 4)],
    ids=["before-02:00-yesterdays-08:00-in-force", "03:00-the-02:00-step-in-force", "09:00-the-08:00-step"],
)
def test_the_first_tick_applies_the_step_in_force(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient], start_h: float, want: int
) -> None:
    fake.put("deployments", deployment(replicas=2))
    wall = Wall(DAY + start_h * H)
    scaler = DeploymentScaler(api_client(), [nights()], wall=wall, tick_s=0.0)
    [fired] = scaler.tick()
    assert replicas(fake) == want and fired.replicas == want
    assert fake.scales == [("default/trainer", want)]
    assert scaler.tick() == []  # the same step is not applied twice
    assert len(fake.scales) == 1


def test_steps_fire_when_their_time_comes_with_a_merge_patch_and_an_event(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]
) -> None:
    fake.put("deployments", deployment(replicas=4))
    wall = Wall(DAY + 1.0 * H)
    scaler = DeploymentScaler(api_client(), [nights()], wall=wall, tick_s=0.0)
    scaler.tick()  # 01:00: yesterday's 08:00 step (4) is in force
    wall.t = DAY + 2 * H - 1  # 01:59:59
    assert scaler.tick() == []
    wall.t = DAY + 2 * H  # 02:00:00
    [down] = scaler.tick()
    assert (down.step, down.at, replicas(fake)) == (0, DAY + 2 * H, 0)
    wall.t = DAY + 8 * H + 30
    [up] = scaler.tick()
    assert (up.step, replicas(fake)) == (1, 4)
    assert [r for r in fake.scales] == [("default/trainer", 4), ("default/trainer", 0), ("default/trainer", 4)]
    patches = [p for m, p in fake.requests if m == "PATCH"]
    assert patches and all(p.startswith(SCALE_PATH) for p in patches)
    events = [e for e in fake.items("events") if e.get("reason") == SCALE_REASON]
    assert [e["involvedObject"]["kind"] for e in events] == ["Deployment"] * 3
    assert "replicas -> 0" in events[1]["message"] and "training-nights" in events[1]["message"]


def test_a_long_pause_applies_only_the_latest_step(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]
) -> None:
    fake.put("deployments", deployment(replicas=4))
    wall = Wall(DAY + 1.0 * H)
    scaler = DeploymentScaler(api_client(), [nights()], wall=wall, tick_s=0.0)
    scaler.tick()
    wall.t = DAY + 2 * 24 * H + 9 * H  # two days later, 09:00: four steps came; the last (08:00, 4) counts
    [fired] = scaler.tick()
    assert (fired.step, fired.at) == (1, DAY + 2 * 24 * H + 8 * H)
    assert fake.scales == [("default/trainer", 4), ("default/trainer", 4)]


def test_a_failed_patch_is_retried_and_a_missing_deployment_is_logged(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]
) -> None:
    fake.put("deployments", deployment(replicas=4))
    wall = Wall(DAY + 3 * H)
    scaler = DeploymentScaler(
        api_client(), [nights(), nights("default/missing", name="other")], wall=wall, tick_s=0.0, retry_s=60
    )
    fake.inject(
        Fault(method="PATCH", path=SCALE_PATH, status=503, reason="ServiceUnavailable", message="etcd leader changed")
    )
    assert scaler.tick() == []  # both failed: 503, and 404 for the missing one
    assert replicas(fake) == 4 and scaler.errors == 2
    wall.t += 30  # inside retry_s: not asked again
    assert scaler.tick() == []
    wall.t += 31
    [fired] = scaler.tick()
    assert fired.target == "default/trainer" and replicas(fake) == 0


def test_the_scale_subresource_refuses_a_strategic_merge_patch(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]
) -> None:
    """The fake checks the content type: the scaler's merge patch is what it accepts (not a vacuous pass)."""
    fake.put("deployments", deployment())
    apps = client.AppsV1Api(api_client())
    with pytest.raises(Exception, match="415"):
        call_json(
            apps.patch_namespaced_deployment_scale,
            "trainer",
            "default",
            {"spec": {"replicas": 1}},
            _content_type="application/strategic-merge-patch+json",
        )
    got = call_json(
        apps.patch_namespaced_deployment_scale,
        "trainer",
        "default",
        {"spec": {"replicas": 1}},
        _content_type=MERGE_PATCH,
    )
    assert got["spec"]["replicas"] == 1 and replicas(fake) == 1


@pytest.mark.parametrize(
    ("target", "kind"),
    [("training", TargetKind.QUEUE), ("chat", TargetKind.SERVICE)],
    ids=["queue", "service"],
)
def test_a_schedule_not_on_a_deployment_is_refused_at_start(
    api_client: Callable[[], client.ApiClient], target: str, kind: TargetKind
) -> None:
    with pytest.raises(ScheduleTargetError, match="rackscale apply"):
        DeploymentScaler(api_client(), [nights(target, kind)])


def test_the_leader_scales_on_its_loop(fake: FakeAPIServer, api_client: Callable[[], client.ApiClient]) -> None:
    fake.put("deployments", deployment(replicas=4))
    wall = Wall(DAY + 3 * H)
    s = KubeScheduler(api_client(), FAST, schedules=[nights()], wall=wall).start()
    try:
        wait_for(lambda: replicas(fake) == 0, what="the 02:00 step applied by the loop")
        wall.t = DAY + 8 * H
        wait_for(lambda: replicas(fake) == 4, what="the 08:00 step")
    finally:
        s.stop(release=False, timeout=3.0)
    assert s.scaler is not None and [f.step for f in s.scaler.fired] == [0, 1]
