"""The simulator: placement changes speed, every job ends, failures and preemption cost work, replays
are byte-identical.

Most cases use this cluster (2 racks x 2 nodes x 4 GPUs, one region):

    region-0
    ├── r000: n00 [....] n01 [....]
    └── r001: n00 [....] n01 [....]
"""

from __future__ import annotations

import json

import pytest

from rackscale.host.perf import Layout, training_step
from rackscale.model import CommProfile, GPUCluster, JobSpec, ServingProfile, TopologyConstraint, inference, training
from rackscale.model.workload import Level
from rackscale.sim import FaultConfig, SimConfig, Simulator
from rackscale.workloads import SyntheticConfig, synthetic_jobs

COMM = CommProfile(bytes_per_step=4e9, compute_s_per_step=0.5)


def small() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


def run(jobs: list[JobSpec], policy: str = "rackscale", **cfg: object) -> object:
    return Simulator(small(), jobs, SimConfig(policy=policy, **cfg)).run()  # type: ignore[arg-type]


def test_a_split_gang_is_slower_than_a_packed_one() -> None:
    cluster = small()
    spec = training("t", 8, comm=COMM)
    one_rack = Layout(((0, 0, 8),))
    two_racks = Layout(((0, 0, 4), (0, 1, 4)))
    fast, slow = training_step(cluster, spec, one_rack), training_step(cluster, spec, two_racks)
    assert fast.compute_s == slow.compute_s
    assert slow.comm_s > 20 * fast.comm_s, "RDMA edges set the ring's pace: far slower than NVLink"
    hier = training_step(cluster, training("h", 8, comm=CommProfile(4e9, 0.5, "hierarchical")), two_racks)
    assert fast.comm_s < hier.comm_s < slow.comm_s, "hierarchical all-reduce crosses racks with less"


def test_placement_changes_the_finish_time() -> None:
    # rackscale keeps the 8-GPU gang in one rack; first-fit spreads one GPU per node over both racks
    jobs = [training("t", 8, comm=COMM, duration_estimate_s=3600.0)]
    packed = run(jobs, "rackscale")
    spread = run(jobs, "first-fit")
    assert packed.jobs["t"].end == pytest.approx(3600.0)  # type: ignore[attr-defined]
    assert spread.jobs["t"].end > 1.5 * 3600.0  # type: ignore[attr-defined]
    assert packed.kpis["intra_rack_traffic_share"] == 1.0  # type: ignore[attr-defined]
    assert spread.kpis["intra_rack_traffic_share"] < 1.0  # type: ignore[attr-defined]


def test_replays_are_byte_identical() -> None:
    cluster = GPUCluster.uniform(racks_per_region=2)
    jobs = synthetic_jobs(SyntheticConfig(jobs=150, max_gpus=cluster.total_gpus, seed=3))
    faults = FaultConfig(node_mtbf_h=200.0)

    def once() -> str:
        r = Simulator(cluster, jobs, SimConfig(seed=3, faults=faults)).run()
        ends = {n: (j.status, j.end, j.restarts) for n, j in sorted(r.jobs.items())}
        return json.dumps({"kpis": r.kpis.as_dict(), "ends": ends, "series": r.series}, sort_keys=True)

    assert once() == once()


def test_every_job_ends_completed_or_failed_with_a_reason() -> None:
    jobs = [
        training("fits", 4, duration_estimate_s=100.0),
        training("too-big", 12, topology=TopologyConstraint(required=Level.RACK), duration_estimate_s=100.0),
        training("later", 16, submit_time=50.0, duration_estimate_s=100.0),
    ]
    r = run(jobs)
    by = r.jobs  # type: ignore[attr-defined]
    assert by["fits"].status == by["later"].status == "completed"
    assert by["too-big"].status == "failed" and "rack" in by["too-big"].reason
    assert r.kpis["completed"] == 2 and r.kpis["failed"] == 1  # type: ignore[attr-defined]


