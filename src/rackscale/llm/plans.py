"""Parallel plans for serving, what one GPU holds under a plan, and the plans worth trying.

A serving *instance* is one copy of the model: ``tp * dp * pp`` GPUs.

- ``tp``: tensor parallel of attention (and of dense FFNs): heads and weight columns split ``tp`` ways.
- ``dp``: attention data parallel (MoE only): ``dp`` attention groups each serve their own sequences, and
  the MoE layers between them are shared by expert parallelism over all ``tp * dp`` GPUs of a stage.
- ``ep``: expert parallel: routed experts spread over ``ep`` GPUs (``ep == tp * dp``), each holding
  ``experts / ep`` whole experts; ``ep == 1`` on a MoE model means expert tensor parallel (every GPU holds
  ``1/(tp*dp)`` of every expert).
- ``pp``: pipeline stages, each holding ``layers / pp`` layers.
- ``batch``: sequences decoded together by the instance (split over its ``dp`` groups).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import lru_cache

from rackscale.llm.checkpoint import dense_bytes, dense_weights, weight_formats
from rackscale.llm.models import ModelSpec
from rackscale.llm.precision import BYTES_PER_PARAM, Precision

# A share of HBM no plan may use: activations, CUDA graphs, the runtime's workspace and fragmentation.
HBM_RESERVE_FRACTION = 0.10
# KV caches are kept at FP8 when the weights are 8-bit or narrower, at BF16 otherwise (what TRT-LLM, SGLang
# and vLLM do by default for FP8/FP4 checkpoints).
KV_PRECISION = {Precision.BF16: Precision.BF16, Precision.FP8: Precision.FP8, Precision.FP4: Precision.FP8}
INSTANCE_SIZES = (1, 2, 4, 8, 16, 32, 64, 72)
# Tensor parallelism splits each weight matrix's columns; below this many columns per GPU (a few tensor-core
# tiles) the GEMMs stop filling the chip and the all-reduces outweigh what they save, so no plan goes there.
MIN_COLUMNS_PER_TP_RANK = 512


def max_tp(model: ModelSpec) -> int:
    """The widest tensor parallelism the model's hidden size allows (``hidden / 512``, at least 1)."""
    return max(1, model.hidden // MIN_COLUMNS_PER_TP_RANK)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServePlan:
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    batch: int = 1

    @property
    def stage_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    def with_batch(self, batch: int) -> ServePlan:
        return replace(self, batch=batch)

    def as_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "ep": self.ep, "pp": self.pp, "dp": self.dp, "batch": self.batch, "gpus": self.gpus}

    def label(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        return " ".join(parts) + f" x{self.batch}"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuMemory:
    """Bytes one GPU of a plan holds (and, for weights, reads each decode step at full load)."""

    shared_weights: float  # attention, dense FFN, shared experts, embeddings: read in full every step
    expert_weights: float  # routed experts on this GPU: read as far as the batch's tokens touch them
    kv_cache: float
    lookup_weights: float = 0.0  # the input embedding: held, but only a batch's rows are read

    @property
    def total(self) -> float:
        return self.shared_weights + self.expert_weights + self.kv_cache + self.lookup_weights


def kv_split(model: ModelSpec, plan: ServePlan) -> int:
    """Ways the KV cache of one sequence is split over its attention group: by KV head (GQA) up to the
    number of KV heads; MLA's latent cache is one vector per token, held whole by every TP rank."""
    if model.uses_mla:
        return 1
    return max(1, min(plan.tp, model.kv_heads))


@lru_cache(maxsize=4096)
def _weights(
    model: ModelSpec, precision: Precision, tp: int, stage_gpus: int, ep: int, pp: int
) -> tuple[float, float, float]:
    """(streamed dense, routed, looked-up) weight bytes on one GPU, each weight group in the format its
    checkpoint keeps it (:mod:`rackscale.llm.checkpoint`); cached: a curve asks for the same plan at every
    batch. The LM head and the input embedding sit on one stage and are split ``tp`` ways."""
    streamed, lookup = dense_bytes(model, precision)
    head = dense_weights(model).lm_head * BYTES_PER_PARAM[weight_formats(model, precision).lm_head]
    per_tp = (streamed - head) / pp / tp + head / tp
    routed = model.expert_params_total() * BYTES_PER_PARAM[weight_formats(model, precision).linear]
    return per_tp, routed / pp / (ep if ep > 1 else stage_gpus), lookup / tp


def gpu_memory(model: ModelSpec, precision: Precision, plan: ServePlan, *, context: float) -> GpuMemory:
    """What one GPU holds when the instance keeps ``plan.batch`` sequences of ``context`` tokens."""
    shared, routed, lookup = _weights(model, precision, plan.tp, plan.stage_gpus, plan.ep, plan.pp)
    seqs_per_gpu = plan.batch / plan.dp
    kv = seqs_per_gpu * context * model.kv_bytes_per_token(KV_PRECISION[precision]) / plan.pp
    return GpuMemory(
        shared_weights=shared, expert_weights=routed, kv_cache=kv / kv_split(model, plan), lookup_weights=lookup
    )


def max_batch(model: ModelSpec, precision: Precision, plan: ServePlan, *, context: float, hbm_bytes: float) -> int:
    """The largest batch whose weights and KV caches fit the usable HBM (0 if the weights alone do not)."""
    usable = hbm_bytes * (1.0 - HBM_RESERVE_FRACTION)
    one = gpu_memory(model, precision, plan.with_batch(plan.dp), context=context)
    weights = one.shared_weights + one.expert_weights + one.lookup_weights
    if weights > usable:
        return 0
    kv_per_dp_batch = one.kv_cache  # the KV of ``dp`` sequences (one per attention group)
    if kv_per_dp_batch <= 0:
        return 1 << 16
    return int((usable - weights) / kv_per_dp_batch) * plan.dp


def candidate_plans(model: ModelSpec, *, max_gpus: int) -> Iterator[ServePlan]:
    """Plans worth trying (batch 1; the caller sweeps batches): instance sizes up to ``max_gpus``."""
    sizes = [g for g in INSTANCE_SIZES if g <= max_gpus]
    widest = max_tp(model)
    pps = (1, 2, 4) if model.total_params() > 200e9 else (1, 2)
    for g in sizes:
        for pp in pps:
            if g % pp:
                continue
            stage = g // pp
            if model.layers < pp:
                continue
            if not model.is_moe:
                if stage <= min(model.heads, widest):
                    yield ServePlan(tp=stage, pp=pp)
                continue
            # expert tensor parallel, TP attention + EP, and DP attention with EP (some TP inside)
            if stage <= widest:
                yield ServePlan(tp=stage, pp=pp, ep=1)
            if stage > 1 and model.experts % stage == 0:
                for tp in (t for t in (1, 2, 4, 8) if stage % t == 0 and t <= min(stage, widest)):
                    yield ServePlan(tp=tp, dp=stage // tp, ep=stage, pp=pp)
