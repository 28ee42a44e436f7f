"""Opportunistic backfill in the simulator (the host's code, so the service's too): a loan runs, is stopped
when the reservation's job can start, loses its work since the last checkpoint (or only its save with
``checkpoint_on_preempt``), and goes back to the queue.

    region-0
    ├── r000: n00 [aaaa] n01 [aaaa]   a: 8 GPUs, 0 .. 10,000 s
    └── r001: n00 [bbbb] n01 [....]   b: 4 GPUs, 0 .. 5,000 s   <- big (8 GPUs, one rack) reserves it
    long (4 GPUs, 20,000 s, checkpoints every 1,800 s) arrives at t=10: it borrows r001's free half.
"""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.model import GPUCluster, Level, TopologyConstraint, training
from rackscale.sim import SimConfig, Simulator

RACK = TopologyConstraint(required=Level.RACK)


def cluster() -> GPUCluster:
    return GPUCluster.uniform(name="two", racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


def run(policy: str, *, save_on_stop: bool) -> Any:
    jobs = [
        training("a", 8, topology=RACK, duration_estimate_s=10_000.0, submit_time=0.0),
        training("b", 4, topology=RACK, duration_estimate_s=5_000.0, submit_time=0.0),
        training("big", 8, topology=RACK, duration_estimate_s=1_000.0, submit_time=5.0),
        training(
            "long",
            4,
            topology=RACK,
            duration_estimate_s=20_000.0,
            submit_time=10.0,
            checkpoint_interval_s=1_800.0,
            checkpoint_on_preempt=save_on_stop,
        ),
    ]
    return Simulator(cluster(), jobs, SimConfig(policy=policy)).run()


@pytest.mark.parametrize(
    ("save_on_stop", "lost_gpu_s"),
    [
        # stopped at 5,000 after 4,990 s on loan: the work since its save at 10 + 2 x 1,800 = 3,610 is lost
        pytest.param(False, (5_000 - 3_610) * 4, id="loses-work-since-its-checkpoint"),
        # it saves on the stop signal: it keeps its progress and pays the save (a minute) on its 4 GPUs
        pytest.param(True, 60 * 4, id="checkpoint-on-preempt-pays-the-save-only"),
    ],
)
def test_a_loan_is_stopped_when_the_holder_can_start(save_on_stop: bool, lost_gpu_s: float) -> None:
    r = run("rackscale", save_on_stop=save_on_stop)
    big, long = r.jobs["big"], r.jobs["long"]
    assert big.first_start == pytest.approx(5_000)  # the loan did not delay the holder
    assert long.first_start == pytest.approx(10)  # the loan started at once (first-fit waits: see below)
    assert long.restarts == 1 and r.kpis.preemptions == 1
    assert r.kpis.lost_gpu_hours * 3600 == pytest.approx(lost_gpu_s)
    assert long.status.value == "completed" and big.status.value == "completed"


def test_a_job_that_saves_on_the_stop_signal_finishes_sooner() -> None:
    plain = run("rackscale", save_on_stop=False).jobs["long"]
    saving = run("rackscale", save_on_stop=True).jobs["long"]
    assert saving.end < plain.end


def test_without_loans_the_reserved_gpus_idle() -> None:
    with_loans = run("rackscale", save_on_stop=True)
    without = run("best-fit", save_on_stop=True)  # same backfill, no loans
    assert without.jobs["long"].first_start > 5_000  # fenced off r001 until big has it
    assert with_loans.kpis.idle_rate < without.kpis.idle_rate
