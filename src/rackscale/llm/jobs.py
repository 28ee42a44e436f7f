"""The simulator's bridge to the LLM model: a cluster, a job and its placement give a step time.

A job with ``spec.llm`` is timed by :mod:`rackscale.llm`; any other falls back to the generic
``CommProfile`` step (:func:`rackscale.network.collectives.training_step`). The host (progress, services),
the scheduler's split decision and the service's metrics all call these functions, so a placement costs
the same wherever it is priced.

- **the system** (:func:`system_of_cluster`): the chip comes from the catalogue by the cluster's GPU model
  name (case-insensitive, also as a word: ``NVIDIA-H100-80GB-HBM3`` is an H100; an unknown name is
  :data:`DEFAULT_GPU`); the links come from the cluster's own tiers (NVLink, RDMA per GPU, backbone), not
  the catalogue, so the cluster spec stays the truth; the NVLink domain is the largest rack.
- **training** (:class:`~rackscale.llm.job_plans.TrainingJob`): the job's plan, then its step on the
  real layout; **serving** (:class:`~rackscale.llm.job_plans.ServingJob`): a replica's decode step on its
  real layout at the batch fixed at its best placement.
- ``speed`` (the cluster's ``gpuSpeed``, relative to a job's own estimate) does not apply to an LLM job:
  the catalogue knows its chip. Its ``duration_estimate_s`` is its run time at its best placement on this
  cluster (:func:`job_ideal_step`), so a worse placement finishes later, in proportion.

An elastic LLM gang (``minGpus``/``maxGpus``) is fixed at admission (:func:`elastic_llm`: its shard, its
bounds in whole data-parallel ranks) and timed at another size with that shard at the new DP and the asked
size's global batch (``_resized``).

Cached twice: a job is resolved (plan and batch search) once per (its ``llm`` settings, kind, GPUs,
system), and a step once per placement shape (GPUs per rack, regions).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from rackscale.llm.calibration import serving_efficiency, training_efficiency
from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP
from rackscale.llm.fabric import Links, Span
from rackscale.llm.hardware import GPUS, MAX_DOMAIN_GPUS, GpuSpec, System
from rackscale.llm.job_plans import (
    JobContext,
    LlmJobError,
    ReplicaServing,
    ServingJob,
    Shape,
    TrainingJob,
    serve_job,
    train_job,
    train_layout,
)
from rackscale.llm.models import model_named
from rackscale.llm.precision import parse_precision
from rackscale.llm.serving import ServeWorkload
from rackscale.llm.train_plans import best_resized_plan, padded
from rackscale.llm.training import GRAD_BYTES, TrainWorkload
from rackscale.model.placement import Placement
from rackscale.model.topology import GPUCluster, LinkTiers
from rackscale.model.workload import CommProfile, JobKind, JobSpec, LlmWork
from rackscale.network.collectives import Layout, StepTime, ideal_step, training_step

DEFAULT_GPU = "gb200"  # a GPU model the catalogue does not know: the project's default rack (GB200 NVL72)
BATCH_TOKENS = 4 * 1024 * 1024  # default global batch: Llama 3's 4M tokens (Llama 3 paper, section 3.4.1)
_WORDS = re.compile(r"[-_ /.:]+")


# ---------------------------------------------------------------------------------------------- the system
def catalogue_gpu(name: str) -> GpuSpec | None:
    """The catalogue GPU a cluster's model name means (``H100``, ``nvidia-h100-sxm``), None when none matches."""
    key = name.strip().lower()
    if key in GPUS:
        return GPUS[key]
    return next((GPUS[w] for w in _WORDS.split(key) if w in GPUS), None)


def gpu_of_model(name: str) -> GpuSpec:
    """The catalogue GPU a cluster's model name means (:data:`DEFAULT_GPU` when none matches)."""
    return catalogue_gpu(name) or GPUS[DEFAULT_GPU]


@lru_cache(maxsize=128)
def _context(tiers: LinkTiers, domain: int, gpu_model: str) -> JobContext:
    chip = gpu_of_model(gpu_model)
    nvlink, nic = tiers.nvlink.bandwidth_gbps / 8.0, tiers.rdma.bandwidth_gbps / 8.0  # Gb/s -> GB/s
    dom = min(max(domain, 1), MAX_DOMAIN_GPUS)
    gpu = replace(chip, nvlink_gb_s=nvlink, nic_gb_s=nic, domain_gpus=dom)
    system = System(gpu=gpu, domain_gpus=dom, nic_gb_s=nic, price_per_gpu_hour=chip.price_per_gpu_hour)
    links = Links.from_gbps(
        nvlink_gbps=tiers.nvlink.bandwidth_gbps, nic_gbps=tiers.rdma.bandwidth_gbps,
        backbone_gbps=tiers.backbone.bandwidth_gbps, nvlink_latency_us=tiers.nvlink.latency_us,
        nic_latency_us=tiers.rdma.latency_us, backbone_latency_us=tiers.backbone.latency_us,
    )  # fmt: skip
    return JobContext(system, links, serving_efficiency(chip), training_efficiency(chip))


