"""Training step time of a transformer under a TP x PP x DP plan, on a placement.

- **compute**: ``6 x active parameters x tokens`` (forward + backward; ``8 x`` with full activation
  recomputation) plus causal attention (``3 x`` its forward FLOPs), at the chip's dense peak times
  ``TrainEfficiency.compute``: the model FLOP utilisation of the kernels themselves; a fused attention
  kernel's FLOPs at its own measured share of the peak where one is known (``TrainEfficiency.attention``);
- **pipeline bubble**: ``(pp - 1) / (v x m)`` of the compute, ``m`` micro-batches per step, ``v`` virtual
  stages per GPU (interleaved 1F1B, Narayanan et al. 2021);
- **TP all-reduces**: 4 per layer per micro-batch (2 forward, 2 backward; 2 more when recomputing) of the
  micro-batch's activations, on the TP group's tier, not overlapped;
- **PP sends**: activations forward and gradients back across each stage boundary, per micro-batch;
- **CP all-gathers** (context parallel, ``cp`` ranks share each sequence, Llama 3's all-gather form): every
  layer gathers the whole sequence's keys and values of the rank's KV heads in the forward pass and
  reduce-scatters their gradients in the backward pass (again when recomputing), on the CP group's tier,
  not overlapped (Llama 3 puts it on the critical path); each rank computes its ``1 / cp`` of the tokens;
- **EP all-to-all** (MoE): each MoE layer's dispatch and combine, forward and backward, over the EP group's
  tier (NVLink when the group fits a domain);
- **attention scores through HBM** (only without a fused attention kernel, ``TrainWorkload.fused_attention``
  False, as Megatron-LM trained in 2021): the unfused kernels write and read each head's ``s x s`` scores
  (QK^T, scale-mask-softmax, dropout and its 1-byte mask, x V) 6.5 times forward and 9.5 times backward,
  again forward when recomputing, at ``TrainEfficiency.memory`` of the HBM bandwidth; a stage's bubble grows
  with it. FlashAttention (Dao et al. 2022) keeps the scores in on-chip memory: no term;
- **DP gradient all-reduce**: BF16 gradients of the GPU's shard, hierarchical: inside a domain over NVLink,
  between domains each of the ``k`` data-parallel ranks a domain holds sends ``1/k`` over its own NIC — the
  bigger the NVLink domain, the fewer bytes per NIC. Not overlapped with backward (a conservative choice).

MFU is ``6 N tokens / (step x GPUs x peak)``, the PaLM definition without attention or recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.llm.fabric import AllReduce, Links, Span, all_reduce_s, all_to_all_s
from rackscale.llm.hardware import GpuSpec
from rackscale.llm.models import ModelSpec
from rackscale.llm.precision import Precision

GRAD_BYTES = 2.0
ACT_BYTES = 2.0


# Unfused attention's passes over the ``s x s`` scores of a head, in units of a BF16 score matrix (the
# kernels Megatron-LM ran in 2021: baddbmm, fused scale-mask-softmax, torch dropout, bmm). Forward: QK^T
# writes 1; softmax reads 1, writes 1; dropout reads 1, writes 1 and a 1-byte mask (0.5); x V reads 1.
# Backward: dV reads the dropped probabilities 1; dP writes 1; dropout's backward reads 1 + the mask 0.5 and
# writes 1; softmax's backward reads the probabilities 1 and dP 1, writes 1; dQ and dK read the scores'
# gradient 1 each.
SCORE_PASSES_FORWARD = 6.5
SCORE_PASSES_BACKWARD = 9.5


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainEfficiency:
    compute: float = 0.5  # calibrated per GPU type: see rackscale.llm.calibration
    memory: float = 0.8  # share of HBM bandwidth a streaming kernel reaches (the serving model's assumption)
    # Share of the dense peak a fused attention kernel reaches, where measured (rackscale.llm.calibration);
    # None: attention's FLOPs run at ``compute``, as the unfused kernels' GEMMs do.
    attention: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainPlan:
    tp: int = 1
    cp: int = 1  # context parallel: ranks that split each sequence (laid out between TP and PP, as Llama 3)
    pp: int = 1
    dp: int = 1
    ep: int = 1  # expert parallel (MoE): routed experts spread over ``ep`` of the DP ranks
    micro_batch: int = 1  # sequences per micro-batch
    virtual_stages: int = 1
    recompute: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def shard_gpus(self) -> int:
        """GPUs of one model replica's data-parallel rank: TP x CP x PP (the ranks a DP group strides over)."""
        return self.tp * self.cp * self.pp

    def as_dict(self) -> dict[str, object]:
        return {
            "tp": self.tp,
            "cp": self.cp,
            "ep": self.ep,
            "pp": self.pp,
            "dp": self.dp,
            "micro_batch": self.micro_batch,
            "virtual_stages": self.virtual_stages,
            "recompute": self.recompute,
            "gpus": self.gpus,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainWorkload:
    model: ModelSpec
    precision: Precision
    seq_len: int
    global_batch: int  # sequences per optimizer step
    # A fused attention kernel (FlashAttention: every current training stack) never moves the s x s scores
    # through HBM; False: the unfused kernels of 2021 (Megatron-LM's published runs), which do.
    fused_attention: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainStep:
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    ep_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    attention_hbm_s: float = 0.0
    tokens: float
    model_flops: float  # 6 N tokens
    counted_flops: float  # what the step computes (recomputation and attention included)
    gpus: int
    peak_flops: float

    @property
    def step_s(self) -> float:
        return (
            self.compute_s
            + self.attention_hbm_s
            + self.bubble_s
            + self.tp_comm_s
            + self.pp_comm_s
            + self.dp_comm_s
            + self.ep_comm_s
            + self.cp_comm_s
        )

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_s * self.gpus * self.peak_flops)

    @property
    def achieved_tflops_per_gpu(self) -> float:
        """FLOP/s per GPU counting everything computed (as Megatron-LM reports, recomputation included)."""
        return self.counted_flops / self.step_s / self.gpus / 1e12

    @property
    def dominant(self) -> str:
        terms = {
            "compute": self.compute_s,
            "attention-hbm": self.attention_hbm_s,
            "pp-bubble": self.bubble_s,
            "tp-all-reduce": self.tp_comm_s,
            "pp-send": self.pp_comm_s,
            "dp-all-reduce": self.dp_comm_s,
            "ep-all-to-all": self.ep_comm_s,
            "cp-all-gather": self.cp_comm_s,
        }
        return max(terms, key=terms.__getitem__)

    def as_dict(self) -> dict[str, object]:
        return {
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "achieved_tflops_per_gpu": self.achieved_tflops_per_gpu,
            "compute_s": self.compute_s,
            "attention_hbm_s": self.attention_hbm_s,
            "bubble_s": self.bubble_s,
            "tp_all_reduce_s": self.tp_comm_s,
            "pp_send_s": self.pp_comm_s,
            "dp_all_reduce_s": self.dp_comm_s,
            "ep_all_to_all_s": self.ep_comm_s,
            "cp_all_gather_s": self.cp_comm_s,
            "dominant": self.dominant,
        }


