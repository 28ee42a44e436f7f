"""Built-in models against their published parameter counts, and the KV / FLOP formulas on hand arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from rackscale.llm.models import BUILTIN_MODELS, ModelSpec, ModelSpecError, model_named
from rackscale.llm.precision import BYTES_PER_PARAM, Precision, PrecisionError, parse_precision
from rackscale.model.errors import RackscaleError

# Published totals: Hugging Face's counts for the meta-llama repos (8.03B / 70.6B / 405.8B), DeepSeek-V3's
# README (671B main model, excluding the 14B MTP module), Mistral's announcement (46.7B), GPT-3 paper (175B).
TOTALS = [
    ("llama-3.1-8b", 8.03e9, 0.005),
    ("llama-3.1-70b", 70.6e9, 0.005),
    ("llama-3.1-405b", 405.8e9, 0.005),
    ("deepseek-v3", 671e9, 0.005),
    ("deepseek-r1", 671e9, 0.005),
    ("mixtral-8x7b", 46.7e9, 0.005),
    ("gpt3-175b", 175e9, 0.005),
]


@pytest.mark.parametrize(("name", "published", "rel"), TOTALS, ids=[t[0] for t in TOTALS])
def test_total_params_match_the_published_figure(name: str, published: float, rel: float) -> None:
    assert BUILTIN_MODELS[name].total_params() == pytest.approx(published, rel=rel)


# DeepSeek's README: "Activation parameters: 36.6B (including 0.9B for the output Head)" (rounded to 37B in
# the paper). Mistral's 12.9B active also counts the input embedding, which active_params() leaves out.
ACTIVE = [
    ("deepseek-v3", 36.6e9, 0.005, False),
    ("mixtral-8x7b", 12.9e9, 0.005, True),
]


@pytest.mark.parametrize(("name", "published", "rel", "with_input_embedding"), ACTIVE, ids=[a[0] for a in ACTIVE])
def test_active_params_match_the_published_figure(
    name: str, published: float, rel: float, with_input_embedding: bool
) -> None:
    model = BUILTIN_MODELS[name]
    lookup = model.vocab * model.hidden if with_input_embedding else 0.0
    assert model.active_params() + lookup == pytest.approx(published, rel=rel)
    assert model.active_params() == pytest.approx(37e9 if name == "deepseek-v3" else published, rel=0.03)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-405b", "gpt3-175b"])
def test_a_dense_model_activates_everything_but_the_embedding_lookup(name: str) -> None:
    model = BUILTIN_MODELS[name]
    # Untied: the lookup is a separate matrix every token skips. Tied: the LM head *is* that matrix.
    skipped = 0.0 if model.tied_embeddings else model.vocab * model.hidden
    assert model.active_params() == pytest.approx(model.total_params() - skipped, rel=1e-12)


def test_deepseek_v3_shape() -> None:
    v3 = BUILTIN_MODELS["deepseek-v3"]
    assert (v3.is_moe, v3.uses_mla, v3.moe_layers) == (True, True, 58)
    one_expert = 3 * 7168 * 2048
    assert v3.expert_params() == one_expert
    assert v3.expert_params_total() == 58 * 256 * one_expert  # routed only: the shared expert replicates
    assert v3.router_params_per_layer() == 7168 * 256
    # MLA: q down/up, kv_a (latent + rotary key), kv_b (latent -> per-head nope k and v), o.
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert v3.attention_params_per_layer() == attn


def test_mla_without_query_compression_projects_q_directly() -> None:
    v3 = BUILTIN_MODELS["deepseek-v3"]
    plain = dataclasses.replace(v3, q_lora_rank=0)
    q_lora = 7168 * 1536 + 1536 * 128 * 192
    assert v3.attention_params_per_layer() - plain.attention_params_per_layer() == q_lora - 7168 * 128 * 192


def test_gqa_attention_and_mlp_counts() -> None:
    m = BUILTIN_MODELS["llama-3.1-70b"]
    assert m.attention_params_per_layer() == 2 * 8192 * 8192 + 2 * 8192 * 1024
    assert m.dense_ffn_params_per_layer() == 3 * 8192 * 28672
    assert (m.is_moe, m.uses_mla, m.moe_layers, m.expert_params_total()) == (False, False, 0, 0)
    gpt3 = BUILTIN_MODELS["gpt3-175b"]
    assert gpt3.dense_ffn_params_per_layer() == 2 * 12288 * 4 * 12288  # GELU MLP: two matrices
    assert gpt3.embedding_params() == 50257 * 12288  # tied


KV = [
    ("llama-3.1-70b", Precision.BF16, 80 * 2 * 8 * 128 * 2),  # 327,680 B
    ("llama-3.1-70b", Precision.FP8, 80 * 2 * 8 * 128),
    ("llama-3.1-70b", Precision.FP4, 80 * 2 * 8 * 128),  # an fp4 model keeps an fp8 cache
    ("deepseek-v3", Precision.BF16, 61 * (512 + 64) * 2),  # the latent plus the rotary key
    ("mixtral-8x7b", Precision.FP8, 32 * 2 * 8 * 128),
]


@pytest.mark.parametrize(("name", "precision", "expected"), KV, ids=[f"{k[0]}-{k[1]}" for k in KV])
def test_kv_bytes_per_token(name: str, precision: Precision, expected: int) -> None:
    assert BUILTIN_MODELS[name].kv_bytes_per_token(precision) == expected


def test_llama_70b_kv_is_the_figure_everyone_quotes() -> None:
    assert BUILTIN_MODELS["llama-3.1-70b"].kv_bytes_per_token(Precision.BF16) == 327_680


@pytest.mark.parametrize("precision", list(Precision), ids=[p.value for p in Precision])
def test_weight_bytes_scale_with_the_format(precision: Precision) -> None:
    m = BUILTIN_MODELS["llama-3.1-405b"]
    assert m.weight_bytes(precision) == m.total_params() * BYTES_PER_PARAM[precision]


def test_bytes_per_param() -> None:
    # NVFP4: 16 four-bit values share one FP8 scale -> (16 * 4 + 8) / 16 bits per value.
    assert dict(BYTES_PER_PARAM) == {Precision.BF16: 2.0, Precision.FP8: 1.0, Precision.FP4: (16 * 4 + 8) / 16 / 8}


def test_attention_flops_per_token() -> None:
    llama = BUILTIN_MODELS["llama-3.1-70b"]
    assert llama.attention_flops_per_token(1000) == 4 * 80 * 64 * 128 * 1000
    v3 = BUILTIN_MODELS["deepseek-v3"]
    assert v3.attention_flops_per_token(1000) == 2 * 61 * 128 * 576 * 1000 + 2 * 61 * 128 * 512 * 1000
    assert v3.attention_flops_per_token(0) == 0


@pytest.mark.parametrize("text", ["Llama-3.1-70B", "  deepseek-v3 ", "GPT3-175B", "MIXTRAL-8X7B"])
def test_model_named_is_case_insensitive(text: str) -> None:
    assert model_named(text) is BUILTIN_MODELS[text.strip().lower()]


@pytest.mark.parametrize("text", ["llama-4", "", "deepseek", "x" * 500])
def test_model_named_refuses_unknown_names_listing_the_choices(text: str) -> None:
    with pytest.raises(ModelSpecError) as caught:
        model_named(text)
    assert isinstance(caught.value, RackscaleError) and isinstance(caught.value, ValueError)
    assert "llama-3.1-8b" in str(caught.value) and "gpt3-175b" in str(caught.value)
    assert len(str(caught.value)) < 400  # a huge name is shortened, not echoed


BASE = BUILTIN_MODELS["llama-3.1-8b"]
MOE = BUILTIN_MODELS["mixtral-8x7b"]
BAD_SPECS = [
    ("zero-layers", BASE, {"layers": 0}, "layers"),
    ("bool-hidden", BASE, {"hidden": True}, "hidden"),
    ("float-heads", BASE, {"heads": 32.0}, "heads"),
    ("kv-not-dividing", BASE, {"kv_heads": 5}, "kv_heads"),
    ("dense-without-ffn", BASE, {"ffn": 0}, "ffn"),
    ("top-k-without-experts", BASE, {"top_k": 2}, "top_k"),
    ("mla-field-without-rank", BASE, {"qk_rope_dim": 64}, "qk_rope_dim"),
    ("top-k-above-experts", MOE, {"top_k": 9}, "top_k"),
    ("all-layers-dense", MOE, {"dense_layers": 32, "ffn": 1}, "dense_layers"),
    ("negative-shared", MOE, {"shared_experts": -1}, "shared_experts"),
    ("tied-not-bool", BASE, {"tied_embeddings": 1}, "tied_embeddings"),
]


@pytest.mark.parametrize(("case", "base", "changes", "field"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_impossible_shapes_are_refused_naming_the_field(
    case: str, base: ModelSpec, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(ModelSpecError, match=field):
        dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"), [("bf16", Precision.BF16), (" FP8 ", Precision.FP8), ("Fp4", Precision.FP4)]
)
def test_parse_precision(text: str, expected: Precision) -> None:
    assert parse_precision(text) is expected


@pytest.mark.parametrize("text", ["fp16", "", "int8", "4"])
def test_parse_precision_refuses_other_formats(text: str) -> None:
    with pytest.raises(PrecisionError, match="bf16, fp8, fp4"):
        parse_precision(text)