def _primary_model(cluster: GPUCluster, spec: JobSpec | None = None) -> str:
    """The GPU model of a job's best placement: one it asks for, else the cluster's most common."""
    models = cluster.gpu_models
    if spec is not None and spec.unit.gpu_models:
        return (sorted(m for m in spec.unit.gpu_models if m in models) or sorted(spec.unit.gpu_models))[0]
    if len(models) <= 1:
        return models[0] if models else DEFAULT_GPU
    count: dict[str, int] = {}
    for rack in cluster.racks:
        count[rack.gpu_model] = count.get(rack.gpu_model, 0) + rack.gpus
    return max(sorted(count), key=lambda m: count[m])


def main_gpu_model(cluster: GPUCluster) -> str:
    """The GPU model :func:`system_of_cluster` takes by default: the cluster's most common."""
    return _primary_model(cluster)


def system_of_cluster(cluster: GPUCluster, gpu_model: str | None = None) -> System:
    """The catalogue chip of ``gpu_model`` (default: the cluster's main one) on the cluster's links."""
    return _context(cluster.tiers, cluster.max_rack_gpus, gpu_model or _primary_model(cluster)).system


# ---------------------------------------------------------------------------------------------- layouts
def shape_of(layout: Layout) -> Shape:
    """What a step depends on: GPUs per rack (largest first) and regions."""
    return tuple(sorted((n for _, _, n in layout.members), reverse=True)), max(layout.regions, 1)


def _model_of(cluster: GPUCluster, layout: Layout) -> str:
    if len(cluster.gpu_models) <= 1 or not layout.members:
        return _primary_model(cluster)
    rack = layout.members[0][1]
    return cluster.racks[rack].gpu_model if 0 <= rack < len(cluster.racks) else _primary_model(cluster)


def replica_layouts(cluster: GPUCluster, placement: Placement, gpus_per_replica: int) -> tuple[Layout, ...]:
    """The layout of each replica of a service's placement.

    A placement lists slices, not replicas (slices on one node are merged), so the replicas are rebuilt:
    the placer keeps every replica inside one rack, so each rack's GPUs are cut into whole replicas first;
    what is left over in the racks (a placement made some other way) forms replicas across racks, in order.
    """
    per = max(gpus_per_replica, 1)
    out: list[Layout] = []
    left: dict[int, int] = {}
    taken = 0
    for _, rack, n in Layout.of(cluster, placement).members:  # GPUs per rack, in rack order
        whole, rest = divmod(n, per)
        out.extend([Layout(((cluster.racks[rack].region, rack, per),))] * whole)
        while rest > 0:  # leftovers: replicas across racks
            k = min(rest, per - taken)
            left[rack] = left.get(rack, 0) + k
            rest, taken = rest - k, taken + k
            if taken == per:
                out.append(Layout(tuple(sorted((cluster.racks[r].region, r, c) for r, c in left.items()))))
                left, taken = {}, 0
    return tuple(out)


