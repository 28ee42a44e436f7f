"""LLM jobs in the simulator: placement changes their speed through the LLM model, the scheduler prices a
split with the same function, services report interactivity and TTFT against their SLOs, and the
embedded default workload runs real model configurations.

Most cases use this cluster (2 racks x 2 nodes x 4 GB200 GPUs, RDMA 100 Gb/s per GPU between racks)::

    region-0
    ├── r000: n00 [....] n01 [....]
    └── r001: n00 [....] n01 [....]
"""

from __future__ import annotations

from html import escape
from typing import Any

import pytest

from rackscale.host.kpis import KpiAccumulator
from rackscale.llm import jobs as llm_jobs
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobKind, JobSpec, LlmWork, ServingProfile, inference, training
from rackscale.network.collectives import Layout
from rackscale.scheduler.split import SplitAdvisor
from rackscale.sim import SimConfig, Simulator
from rackscale.sim.report import LLM_NOTE, render_report
from rackscale.sim.summary import GOALS, fmt_kpi, label
from rackscale.workloads import SyntheticConfig, synthetic_jobs
from rackscale.workloads.synthetic import LLM_SERVICES

GANG = LlmWork(model="llama-3.1-8b", tp=1, pp=1, dp=8)


def small() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


def run(jobs: list[JobSpec], policy: str = "rackscale", cluster: GPUCluster | None = None) -> Any:
    return Simulator(cluster or small(), jobs, SimConfig(policy=policy)).run()


# ---------------------------------------------------------------------------------------------- training
def test_a_split_llm_gang_finishes_later_by_the_models_slowdown() -> None:
    """rackscale keeps the 8-GPU gang in one rack; first-fit spreads it over both: its DP all-reduce then
    crosses the NIC, and the gang ends later in proportion to the model's step times."""
    spec = training("t", 8, llm=GANG, duration_estimate_s=3600.0)
    packed, spread = run([spec], "rackscale"), run([spec], "first-fit")
    assert packed.jobs["t"].end == pytest.approx(3600.0)
    layout = spread.jobs["t"].layout
    assert layout.racks == 2
    cluster = small()
    ratio = llm_jobs.job_step(cluster, spec, layout).total_s / llm_jobs.job_ideal_step(cluster, spec).total_s
    assert ratio > 1.0
    assert spread.jobs["t"].end == pytest.approx(3600.0 * ratio, rel=1e-6)
    assert packed.kpis["training_samples_per_s"] is not None


def _state_with_half_racks(end: float) -> ClusterState:
    """``a`` and ``b`` hold 4 GPUs of each rack until ``end``: 8 GPUs are free, 4 per rack::

    region-0
    ├── r000: n00 [aaaa] n01 [....]
    └── r001: n00 [bbbb] n01 [....]
    """
    state = ClusterState(small())
    for name, rack in (("a", 0), ("b", 1)):
        node = state.cluster.racks[rack].nodes[0]
        blocker = training(name, 4, duration_estimate_s=end)
        state.allocate(blocker, Placement(name, (NodeAlloc(node, (0, 1, 2, 3)),), 4), now=0.0, expected_end=end)
    return state


@pytest.mark.parametrize(
    ("duration", "frees_in", "splits"),
    [
        pytest.param(36_000.0, 60.0, False, id="long-gang-waits-a-minute"),
        pytest.param(600.0, 36_000.0, True, id="short-gang-splits"),
    ],
)
def test_the_split_decision_prices_an_llm_gang_with_the_same_model(
    duration: float, frees_in: float, splits: bool
) -> None:
    spec = training("t", 8, llm=GANG, duration_estimate_s=duration)
    state = _state_with_half_racks(frees_in)
    assert SplitAdvisor().split_pays_off(spec, state, 0.0) is splits
    one = llm_jobs.job_step(state.cluster, spec, Layout(((0, 0, 8),))).total_s
    two = llm_jobs.job_step(state.cluster, spec, Layout(((0, 0, 4), (0, 1, 4)))).total_s
    assert ((two / one - 1.0) * duration < frees_in) is splits  # the advisor's rule, on the model's steps


