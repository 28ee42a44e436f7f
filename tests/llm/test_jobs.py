"""The simulator's bridge to the LLM model: a cluster, a job and its placement give a step time.

The placements priced here (GB200 NVL72 racks, 18 trays of 4 GPUs, RDMA 100 Gb/s per GPU between racks)::

    region-0
    ├── r000 (72 GPUs, NVLink 7,200 Gb/s per GPU) ──┐
    └── r001 (72 GPUs)                            ──┴── RDMA 100 Gb/s per GPU

    one rack:   r000 [16 ................]           the replica's TP-16 all-reduce stays on NVLink
    split:      r000 [8 ........] r001 [8 ........]  the same all-reduce crosses the NIC
"""

from __future__ import annotations

import math

import pytest

from rackscale.llm import jobs
from rackscale.llm.fabric import Span
from rackscale.llm.hardware import GPUS, MAX_DOMAIN_GPUS
from rackscale.llm.job_plans import LOAD_LEVELS, MAX_BATCH, ServingJob, TrainingJob, replica_on, train_layout
from rackscale.llm.plans import max_batch
from rackscale.llm.training import TrainPlan
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.topology import GPUCluster, LinkTier, LinkTiers
from rackscale.model.workload import CommProfile, JobSpec, LlmWork, inference, training
from rackscale.network.collectives import Layout, training_step

NVL72 = GPUCluster.uniform(racks_per_region=2)
ONE_RACK_16 = Layout(((0, 0, 16),))
SPLIT_16 = Layout(((0, 0, 8), (0, 1, 8)))


def tp16_service(**llm: object) -> JobSpec:
    work = LlmWork(model="llama-3.1-70b", tp=16, interactivity_slo=25.0, **llm)  # type: ignore[arg-type]
    return inference("svc", 2, gpus_per_replica=16, llm=work)


def dp16_gang(model: str = "llama-3.1-8b") -> JobSpec:
    return training("gang", 16, llm=LlmWork(model=model, tp=1, pp=1, dp=16), duration_estimate_s=3600.0)


# ---------------------------------------------------------------------------------------------- the system
@pytest.mark.parametrize(
    ("name", "chip"),
    [
        pytest.param("GB200", "gb200", id="catalogue-name"),
        pytest.param("h100", "h100", id="lower-case"),
        pytest.param("NVIDIA-H100-80GB-HBM3", "h100", id="kubernetes-product-label"),
        pytest.param("A100-SXM4-80GB", "a100", id="a-word-of-the-name"),
        pytest.param("V100", jobs.DEFAULT_GPU, id="unknown-is-the-default"),
        pytest.param("local", jobs.DEFAULT_GPU, id="the-local-backend"),
    ],
)
def test_the_chip_comes_from_the_catalogue_by_name(name: str, chip: str) -> None:
    assert jobs.gpu_of_model(name) is GPUS[chip]


def test_the_links_come_from_the_cluster_not_the_catalogue() -> None:
    tiers = LinkTiers(nvlink=LinkTier("nvlink", 3600.0, 1.0), rdma=LinkTier("rdma", 200.0, 5.0))
    cluster = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=2, gpus_per_node=8, gpu_model="B200", tiers=tiers)
    system = jobs.system_of_cluster(cluster)
    assert system.gpu.name == "B200"
    assert system.gpu.hbm_gb == GPUS["b200"].hbm_gb  # the chip's own numbers stay
    assert system.gpu.nvlink_gb_s == pytest.approx(3600.0 / 8)  # Gb/s -> GB/s
    assert system.nic_gb_s == pytest.approx(200.0 / 8) != GPUS["b200"].nic_gb_s
    assert system.domain_gpus == 16  # the largest rack


def test_a_rack_larger_than_any_nvlink_domain_is_capped() -> None:
    huge = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=160, gpus_per_node=4)
    assert jobs.system_of_cluster(huge).domain_gpus == MAX_DOMAIN_GPUS


