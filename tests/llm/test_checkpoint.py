"""What a quantised checkpoint keeps wide, and what that costs a GPU in bytes and in time."""

from __future__ import annotations

import pytest

from rackscale.llm.checkpoint import dense_bytes, dense_seconds_per_token, dense_weights, mtp_module
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.plans import ServePlan, gpu_memory, max_batch
from rackscale.llm.precision import BYTES_PER_PARAM, Precision

DSR1 = model_named("deepseek-r1")
L70 = model_named("llama-3.1-70b")
B200 = system_named("b200").gpu


def test_the_dense_weights_add_up_to_the_model() -> None:
    """Dense groups plus the routed experts are every weight the model counts (the embedding once untied)."""
    for model in (DSR1, L70, model_named("mixtral-8x7b")):
        w = dense_weights(model)
        total = w.attention + w.attention_out + w.linear + w.lm_head + w.embedding + model.expert_params_total()
        assert total == pytest.approx(model.total_params(), rel=1e-12), model.name


def test_deepseek_fp4_streams_its_attention_and_head_in_bf16() -> None:
    w = dense_weights(DSR1)
    streamed, lookup = dense_bytes(DSR1, Precision.FP4)
    fp4 = BYTES_PER_PARAM[Precision.FP4]
    expected = (w.attention + w.lm_head) * 2.0 + (w.attention_out + w.linear) * fp4
    assert streamed == pytest.approx(expected)
    assert lookup == pytest.approx(w.embedding * 2.0)
    # a dense FP8 model keeps only its head wide
    streamed70, _ = dense_bytes(L70, Precision.FP8)
    w70 = dense_weights(L70)
    assert streamed70 == pytest.approx(w70.attention + w70.attention_out + w70.linear + 2.0 * w70.lm_head)


def test_bf16_attention_multiplies_at_the_bf16_rate() -> None:
    w = dense_weights(DSR1)
    fp4_rate, bf16_rate = B200.flops(Precision.FP4), B200.flops(Precision.BF16)
    expected = 2.0 * ((w.attention + w.lm_head) / bf16_rate + (w.attention_out + w.linear) / fp4_rate)
    assert dense_seconds_per_token(DSR1, Precision.FP4, B200) == pytest.approx(expected)


def test_the_input_embedding_takes_hbm_but_is_not_streamed() -> None:
    plan = ServePlan(tp=1, dp=8, ep=8, batch=8)
    mem = gpu_memory(DSR1, Precision.FP4, plan, context=2048.0)
    assert mem.lookup_weights > 0
    assert mem.total == pytest.approx(mem.shared_weights + mem.expert_weights + mem.kv_cache + mem.lookup_weights)
    room = max_batch(DSR1, Precision.FP4, plan, context=2048.0, hbm_bytes=B200.hbm_bytes)
    per_dp_kv = gpu_memory(DSR1, Precision.FP4, plan.with_batch(plan.dp), context=2048.0).kv_cache
    usable = B200.hbm_bytes * 0.9 - (mem.shared_weights + mem.expert_weights + mem.lookup_weights)
    assert room == int(usable / per_dp_kv) * plan.dp


def test_the_mtp_module_is_one_layer_with_the_shared_head() -> None:
    module = mtp_module(DSR1)
    assert (module.layers, module.dense_layers, module.moe_layers) == (1, 0, 1)
    assert module.experts == DSR1.experts and module.hidden == DSR1.hidden
    assert dense_weights(module).embedding == 0.0  # shared with the main model: held once