# ---------------------------------------------------------------------------------------------- serving
def service(slo: float | None, ttft: float | None, peak: float = 2000.0) -> JobSpec:
    """A Llama-3.1-8B service of 2 one-GPU replicas, serving for 6 h with a daily peak of ``peak`` tokens/s."""
    llm = LlmWork(model="llama-3.1-8b", interactivity_slo=slo, ttft_slo_s=ttft)
    profile = ServingProfile(peak_tokens_per_s=peak, tokens_per_request=1024.0)
    return inference("svc", 2, llm=llm, serving=profile, duration_estimate_s=6 * 3600.0)


@pytest.mark.parametrize(
    ("spec", "inter", "ttft"),
    [
        pytest.param(service(50.0, 2.0), 1.0, 1.0, id="both-met"),
        pytest.param(service(1e5, 2.0, peak=10.0), 0.0, 1.0, id="interactivity-out-of-reach"),
        pytest.param(service(50.0, 1e-6), 1.0, 0.0, id="ttft-out-of-reach"),
        pytest.param(service(None, None), None, None, id="no-slo"),
        pytest.param(service(50.0, 2.0, peak=1e7), 1.0, 0.0, id="overloaded-misses-ttft"),
    ],
)
def test_services_report_interactivity_and_ttft_against_their_slos(
    spec: JobSpec, inter: float | None, ttft: float | None
) -> None:
    k = run([spec]).kpis
    assert k["interactivity_slo_attainment"] == (None if inter is None else pytest.approx(inter))
    assert k["ttft_slo_attainment"] == (None if ttft is None else pytest.approx(ttft))
    assert k["mean_user_tokens_per_s"] > 0  # measured even without an SLO
    assert k["inference_tokens_per_s"] > 0


def test_a_service_without_a_model_has_no_llm_kpis() -> None:
    k = run([inference("plain", 2, duration_estimate_s=3600.0)]).kpis
    assert k["interactivity_slo_attainment"] is None and k["mean_user_tokens_per_s"] is None
    assert k["mean_ttft_s"] is None and k["ttft_slo_attainment"] is None


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        pytest.param({}, dict.fromkeys(("interactivity", "ttft", "tok", "mean_ttft")), id="nothing-served"),
        pytest.param(
            {
                "interactivity_weight": 4.0,
                "interactivity_met_weight": 3.0,
                "ttft_weight": 2.0,
                "ttft_met_weight": 0.0,
                "user_tokens": 10.0,
                "user_tok_s_tokens": 500.0,
                "ttft_weight_finite": 2.0,
                "ttft_s_weighted": 1.0,
            },
            {"interactivity": 0.75, "ttft": 0.0, "tok": 50.0, "mean_ttft": 0.5},
            id="weighted",
        ),
    ],
)
def test_the_llm_kpis_are_weighted_shares(fields: dict[str, float], want: dict[str, float | None]) -> None:
    acc = KpiAccumulator(**fields)  # type: ignore[arg-type]
    k = acc.kpis(makespan_s=10.0, cluster_gpus=8, price_per_gpu_hour=1.0)
    got = {
        "interactivity": k.interactivity_slo_attainment, "ttft": k.ttft_slo_attainment,
        "tok": k.mean_user_tokens_per_s, "mean_ttft": k.mean_ttft_s,
    }  # fmt: skip
    assert got == want


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        pytest.param("interactivity_slo_attainment", 0.925, "92.5 %", id="share"),
        pytest.param("ttft_slo_attainment", None, "n/a", id="nothing-to-measure"),
        pytest.param("mean_user_tokens_per_s", 54.3, "54.3 tokens/s", id="tokens-per-user"),
        pytest.param("mean_ttft_s", 0.21, "0.21 s", id="ttft"),
    ],
)
def test_the_llm_kpis_read_as_people_read_them(key: str, value: float | None, shown: str) -> None:
    assert fmt_kpi(key, value) == shown
    assert "LLM" in label(key)


