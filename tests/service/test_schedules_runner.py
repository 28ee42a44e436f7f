"""Scheduled scaling in the service's runner, on a hand-moved service clock (epoch seconds): a queue's
night quota fires at 02:00 and 08:00 UTC, the running job goes on, a new one waits until 08:00; the
schedule's row survives a restart (SQLite and the real PostgreSQL), which applies the step in force again
without recording a second fire, and records once a step whose time came while the service was down.

The cluster is 2 racks x 2 nodes x 4 GPUs; the plan's night (section 8.1), Monday 2026-01-05, UTC::

    00:00      01:00 put      02:00 quota 0                 08:00 no quota            09:00
      |----------|--a runs-------|-- a goes on, b waits ----------|-- b starts ---------|
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from tests.service.conftest import HandClock
from tests.service.test_postgres import pg_store, pg_url  # noqa: F401  (the fixtures: one server here)

from rackscale.backends.sim import SimBackend
from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind
from rackscale.model.topology import GPUCluster
from rackscale.service.live import NOTICE, LiveCluster
from rackscale.service.runner import Runner, spec_of
from rackscale.service.schedules_store import ScheduleOrder, decode, schedule_key
from rackscale.service.store import Store, meta

CLUSTER = GPUCluster.uniform(name="sched", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
DAY = 1_767_571_200.0  # Monday 2026-01-05 00:00 UTC
H = 3600.0
NIGHTS = ScalingSchedule(
    name="training-nights",
    time_zone="UTC",
    target_kind=TargetKind.QUEUE,
    target="training",
    steps=(
        ScheduleStep(cron="0 2 * * *", quota_gpus=0.0, set_quota=True),
        ScheduleStep(cron="0 8 * * *", quota_gpus=None, set_quota=True),  # no quota: the whole cluster
    ),
)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
    else:
        request.getfixturevalue("pg_store")  # a clean database (truncated), on the module's server
        yield str(request.getfixturevalue("pg_url"))


def runner_at(url: str, t: float) -> tuple[Runner, HandClock]:
    """A service as build_service makes one (recover, then the stored schedules to the runner), at ``t``."""
    clock = HandClock()
    clock.t = t
    store = Store(url)
    runner = Runner(LiveCluster(CLUSTER), store, SimBackend(CLUSTER), clock)  # type: ignore[arg-type]
    runner.recover()
    for s in runner.schedules.restore():
        runner.scheduled(ScheduleOrder(put=s))
    return runner, clock


def close(runner: Runner) -> None:
    runner.stop()
    runner.store.close()


def put(runner: Runner, s: ScalingSchedule) -> None:
    """What POST /v1/schedules does: commit the row, then hand it to the runner."""
    runner.schedules.put(s)
    runner.scheduled(ScheduleOrder(put=s))


def submit(runner: Runner, name: str, *, queue: str = "training", gpus: int = 4, t: float = 0.0) -> None:
    doc: dict[str, Any] = {"name": name, "kind": "training", "gpus": gpus, "durationEstimateSeconds": 1e7}
    row = runner.store.insert_job(name=name, queue=queue, kind="training", gpus=gpus, priority=0, doc=doc, submitted=t)
    runner.submitted(spec_of(row), row.seq)


def quota(runner: Runner) -> float | None:
    cfg = runner.live.sched.queues.get("training")
    assert cfg is not None, "the schedule creates the queue's config"
    return cfg.quota_gpus


def row(store: Store) -> list[tuple[float, int, float]]:
    """The stored fires: (the step's time, its index, when it was applied), hours after DAY."""
    with store.reader.connect() as c:
        value = c.execute(select(meta.c.value).where(meta.c.key == schedule_key("training-nights"))).scalar_one()
    rec = decode(value, source="test")
    assert rec.schedule == NIGHTS
    return [((f.at - DAY) / H, f.step, (f.applied - DAY) / H) for f in rec.history]


def test_a_night_quota_fires_on_the_service_clock_and_new_training_waits_until_08(tmp_path: Path) -> None:
    runner, clock = runner_at(f"sqlite:///{tmp_path / 'db.sqlite'}", DAY + 1 * H)
    try:
        put(runner, NIGHTS)
        submit(runner, "a", t=clock.t)
        runner.step()
        assert quota(runner) is None  # in force at 01:00: Sunday's 08:00 step (no quota)
        assert "a" in runner.live.state.running
        clock.t = DAY + 2 * H - 1
        runner.step()
        assert quota(runner) is None
        clock.t = DAY + 2 * H
        runner.step()
        assert quota(runner) == 0.0
        assert "a" in runner.live.state.running  # lowering the quota stops nothing
        submit(runner, "b", t=clock.t)
        for hour in (3, 5, 7):
            clock.t = DAY + hour * H
            runner.step()
            assert "b" not in runner.live.state.running and "b" in runner.live.specs
        clock.t = DAY + 8 * H
        runner.step()
        assert quota(runner) is None and "b" in runner.live.state.running
        started = [e.time for e in runner.store.events("b") if e.type == "scheduled"]
        assert started == [DAY + 8 * H]  # in the step that fired 08:00, not a step later
        assert row(runner.store) == [(-16.0, 1, 1.0), (2.0, 0, 2.0), (8.0, 1, 8.0)]
        assert runner.schedules.fired["training-nights"] == 3
        notes = [e.message for e in runner.store.events("a") if e.type == NOTICE and e.reason == "ScheduledScaling"]
        assert any("GPU quota none -> 0" in m for m in notes), notes
    finally:
        close(runner)


def test_a_restart_keeps_the_schedule_does_not_fire_it_again_and_fires_a_step_missed_while_down(url: str) -> None:
    first, clock = runner_at(url, DAY + 1 * H)
    try:
        put(first, NIGHTS)
        first.step()
        clock.t = DAY + 2 * H
        first.step()
        assert quota(first) == 0.0
    finally:
        close(first)
    fires = [(-16.0, 1, 1.0), (2.0, 0, 2.0)]

    second, _ = runner_at(url, DAY + 3 * H)  # restarted at 03:00: the 02:00 step is in force, fired before
    try:
        second.step()
        assert quota(second) == 0.0  # applied again: quotas live in memory
        assert second.schedules.fired["training-nights"] == 0
        assert row(second.store) == fires  # no second fire recorded
    finally:
        close(second)

    third, _ = runner_at(url, DAY + 9 * H)  # down through 08:00: that step fires once, at the restart
    try:
        third.step()
        assert quota(third) is None
        assert third.schedules.fired["training-nights"] == 1
        assert row(third.store) == [*fires, (8.0, 1, 9.0)]
    finally:
        close(third)


def test_a_deleted_schedule_is_gone_after_a_restart_and_leaves_what_it_set(url: str) -> None:
    first, clock = runner_at(url, DAY + 3 * H)
    try:
        put(first, NIGHTS)
        first.step()
        assert quota(first) == 0.0
        assert first.schedules.delete("training-nights")
        first.scheduled(ScheduleOrder(delete="training-nights"))
        clock.t = DAY + 8 * H
        first.step()
        assert quota(first) == 0.0  # deleted before 08:00: the night's quota stays
        assert first.live.schedules == {}
    finally:
        close(first)
    second, _ = runner_at(url, DAY + 9 * H)
    try:
        second.step()
        assert second.schedules.records == {} and "training" not in second.live.sched.queues
    finally:
        close(second)