# ---------------------------------------------------------------------------------------------- resolving
def default_global_batch(llm: LlmWork, gpus: int) -> int:
    """Sequences per step: as given, else about :data:`BATCH_TOKENS` rounded up to a multiple of the GPUs
    (so that every data-parallel degree divides it)."""
    if llm.global_batch is not None:
        return llm.global_batch
    g = max(gpus, 1)
    return -(-max(BATCH_TOKENS // max(llm.seq_len, 1), 1) // g) * g


def group_gpus(spec: JobSpec) -> int:
    """The GPUs one copy of the model runs on: the gang (training), one replica (inference)."""
    return max(spec.total_gpus if spec.kind is JobKind.TRAINING else spec.unit.gpus, 1)


@lru_cache(maxsize=1024)
def _resolve(ctx: JobContext, llm: LlmWork, kind: JobKind, gpus: int) -> TrainingJob | ServingJob:
    try:
        model, prec = model_named(llm.model), parse_precision(llm.precision)
    except ValueError as err:
        raise LlmJobError(f"llm: {err}") from None
    if kind is JobKind.TRAINING:
        work = TrainWorkload(
            model=model, precision=prec, seq_len=llm.seq_len, global_batch=default_global_batch(llm, gpus)
        )
        return train_job(work, llm, gpus, ctx)
    serve = ServeWorkload(
        model=model, precision=prec, isl=llm.isl, osl=llm.osl, mtp=DEEPSEEK_MTP if llm.mtp else NO_MTP,
        ttft_s=llm.ttft_slo_s,
    )  # fmt: skip
    return serve_job(serve, llm, gpus, ctx)


def resolve(cluster: GPUCluster, spec: JobSpec, *, gpu_model: str | None = None) -> TrainingJob | ServingJob:
    """``spec`` (which has ``llm``, and is training or inference) resolved on the cluster's GPUs."""
    assert spec.llm is not None
    ctx = _context(cluster.tiers, cluster.max_rack_gpus, gpu_model or _primary_model(cluster, spec))
    try:
        return _resolve(ctx, spec.llm, spec.kind, group_gpus(spec))
    except LlmJobError as err:
        raise LlmJobError(f"job {spec.name!r}: {err}") from None


# ---------------------------------------------------------------------------------------------- elastic
@lru_cache(maxsize=1024)
def _resized(ctx: JobContext, llm: LlmWork, asked: int, gpus: int) -> TrainingJob:
    """An elastic gang that asked for ``asked`` GPUs, on ``gpus``: its plan's model shard (TP x PP x EP) at
    the data-parallel degree ``gpus`` holds, its micro-batches and recomputation chosen again to fit HBM,
    at the asked size's global batch (TorchElastic keeps it: the same work, only the speed changes)."""
    job = _resolve(ctx, llm, JobKind.TRAINING, asked)
    assert isinstance(job, TrainingJob)
    plan = job.plan
    dp = max(gpus // plan.shard_gpus, 1)
    dp = max(dp - dp % plan.ep, plan.ep)
    if dp == plan.dp:
        return job
    packed = Span.packed(dp * plan.shard_gpus, ctx.system.domain_gpus).per_domain
    choice = best_resized_plan(
        job.work, plan, ctx.system, dp=dp, links=ctx.links, eff=ctx.training,
        layout=lambda p: train_layout(p, packed),
    )  # fmt: skip
    # Below the fewest ranks that fit HBM (the host keeps a gang above them): timed as if it fitted.
    run = choice.plan if choice is not None else replace(plan, dp=dp, micro_batch=1, recompute=True)
    return TrainingJob(work=padded(job.work, run.dp * run.micro_batch), plan=run, ctx=ctx)


@lru_cache(maxsize=1024)
def _fewest_ranks(ctx: JobContext, llm: LlmWork, asked: int) -> int:
    """The fewest data-parallel ranks (a multiple of EP) an elastic gang's model shard fits HBM on."""
    job = _resolve(ctx, llm, JobKind.TRAINING, asked)
    assert isinstance(job, TrainingJob)
    plan = job.plan

    def fits(groups: int) -> bool:  # ``groups`` x EP ranks
        dp = groups * plan.ep
        return best_resized_plan(job.work, plan, ctx.system, dp=dp, links=ctx.links, eff=ctx.training) is not None

    # A bisection (a gang of a million GPUs asks ~20 questions, not a million): more ranks never need more
    # memory a rank (a smaller optimizer shard; no more micro-batches in flight), so the ranks that fit are
    # all those from the fewest up; the asked size fits (its plan was chosen to).
    lo, hi = 0, plan.dp // plan.ep  # lo does not fit (no ranks), hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi * plan.ep


def elastic_llm(cluster: GPUCluster, spec: JobSpec) -> JobSpec:
    """An LLM gang with ``minGpus``/``maxGpus``, ready to resize: its ``llm`` fixes the TP, PP (and EP) of
    the plan chosen for the size it asked, so only the data-parallel degree changes; its bounds become
    whole data-parallel ranks (``JobSpec.resize_step``), the minimum at least the fewest ranks whose
    optimizer shard fits HBM, the maximum at most one sequence of the global batch per rank. Any other
    spec is returned as it is (so is one whose ``llm.dp`` fixes its size)."""
    llm = spec.llm
    bounded = (0 < spec.min_units < spec.units) or spec.max_units > spec.units
    if llm is None or spec.kind is not JobKind.TRAINING or not bounded or llm.dp is not None:
        return spec
    job = resolve(cluster, spec)
    assert isinstance(job, TrainingJob)
    ctx, asked, plan = job.ctx, group_gpus(spec), job.plan
    pinned = replace(llm, tp=plan.tp, pp=plan.pp, ep=plan.ep if plan.ep > 1 else llm.ep)
    out = replace(spec, llm=pinned)
    step, g = out.resize_step, max(spec.unit.gpus, 1)
    fewest = -(-_fewest_ranks(ctx, llm, asked) * plan.shard_gpus // g)
    lo = max(-(-(spec.min_units or spec.units) // step) * step, -(-fewest // step) * step)
    widest = job.work.global_batch * plan.shard_gpus // g  # one sequence per rank
    hi = min(spec.elastic_max_units, widest) // step * step
    return replace(out, min_units=lo if lo < spec.units else 0, max_units=hi if hi > spec.units else 0)


def is_llm(spec: JobSpec) -> bool:
    return spec.timed_by_llm


def check_job(cluster: GPUCluster, spec: JobSpec) -> None:
    """Raise :class:`LlmJobError` (naming the job and the field) if the cluster cannot run ``spec``'s LLM."""
    if is_llm(spec):
        resolve(cluster, spec)


# ---------------------------------------------------------------------------------------------- steps
def job_step(
    cluster: GPUCluster, spec: JobSpec, layout: Layout, *, slowdown: float = 1.0, speed: float = 1.0
) -> StepTime:
    """One step of ``spec`` on ``layout``: a training step, or one decode step of an inference replica
    (``layout`` is then the replica's). Without ``llm``: the generic step of its ``CommProfile``."""
    if not is_llm(spec):
        return training_step(cluster, spec, layout, slowdown=slowdown, speed=speed)
    job = resolve(cluster, spec, gpu_model=_model_of(cluster, layout))
    shape = shape_of(layout)
    if isinstance(job, ServingJob):
        return job.step(shape)
    if spec.is_elastic and layout.gpus != job.plan.gpus:
        assert spec.llm is not None
        job = _resized(job.ctx, spec.llm, group_gpus(spec), layout.gpus)
    return job.step(shape, slowdown)


def job_ideal_step(cluster: GPUCluster, spec: JobSpec) -> StepTime:
    """The work reference: the step at the job's best placement (packed racks, uncontended)."""
    if not is_llm(spec):
        return ideal_step(cluster, spec)
    job = resolve(cluster, spec)
    shape = shape_of(Layout.packed(cluster, group_gpus(spec)))
    return job.step(shape) if isinstance(job, ServingJob) else job.step(shape, 1.0)


def replica_serving(cluster: GPUCluster, spec: JobSpec, layout: Layout) -> ReplicaServing:
    """An LLM inference replica on ``layout``: its tokens/s, interactivity and TTFT by load."""
    job = resolve(cluster, spec, gpu_model=_model_of(cluster, layout))
    if not isinstance(job, ServingJob):
        raise LlmJobError(f"job {spec.name!r} is {spec.kind.value}, not an inference service")
    return job.replica(shape_of(layout))


def traffic_profile(cluster: GPUCluster, spec: JobSpec) -> CommProfile:
    """The bytes per step the network monitor should see for an LLM job (its ``CommProfile`` otherwise):
    training moves its whole model's BF16 gradients between racks hierarchically (each DP group its shard);
    a replica's TP group all-reduces its activations twice per layer per decode step."""
    if not is_llm(spec):
        return spec.comm
    job = resolve(cluster, spec)
    if isinstance(job, TrainingJob):
        step = job_ideal_step(cluster, spec)
        return CommProfile(job.work.model.total_params() * GRAD_BYTES, step.compute_s, "hierarchical")
    replica = job.replica(shape_of(Layout.packed(cluster, group_gpus(spec))))
    return CommProfile(replica.traffic_bytes(job.work.model), replica.step.step_s, "ring")


def samples_per_step(spec: JobSpec) -> int | None:
    """Sequences one training step of an LLM job consumes (None for any other job)."""
    if spec.llm is None or spec.kind is not JobKind.TRAINING:
        return None
    return default_global_batch(spec.llm, group_gpus(spec))


__all__ = [
    "DEFAULT_GPU",
    "LlmJobError",
    "ReplicaServing",
    "catalogue_gpu",
    "check_job",
    "default_global_batch",
    "elastic_llm",
    "gpu_of_model",
    "is_llm",
    "job_ideal_step",
    "job_step",
    "main_gpu_model",
    "replica_layouts",
    "replica_serving",
    "resolve",
    "samples_per_step",
    "shape_of",
    "system_of_cluster",
    "traffic_profile",
]