def test_the_report_explains_the_llm_kpis_only_when_there_are_some() -> None:
    cluster = small()
    with_llm = run([service(50.0, 2.0)])
    without = run([inference("plain", 1, duration_estimate_s=600.0)])
    note = escape(LLM_NOTE)
    assert note in render_report(cluster=cluster, results=[with_llm], workload="w")
    assert note not in render_report(cluster=cluster, results=[without], workload="w")
    assert GOALS["interactivity_slo_attainment"] == GOALS["ttft_slo_attainment"] == "higher"


# ---------------------------------------------------------------------------------------------- the default
def test_the_default_workload_carries_real_models_and_leaves_the_rest_unchanged() -> None:
    cfg = SyntheticConfig(max_gpus=288)
    mixed, plain = synthetic_jobs(cfg), synthetic_jobs(SyntheticConfig(max_gpus=288, llm_share=0.0))
    llm = [(j.kind, j.llm) for j in mixed if j.llm is not None]
    assert {kind for kind, _ in llm} == {JobKind.TRAINING, JobKind.INFERENCE}
    served = [work for kind, work in llm if kind is JobKind.INFERENCE]
    assert {w.model for w in served} == {s.llm.model for s in LLM_SERVICES}
    assert all(w.interactivity_slo and w.ttft_slo_s for w in served)
    assert [(j.name, j.kind, j.submit_time, j.duration_estimate_s) for j in mixed] == [
        (j.name, j.kind, j.submit_time, j.duration_estimate_s) for j in plain
    ]
    assert [j.total_gpus for j in mixed if j.kind is JobKind.TRAINING] == [
        j.total_gpus for j in plain if j.kind is JobKind.TRAINING
    ]


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param(GPUCluster.uniform(racks_per_region=4), id="gb200-nvl72"),
        pytest.param(
            GPUCluster.uniform(racks_per_region=36, nodes_per_rack=1, gpus_per_node=8, gpu_model="A100"), id="a100-x8"
        ),
        pytest.param(
            GPUCluster.uniform(racks_per_region=36, nodes_per_rack=1, gpus_per_node=8, gpu_model="H100"), id="h100-x8"
        ),
    ],
)
def test_every_default_llm_job_fits_80gb_gpus_too(cluster: GPUCluster) -> None:
    for job in synthetic_jobs(SyntheticConfig(max_gpus=cluster.total_gpus)):
        llm_jobs.check_job(cluster, job)  # raises LlmJobError naming the job if one does not fit


def test_the_default_simulation_is_sane() -> None:
    cluster = GPUCluster.uniform(racks_per_region=4, total_gpus=288)
    jobs = synthetic_jobs(SyntheticConfig(max_gpus=cluster.total_gpus))
    k = run(jobs, cluster=cluster).kpis
    assert k["completed"] == len(jobs) and k["failed"] == 0
    assert k["intra_rack_traffic_share"] >= 0.9
    assert k["idle_rate"] is not None
    for key in ("interactivity_slo_attainment", "ttft_slo_attainment"):
        assert 0.5 <= k[key] <= 1.0, key
    assert k["mean_user_tokens_per_s"] > 10.0 and 0.0 < k["mean_ttft_s"] < 10.0


def test_a_model_the_cluster_cannot_hold_fails_that_job_not_the_run() -> None:
    """405B at BF16 on one GPU fits no plan: the job fails at arrival with the reason; the others run."""
    too_big = training("huge", 1, llm=LlmWork(model="llama-3.1-405b"), duration_estimate_s=600.0)
    fine = training("t", 8, llm=GANG, duration_estimate_s=600.0)
    result = run([too_big, fine])
    assert result.jobs["huge"].status.value == "failed"
    assert "does not train on 1" in result.jobs["huge"].reason
    assert result.jobs["t"].end == pytest.approx(600.0)
    assert result.kpis["failed"] == 1
