"""A Hugging Face ``config.json`` (already parsed) -> :class:`~rackscale.llm.models.ModelSpec`.

Pure: the CLI reads the file, this reads the mapping. Families are recognised by the fields they carry, not
by ``architectures``, so a fine-tune or a renamed checkpoint of a known shape loads too:

* Llama / Mistral / Qwen2 / Qwen3 dense: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
  ``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``;
* Mixtral: ``num_local_experts`` (each expert is ``intermediate_size`` wide);
* Qwen2-MoE / Qwen3-MoE: ``num_experts``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``;
* DeepSeek-V2/V3: ``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``, the MLA ranks;
* GPT-2 / GPT-NeoX style: ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (default 4h), a 2-matrix MLP.

A multimodal wrapper's ``text_config`` is read first, falling back to the top level. Anything that is not
a positive integer where one is needed (strings, bools, NaN, negatives, values above 10**7) is a
:class:`ModelConfigError` naming the field; nothing else escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rackscale.llm.models import ModelSpec, ModelSpecError
from rackscale.model.errors import RackscaleError

MAX_VALUE = 10**7  # no real dimension, layer or expert count comes near this; larger is a typo or an attack

# Families whose MLP is two matrices with a plain activation (no gate), named by ``model_type``. The field
# names (``n_embd`` etc.) already mark GPT-2 style; these share Llama's field names but not its SwiGLU.
_UNGATED_TYPES = frozenset({"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "falcon", "phi", "starcoder2"})


class ModelConfigError(RackscaleError, ValueError):
    """A config.json this loader cannot turn into a model, with the field to fix."""


def _shown(value: object) -> str:
    """A short, always-printable description: hostile values may be huge, deep or unprintable as a whole."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    if isinstance(value, Mapping):
        return f"an object of {len(value)} fields"
    return f"a {type(value).__name__}"


class _Fields:
    """Typed reads of one config, with text_config first; every failure names ``prefix + key``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._layers: list[tuple[str, Mapping[str, object]]] = []
        text = config.get("text_config")
        if isinstance(text, Mapping):
            self._layers.append(("text_config.", text))
        elif text is not None:
            raise ModelConfigError(f"config.json: text_config is {_shown(text)} (need an object, or leave it out)")
        self._layers.append(("", config))

    def _find(self, key: str) -> tuple[str, object]:
        """(where, value) of the first layer holding ``key`` with a non-null value; null counts as absent."""
        for prefix, layer in self._layers:
            value = layer.get(key)
            if value is not None:
                return prefix + key, value
        return self._layers[0][0] + key, None

    def has(self, key: str) -> bool:
        return self._find(key)[1] is not None

    def int_(self, key: str, *, least: int = 1, default: int | None = None) -> int:
        where, value = self._find(key)
        if value is None:
            if default is not None:
                return default
            raise ModelConfigError(f"config.json: {where} is missing (need an integer >= {least})")
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_VALUE:
            raise ModelConfigError(
                f"config.json: {where} is {_shown(value)} (need an integer from {least} to {MAX_VALUE})"
            )
        return value

    def bool_(self, key: str, *, default: bool) -> bool:
        where, value = self._find(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ModelConfigError(f"config.json: {where} is {_shown(value)} (need true or false)")
        return value

    def str_(self, key: str) -> str:
        value = self._find(key)[1]
        return value.lower() if isinstance(value, str) else ""

    def int_list(self, key: str) -> list[int]:
        where, value = self._find(key)
        if value is None:
            return []
        if isinstance(value, list):
            items = [i for i in value if isinstance(i, int) and not isinstance(i, bool)]
            if len(items) == len(value):
                return items
        raise ModelConfigError(f"config.json: {where} is {_shown(value)} (need a list of layer indices)")


def model_from_hf_config(config: Mapping[str, object], *, name: str) -> ModelSpec:
    """The :class:`ModelSpec` a parsed ``config.json`` describes, called ``name``."""
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"config.json: the top level is {_shown(config)} (need a JSON object)")
    if not isinstance(name, str) or not name.strip():
        raise ModelConfigError(f"model name {_shown(name)} must be non-empty text")
    f = _Fields(config)
    try:
        return _build(f, name=name.strip(), source=_source(config))
    except ModelSpecError as exc:  # a relation between fields the checks below do not name: keep the message
        raise ModelConfigError(f"config.json: {exc}") from exc


def _source(config: Mapping[str, object]) -> str:
    origin = config.get("_name_or_path")
    if isinstance(origin, str) and 0 < len(origin) <= 200:
        return f"config.json ({origin})"
    return "config.json"


@dataclass(frozen=True, slots=True)
class _Moe:
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: int = 0


@dataclass(frozen=True, slots=True)
class _Mla:
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0


_DENSE, _GQA = _Moe(), _Mla()


def _build(f: _Fields, *, name: str, source: str) -> ModelSpec:
    gpt2_style = not f.has("hidden_size") and (f.has("n_embd") or f.has("n_layer"))
    if gpt2_style:
        layers, hidden, heads = f.int_("n_layer"), f.int_("n_embd"), f.int_("n_head")
        kv_heads = heads
        tied_default, gated = True, False  # GPT-2's LM head is its input embedding; its MLP is GELU, 2 matrices
    else:
        layers, hidden = f.int_("num_hidden_layers"), f.int_("hidden_size")
        heads = f.int_("num_attention_heads")
        kv_heads = f.int_("num_key_value_heads", default=heads)
        tied_default, gated = False, f.str_("model_type") not in _UNGATED_TYPES
    vocab = f.int_("vocab_size")
    # Absent tie_word_embeddings: untied, as Llama/Mistral/Qwen/DeepSeek's config classes default to.
    tied = f.bool_("tie_word_embeddings", default=tied_default)
    if kv_heads > heads or heads % kv_heads:
        raise ModelConfigError(
            f"config.json: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})"
        )

    mla = _mla(f)
    if mla.kv_lora_rank:
        head_dim = mla.qk_nope_dim + mla.qk_rope_dim
    elif f.has("head_dim"):
        head_dim = f.int_("head_dim")
    elif hidden % heads == 0:
        head_dim = hidden // heads
    else:
        raise ModelConfigError(
            f"config.json: head_dim is missing and the hidden size ({hidden}) is not a multiple of the "
            f"attention heads ({heads}): give head_dim"
        )

    if gpt2_style:
        moe, ffn = _DENSE, f.int_("n_inner", default=4 * hidden)
    else:
        moe = _moe(f, layers=layers)
        # A MoE model without dense layers has no dense FFN (Mixtral's intermediate_size is its expert width).
        ffn = f.int_("intermediate_size") if moe.experts == 0 or moe.dense_layers > 0 else 0
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        tied_embeddings=tied,
        gated_ffn=gated,
        experts=moe.experts,
        top_k=moe.top_k,
        shared_experts=moe.shared_experts,
        expert_ffn=moe.expert_ffn,
        dense_layers=moe.dense_layers,
        kv_lora_rank=mla.kv_lora_rank,
        q_lora_rank=mla.q_lora_rank,
        qk_rope_dim=mla.qk_rope_dim,
        qk_nope_dim=mla.qk_nope_dim,
        v_head_dim=mla.v_head_dim,
        source=source,
    )


def _mla(f: _Fields) -> _Mla:
    """DeepSeek's multi-head latent attention fields; all zero for GQA/MHA (no ``kv_lora_rank``)."""
    if f.int_("kv_lora_rank", least=0, default=0) == 0:
        return _GQA
    return _Mla(
        kv_lora_rank=f.int_("kv_lora_rank"),
        q_lora_rank=f.int_("q_lora_rank", least=0, default=0),  # DeepSeek-V2-Lite: null, no q compression
        qk_rope_dim=f.int_("qk_rope_head_dim", least=0),
        qk_nope_dim=f.int_("qk_nope_head_dim", least=0),
        v_head_dim=f.int_("v_head_dim"),
    )


