"""Scheduled scaling on the simulator's virtual clock: virtual t is the instant ``start_epoch + t``.

2 racks x 2 nodes x 4 GPUs; virtual 0 = Monday 2026-01-05 00:00 UTC (the default start)

t:  1h          2h: quota 0     3h                    8h: no quota
    a (training) starts  |      b (training) waits    | b starts
                         |      c (research) starts at once (another queue)
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind
from rackscale.model import GPUCluster, training
from rackscale.model.spec_errors import SpecError
from rackscale.model.workload import JobSpec
from rackscale.sim import SimConfig, Simulator
from rackscale.sim.schedules import DEFAULT_START_EPOCH, parse_start_time, read_schedule_file
from rackscale.workloads import SyntheticConfig, synthetic_jobs

H = 3600.0
CLUSTER = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


def nights(queue: str = "training", tz: str = "UTC") -> ScalingSchedule:
    return ScalingSchedule(
        name=f"{queue}-nights",
        time_zone=tz,
        target_kind=TargetKind.QUEUE,
        target=queue,
        steps=(
            ScheduleStep(cron="0 2 * * *", quota_gpus=0.0, set_quota=True),
            ScheduleStep(cron="0 8 * * *", quota_gpus=None, set_quota=True),
        ),
    )


def job(name: str, at_h: float, queue: str = "training") -> JobSpec:
    return training(name, 4, queue=queue, submit_time=at_h * H, duration_estimate_s=600.0)


def test_a_night_quota_of_zero_makes_new_training_wait_until_eight() -> None:
    jobs = [job("a", 1), job("b", 3), job("c", 3, queue="research")]
    r = Simulator(CLUSTER, jobs, SimConfig(schedules=(nights(),))).run()
    starts = {n: run.first_start for n, run in r.jobs.items()}
    assert starts == {"a": 1 * H, "b": 8 * H, "c": 3 * H}
    # fired: the step in force at the workload's start (Sunday's 08:00), then Monday's 02:00 and 08:00
    assert [(f.step, f.at - DEFAULT_START_EPOCH) for f in r.fired] == [(1, -16 * H), (0, 2 * H), (1, 8 * H)]
    assert r.kpis["completed"] == 3


def test_without_the_schedule_b_starts_on_arrival() -> None:
    jobs = [job("a", 1), job("b", 3), job("c", 3, queue="research")]
    r = Simulator(CLUSTER, jobs, SimConfig()).run()
    assert r.jobs["b"].first_start == 3 * H and r.fired == []


def berlin(y: int, mo: int, d: int, h: int, mi: int) -> float:
    return datetime(y, mo, d, h, mi, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()


@pytest.mark.parametrize(
    ("start", "want_h"),
    [
        # Saturday 28 March 2026 00:00 Berlin: 02:00 and 08:00 CET, then the DST gap's step at 03:00 CEST
        # (27 wall-clock hours later, 26 real ones: the lost hour) and 08:00 CEST
        (berlin(2026, 3, 28, 0, 0), [2.0, 8.0, 26.0, 31.0]),
        # Saturday 24 October 2026 00:00 Berlin: the night of 25 October is 25 h long, and 02:00 happens twice
        (berlin(2026, 10, 24, 0, 0), [2.0, 8.0, 26.0, 27.0, 33.0]),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_fires_at_the_virtual_times_of_berlin_across_dst(start: float, want_h: list[float]) -> None:
    jobs = [job("a", 0.0), job("z", 40.0, queue="research")]  # z keeps the run going to 40 h
    cfg = SimConfig(schedules=(nights(tz="Europe/Berlin"),), start_epoch=start, record_series=False)
    r = Simulator(CLUSTER, jobs, cfg).run()
    got = [(f.at - start) / H for f in r.fired if f.at >= start]
    assert got == want_h


def test_no_schedule_gives_byte_identical_kpis_whatever_the_start_time() -> None:
    jobs = synthetic_jobs(SyntheticConfig(jobs=120, duration_s=6 * H, max_gpus=CLUSTER.total_gpus, seed=3))
    a = Simulator(CLUSTER, jobs, SimConfig(record_series=False)).run()
    b = Simulator(CLUSTER, jobs, SimConfig(record_series=False, start_epoch=parse_start_time("2030-07-01"))).run()
    assert json.dumps(a.kpis.as_dict(), sort_keys=True) == json.dumps(b.kpis.as_dict(), sort_keys=True)
    assert a.fired == b.fired == []


def test_a_quota_never_raised_ends_the_run_instead_of_firing_forever() -> None:
    zero = ScalingSchedule(
        name="never",
        time_zone="UTC",
        target_kind=TargetKind.QUEUE,
        target="training",
        steps=(ScheduleStep(cron="0 * * * *", quota_gpus=0.0, set_quota=True),),
    )
    r = Simulator(CLUSTER, [job("a", 1)], SimConfig(schedules=(zero,))).run()
    assert r.jobs["a"].first_start is None and r.kpis["failed"] == 1
    assert len(r.fired) <= 8 * 24 + 3  # the idle stop: a little over 8 days of hourly steps


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "holds no document"),
        ("a: [b", "is not YAML"),
        ("apiVersion: rackscale.io/v1\nkind: ScalingSchedule\nmetadata: {name: x}\nspec: {}\n", "spec.target"),
    ],
    ids=["empty", "not-yaml", "missing-target"],
)
def test_bad_schedule_files_say_the_file_and_field(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(SpecError) as err:
        read_schedule_file(f)
    assert str(err.value).startswith(str(f)) and words in str(err.value)


def test_the_example_files_load() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    [dep] = read_schedule_file(root / "schedule-training-nights.yaml")
    [queue] = read_schedule_file(root / "schedule-training-quota.yaml")
    assert (dep.target_kind, dep.target, [s.replicas for s in dep.steps]) == (
        TargetKind.DEPLOYMENT,
        "default/trainer",
        [0, 4],
    )
    assert (queue.target, queue.steps[1].set_quota, queue.steps[1].quota_gpus) == ("interns", True, None)


@pytest.mark.parametrize(
    ("text", "want"),
    [("2026-01-05T00:00:00+00:00", DEFAULT_START_EPOCH), ("2026-01-05", DEFAULT_START_EPOCH)],
    ids=["offset", "no-offset-is-utc"],
)
def test_start_time(text: str, want: float) -> None:
    assert parse_start_time(text) == want