def test_a_high_priority_gang_preempts_and_the_victim_loses_work_since_its_checkpoint() -> None:
    low = training("low", 16, priority=0, duration_estimate_s=10_000.0, checkpoint_interval_s=1000.0)
    high = training("high", 8, priority=100, submit_time=2500.0, duration_estimate_s=1000.0)
    r = run([low, high])
    by = r.jobs  # type: ignore[attr-defined]
    assert r.kpis["preemptions"] == 1  # type: ignore[attr-defined]
    assert by["high"].first_start == 2500.0 and by["high"].status == "completed"
    # 500 s since the checkpoint at 2000 s are lost: low ends 500 s + high's 1000 s later than alone
    assert by["low"].status == "completed"
    assert by["low"].end == pytest.approx(10_000.0 + 1000.0 + 500.0)
    assert r.kpis["lost_gpu_hours"] == pytest.approx(16 * 500.0 / 3600.0)  # type: ignore[attr-defined]


def test_failures_restart_jobs_from_their_checkpoint_and_every_job_still_ends() -> None:
    cluster = GPUCluster.uniform(racks_per_region=2)
    jobs = synthetic_jobs(SyntheticConfig(jobs=120, max_gpus=cluster.total_gpus, seed=1))
    faults = FaultConfig(node_mtbf_h=50.0, gpu_mtbf_h=5_000.0, uplink_mtbf_h=100.0)
    r = Simulator(cluster, jobs, SimConfig(seed=1, faults=faults)).run()
    assert r.kpis["restarts"] > 0 and r.kpis["lost_gpu_hours"] > 0
    assert all(j.status in ("completed", "failed") for j in r.jobs.values())
    assert all(j.reason for j in r.jobs.values() if j.status == "failed")
    assert r.kpis["completed"] + r.kpis["failed"] == len(jobs)


def test_the_autoscaler_follows_the_daily_curve() -> None:
    svc = inference(
        "svc",
        2,
        min_replicas=1,
        max_replicas=8,
        duration_estimate_s=86_400.0,
        comm=CommProfile(bytes_per_step=0.0, compute_s_per_step=0.05),
        serving=ServingProfile(peak_tokens_per_s=3000.0, trough_fraction=0.1, peak_hour=12.0),
    )
    sim = Simulator(small(), [svc], SimConfig(autoscale_every_s=600.0, sample_every_s=600.0))
    r = sim.run()
    replicas = r.series["replicas"]
    assert r.jobs["svc"].status == "completed"
    # one replica serves 1,280 tokens/s; at 60 % target the 3,000 tokens/s peak needs 4, the trough 1
    assert min(x for x in replicas if x) == 1 and max(replicas) == 4
    noon = replicas[len(replicas) // 2]
    assert noon == 4, "the peak is at noon"
    assert r.kpis["inference_tokens_per_s"] > 0
    assert 0.0 < r.kpis["slo_attainment"] <= 1.0
    # at most 8 replicas of 1,280 tokens/s always cover a 3,000 tokens/s peak: never overloaded
    assert r.kpis["inference_overloaded_share"] == 0.0


def test_kpis_follow_their_definitions() -> None:
    # One 8-GPU job for 1000 s on 16 GPUs: half the cluster allocated; nothing waits: idle rate 0.
    r = run([training("t", 8, duration_estimate_s=1000.0)])
    k = r.kpis  # type: ignore[attr-defined]
    assert k["allocation_ratio"] == pytest.approx(0.5)
    assert k["idle_rate"] == 0.0 and k["idle_no_work_share"] == pytest.approx(0.5)
    assert k["mean_jct_s"] == pytest.approx(1000.0)
    assert k["cost_per_hour"] == pytest.approx(16 * 20.0)


def test_a_waiting_gang_makes_idle_gpus_count_against_the_scheduler() -> None:
    # 12 GPUs busy until t=1000; a 16-GPU gang waits meanwhile while 4 GPUs stay free: idle.
    r = run([training("busy", 12, duration_estimate_s=1000.0), training("gang", 16, duration_estimate_s=1000.0)])
    k = r.kpis  # type: ignore[attr-defined]
    assert k["idle_rate"] == pytest.approx(4 / 16)  # during [0, 1000): 4 of 16 idle while the gang waits
    assert r.jobs["gang"].first_start == pytest.approx(1000.0)  # type: ignore[attr-defined]


def test_faster_gpus_finish_compute_bound_work_sooner() -> None:
    # compute-bound job (no bytes): on GPUs twice as fast as its estimate it ends at half the time
    fast = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, gpus_per_node=4, gpu_speed={"GB200": 2.0})
    job = training("t", 4, comm=CommProfile(bytes_per_step=0.0, compute_s_per_step=1.0), duration_estimate_s=1000.0)
    r = Simulator(fast, [job]).run()
    assert r.jobs["t"].end == pytest.approx(500.0)