# ---------------------------------------------------------------------------------------------- placement
def test_a_tp16_replica_split_over_two_racks_is_slower() -> None:
    """The issue's example: the TP-16 all-reduce runs on the NIC once the replica leaves its rack."""
    spec = tp16_service()
    one, split = jobs.job_step(NVL72, spec, ONE_RACK_16), jobs.job_step(NVL72, spec, SPLIT_16)
    assert split.total_s > 1.2 * one.total_s
    assert split.comm_s > 10 * one.comm_s  # NVLink is 72x the NIC here: the all-reduce pays for it
    assert split.compute_s == pytest.approx(one.compute_s)  # the chips did not change
    a, b = jobs.replica_serving(NVL72, spec, ONE_RACK_16), jobs.replica_serving(NVL72, spec, SPLIT_16)
    assert b.tokens_per_s < a.tokens_per_s and b.interactivity < a.interactivity
    assert a.interactivity >= 25.0 > b.interactivity  # the batch meets the SLO only where it was sized


def test_a_training_gangs_dp_all_reduce_on_two_racks_is_slower() -> None:
    spec = dp16_gang()
    one, two = jobs.job_step(NVL72, spec, ONE_RACK_16), jobs.job_step(NVL72, spec, SPLIT_16)
    assert two.comm_s > 5 * one.comm_s > 0
    assert two.compute_s == one.compute_s
    assert jobs.job_ideal_step(NVL72, spec) == one  # the ideal is the packed placement: one rack


@pytest.mark.parametrize("slowdown", [1.0, 1.7, 3.0, 40.0], ids=["none", "x1.7", "x3", "x40"])
def test_contention_stretches_the_step_as_the_model_says(slowdown: float) -> None:
    """The step is cached per shape and stretched linearly; the model itself agrees at every slowdown."""
    spec = dp16_gang()
    job = jobs.resolve(NVL72, spec)
    assert isinstance(job, TrainingJob)
    got = jobs.job_step(NVL72, spec, SPLIT_16, slowdown=slowdown)
    exact = job.terms(jobs.shape_of(SPLIT_16), slowdown)
    assert got.total_s == pytest.approx(exact.step_s, rel=1e-9)


def test_steps_are_cached_per_placement_shape() -> None:
    spec = training("gang", 16, llm=LlmWork(model="llama-3.1-70b", tp=8))
    job = jobs.resolve(NVL72, spec)
    assert jobs.resolve(NVL72, spec) is job  # resolved once
    for slowdown in (1.0, 2.0, 5.0):
        jobs.job_step(NVL72, spec, SPLIT_16, slowdown=slowdown)
        jobs.job_step(NVL72, spec, Layout(((0, 1, 8), (0, 0, 8))), slowdown=slowdown)  # the same shape
    assert isinstance(job, TrainingJob)
    assert list(job._steps) == [((8, 8), 1)]


@pytest.mark.parametrize(
    ("plan", "counts", "tp_crosses", "dp_racks"),
    [
        pytest.param(TrainPlan(tp=8, dp=2), (16,), False, 1, id="one-rack"),
        pytest.param(TrainPlan(tp=8, dp=2), (8, 8), False, 2, id="a-copy-per-rack"),
        pytest.param(TrainPlan(tp=8, dp=2), (12, 4), True, 2, id="a-tp-group-straddles"),
        pytest.param(TrainPlan(tp=4, pp=2, dp=2), (12, 4), False, 2, id="a-pipeline-crosses"),
        pytest.param(TrainPlan(tp=2, dp=8), (10, 6), False, 2, id="uneven-racks"),
    ],
)
def test_a_layout_decides_which_groups_cross_racks(
    plan: TrainPlan, counts: tuple[int, ...], tp_crosses: bool, dp_racks: int
) -> None:
    domain, dp = train_layout(plan, counts)
    assert (domain < plan.tp) is tp_crosses
    assert dp.domains == dp_racks and dp.gpus == plan.dp


