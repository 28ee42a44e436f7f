"""Transformer shapes, and the parameter, KV-cache and attention-FLOP counts the performance model needs.

A :class:`ModelSpec` is the handful of numbers in a Hugging Face ``config.json`` (or a paper's table) that
decide memory and time: layer count and widths, GQA or MLA attention, dense or mixture-of-experts FFN.
Counts are closed-form (no loop over layers) and ignore norms, biases and rotary tables: those are < 0.01 %
of any model here. Values and sources: ``docs/perf-catalogue.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from rackscale.llm.precision import BYTES_PER_PARAM, Precision
from rackscale.model.errors import RackscaleError


class ModelSpecError(RackscaleError, ValueError):
    """A model description that cannot be a transformer, or a model name that is not built in."""


# Fields that must be >= 1 for every model; every other integer field must be >= 0.
_POSITIVE = ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One decoder-only transformer. MoE fields are 0 for a dense model, MLA fields 0 for GQA/MHA."""

    name: str
    layers: int
    hidden: int
    heads: int  # query heads
    kv_heads: int  # GQA key/value heads (== heads for MHA)
    head_dim: int  # q/k width per head (MLA: qk_nope_dim + qk_rope_dim)
    ffn: int  # intermediate size of a dense FFN layer (0 if the model has none)
    vocab: int
    tied_embeddings: bool = False
    gated_ffn: bool = True  # SwiGLU (3 matrices); False = 2 matrices (GPT-3's GELU MLP)
    experts: int = 0  # routed experts per MoE layer; 0 = dense model
    top_k: int = 0  # routed experts per token
    shared_experts: int = 0
    expert_ffn: int = 0  # intermediate size of ONE routed (and shared) expert
    dense_layers: int = 0  # leading layers with a dense FFN in a MoE model (DeepSeek first_k_dense_replace)
    kv_lora_rank: int = 0  # MLA (DeepSeek): compressed KV width; 0 = GQA/MHA attention
    q_lora_rank: int = 0  # MLA query compression (0 = none)
    qk_rope_dim: int = 0  # MLA: rotary part of q/k per head
    qk_nope_dim: int = 0  # MLA: non-rotary part of q/k per head
    v_head_dim: int = 0  # MLA: value width per head
    source: str = ""  # where the numbers come from (HF repo id, paper)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def _ffn_matrices(self) -> int:
        return 3 if self.gated_ffn else 2

    def attention_params_per_layer(self) -> float:
        """Projection weights of one attention block (GQA: q, k, v, o; MLA: the low-rank factors and o)."""
        h = float(self.hidden)
        if not self.uses_mla:
            q_and_o = 2.0 * h * self.heads * self.head_dim
            k_and_v = 2.0 * h * self.kv_heads * self.head_dim
            return q_and_o + k_and_v
        qk = float(self.qk_nope_dim + self.qk_rope_dim)
        # With q compression: down to q_lora_rank, then up to every head's q; without: one h x heads*qk matrix.
        q_in = float(self.q_lora_rank) if self.q_lora_rank > 0 else h
        q = (h * self.q_lora_rank if self.q_lora_rank > 0 else 0.0) + q_in * self.heads * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_dim)  # down-projection, plus the shared rotary key
        kv_b = float(self.kv_lora_rank) * self.heads * (self.qk_nope_dim + self.v_head_dim)
        o = float(self.heads) * self.v_head_dim * h
        return q + kv_a + kv_b + o

    def attention_out_params_per_layer(self) -> float:
        """The o projection of one attention block (included in :meth:`attention_params_per_layer`)."""
        width = self.v_head_dim if self.uses_mla else self.head_dim
        return float(self.heads) * width * self.hidden

    def dense_ffn_params_per_layer(self) -> float:
        return float(self._ffn_matrices) * self.hidden * self.ffn

    def expert_params(self) -> float:
        """ONE routed (or shared) expert: the same MLP shape as a dense FFN at ``expert_ffn`` width."""
        return float(self._ffn_matrices) * self.hidden * self.expert_ffn

    def router_params_per_layer(self) -> float:
        return float(self.hidden) * self.experts if self.is_moe else 0.0

    def embedding_params(self) -> float:
        """The input embedding and the LM head (one matrix when tied)."""
        return float(self.vocab) * self.hidden * (1 if self.tied_embeddings else 2)

    def _dense_ffn_layers(self) -> int:
        return self.dense_layers if self.is_moe else self.layers

    def total_params(self) -> float:
        """Every weight (norms, biases ignored). DeepSeek-V3: the 671B main model, not the 14B MTP module."""
        per_moe_layer = (self.experts + self.shared_experts) * self.expert_params() + self.router_params_per_layer()
        return (
            self.layers * self.attention_params_per_layer()
            + self._dense_ffn_layers() * self.dense_ffn_params_per_layer()
            + self.moe_layers * per_moe_layer
            + self.embedding_params()
        )

    def active_params(self) -> float:
        """Weights one token multiplies by: the input embedding is a lookup, not a matmul, so it is left out."""
        per_moe_layer = (self.top_k + self.shared_experts) * self.expert_params() + self.router_params_per_layer()
        lm_head = float(self.vocab) * self.hidden
        return (
            self.layers * self.attention_params_per_layer()
            + self._dense_ffn_layers() * self.dense_ffn_params_per_layer()
            + self.moe_layers * per_moe_layer
            + lm_head
        )

    def expert_params_total(self) -> float:
        """The routed experts of all MoE layers: what expert parallelism shards (shared experts replicate)."""
        return self.moe_layers * self.experts * self.expert_params()

    def kv_bytes_per_token(self, precision: Precision) -> float:
        """KV cache of one token, all layers. Stored at 2 bytes for bf16 and 1 byte for fp8 *and* fp4.

        FP4 KV caches are not yet common in serving stacks, so an fp4 model keeps an fp8 cache. MLA caches
        the compressed latent plus the shared rotary key, not per-head K and V.
        """
        kv_bytes = 2.0 if precision is Precision.BF16 else 1.0
        if self.uses_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_dim) * kv_bytes
        return self.layers * 2.0 * self.kv_heads * self.head_dim * kv_bytes

    def weight_bytes(self, precision: Precision) -> float:
        return self.total_params() * BYTES_PER_PARAM[precision]

    def attention_flops_per_token(self, context: float) -> float:
        """Score and value FLOPs of ONE new token attending to ``context`` earlier tokens, all layers.

        MLA is counted with the up-projections absorbed (as DeepSeek serves it): scores run over the
        latent plus the rotary key, values over the latent.
        """
        if self.uses_mla:
            scores = 2.0 * self.layers * self.heads * (self.kv_lora_rank + self.qk_rope_dim) * context
            values = 2.0 * self.layers * self.heads * self.kv_lora_rank * context
            return scores + values
        return 4.0 * self.layers * self.heads * self.head_dim * context