def _moe(f: _Fields, *, layers: int) -> _Moe:
    """The MoE fields of a Mixtral, Qwen-MoE or DeepSeek config; all zero for a dense model."""
    if f.has("n_routed_experts"):  # DeepSeek-V2/V3
        experts_key, width_key = "n_routed_experts", "moe_intermediate_size"
    elif f.has("num_local_experts"):  # Mixtral: every expert is intermediate_size wide, every layer MoE
        experts_key, width_key = "num_local_experts", "intermediate_size"
    elif f.has("num_experts"):  # Qwen2-MoE / Qwen3-MoE
        experts_key, width_key = "num_experts", "moe_intermediate_size"
    else:
        return _DENSE
    experts = f.int_(experts_key, least=0)
    if experts == 0:
        return _DENSE
    width = f.int_(width_key)
    top_k = f.int_("num_experts_per_tok")
    if top_k > experts:
        raise ModelConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds {experts_key} ({experts})")
    shared = 0
    if experts_key == "n_routed_experts":
        shared = f.int_("n_shared_experts", least=0, default=0)
        moe_count = _deepseek_moe_layers(f, layers=layers)
    else:
        moe_count = _qwen_moe_layers(f, layers=layers) if experts_key == "num_experts" else layers
        shared_width = f.int_("shared_expert_intermediate_size", least=0, default=0)
        if shared_width:
            # Qwen's one shared expert of that width, approximated as whole experts of the routed width
            # (Qwen2-MoE-A2.7B: 5632 / 1408 = exactly 4); at least one, so a narrow one is not dropped.
            shared = max(1, round(shared_width / width))
    if moe_count == 0:
        return _DENSE  # every layer dense: a dense model (intermediate_size is then required)
    return _Moe(experts=experts, top_k=top_k, shared_experts=shared, expert_ffn=width, dense_layers=layers - moe_count)


def _deepseek_moe_layers(f: _Fields, *, layers: int) -> int:
    """Layers i >= first_k_dense_replace with i % moe_layer_freq == 0 are MoE (DeepSeek's modelling code)."""
    first = f.int_("first_k_dense_replace", least=0, default=0)
    freq = f.int_("moe_layer_freq", default=1)
    start = -(-first // freq) * freq  # the first multiple of freq at or after `first`
    return 0 if start >= layers else (layers - 1 - start) // freq + 1


def _qwen_moe_layers(f: _Fields, *, layers: int) -> int:
    """Layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (Qwen's code)."""
    step = f.int_("decoder_sparse_step", default=1)
    dense_only = {i for i in f.int_list("mlp_only_layers") if 0 <= i < layers and (i + 1) % step == 0}
    return layers // step - len(dense_only)


__all__ = ["MAX_VALUE", "ModelConfigError", "model_from_hf_config"]