def test_an_undersized_service_counts_as_overloaded() -> None:
    # one replica (max 1) of 1,280 tokens/s against a flat 5,000 tokens/s demand: overloaded all day
    svc = inference(
        "svc",
        1,
        max_replicas=1,
        duration_estimate_s=7200.0,
        comm=CommProfile(bytes_per_step=0.0, compute_s_per_step=0.05),
        serving=ServingProfile(peak_tokens_per_s=5000.0, trough_fraction=1.0),
    )
    r = Simulator(small(), [svc], SimConfig(autoscale_every_s=600.0)).run()
    assert r.kpis["inference_overloaded_share"] == pytest.approx(1.0)
    assert r.kpis["slo_attainment"] == 0.0


def test_no_data_is_none_never_a_perfect_score() -> None:
    # the only job is larger than the cluster: it fails at once, nothing runs, nothing is measured
    r = run([training("huge", 1000, duration_estimate_s=3600.0)])
    k = r.kpis  # type: ignore[attr-defined]
    assert (k["completed"], k["failed"]) == (0, 1)
    for key in (
        "allocation_ratio",
        "idle_rate",
        "intra_rack_traffic_share",
        "single_rack_share",
        "mean_jct_s",
        "p99_jct_s",
        "mean_queueing_s",
        "training_samples_per_s",
        "cost_per_million_samples",
        "cost_efficiency_samples",
        "slo_attainment",
        "worst_p99_latency_s",
        "makespan_s",
    ):
        assert k[key] is None, key
    assert json.loads(json.dumps(k.as_dict()))["intra_rack_traffic_share"] is None  # JSON null


def test_kpis_without_their_kind_of_work_are_none() -> None:
    # one batch job: no multi-GPU training, no bytes moved, no inference; time did pass
    from rackscale.model import batch

    r = run([batch("b", gpus=1, tasks=1, duration_estimate_s=600.0)])
    k = r.kpis  # type: ignore[attr-defined]
    assert k["makespan_s"] == pytest.approx(600.0) and k["mean_jct_s"] == pytest.approx(600.0)
    assert k["single_rack_share"] is None and k["intra_rack_traffic_share"] is None
    assert k["slo_attainment"] is None and k["inference_overloaded_share"] is None
    assert k["cost_per_million_tokens"] is None and k["inference_tokens_per_s"] == 0.0


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        pytest.param({"duration_estimate_s": 1e308}, "the simulation horizon ended before the job did", id="endless"),
        pytest.param({"submit_time": 1e308}, "never arrived before the horizon", id="arrives-never"),
    ],
)
def test_a_job_past_the_default_horizon_ends_the_run_as_failed(kw: dict[str, float], reason: str) -> None:
    """Ten years after the first arrival by default: a 1e308 s job (the spec allows any positive length) kept
    the samples going for ever. Monthly samples here keep the test quick; the bound is the default's."""
    from rackscale.sim.records import DEFAULT_HORIZON_S

    assert SimConfig().horizon_s == DEFAULT_HORIZON_S == 10 * 365.25 * 86_400
    cluster = GPUCluster.uniform(name="x", racks_per_region=1)
    jobs = [training("short", 8, duration_estimate_s=100.0), training("long", 8, **kw)]  # type: ignore[arg-type]
    r = Simulator(cluster, jobs, SimConfig(sample_every_s=30 * 86_400.0)).run()
    assert r.jobs["short"].status.value == "completed"
    assert r.jobs["long"].status.value == "failed" and r.jobs["long"].reason == reason