def _check(spec: ModelSpec) -> None:
    """Refuse shapes the counts above would turn into nonsense, naming the field and what it needs."""
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in ("name", "source"):
            if not isinstance(value, str):
                raise ModelSpecError(f"model {f.name} must be a string, got {type(value).__name__}")
        elif f.name in ("tied_embeddings", "gated_ffn"):
            if not isinstance(value, bool):
                raise ModelSpecError(f"model {spec.name!r}: {f.name} must be true or false")
        elif not isinstance(value, int) or isinstance(value, bool):
            raise ModelSpecError(f"model {spec.name!r}: {f.name} must be an integer, got {type(value).__name__}")
        else:
            least = 1 if f.name in _POSITIVE else 0
            if value < least:
                shown = value if value > -(10**18) else "far negative"
                raise ModelSpecError(f"model {spec.name!r}: {f.name} is {shown} (need an integer >= {least})")

    def bad(why: str) -> ModelSpecError:
        return ModelSpecError(f"model {spec.name!r}: {why}")

    if spec.kv_heads > spec.heads or spec.heads % spec.kv_heads:
        raise bad(f"kv_heads ({spec.kv_heads}) must divide heads ({spec.heads})")
    if spec.is_moe:
        if not 1 <= spec.top_k <= spec.experts:
            raise bad(f"top_k is {spec.top_k} (need 1 to experts = {spec.experts})")
        if spec.expert_ffn < 1:
            raise bad("expert_ffn is 0 (a MoE model needs the width of one expert)")
        if spec.dense_layers >= spec.layers:
            raise bad(f"dense_layers ({spec.dense_layers}) must be fewer than layers ({spec.layers})")
        if spec.dense_layers and spec.ffn < 1:
            raise bad("ffn is 0 but the model has dense layers (give their intermediate size)")
    else:
        if spec.ffn < 1:
            raise bad("ffn is 0 (a dense model needs its FFN intermediate size)")
        moe_only = ("top_k", "shared_experts", "expert_ffn", "dense_layers")
        for name in moe_only:
            if getattr(spec, name):
                raise bad(f"{name} is set but experts is 0 (set experts for a MoE model)")
    if spec.uses_mla:
        if spec.qk_nope_dim + spec.qk_rope_dim < 1 or spec.v_head_dim < 1:
            raise bad("MLA needs qk_nope_dim + qk_rope_dim >= 1 and v_head_dim >= 1")
    else:
        for name in ("q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim"):
            if getattr(spec, name):
                raise bad(f"{name} is set but kv_lora_rank is 0 (MLA fields need kv_lora_rank)")