def dp_span(plan: TrainPlan, domain_gpus: int, size: int | None = None) -> Span:
    """The data-parallel group of one model shard (or its first ``size`` ranks: an EP group): at most
    ``domain // (tp x cp x pp)`` of its ranks share a domain, spread evenly over the fewest domains that hold
    them (``Span.balanced``: a domain left with one rank would carry the whole shard on its NIC)."""
    per_domain = max(1, domain_gpus // max(plan.shard_gpus, 1))
    return Span.balanced(plan.dp if size is None else size, per_domain)


def train_step(
    work: TrainWorkload,
    plan: TrainPlan,
    *,
    gpu: GpuSpec,
    links: Links,
    domain_gpus: int,
    eff: TrainEfficiency,
    dp_layout: Span | None = None,
    slowdown: float = 1.0,
) -> TrainStep:
    """One optimizer step; ``dp_layout`` overrides the data-parallel group's layout (a real placement)."""
    model = work.model
    if plan.ep > 1 and (not model.is_moe or plan.dp % plan.ep or model.experts % plan.ep):
        raise ValueError(f"ep {plan.ep} needs a MoE model whose experts and dp ({plan.dp}) it divides")
    if work.global_batch % (plan.dp * plan.micro_batch):
        raise ValueError(
            f"global batch {work.global_batch} is not a multiple of dp x micro_batch = {plan.dp * plan.micro_batch}"
        )
    m = work.global_batch // (plan.dp * plan.micro_batch)
    tokens = float(work.global_batch * work.seq_len)
    linear = 2.0 * model.active_params() * tokens
    attention = model.attention_flops_per_token(work.seq_len / 2.0) * tokens
    passes = 4.0 if plan.recompute else 3.0  # forward, backward (2x), and a second forward when recomputing
    counted = passes * (linear + attention)
    peak = gpu.flops(work.precision)
    # a fused attention kernel runs at its own measured share of the peak; unfused, attention is GEMMs
    att_share = eff.attention if work.fused_attention and eff.attention is not None else eff.compute
    compute = passes * (linear / eff.compute + attention / att_share) / (plan.gpus * peak)
    layers_stage = model.layers / plan.pp
    seq_rank = work.seq_len / plan.cp  # tokens of each sequence one CP rank holds
    scores_hbm = 0.0
    if not work.fused_attention:
        # each rank's heads (1 / tp of them) score its 1 / cp of the queries against the whole sequence
        score_passes = SCORE_PASSES_FORWARD * (2 if plan.recompute else 1) + SCORE_PASSES_BACKWARD
        scores = plan.micro_batch * (model.heads / plan.tp) * seq_rank * work.seq_len * ACT_BYTES
        scores_hbm = m * layers_stage * score_passes * scores / (gpu.hbm_bytes_per_s * eff.memory)
    bubble = (compute + scores_hbm) * (plan.pp - 1) / (plan.virtual_stages * m)
    act = plan.micro_batch * seq_rank * model.hidden * ACT_BYTES
    tp_span = Span.packed(plan.tp, domain_gpus)
    per_layer = 6 if plan.recompute else 4
    tp_comm = m * layers_stage * per_layer * all_reduce_s(links, tp_span, act) if plan.tp > 1 else 0.0
    pp_comm = 0.0
    if plan.pp > 1:
        crosses = plan.shard_gpus > domain_gpus
        bw = links.nic_bytes_s if crosses else links.nvlink_bytes_s
        pp_comm = 2 * m * plan.virtual_stages * (act / plan.tp) / bw
    dp_comm = 0.0
    if plan.dp > 1:
        # expert gradients are shared by dp / ep replicas only (each EP rank holds its own experts)
        params = model.total_params() - model.expert_params_total() * (1.0 - 1.0 / plan.ep)
        # CP ranks hold whole layers, so the real gradient group is DP x CP ranks; it is timed over the DP
        # ranks only (the same bytes per rank: Llama 3's 128k row, 8 vs 128 ranks, 0.22 vs 0.25 s of 9.8 s)
        grads = params / (plan.tp * plan.pp) * GRAD_BYTES
        span = dp_layout if dp_layout is not None else dp_span(plan, domain_gpus)
        dp_comm = all_reduce_s(links, span, grads, algorithm=AllReduce.HIERARCHICAL, slowdown=slowdown)
    ep_comm = 0.0
    if plan.ep > 1:
        # per MoE layer and micro-batch: dispatch + combine forward, twice that backward, again if recomputed;
        # the EP group is ``ep`` DP ranks, laid out like the DP group (``domain // (tp x cp x pp)`` per domain)
        ep_group = dp_span(plan, domain_gpus, plan.ep)
        send = plan.micro_batch * seq_rank / plan.tp * model.top_k * model.hidden * ACT_BYTES
        passes_a2a = 6 if plan.recompute else 4
        moe_layers_stage = model.moe_layers / plan.pp
        ep_comm = m * moe_layers_stage * passes_a2a * all_to_all_s(links, ep_group, send, slowdown=slowdown)
    cp_comm = 0.0
    if plan.cp > 1:
        # one all-gather of the sequence's K and V (the rank's share of the KV heads) forward, one reduce-scatter
        # of their gradients backward: together the bytes of one all-reduce; a recomputed forward gathers again
        kv_layer = model.kv_bytes_per_token(Precision.BF16) / model.layers * work.seq_len * plan.micro_batch
        # TP splits GQA's KV heads; MLA's latent is shared by every head, so each TP rank gathers all of it
        kv_rank = kv_layer / (1 if model.uses_mla else min(plan.tp, model.kv_heads))
        cp_group = Span.packed(plan.cp, max(1, domain_gpus // plan.tp))
        gather_s = all_reduce_s(links, cp_group, kv_rank, slowdown=slowdown) * (1.5 if plan.recompute else 1.0)
        cp_comm = m * layers_stage * gather_s
    return TrainStep(
        compute_s=compute,
        bubble_s=bubble,
        tp_comm_s=tp_comm,
        pp_comm_s=pp_comm,
        dp_comm_s=dp_comm,
        ep_comm_s=ep_comm,
        cp_comm_s=cp_comm,
        attention_hbm_s=scores_hbm,
        tokens=tokens,
        model_flops=6.0 * model.active_params() * tokens,
        counted_flops=counted,
        gpus=plan.gpus,
        peak_flops=peak,
    )
