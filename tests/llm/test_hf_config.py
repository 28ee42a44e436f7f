"""config.json -> ModelSpec: the families by their fields, published totals, and hostile input."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale.llm.hf_config import ModelConfigError, model_from_hf_config
from rackscale.llm.models import BUILTIN_MODELS, ModelSpec
from rackscale.model.errors import RackscaleError

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def load(name: str) -> ModelSpec:
    return model_from_hf_config(fixture(name), name=name)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3", "mixtral-8x7b"])
def test_a_fixture_loads_as_its_builtin(name: str) -> None:
    loaded, builtin = load(name), BUILTIN_MODELS[name]
    assert loaded.total_params() == pytest.approx(builtin.total_params(), rel=0.005)
    assert loaded.active_params() == pytest.approx(builtin.active_params(), rel=0.005)
    same = ("layers", "hidden", "heads", "kv_heads", "experts", "top_k", "shared_experts", "kv_lora_rank")
    assert {f: getattr(loaded, f) for f in same} == {f: getattr(builtin, f) for f in same}


# Published totals / actives: Qwen's model cards (Qwen3-30B-A3B: 30.5B, 3.3B activated; Qwen1.5-MoE-A2.7B:
# 14.3B, 2.7B activated), DeepSeek-V2 paper (V2-Lite: 15.7B, 2.4B activated), OpenAI's GPT-2 small (124M).
# Qwen's "activated" figures count the input embedding, which active_params() leaves out.
PUBLISHED = [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 0.02),
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, True, 0.02),
    ("deepseek-v2-lite", 15.7e9, 2.4e9, False, 0.03),
    ("gpt2", 124e6, None, False, 0.01),
]


@pytest.mark.parametrize(("name", "total", "active", "with_lookup", "rel"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_other_families_match_their_published_sizes(
    name: str, total: float, active: float | None, with_lookup: bool, rel: float
) -> None:
    model = load(name)
    assert model.total_params() == pytest.approx(total, rel=rel)
    if active is not None:
        lookup = model.vocab * model.hidden if with_lookup else 0.0
        assert model.active_params() + lookup == pytest.approx(active, rel=rel)


def test_families_are_read_by_their_fields() -> None:
    mixtral = load("mixtral-8x7b")
    assert (mixtral.experts, mixtral.top_k, mixtral.expert_ffn, mixtral.ffn, mixtral.dense_layers) == (
        8,
        2,
        14336,
        0,
        0,
    )
    qwen3 = load("qwen3-30b-a3b")
    assert (qwen3.experts, qwen3.expert_ffn, qwen3.shared_experts, qwen3.kv_heads, qwen3.head_dim) == (
        128,
        768,
        0,
        4,
        128,
    )
    qwen2 = load("qwen1.5-moe-a2.7b")
    assert qwen2.shared_experts == 5632 // 1408  # one 5632-wide shared expert = four 1408-wide ones
    lite = load("deepseek-v2-lite")
    assert (lite.q_lora_rank, lite.dense_layers, lite.shared_experts, lite.head_dim) == (0, 1, 2, 192)
    gpt2 = load("gpt2")
    assert (gpt2.gated_ffn, gpt2.tied_embeddings, gpt2.ffn, gpt2.kv_heads) == (False, True, 4 * 768, 12)
    assert gpt2.source == "config.json"


def test_text_config_of_a_multimodal_wrapper_is_followed() -> None:
    model = load("llava-wrapper")
    assert (model.layers, model.hidden, model.ffn, model.vocab) == (32, 4096, 11008, 32064)
    assert model.tied_embeddings is False  # from the top level: text_config does not say
    broken = fixture("llava-wrapper")
    del broken["text_config"]["num_hidden_layers"]
    broken["num_hidden_layers"] = 7  # the top level is the fallback
    assert model_from_hf_config(broken, name="x").layers == 7
    del broken["num_hidden_layers"]
    with pytest.raises(ModelConfigError, match=r"text_config\.num_hidden_layers is missing"):
        model_from_hf_config(broken, name="x")


def test_defaults() -> None:
    config = fixture("llama-3.1-8b")
    for key in ("num_key_value_heads", "tie_word_embeddings"):
        del config[key]
    model = model_from_hf_config(config, name="mha")
    assert (model.kv_heads, model.head_dim, model.tied_embeddings) == (32, 128, False)
    config["model_type"] = "gpt_neox"
    assert model_from_hf_config(config, name="neox").gated_ffn is False


def test_layer_patterns_count_dense_layers() -> None:
    qwen = fixture("qwen3-30b-a3b")
    qwen["decoder_sparse_step"], qwen["mlp_only_layers"] = 2, [1, 2, 47]  # MoE at odd i; 1 and 47 forced dense
    assert model_from_hf_config(qwen, name="q").moe_layers == 24 - 2
    ds = fixture("deepseek-v3")
    ds["moe_layer_freq"] = 2  # MoE at even i >= 3: 4, 6, ..., 60
    assert model_from_hf_config(ds, name="d").moe_layers == 29
    ds["first_k_dense_replace"] = 61  # no MoE layer left: a dense model
    assert model_from_hf_config(ds, name="d").is_moe is False


def edit(base: str, **changes: Any) -> dict[str, Any]:
    """A fixture with fields set (``...`` deletes one)."""
    config = copy.deepcopy(fixture(base))
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


HOSTILE: list[tuple[str, object, str]] = [
    ("deeply-nested", edit("llama-3.1-8b", hidden_size=deep(100_000)), "hidden_size is a list of 1 items"),
    ("5000-digit-int", edit("llama-3.1-8b", num_hidden_layers=10**5000), "an integer of"),
    ("long-string", edit("llama-3.1-8b", vocab_size="9" * 100_000), "vocab_size is '99999"),
    ("missing-layers", edit("llama-3.1-8b", num_hidden_layers=...), "num_hidden_layers is missing"),
    ("string-hidden", edit("llama-3.1-8b", hidden_size="4096"), "hidden_size is '4096'"),
    ("bool-heads", edit("llama-3.1-8b", num_attention_heads=True), "num_attention_heads"),
    ("float-vocab", edit("llama-3.1-8b", vocab_size=128256.0), "vocab_size"),
    ("nan-ffn", edit("llama-3.1-8b", intermediate_size=math.nan), "intermediate_size"),
    ("inf-ffn", edit("llama-3.1-8b", intermediate_size=math.inf), "intermediate_size"),
    ("negative-layers", edit("llama-3.1-8b", num_hidden_layers=-32), "num_hidden_layers"),
    ("zero-hidden", edit("llama-3.1-8b", hidden_size=0), "hidden_size"),
    ("huge-hidden", edit("llama-3.1-8b", hidden_size=10**7 + 1), "hidden_size"),
    ("astronomic-vocab", edit("llama-3.1-8b", vocab_size=10**400), "vocab_size"),
    ("list-kv", edit("llama-3.1-8b", num_key_value_heads=[8]), "num_key_value_heads"),
    ("dict-head-dim", edit("llama-3.1-8b", head_dim={"a": 1}), "head_dim"),
    ("kv-not-dividing", edit("llama-3.1-8b", num_key_value_heads=7), "num_key_value_heads"),
    (
        "head-dim-needed",
        edit("llama-3.1-8b", hidden_size=4000, num_attention_heads=48, num_key_value_heads=8),
        "head_dim",
    ),
    ("tie-as-string", edit("llama-3.1-8b", tie_word_embeddings="false"), "tie_word_embeddings"),
    ("text-config-list", edit("llama-3.1-8b", text_config=[1, 2]), "text_config"),
    ("moe-without-top-k", edit("mixtral-8x7b", num_experts_per_tok=...), "num_experts_per_tok"),
    ("top-k-above-experts", edit("mixtral-8x7b", num_experts_per_tok=9), "num_experts_per_tok"),
    ("moe-width-missing", edit("qwen3-30b-a3b", moe_intermediate_size=...), "moe_intermediate_size"),
    ("negative-experts", edit("qwen3-30b-a3b", num_experts=-1), "num_experts"),
    ("mlp-only-junk", edit("qwen3-30b-a3b", mlp_only_layers="all"), "mlp_only_layers"),
    ("mlp-only-nested", edit("qwen3-30b-a3b", mlp_only_layers=[[1]]), "mlp_only_layers"),
    ("sparse-step-zero", edit("qwen3-30b-a3b", decoder_sparse_step=0), "decoder_sparse_step"),
    ("mla-rope-missing", edit("deepseek-v3", qk_rope_head_dim=...), "qk_rope_head_dim"),
    ("mla-v-zero", edit("deepseek-v3", v_head_dim=0), "v_head_dim"),
    ("dense-ffn-missing", edit("deepseek-v3", intermediate_size=...), "intermediate_size"),
    ("shared-as-string", edit("deepseek-v3", n_shared_experts="1"), "n_shared_experts"),
    ("gpt2-heads-missing", edit("gpt2", n_head=...), "n_head is missing"),
    ("top-level-list", [1, 2, 3], "top level"),
    ("top-level-string", "config", "top level"),
]


@pytest.mark.parametrize(("case", "config", "field"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_configs_raise_model_config_error_naming_the_field(case: str, config: object, field: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        model_from_hf_config(config, name=case)  # type: ignore[arg-type]
    message = str(caught.value)
    assert field in message and len(message) < 400
    assert isinstance(caught.value, RackscaleError) and isinstance(caught.value, ValueError)


def test_missing_field_message_says_what_is_needed() -> None:
    with pytest.raises(ModelConfigError) as caught:
        model_from_hf_config(edit("llama-3.1-8b", num_hidden_layers=...), name="x")
    assert str(caught.value) == "config.json: num_hidden_layers is missing (need an integer >= 1)"


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_the_model_needs_a_name(name: object) -> None:
    with pytest.raises(ModelConfigError, match="name"):
        model_from_hf_config(fixture("llama-3.1-8b"), name=name)  # type: ignore[arg-type]


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
KNOWN_KEYS = sorted(
    {key for name in ("llama-3.1-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt2", "mixtral-8x7b") for key in fixture(name)}
    | {"text_config", "head_dim", "shared_expert_intermediate_size", "n_inner"}
)
# Small ints in the right places are what reach the deep checks; arbitrary JSON elsewhere.
FIELD_VALUES = st.integers(min_value=-3, max_value=70) | JSON_VALUES
CONFIGS = st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8), FIELD_VALUES, max_size=24)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS)
def test_fuzzed_configs_raise_nothing_but_model_config_error(config: dict[str, Any]) -> None:
    try:
        model = model_from_hf_config(config, name="fuzz")
    except ModelConfigError:
        return
    assert model.total_params() > 0 and model.active_params() > 0


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(["llama-3.1-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt2", "mixtral-8x7b", "qwen1.5-moe-a2.7b"]),
    key=st.sampled_from(KNOWN_KEYS),
    value=FIELD_VALUES,
)
def test_one_corrupted_field_of_a_real_config_raises_nothing_else(base: str, key: str, value: Any) -> None:
    try:
        model = model_from_hf_config(edit(base, **{key: value}), name="fuzz")
    except ModelConfigError:
        return
    assert model.total_params() > 0