def _llama(name: str, *, layers: int, hidden: int, heads: int, ffn: int) -> ModelSpec:
    # Llama 3.1: GQA with 8 KV heads, head_dim 128, a 128,256-token vocabulary, untied embeddings.
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=8,
        head_dim=128,
        ffn=ffn,
        vocab=128256,
        source=f"meta-llama/{name} config.json",
    )


def _deepseek_v3(name: str, source: str) -> ModelSpec:
    return ModelSpec(
        name=name,
        layers=61,
        hidden=7168,
        heads=128,
        kv_heads=128,
        head_dim=128 + 64,
        ffn=18432,
        vocab=129280,
        experts=256,
        top_k=8,
        shared_experts=1,
        expert_ffn=2048,
        dense_layers=3,
        kv_lora_rank=512,
        q_lora_rank=1536,
        qk_rope_dim=64,
        qk_nope_dim=128,
        v_head_dim=128,
        source=source,
    )


_BUILTIN = (
    _llama("Llama-3.1-8B", layers=32, hidden=4096, heads=32, ffn=14336),
    _llama("Llama-3.1-70B", layers=80, hidden=8192, heads=64, ffn=28672),
    _llama("Llama-3.1-405B", layers=126, hidden=16384, heads=128, ffn=53248),
    _deepseek_v3("DeepSeek-V3", "deepseek-ai/DeepSeek-V3 config.json"),
    # R1 is V3's architecture, post-trained: the same config.json shape.
    _deepseek_v3("DeepSeek-R1", "deepseek-ai/DeepSeek-R1 config.json (same architecture as DeepSeek-V3)"),
    ModelSpec(
        name="Mixtral-8x7B",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        ffn=0,
        vocab=32000,
        experts=8,
        top_k=2,
        expert_ffn=14336,
        source="mistralai/Mixtral-8x7B-v0.1 config.json",
    ),
    # GPT-3 reuses GPT-2's architecture: MHA, a 4h GELU MLP, embeddings tied to the LM head.
    ModelSpec(
        name="GPT3-175B",
        layers=96,
        hidden=12288,
        heads=96,
        kv_heads=96,
        head_dim=128,
        ffn=4 * 12288,
        vocab=50257,
        tied_embeddings=True,
        gated_ffn=False,
        source="Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1",
    ),
)

BUILTIN_MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name.lower(): m for m in _BUILTIN})


def model_named(name: str) -> ModelSpec:
    """A built-in model by name, case-insensitive (``"Llama-3.1-70B"``, ``"deepseek-v3"``)."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key is not None and key in BUILTIN_MODELS:
        return BUILTIN_MODELS[key]
    shown = repr(name[:60]) + ("..." if len(name) > 60 else "") if isinstance(name, str) else type(name).__name__
    choices = ", ".join(sorted(BUILTIN_MODELS))
    raise ModelSpecError(f"unknown model {shown}: choose one of {choices} (or give a path to a config.json)")


__all__ = ["BUILTIN_MODELS", "ModelSpec", "ModelSpecError", "model_named"]
