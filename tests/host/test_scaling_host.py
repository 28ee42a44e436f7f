"""The host applies scheduled scaling: queue quotas, service replica bounds, deployment steps handed back.

2 racks x 2 nodes x 4 GPUs (16 GPUs); times are epoch seconds of Monday 2026-01-05 (UTC):

01:00 put   02:00 quota 0              08:00 no quota
  |  a runs   |  a goes on; b waits (quota)  |  b starts
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rackscale.host.changes import ChangeKind
from rackscale.host.host import ClusterHost
from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind
from rackscale.host.scaling_docs import parse_schedule
from rackscale.model import GPUCluster, training
from rackscale.model.workload import ServingProfile, inference
from rackscale.scheduler.framework import QueueConfig
from rackscale.scheduler.status import Reason


def hour(h: float) -> float:
    return datetime(2026, 1, 5, tzinfo=UTC).timestamp() + h * 3600.0


CLUSTER = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NIGHTS = ScalingSchedule(
    name="training-nights",
    time_zone="UTC",
    target_kind=TargetKind.QUEUE,
    target="training",
    steps=(
        ScheduleStep(cron="0 2 * * *", quota_gpus=0.0, set_quota=True),
        ScheduleStep(cron="0 8 * * *", quota_gpus=None, set_quota=True),
    ),
)


def job(name: str, at: float, gpus: int = 4) -> object:
    return training(name, gpus, queue="training", submit_time=at, duration_estimate_s=100_000.0)


def test_a_night_quota_keeps_running_jobs_and_holds_new_ones_until_eight() -> None:
    host = ClusterHost(CLUSTER)
    host.put_schedule(NIGHTS, now=hour(1))
    fired = host.fire_schedules(now=hour(1))  # the step in force at 01:00: yesterday's 08:00, no quota
    assert [(f.step, f.at) for f in fired] == [(1, hour(-16))]
    host.submit(job("a", hour(1.5)))  # type: ignore[arg-type]
    host.cycle(hour(1.5))
    assert "a" in host.state.running
    [f] = host.fire_schedules(now=hour(2.25))  # called late: the 02:00 step fires at its own time
    assert (f.step, f.at, f.summary) == (
        0,
        hour(2),
        "queue training: GPU quota none -> 0 (it holds 4: its running jobs go on, new ones wait)",
    )
    assert host.sched.queues["training"].quota_gpus == 0.0
    host.submit(job("b", hour(3)))  # type: ignore[arg-type]
    host.cycle(hour(3))
    assert "a" in host.state.running and "b" not in host.state.running
    assert host.why["b"].reason is Reason.QUOTA
    assert host.fire_schedules(now=hour(7.99)) == []
    [f] = host.fire_schedules(now=hour(8))
    assert f.summary == "queue training: GPU quota 0 -> none"
    changes = host.cycle(hour(8))
    assert "b" in host.state.running
    notices = [c for c in changes if c.type is ChangeKind.NOTICE]
    assert {c.job for c in notices} == {"a", "b"} and all(c.reason == "ScheduledScaling" for c in notices)
    assert "schedule 'training-nights' step 1 (0 8 * * *)" in notices[0].message


def test_put_at_three_applies_the_step_in_force_and_keeps_the_other_queue_settings() -> None:
    host = ClusterHost(CLUSTER)
    host.sched.queues["training"] = QueueConfig(name="training", weight=3.0, quota_gpus=12.0)
    host.put_schedule(NIGHTS, now=hour(3))
    [f] = host.fire_schedules(now=hour(3))
    assert (f.step, f.at) == (0, hour(2))
    assert host.sched.queues["training"] == QueueConfig(name="training", weight=3.0, quota_gpus=0.0)
    host.put_schedule(NIGHTS, now=hour(4))  # the same again (a restart): nothing fires twice
    assert host.fire_schedules(now=hour(4)) == []
    [view] = host.schedule_views(now=hour(4))
    assert (view.next_at, view.next_step, view.next_sets) == (hour(8), 1, "no GPU quota")
    assert view.last is not None and view.last.at == hour(2)
    assert host.delete_schedule("training-nights") and not host.delete_schedule("training-nights")
    assert host.fire_schedules(now=hour(9)) == [] and host.sched.queues["training"].quota_gpus == 0.0


QUIET = ServingProfile(peak_tokens_per_s=100.0, trough_fraction=0.1)


@pytest.mark.parametrize(
    ("step", "replicas", "resized"),
    [
        (ScheduleStep(cron="0 2 * * *", max_replicas=2), 2, True),
        (ScheduleStep(cron="0 2 * * *", min_replicas=6), 6, False),
        (ScheduleStep(cron="0 2 * * *", min_replicas=1, max_replicas=8), 4, False),
    ],
    ids=["max-below-size-scales-down-now", "min-above-size-scales-up", "within-bounds-nothing"],
)
def test_service_bounds(step: ScheduleStep, replicas: int, resized: bool) -> None:
    host = ClusterHost(CLUSTER)
    chat = inference("chat", 4, min_replicas=1, max_replicas=8, serving=QUIET, submit_time=hour(1))
    host.submit(chat)
    host.cycle(hour(1))
    s = ScalingSchedule(name="chat", time_zone="UTC", target_kind=TargetKind.SERVICE, target="chat", steps=(step,))
    host.put_schedule(s, now=hour(1.5))
    *_, f = host.fire_schedules(now=hour(2))  # yesterday's 02:00 (in force at the put), then today's
    assert (f.target, f.at, f.replicas) == ("chat", hour(2), None)
    changes = host.cycle(hour(2))
    assert host.state.running["chat"].placement.units == replicas
    assert any(c.type is ChangeKind.RESIZED and c.reason == "ScaledDown" for c in changes) is resized
    if step.min_replicas == 6:
        assert [c.message for c in host.scaled(hour(2))] == [
            "scaled up 4 -> 6 replicas: scheduled scaling (replicas 1-8 -> 6-8)"
        ]
    assert host.runs["chat"].spec.max_units == (step.max_replicas or 8)


def test_a_deployment_step_is_handed_back_and_an_absent_service_is_said() -> None:
    host = ClusterHost(CLUSTER)
    dep = parse_schedule(
        {
            "apiVersion": "rackscale.io/v1",
            "kind": "ScalingSchedule",
            "metadata": {"name": "trainer-nights"},
            "spec": {
                "timeZone": "Europe/Berlin",
                "target": {"deployment": {"namespace": "ml", "name": "trainer"}},
                "steps": [{"cron": "0 2 * * *", "replicas": 0}, {"cron": "0 8 * * *", "replicas": 4}],
            },
        }
    )
    svc = ScalingSchedule(
        name="ghost",
        time_zone="UTC",
        target_kind=TargetKind.SERVICE,
        target="ghost",
        steps=(ScheduleStep(cron="0 2 * * *", max_replicas=1),),
    )
    host.put_schedule(dep, now=hour(0))
    host.put_schedule(svc, now=hour(0))
    got = host.fire_schedules(now=hour(12))
    # 02:00 Berlin is 01:00 UTC in January; ordered by time, then schedule name
    assert [(f.schedule, f.at, f.replicas) for f in got] == [
        ("ghost", hour(-22), None),  # each in force at the put: yesterday's 02:00 UTC ...
        ("trainer-nights", hour(-17), 4),  # ... and yesterday's 08:00 Berlin (07:00 UTC)
        ("trainer-nights", hour(1), 0),
        ("ghost", hour(2), None),
        ("trainer-nights", hour(7), 4),
    ]
    assert got[2].summary == "deployment ml/trainer: replicas -> 0"
    assert got[3].summary == "service ghost: no such service queued or running; nothing changed"
