"""What the scheduler is told of durations (``--estimates``): the jobs' own, history's predictions, or none.
The work each job carries is its own in every case: only the plan changes (the simulator's truth stays)."""

from __future__ import annotations

import pytest

from rackscale.host.runs import Estimates
from rackscale.model import GPUCluster, training
from rackscale.sim import SimConfig, Simulator


def jobs(n: int = 12) -> list:  # type: ignore[type-arg]
    # One queue, one size, 1,000 s each, one after another: history learns "1,000 s" quickly.
    return [training(f"j{i:02d}", 8, duration_estimate_s=1_000.0, submit_time=2_000.0 * i) for i in range(n)]


def run(estimates: Estimates) -> dict[str, object]:
    cluster = GPUCluster.uniform(name="one", racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)
    r = Simulator(cluster, jobs(), SimConfig(policy="rackscale", estimates=estimates.value)).run()
    return {name: run.spec.duration_estimate_s for name, run in r.jobs.items()} | {
        "_ends": [round(run.end - run.first_start) for run in r.jobs.values()]  # type: ignore[operator]
    }


@pytest.mark.parametrize(
    ("how", "first", "later"),
    [
        pytest.param(Estimates.GIVEN, 1_000.0, 1_000.0, id="given-the-jobs-own"),
        pytest.param(Estimates.NONE, None, None, id="none-hidden"),
        # no history for the first few (min_history), then history's median, within its 2 % buckets
        pytest.param(Estimates.PREDICTED, None, pytest.approx(1_000.0, rel=0.02), id="predicted-from-history"),
    ],
)
def test_the_estimate_the_scheduler_plans_with(how: Estimates, first: object, later: object) -> None:
    got = run(how)
    assert got["j00"] == first
    assert got["j11"] == later
    assert got["_ends"] == [1_000] * 12  # every job still runs its own 1,000 s
