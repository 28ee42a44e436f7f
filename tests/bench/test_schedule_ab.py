"""The schedule-ab what-if's arms: which schedules each runs, and its ratios against the run without."""

from __future__ import annotations

import pytest

from rackscale.bench.schedule_ab import NIGHT_QUEUE, SERVICES_ONLY, WITH, ratios, schedules_of
from rackscale.host.scaling import TargetKind
from rackscale.model.workload import JobSpec, inference, training


def _jobs() -> list[JobSpec]:
    return [
        training("train", 8, gpus_per_worker=4),
        inference("chat", 2, gpus_per_replica=4, min_replicas=1, max_replicas=4),
    ]


@pytest.mark.parametrize(
    ("arm", "targets"),
    [
        pytest.param(WITH, [(TargetKind.QUEUE, NIGHT_QUEUE), (TargetKind.SERVICE, "chat")], id="both"),
        pytest.param(SERVICES_ONLY, [(TargetKind.SERVICE, "chat")], id="service-caps-only"),
        pytest.param("rackscale", [], id="without"),
    ],
)
def test_each_arm_runs_its_schedules(arm: str, targets: list[tuple[TargetKind, str]]) -> None:
    assert [(s.target_kind, s.target) for s in schedules_of(arm, _jobs())] == targets


def test_the_service_cap_holds_it_to_its_minimum_at_night_and_gives_back_its_maximum() -> None:
    [cap] = schedules_of(SERVICES_ONLY, _jobs())
    night, day = cap.steps
    assert (night.max_replicas, day.max_replicas) == (1, 4)


def test_ratios_are_arm_over_without_and_none_where_a_number_is_missing_or_zero() -> None:
    results = {
        "rackscale": {"cost": 100.0, "mean_jct_s": 0.0},
        SERVICES_ONLY: {"cost": 106.0, "mean_jct_s": 5.0},
    }
    got = ratios(results, SERVICES_ONLY)
    assert got["cost"] == pytest.approx(1.06)
    assert got["mean_jct_s"] is None and got["slo_attainment"] is None
    assert all(v is None for v in ratios(results, WITH).values())