def test_a_straddling_tp_group_costs_more_than_whole_groups() -> None:
    spec = training("g", 16, llm=LlmWork(model="llama-3.1-8b", tp=8, dp=2))
    whole = jobs.job_step(NVL72, spec, Layout(((0, 0, 8), (0, 1, 8))))
    cut = jobs.job_step(NVL72, spec, Layout(((0, 0, 12), (0, 1, 4))))
    assert cut.comm_s > 5 * whole.comm_s


# ---------------------------------------------------------------------------------------------- serving
@pytest.mark.parametrize("slo", [15.0, 25.0, 60.0], ids=["lax", "mlperf-interactive", "strict"])
def test_the_batch_is_the_largest_that_meets_the_interactivity_slo(slo: float) -> None:
    spec = inference("svc", 1, gpus_per_replica=8, llm=LlmWork(model="llama-3.1-70b", interactivity_slo=slo))
    job = jobs.resolve(NVL72, spec)
    assert isinstance(job, ServingJob)
    at = jobs.replica_serving(NVL72, spec, Layout(((0, 0, 8),)))
    assert at.interactivity >= slo
    w = job.work
    cap = min(
        MAX_BATCH, max_batch(w.model, w.precision, job.plan, context=w.max_context, hbm_bytes=GPUS["gb200"].hbm_bytes)
    )
    if job.plan.batch + job.plan.dp <= cap:  # one more sequence (per attention group) would miss the SLO
        bigger = job.plan.with_batch(job.plan.batch + job.plan.dp)
        assert replica_on(job.work, bigger, job.ctx, Span((8,))).interactivity < slo


def test_a_stricter_slo_means_a_smaller_batch_and_fewer_tokens() -> None:
    def service(slo: float) -> jobs.ReplicaServing:
        llm = LlmWork(model="llama-3.1-8b", interactivity_slo=slo)
        return jobs.replica_serving(NVL72, inference("s", 1, llm=llm), Layout(((0, 0, 1),)))

    lax, strict = service(50.0), service(150.0)
    assert strict.plan.batch < lax.plan.batch
    assert strict.tokens_per_s < lax.tokens_per_s


def test_load_raises_ttft_and_lowers_interactivity() -> None:
    replica = jobs.replica_serving(NVL72, tp16_service(), ONE_RACK_16)
    loads = [0.1, 0.3, 0.6, 0.9, 0.99]
    seen = [replica.at_load(x) for x in loads]
    inters, ttfts = [i for i, _ in seen], [t for _, t in seen]
    assert inters == sorted(inters, reverse=True) and ttfts == sorted(ttfts)
    assert replica.at_load(1.0)[1] == math.inf == replica.at_load(1.5)[1]  # overloaded: no steady state
    assert replica.at_load(1.5)[0] == replica.interactivity  # the batch is capped: users still see the SLO
    assert len(replica.level_steps) == LOAD_LEVELS


def test_mtp_emits_more_tokens_per_step() -> None:
    def r1(mtp: bool) -> jobs.ReplicaServing:
        llm = LlmWork(model="deepseek-r1", precision="fp4", mtp=mtp)
        return jobs.replica_serving(NVL72, inference("r1", 1, gpus_per_replica=8, llm=llm), Layout(((0, 0, 8),)))

    assert r1(True).emitted > r1(False).emitted == 1.0


# ---------------------------------------------------------------------------------------------- replicas
def _placement(cluster: GPUCluster, per_node: list[tuple[int, int]]) -> Placement:
    """``(node index, GPUs)`` slices; a node of 4 GPUs."""
    return Placement("svc", tuple(NodeAlloc(node, tuple(range(n))) for node, n in per_node), 1)


