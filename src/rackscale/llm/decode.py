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

from dataclasses import dataclass
from functools import lru_cache

from rackscale.llm.fabric import Links, Span, all_reduce_s, all_to_all_s
from rackscale.llm.hardware import GpuSpec
from rackscale.llm.models import ModelSpec
from rackscale.llm.plans import ServePlan, gpu_memory
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
    """Multi-token prediction: ``drafts`` extra tokens proposed per step, each accepted with ``acceptance``."""

    drafts: int = 0
    acceptance: float = 0.0

    @property
    def tokens_verified(self) -> int:
        return 1 + self.drafts

    @property
    def tokens_emitted(self) -> float:
        return 1.0 + sum(self.acceptance**i for i in range(1, self.drafts + 1))


NO_MTP = Mtp()
# DeepSeek-V3 technical report (arXiv 2412.19437, section 5.4.3): its one MTP module proposes one extra token,
# accepted 85-90 % of the time. One draft at 0.85. (Runtimes can chain the module for more drafts; how often
# later drafts survive is not published, so the model does not assume it: docs/perf.md shows what 3 drafts
# at 0.85^i would change.)
DEEPSEEK_MTP = Mtp(drafts=1, acceptance=0.85)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTerms:
    """One decode step of an instance, in seconds, by term; ``step_s`` is what the user waits per step."""

    compute_s: float
    weights_s: float
    kv_s: float
    ep_comm_s: float
    tp_comm_s: float
    overhead_s: float

    @property
    def memory_s(self) -> float:
        return self.weights_s + self.kv_s

    @property
    def roofline_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def step_s(self) -> float:
        return self.roofline_s + self.ep_comm_s + self.tp_comm_s + self.overhead_s

    @property
    def dominant(self) -> str:
        """The term that sets the step: compute, hbm-weights, hbm-kv, ep-all-to-all, tp-all-reduce or overhead."""
        terms = {
            "compute": self.compute_s if self.compute_s >= self.memory_s else 0.0,
            "hbm-weights": self.weights_s if self.memory_s > self.compute_s else 0.0,
            "hbm-kv": self.kv_s if self.memory_s > self.compute_s else 0.0,
            "ep-all-to-all": self.ep_comm_s,
            "tp-all-reduce": self.tp_comm_s,
            "overhead": self.overhead_s,
        }
        return max(terms, key=terms.__getitem__)

    def as_dict(self) -> dict[str, float | str]:
        return {
            "compute_s": self.compute_s,
            "hbm_weights_s": self.weights_s,
            "hbm_kv_s": self.kv_s,
            "ep_all_to_all_s": self.ep_comm_s,
            "tp_all_reduce_s": self.tp_comm_s,
            "overhead_s": self.overhead_s,
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
) -> StepTerms:
    """One decode step of ``plan`` (``plan.batch`` sequences at ``context`` tokens), laid out as ``span``."""
    stage = plan.stage_gpus
    tokens = plan.batch * mtp.tokens_verified  # tokens the instance processes per step
    tokens_rank = tokens / plan.dp  # per attention group
    mem = gpu_memory(model, precision, plan, context=context)
    # Every stage runs every micro-batch: with pp stages a sequence waits pp stage-times per token, and the
    # pp micro-batches in flight keep each stage busy; one stage-time covers batch/pp sequences.
    per_stage_tokens = tokens / plan.pp
    touched = _experts_touched(model, per_stage_tokens)
    weights = mem.shared_weights + mem.expert_weights * touched
    kv = mem.kv_cache / plan.pp
    flops_linear = linear_flops_per_token(model) * per_stage_tokens / stage / plan.pp
    flops_attn = model.attention_flops_per_token(context) * (tokens_rank / plan.pp) / plan.tp / plan.pp
    compute = (flops_linear + flops_attn) / (gpu.flops(precision) * eff.compute)
    hbm = gpu.hbm_bytes_per_s * eff.memory
    layers_stage = model.layers / plan.pp
    tp_comm = 0.0
    if plan.tp > 1 or (model.is_moe and plan.ep == 1 and stage > 1):
        tp_span = span.sub(plan.tp if (plan.ep > 1 or not model.is_moe) else stage)
        msg = (per_stage_tokens / plan.dp) * model.hidden * ACT_BYTES
        tp_comm = 2 * layers_stage * all_reduce_s(links, tp_span, msg, slowdown=slowdown)
    ep_comm = 0.0
    if model.is_moe and plan.ep > 1:
        ep_span = span.sub(plan.ep)
        per_gpu_tokens = per_stage_tokens / stage
        send = per_gpu_tokens * model.top_k * model.hidden
        one_layer = all_to_all_s(links, ep_span, send * DISPATCH_BYTES, slowdown=slowdown) + all_to_all_s(
            links, ep_span, send * ACT_BYTES, slowdown=slowdown
        )
        ep_comm = one_layer * model.moe_layers / plan.pp
    overhead = eff.step_overhead_s + eff.layer_overhead_s * layers_stage
    # a pipeline multiplies the per-token wait by its stages: each step passes pp stages in turn
    return StepTerms(
        compute_s=compute * plan.pp,
        weights_s=weights / hbm * plan.pp,
        kv_s=kv / hbm * plan.pp,
        ep_comm_s=ep_comm * plan.pp,
        tp_comm_s=tp_comm * plan.pp,
        overhead_s=overhead * plan.pp,
    )


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
    flops = linear_flops_per_token(model) * tokens + model.attention_flops_per_token(isl / 2.0) * tokens
    compute = flops / (plan.gpus * gpu.flops(precision) * eff.compute)
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
