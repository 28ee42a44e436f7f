"""The time of one decode step and of one prefill, term by term, on a placement.

Decode step of an instance (per GPU, the busiest GPU of the plan):

- **compute**: ``2 x active parameters`` per token (experts averaged over the EP group) plus attention
  over the context, at the chip's dense peak for the precision times ``Efficiency.compute``;
- **HBM**: the weights the step touches (attention and shared weights in full; routed experts as far as
  the batch's ``tokens x top_k`` picks reach them) plus the KV cache of the GPU's sequences, at the HBM
  bandwidth times ``Efficiency.memory``;
- the **roofline** is the larger of the two (they overlap on the chip);
- **EP all-to-all** per MoE layer (dispatch in FP8, combine in BF16): the runtime overlaps it with the
  expert GEMMs (two micro-batches, as DeepEP/TRT-LLM do), so the step pays ``max(roofline, all-to-all)``;
- **TP all-reduce** per layer (after attention and after the FFN, BF16 activations): on the critical path;
- **overhead**: a fixed cost per step (scheduling, sampling, launch gaps between CUDA graphs) and per layer.

With multi-token prediction (MTP) each step verifies ``1 + drafts`` tokens per sequence and emits
``1 + sum(acceptance^i)`` of them on average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from rackscale.llm.checkpoint import dense_seconds_per_token, mtp_module, weight_formats
from rackscale.llm.fabric import Links, Span, all_reduce_s, all_to_all_s
from rackscale.llm.hardware import GpuSpec
from rackscale.llm.kernels import MoeBackend, moe_kernels
from rackscale.llm.models import ModelSpec
from rackscale.llm.plans import KV_PRECISION, ServePlan, gpu_memory
from rackscale.llm.precision import Precision

ACT_BYTES = 2.0  # BF16 activations on TP all-reduces and the EP combine
DISPATCH_BYTES = 1.0  # FP8 tokens on the EP dispatch (DeepEP / TRT-LLM wide-EP)


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """Achieved fractions of the rooflines, and fixed overheads (see docs/perf.md for where each comes from)."""

    compute: float = 0.5
    memory: float = 0.8
    step_overhead_s: float = 1.0e-3
    layer_overhead_s: float = 10e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Mtp:
    """Multi-token prediction: ``drafts`` extra tokens proposed per step by the model's MTP module.

    ``accepted`` gives the measured mean tokens a step emits with 1, 2, ... drafts (the verified token
    included); without a measurement each draft is accepted with ``acceptance`` after the one before it.
    """

    drafts: int = 0
    acceptance: float = 0.0
    accepted: tuple[float, ...] = ()

    @property
    def tokens_verified(self) -> int:
        return 1 + self.drafts

    @property
    def tokens_emitted(self) -> float:
        if self.drafts == 0:
            return 1.0
        if self.drafts <= len(self.accepted):
            return self.accepted[self.drafts - 1]
        return 1.0 + sum(self.acceptance**i for i in range(1, self.drafts + 1))

    def with_drafts(self, drafts: int) -> Mtp:
        return replace(self, drafts=drafts)


NO_MTP = Mtp()
# Tokens per step of DeepSeek-R1's MTP module chained 1, 2 and 3 times, measured by NVIDIA on TensorRT-LLM (8
# B200, batch 1, ISL 1k / OSL 2k): 1.92, 2.58, 2.82 ("Pushing Latency Boundaries: Optimizing DeepSeek-R1
# Performance on NVIDIA B200 GPUs", NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1). The DeepSeek-V3
# report (arXiv 2412.19437, section 5.4.3) gives 85-90 % for the first draft, which the 1.92 agrees with.
TRTLLM_MTP_ACCEPTED = (1.92, 2.58, 2.82)
DEEPSEEK_MTP = Mtp(drafts=3, acceptance=0.85, accepted=TRTLLM_MTP_ACCEPTED)


# TensorRT-LLM blog 4 ("Scaling Expert Parallelism in TensorRT-LLM, Part 1"): (max - mean) / mean of routed
# tokens per rank, DeepSeek-R1 on 32 GB200, without and with the online EPLB (288 slots).
NO_EPLB_EXCESS_AT_ANCHOR = 1.564
EPLB_EXCESS = 0.109
IMBALANCE_ANCHOR_EP = 32


def expert_imbalance(model: ModelSpec, ep: int, *, eplb: bool) -> float:
    """Routed tokens on the busiest GPU of an EP group over the mean (the MoE layers wait for it).

    Measured by NVIDIA for DeepSeek-R1 on 32 GB200 (TensorRT-LLM blog "Scaling Expert Parallelism in
    TensorRT-LLM, Part 1", translation dataset, decode): (max - mean) / mean = 1.564 per rank without a load
    balancer (8 experts per GPU), 0.109 with its online EPLB (288 slots). Other EP sizes are not published: with
    EPLB the balanced 0.109 is assumed; without it the excess scales as the extreme of ``ep`` sums of
    independent expert loads, ``sqrt(2 ln ep) / sqrt(experts per GPU)``, anchored on the EP32 measurement (EP8
    1.61x, EP4 1.35x). An ASSUMPTION for every size but 32 (docs/perf.md).
    """
    if not model.is_moe or ep <= 1 or model.experts <= 0:
        return 1.0
    if eplb:
        return 1.0 + EPLB_EXCESS
    per_gpu = model.experts / ep
    anchor = math.sqrt(2 * math.log(IMBALANCE_ANCHOR_EP)) / math.sqrt(model.experts / IMBALANCE_ANCHOR_EP)
    return 1.0 + NO_EPLB_EXCESS_AT_ANCHOR * (math.sqrt(2 * math.log(ep)) / math.sqrt(per_gpu)) / anchor


@dataclass(frozen=True, slots=True, kw_only=True)
class OpRoofline:
    """One group of a step's kernels: its FLOP time at the achieved rate, its HBM time, and a fixed cost (the
    measured MoE kernels' per-layer start: :mod:`rackscale.llm.kernels`)."""

    compute_s: float
    memory_s: float
    fixed_s: float = 0.0

    @property
    def time_s(self) -> float:
        return self.fixed_s + max(self.compute_s, self.memory_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTerms:
    """One decode step of an instance, in seconds, by term; ``step_s`` is what the user waits per step.

    The step's kernels fall in three groups, each bound by its own roofline (a kernel is compute- or
    memory-bound by itself; one kernel's spare bandwidth does not speed another's math): ``dense`` (attention
    projections, dense and shared FFNs, the LM head: weights read in full), ``experts`` (the routed experts the
    batch touches) and ``attention`` (the products with the KV cache). ``roofline_s`` is their sum.
    """

    dense: OpRoofline
    experts: OpRoofline
    attention: OpRoofline
    ep_comm_s: float
    tp_comm_s: float
    overhead_s: float
    draft_s: float = 0.0  # the MTP module's forwards that propose the drafts (one layer each)

    @property
    def compute_s(self) -> float:
        return self.dense.compute_s + self.experts.compute_s + self.attention.compute_s

    @property
    def weights_s(self) -> float:
        return self.dense.memory_s + self.experts.memory_s

    @property
    def kv_s(self) -> float:
        return self.attention.memory_s

    @property
    def memory_s(self) -> float:
        return self.weights_s + self.kv_s

    @property
    def roofline_s(self) -> float:
        return self.dense.time_s + self.experts.time_s + self.attention.time_s

    @property
    def step_s(self) -> float:
        return self.roofline_s + self.ep_comm_s + self.tp_comm_s + self.overhead_s + self.draft_s

    @property
    def dominant(self) -> str:
        """The term that sets the step: compute, hbm-weights, hbm-kv, ep-all-to-all, tp-all-reduce or overhead
        (each group's roofline time counts for what bounds it)."""
        ops = (self.dense, self.experts, self.attention)
        terms = {
            "compute": sum(o.time_s for o in ops if o.compute_s >= o.memory_s),
            "hbm-weights": sum(o.time_s for o in ops[:2] if o.memory_s > o.compute_s),
            "hbm-kv": self.attention.time_s if self.attention.memory_s > self.attention.compute_s else 0.0,
            "ep-all-to-all": self.ep_comm_s,
            "tp-all-reduce": self.tp_comm_s,
            "overhead": self.overhead_s,
            "mtp-drafts": self.draft_s,
        }
        return max(terms, key=terms.__getitem__)

    def as_dict(self) -> dict[str, float | str]:
        return {
            "compute_s": self.compute_s,
            "hbm_weights_s": self.weights_s,
            "hbm_kv_s": self.kv_s,
            "roofline_s": self.roofline_s,
            "ep_all_to_all_s": self.ep_comm_s,
            "tp_all_reduce_s": self.tp_comm_s,
            "overhead_s": self.overhead_s,
            "mtp_drafts_s": self.draft_s,
            "step_s": self.step_s,
            "dominant": self.dominant,
        }


def _experts_touched(model: ModelSpec, tokens: float) -> float:
    """Expected share of a GPU's routed experts that ``tokens`` tokens pick at least once (uniform routing)."""
    if not model.is_moe or model.experts <= 0:
        return 0.0
    miss = max(0.0, 1.0 - model.top_k / model.experts)
    return 1.0 - float(miss**tokens)


@lru_cache(maxsize=256)
def linear_flops_per_token(model: ModelSpec) -> float:
    """Matrix-multiply FLOPs of one token through the whole model (2 per active parameter)."""
    return 2.0 * model.active_params()


@lru_cache(maxsize=256)
def routed_flops_per_token(model: ModelSpec) -> float:
    """The routed experts' share of :func:`linear_flops_per_token`."""
    return 2.0 * model.moe_layers * model.top_k * model.expert_params() if model.is_moe else 0.0


def linear_seconds_per_token(model: ModelSpec, precision: Precision, gpu: GpuSpec) -> tuple[float, float]:
    """(routed experts, dense weights): seconds at the tensor-core peak for one token, each weight group at
    the rate of the format its checkpoint keeps it in (:mod:`rackscale.llm.checkpoint`)."""
    routed = routed_flops_per_token(model) / gpu.flops(weight_formats(model, precision).linear)
    return routed, dense_seconds_per_token(model, precision, gpu)


def decode_step(
    model: ModelSpec,
    precision: Precision,
    plan: ServePlan,
    *,
    gpu: GpuSpec,
    links: Links,
    span: Span,
    context: float,
    eff: Efficiency,
    mtp: Mtp = NO_MTP,
    slowdown: float = 1.0,
    batch: float | None = None,
    imbalance: float = 1.0,
    moe_backend: MoeBackend | None = None,
) -> StepTerms:
    """One decode step of ``plan`` (``plan.batch`` sequences at ``context`` tokens), laid out as ``span``;
    ``batch`` overrides ``plan.batch`` with a mean (a steady state's users per instance need not be whole);
    ``imbalance`` is :func:`expert_imbalance` (the busiest GPU's routed tokens over the mean); ``moe_backend``
    names the MoE kernel (None: the faster measured one for the chip and token count)."""
    stage = plan.stage_gpus
    seqs = float(plan.batch if batch is None else batch)
    tokens = seqs * mtp.tokens_verified  # tokens the instance processes per step
    tokens_rank = tokens / plan.dp  # per attention group
    one = gpu_memory(model, precision, plan.with_batch(plan.dp), context=context)  # one sequence per group
    kv_cache = one.kv_cache * seqs / plan.dp
    # Every stage runs every micro-batch: with pp stages a sequence waits pp stage-times per token, and the
    # pp micro-batches in flight keep each stage busy; one stage-time covers batch/pp sequences.
    per_stage_tokens = tokens / plan.pp
    hot = imbalance if plan.ep > 1 else 1.0
    touched = _experts_touched(model, per_stage_tokens * hot)
    routed_s, dense_s = linear_seconds_per_token(model, precision, gpu)
    per_gpu_tokens = per_stage_tokens / stage / plan.pp  # linear work is spread evenly over the stage's GPUs
    attn_flops = model.attention_flops_per_token(context) * (tokens_rank / plan.pp) / plan.tp / plan.pp
    hbm_rate = gpu.hbm_bytes_per_s * eff.memory
    layers_stage = model.layers / plan.pp
    tp_comm = 0.0
    if plan.tp > 1 or (model.is_moe and plan.ep == 1 and stage > 1):
        tp_span = span.sub(plan.tp if (plan.ep > 1 or not model.is_moe) else stage)
        msg = (per_stage_tokens / plan.dp) * model.hidden * ACT_BYTES
        tp_comm = 2 * layers_stage * all_reduce_s(links, tp_span, msg, slowdown=slowdown)
    ep_comm = 0.0
    if model.is_moe and plan.ep > 1:
        ep_span = span.sub(plan.ep)
        send = per_stage_tokens / stage * model.top_k * model.hidden * hot  # the busiest GPU's share
        one_layer = all_to_all_s(links, ep_span, send * DISPATCH_BYTES, slowdown=slowdown) + all_to_all_s(
            links, ep_span, send * ACT_BYTES, slowdown=slowdown
        )
        ep_comm = one_layer * model.moe_layers / plan.pp
    overhead = eff.step_overhead_s + eff.layer_overhead_s * layers_stage
    # a pipeline multiplies the per-token wait by its stages: each step passes pp stages in turn
    pp = plan.pp
    return StepTerms(
        dense=OpRoofline(
            compute_s=dense_s * per_gpu_tokens / eff.compute * pp, memory_s=one.shared_weights / hbm_rate * pp
        ),
        experts=_experts(
            model, gpu, plan, eff=eff, backend=moe_backend, group_tokens=per_stage_tokens,
            compute_s=routed_s * per_gpu_tokens * hot, weight_bytes=one.expert_weights * touched,
        ),
        attention=OpRoofline(
            # the products with the KV cache run at the cache's precision (FP8 beside FP4 weights), not the weights'
            compute_s=attn_flops / (gpu.flops(KV_PRECISION[precision]) * eff.compute) * pp,
            memory_s=kv_cache / pp / hbm_rate * pp,
        ),
        ep_comm_s=ep_comm * pp,
        tp_comm_s=tp_comm * pp,
        overhead_s=overhead * pp,
        draft_s=_drafts_s(model, precision, plan, gpu=gpu, links=links, span=span, context=context, eff=eff,
                          mtp=mtp, slowdown=slowdown, seqs=seqs, imbalance=imbalance, moe_backend=moe_backend),
    )  # fmt: skip


def _experts(
    model: ModelSpec,
    gpu: GpuSpec,
    plan: ServePlan,
    *,
    eff: Efficiency,
    backend: MoeBackend | None,
    group_tokens: float,
    compute_s: float,
    weight_bytes: float,
) -> OpRoofline:
    """The routed experts of a step on the busiest GPU, pipeline stages included (``compute_s``: seconds at
    the tensor-core peak): through the chip's measured MoE kernel (the faster one when none is named), else
    the generic roofline."""
    pp = plan.pp
    if not model.is_moe:
        return OpRoofline(compute_s=0.0, memory_s=0.0)
    experts_per_gpu = model.experts / (plan.ep if plan.ep > 1 else 1)
    kernels = moe_kernels(gpu.name, backend, group_tokens, experts_per_gpu)
    if not kernels:
        return OpRoofline(
            compute_s=compute_s / eff.compute * pp, memory_s=weight_bytes / (gpu.hbm_bytes_per_s * eff.memory) * pp
        )
    layers = model.moe_layers / pp
    options = [
        OpRoofline(
            compute_s=compute_s / k.compute * pp,
            memory_s=weight_bytes / (gpu.hbm_bytes_per_s * k.memory) * pp,
            fixed_s=k.fixed_s * layers * pp,
        )
        for k in kernels
    ]
    return min(options, key=lambda o: o.time_s)


def _drafts_s(
    model: ModelSpec,
    precision: Precision,
    plan: ServePlan,
    *,
    gpu: GpuSpec,
    links: Links,
    span: Span,
    context: float,
    eff: Efficiency,
    mtp: Mtp,
    slowdown: float,
    seqs: float,
    imbalance: float,
    moe_backend: MoeBackend | None,
) -> float:
    """The drafts' cost: each draft is a forward of the MTP module (one transformer layer of the model's own
    shape and the shared output head: DeepSeek-V3 report, section 2.2) over one token per sequence, run in
    turn before the step verifies them."""
    if mtp.drafts == 0:
        return 0.0
    layer = _draft_layer_s(
        model, precision, plan, gpu, links, span, context, eff, slowdown, seqs, imbalance, moe_backend
    )
    return mtp.drafts * layer


@lru_cache(maxsize=8192)
def _draft_layer_s(
    model: ModelSpec,
    precision: Precision,
    plan: ServePlan,
    gpu: GpuSpec,
    links: Links,
    span: Span,
    context: float,
    eff: Efficiency,
    slowdown: float,
    seqs: float,
    imbalance: float,
    moe_backend: MoeBackend | None,
) -> float:
    """One MTP module forward: its one layer and the output head over one token per sequence, in the format the
    checkpoint keeps the module in (BF16 beside NVFP4 weights), with its own collectives and launch gaps and
    no step's fixed cost (cached: a curve asks for it once per draft count)."""
    module = mtp_module(model)
    draft = decode_step(
        module, weight_formats(model, precision).mtp, plan, gpu=gpu, links=links, span=span, context=context,
        eff=replace(eff, step_overhead_s=0.0), slowdown=slowdown, batch=seqs, imbalance=imbalance,
        moe_backend=moe_backend,
    )  # fmt: skip
    return draft.step_s


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillTerms:
    compute_s: float
    weights_s: float
    comm_s: float
    overhead_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.weights_s, self.comm_s) + self.overhead_s


def prefill(
    model: ModelSpec,
    precision: Precision,
    plan: ServePlan,
    *,
    gpu: GpuSpec,
    links: Links,
    span: Span,
    isl: int,
    requests: int,
    eff: Efficiency,
) -> PrefillTerms:
    """Prefill of ``requests`` prompts of ``isl`` tokens in one pass of ``plan`` (compute-bound when large)."""
    stage = plan.stage_gpus
    tokens = float(requests * isl)
    routed, dense = linear_seconds_per_token(model, precision, gpu)
    attention = model.attention_flops_per_token(isl / 2.0) * tokens / gpu.flops(KV_PRECISION[precision])
    compute = (dense * tokens + attention) / (plan.gpus * eff.compute)
    # the experts through the chip's measured throughput MoE kernel, as in decode (its fixed cost per layer)
    compute += _experts(
        model, gpu, plan, eff=eff, backend=MoeBackend.CUTLASS, group_tokens=tokens / plan.dp / plan.pp,
        compute_s=routed * tokens / plan.gpus / plan.pp, weight_bytes=0.0,
    ).time_s  # fmt: skip
    mem = gpu_memory(model, precision, plan, context=0.0)
    weights = (mem.shared_weights + mem.expert_weights) / (gpu.hbm_bytes_per_s * eff.memory)
    comm = 0.0
    layers_stage = model.layers / plan.pp
    if plan.tp > 1:
        comm += (
            2
            * layers_stage
            * all_reduce_s(links, span.sub(plan.tp), tokens / plan.dp / plan.pp * model.hidden * ACT_BYTES)
        )
    if model.is_moe and plan.ep > 1:
        send = tokens / stage / plan.pp * model.top_k * model.hidden
        comm += (model.moe_layers / plan.pp) * (
            all_to_all_s(links, span.sub(plan.ep), send * DISPATCH_BYTES)
            + all_to_all_s(links, span.sub(plan.ep), send * ACT_BYTES)
        )
    overhead = eff.step_overhead_s + eff.layer_overhead_s * model.layers
    return PrefillTerms(compute_s=compute, weights_s=weights, comm_s=comm * plan.pp, overhead_s=overhead)