@pytest.mark.parametrize(
    ("slices", "per", "shapes"),
    [
        pytest.param([(0, 4), (1, 4)], 8, [((8,), 1)], id="one-replica-two-nodes"),
        pytest.param([(0, 4), (18, 4), (1, 4), (19, 4)], 8, [((8,), 1), ((8,), 1)], id="merged-slices-by-rack"),
        pytest.param([(0, 4), (18, 4)], 8, [((4, 4), 1)], id="split-over-racks"),
        pytest.param([(0, 2), (1, 1)], 1, [((1,), 1)] * 3, id="one-gpu-replicas"),
    ],
)
def test_replicas_are_rebuilt_rack_by_rack(
    slices: list[tuple[int, int]], per: int, shapes: list[tuple[tuple[int, ...], int]]
) -> None:
    layouts = jobs.replica_layouts(NVL72, _placement(NVL72, slices), per)
    assert [jobs.shape_of(x) for x in layouts] == shapes


# ---------------------------------------------------------------------------------------------- the rest
def test_a_job_without_a_model_keeps_its_comm_profile_step() -> None:
    spec = training("plain", 16, comm=CommProfile(bytes_per_step=4e9, compute_s_per_step=0.5))
    assert jobs.job_step(NVL72, spec, SPLIT_16, slowdown=2.0) == training_step(NVL72, spec, SPLIT_16, slowdown=2.0)
    assert jobs.traffic_profile(NVL72, spec) is spec.comm
    assert jobs.samples_per_step(spec) is None


def test_the_network_sees_the_models_gradients() -> None:
    spec = training("gang", 64, llm=LlmWork(model="llama-3.1-70b"))
    job = jobs.resolve(NVL72, spec)
    comm = jobs.traffic_profile(NVL72, spec)
    assert comm.collective == "hierarchical"
    assert comm.bytes_per_step == pytest.approx(job.work.model.total_params() * 2.0)  # BF16 gradients


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(inference("big", 1, llm=LlmWork(model="llama-3.1-405b")), "llm.model", id="405b-on-one-gpu"),
        pytest.param(training("big", 1, llm=LlmWork(model="llama-3.1-70b")), "llm.model", id="train-70b-on-one-gpu"),
        pytest.param(training("t", 8, llm=LlmWork(model="nope")), "llm", id="unknown-model-built-in-code"),
    ],
)
def test_a_job_the_cluster_cannot_run_is_refused_naming_it(spec: JobSpec, field: str) -> None:
    a100 = GPUCluster.uniform(racks_per_region=1, nodes_per_rack=1, gpus_per_node=8, gpu_model="A100")
    with pytest.raises(jobs.LlmJobError) as err:
        jobs.check_job(a100, spec)
    assert f"job {spec.name!r}" in str(err.value) and field in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("seq_len", "gpus", "batch"),
    [pytest.param(4096, 8, 1024, id="4m-tokens"), pytest.param(8192, 24, 528, id="rounded-to-the-gpus")],
)
def test_the_default_global_batch_is_about_4m_tokens(seq_len: int, gpus: int, batch: int) -> None:
    got = jobs.default_global_batch(LlmWork(model="llama-3.1-8b", seq_len=seq_len), gpus)
    assert got == batch and got % gpus == 0 and abs(got * seq_len - 4 * 2**20) <= gpus * seq_len


def test_a_given_expert_parallel_degree_is_the_plans() -> None:
    """A MoE gang's ``ep`` is honoured like its tp/pp/dp, through the same plan search as `perf train`."""
    spec = training(
        "moe", 128, llm=LlmWork(model="deepseek-v3", precision="fp8", pp=16, ep=8, global_batch=512),
        duration_estimate_s=3600.0,
    )  # fmt: skip
    job = jobs.resolve(NVL72, spec)
    assert isinstance(job, TrainingJob) and job.plan.ep == 8 and job.plan.pp == 16
    assert job.terms(((72, 56), 1)).ep_comm_s > 0
