"""Least attained service on the host: service carried across restarts, the recheck of the cycle driver, and
the ``tiresias`` and ``rackscale`` profiles end to end in the simulator.

The host runs on one rack of 2 nodes x 4 GPUs (8 GPUs): a waiting 8-GPU job runs only if the running one
is preempted. Service is in GPU-seconds; Tiresias' queues split at 3,250 and 7,200 (numbered 1..3 here).
"""

from __future__ import annotations

import pytest

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.host import ClusterHost, HostOptions
from rackscale.model import GPUCluster, batch, training
from rackscale.scheduler.framework import VICTIM_CHOOSERS, AttainedService
from rackscale.scheduler.las import LasConfig, LasVictims
from rackscale.sim import SimConfig, Simulator
from rackscale.workloads import SyntheticConfig, synthetic_jobs


def host(policy: str = "tiresias") -> ClusterHost:
    cluster = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, gpus_per_node=4)
    return ClusterHost(cluster, policy=policy, options=HostOptions(explain=False))


def preempted(changes: list[Change]) -> list[str]:
    return [c.job for c in changes if c.type is ChangeKind.PREEMPTED]


def test_a_job_preempted_and_restarted_keeps_its_attained_service(monkeypatch: pytest.MonkeyPatch) -> None:
    # (The same minimum run for every run: the second preemption comes 700 s into the second run.)
    monkeypatch.setitem(VICTIM_CHOOSERS, "las-victims", lambda: LasVictims(LasConfig(run_backoff=1.0)))
    h = host()
    # long saves on the stop signal: a preemption costs it a minute of 8 GPUs, within the bound
    h.submit(training("long", 8, checkpoint_on_preempt=True, duration_estimate_s=100_000.0))
    h.cycle(0.0)
    # 3,700 s x 8 GPUs = 29,600 GPU-s (queue 3); short never ran and is in queue 2 after its 600-s minimum
    h.submit(training("short", 8, submit_time=3700.0, duration_estimate_s=1000.0))
    assert preempted(h.cycle(3700.0)) == ["long"]
    assert h.attained["long"] == AttainedService(
        gpu_s=8 * 3700.0, run_s=3700.0, waited_s=0.0, stopped_at=3700.0, runs=1
    )
    h.finish("short", 4700.0)
    h.cycle(4700.0)
    assert "long" in h.state.running
    assert h.attained["long"].waited_s == 1000.0  # the wait between its runs
    # 700 s into its second run: 5,600 GPU-s in this run alone (queue 2, where short2 is after its minimum
    # run: no preemption), 35,200 with the first run (queue 3): preempted only because its service is kept.
    h.submit(training("short2", 8, submit_time=5400.0, duration_estimate_s=1000.0))
    assert preempted(h.cycle(5400.0)) == ["long"]
    assert h.attained["long"].gpu_s == pytest.approx(8 * 3700.0 + 8 * 700.0)
    assert h.attained["long"].run_s == pytest.approx(4400.0)
    assert h.attained["long"].runs == 2
    h.finish("short2", 6400.0)
    h.cycle(6400.0)
    h.finish("long", 7000.0)
    assert "long" not in h.attained, "an ended job's record goes with it"


def test_time_alone_runs_no_cycle_but_the_next_one_sees_the_new_victim() -> None:
    h = host()
    h.submit(training("old", 8, checkpoint_interval_s=1800.0, duration_estimate_s=100_000.0))
    h.cycle(0.0)
    # at 100 s old has 800 GPU-s (queue 1, as the waiting job): no preemption
    h.submit(training("new", 4, submit_time=100.0, duration_estimate_s=1000.0))
    assert preempted(h.cycle(100.0)) == []
    # at 1,850 s old has 14,800 GPU-s (queue 3) and lost only 50 s since its checkpoint at 1,800 s. With
    # nothing happening no cycle runs (the simulator and the service alike: the service steps in between);
    # an unrelated arrival (a job for a GPU model there is none of) makes a full one: new preempts old.
    assert h.cycle(1800.0) == []
    h.submit(batch("tick", gpus=1, gpu_models=frozenset({"no-such-gpu"}), submit_time=1850.0))
    assert preempted(h.cycle(1850.0)) == ["old"]


@pytest.mark.parametrize("policy", ["tiresias", "rackscale"])
def test_las_profiles_end_every_job_and_count_what_preemption_cost(policy: str) -> None:
    cluster = GPUCluster.uniform(racks_per_region=2)
    jobs = synthetic_jobs(SyntheticConfig(jobs=150, max_gpus=cluster.total_gpus, seed=3))
    r = Simulator(cluster, jobs, SimConfig(policy=policy, seed=3)).run()
    assert all(j.status == "completed" or (j.status == "failed" and j.reason) for j in r.jobs.values())
    assert r.kpis["completed"] > 0
    assert r.kpis["preemptions"] > 0 and r.kpis["lost_gpu_hours"] > 0  # type: ignore[operator]
