"""What a quantised checkpoint leaves wide: the format each group of weights is stored and multiplied in.

"An FP4 model" is not FP4 throughout. The checkpoints the published figures ran keep some weights in BF16,
and those weights cost 3.6x the bytes to stream and a quarter of the tensor-core rate:

- **the LM head** stays BF16 in every FP8 and FP4 checkpoint here: ModelOpt's NVFP4 and FP8 configurations
  exclude ``*lm_head*`` (NVIDIA/TensorRT-Model-Optimizer), and DeepSeek's own FP8 release keeps it BF16;
- **DeepSeek's NVFP4 checkpoints** (``nvidia/DeepSeek-R1-0528-FP4``, ``-NVFP4-v2``) quantise only the MLPs:
  ModelOpt's DeepSeek recipe disables ``*attn*`` quantisation and excludes the MTP layer ``layers.61*``
  (``examples/deepseek/ptq.py``), which the conversion writes out as BF16; the v2 checkpoint "additionally
  quantizes the wo module" (its model card), so the attention output projection is NVFP4 and the q/kv
  projections stay BF16. TensorRT-LLM's blog 1 lists the same: "64x Attention Modules bf16", "3x MTP Layers
  bf16".

Everything else (experts, dense and shared FFNs, the router) is in the checkpoint's precision. The input
embedding is a lookup: it takes HBM but is not streamed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from rackscale.llm.hardware import GpuSpec
from rackscale.llm.models import ModelSpec
from rackscale.llm.precision import BYTES_PER_PARAM, Precision


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightFormats:
    linear: Precision  # routed and shared experts, dense FFNs, the router
    attention: Precision  # q and kv projections (MLA: its low-rank factors)
    attention_out: Precision  # the o projection
    lm_head: Precision
    mtp: Precision  # the whole MTP module


def weight_formats(model: ModelSpec, precision: Precision) -> WeightFormats:
    """The formats of ``model``'s weights in a ``precision`` checkpoint (the module's docstring says why)."""
    head = Precision.BF16
    if model.uses_mla and precision is Precision.FP4:
        return WeightFormats(
            linear=precision, attention=Precision.BF16, attention_out=precision, lm_head=head, mtp=Precision.BF16
        )
    return WeightFormats(linear=precision, attention=precision, attention_out=precision, lm_head=head, mtp=precision)


@dataclass(frozen=True, slots=True, kw_only=True)
class DenseWeights:
    """Parameters of the weights every token multiplies by in full (not the routed experts), by format group."""

    attention: float  # all layers
    attention_out: float
    linear: float  # dense FFNs, shared experts, routers
    lm_head: float
    embedding: float  # input lookup (0 when tied to the LM head)


@lru_cache(maxsize=256)
def dense_weights(model: ModelSpec) -> DenseWeights:
    out = model.attention_out_params_per_layer() * model.layers
    linear = (
        model.dense_ffn_params_per_layer() * (model.dense_layers if model.is_moe else model.layers)
        + model.expert_params() * model.shared_experts * model.moe_layers
        + model.router_params_per_layer() * model.moe_layers
    )
    head = float(model.vocab) * model.hidden
    return DenseWeights(
        attention=model.attention_params_per_layer() * model.layers - out,
        attention_out=out,
        linear=linear,
        lm_head=head,
        embedding=0.0 if model.tied_embeddings else head,
    )


@lru_cache(maxsize=256)
def dense_bytes(model: ModelSpec, precision: Precision) -> tuple[float, float]:
    """(streamed, looked up) bytes of the dense weights: what a step reads in full, and the input embedding."""
    w, f = dense_weights(model), weight_formats(model, precision)
    streamed = (
        w.attention * BYTES_PER_PARAM[f.attention]
        + w.attention_out * BYTES_PER_PARAM[f.attention_out]
        + w.linear * BYTES_PER_PARAM[f.linear]
        + w.lm_head * BYTES_PER_PARAM[f.lm_head]
    )
    return streamed, w.embedding * BYTES_PER_PARAM[f.lm_head]


@lru_cache(maxsize=256)
def dense_seconds_per_token(model: ModelSpec, precision: Precision, gpu: GpuSpec) -> float:
    """Seconds at the tensor-core peak for one token through the dense weights (2 FLOPs per parameter), each
    group at its own format's rate."""
    w, f = dense_weights(model), weight_formats(model, precision)
    return 2.0 * (
        w.attention / gpu.flops(f.attention)
        + w.attention_out / gpu.flops(f.attention_out)
        + w.linear / gpu.flops(f.linear)
        + w.lm_head / gpu.flops(f.lm_head)
    )


@lru_cache(maxsize=64)
def mtp_module(model: ModelSpec) -> ModelSpec:
    """DeepSeek's MTP module as a model of its own: one transformer layer of the main model's shape (MoE where
    the main model is) with the shared output head (DeepSeek-V3 report, section 2.2). Its 2h x h input
    projection (0.1B parameters) is left out."""
    return replace(model, name=f"{model.name} MTP module", layers=1, dense_layers=0, tied_embeddings=True)


__all__ = [
    "DenseWeights",
    "WeightFormats",
    "dense_bytes",
    "dense_seconds_per_token",
    "dense_weights",
    "mtp_module",
    "weight_formats",
]
