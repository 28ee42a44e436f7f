"""The decode step's terms: per-group rooflines, attention at the cache's precision, MTP drafts, expert imbalance."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.llm.calibration import serving_efficiency
from rackscale.llm.checkpoint import mtp_module, weight_formats
from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP, Mtp, StepTerms, decode_step, expert_imbalance
from rackscale.llm.fabric import Span
from rackscale.llm.hardware import system_named
from rackscale.llm.kernels import MEASURED_MOE_KERNELS, MoeBackend, moe_kernels
from rackscale.llm.models import model_named
from rackscale.llm.plans import ServePlan
from rackscale.llm.precision import Precision
from rackscale.llm.serving import links_of

DSR1 = model_named("deepseek-r1")
B200 = system_named("b200")
EFF = serving_efficiency(B200.gpu)


def step(
    plan: ServePlan,
    *,
    mtp: Mtp = NO_MTP,
    imbalance: float = 1.0,
    batch: float | None = None,
    moe_backend: MoeBackend | None = None,
) -> StepTerms:
    return decode_step(
        DSR1, Precision.FP4, plan, gpu=B200.gpu, links=links_of(B200), span=Span.packed(plan.gpus, 8),
        context=1536.0, eff=EFF, mtp=mtp, imbalance=imbalance, batch=batch, moe_backend=moe_backend,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("ep", "eplb", "expected"),
    [(32, False, 2.564), (32, True, 1.109), (8, True, 1.109), (1, False, 1.0)],
    ids=["ep32-measured", "ep32-eplb-measured", "eplb-elsewhere", "no-ep"],
)
def test_expert_imbalance_is_the_published_measurement_at_ep32(ep: int, eplb: bool, expected: float) -> None:
    assert expert_imbalance(DSR1, ep, eplb=eplb) == pytest.approx(expected, abs=1e-3)


def test_expert_imbalance_without_a_balancer_grows_with_ep() -> None:
    sizes = [expert_imbalance(DSR1, ep, eplb=False) for ep in (2, 4, 8, 16, 32, 64)]
    assert sizes == sorted(sizes) and sizes[0] > 1.0
    assert expert_imbalance(model_named("llama-3.1-70b"), 8, eplb=False) == 1.0  # dense: no experts


def test_the_step_pays_each_groups_own_roofline() -> None:
    s = step(ServePlan(tp=1, dp=8, ep=8, batch=512))
    assert s.roofline_s == pytest.approx(s.dense.time_s + s.experts.time_s + s.attention.time_s)
    assert s.roofline_s >= max(s.compute_s, s.memory_s)


def test_deepseeks_fp4_checkpoint_keeps_attention_mtp_and_head_in_bf16() -> None:
    f = weight_formats(DSR1, Precision.FP4)
    assert (f.linear, f.attention_out) == (Precision.FP4, Precision.FP4)
    assert (f.attention, f.lm_head, f.mtp) == (Precision.BF16,) * 3
    llama = weight_formats(model_named("llama-3.1-70b"), Precision.FP8)
    assert (llama.attention, llama.lm_head) == (Precision.FP8, Precision.BF16)


def test_attention_runs_at_the_kv_cache_precision_not_the_weights() -> None:
    """FP4 weights keep an FP8 cache (plans.KV_PRECISION): the attention products run at B200's FP8 rate, half
    its FP4 one, so at equal FLOPs attention takes twice the time a linear layer would."""
    s = step(ServePlan(tp=1, dp=8, ep=8, batch=512))
    flops_attn = DSR1.attention_flops_per_token(1536.0) * 512 / 8
    assert s.attention.compute_s == pytest.approx(flops_attn / (B200.gpu.flops(Precision.FP8) * EFF.compute))


def test_a_hotter_gpu_slows_the_experts_and_their_all_to_all_only() -> None:
    plan = ServePlan(tp=1, dp=8, ep=8, batch=2048)
    even, hot = step(plan), step(plan, imbalance=1.5)
    assert hot.experts.compute_s == pytest.approx(1.5 * even.experts.compute_s)
    assert hot.ep_comm_s > even.ep_comm_s
    assert hot.dense == even.dense and hot.attention == even.attention


def test_mtp_emits_the_measured_tokens_and_pays_one_module_forward_per_draft() -> None:
    assert [DEEPSEEK_MTP.with_drafts(d).tokens_emitted for d in (0, 1, 2, 3)] == [1.0, 1.92, 2.58, 2.82]
    assert Mtp(drafts=2, acceptance=0.5).tokens_emitted == pytest.approx(1.75)  # no measurement: geometric
    plan = ServePlan(tp=8, ep=8, batch=16)
    steps = [step(plan, mtp=DEEPSEEK_MTP.with_drafts(d)) for d in (1, 2, 3)]
    drafts = [s.draft_s for s in steps]
    assert drafts[1] == pytest.approx(2 * drafts[0]) and drafts[2] == pytest.approx(3 * drafts[0])
    # one draft is the BF16 MTP module (one layer and the output head) over one token per sequence, no step cost
    module = decode_step(
        mtp_module(DSR1), Precision.BF16, plan, gpu=B200.gpu, links=links_of(B200), span=Span.packed(8, 8),
        context=1536.0, eff=replace(EFF, step_overhead_s=0.0), batch=16.0,
    )  # fmt: skip
    assert drafts[0] == pytest.approx(module.step_s)
    assert module.weights_s > step(plan).weights_s / DSR1.layers  # BF16 weights: more bytes than one FP4 layer


def test_a_mean_batch_interpolates_between_whole_ones() -> None:
    plan = ServePlan(tp=1, dp=8, ep=8, batch=64)
    lo, mid, hi = step(plan, batch=64.0), step(plan, batch=64.5), step(plan, batch=65.0)
    assert lo.step_s < mid.step_s < hi.step_s
    assert lo.step_s == step(plan).step_s


def test_the_measured_moe_kernel_sets_the_experts_time() -> None:
    """The experts run through the chip's measured MoE kernel (llm/kernels.py): a fixed cost per MoE layer plus
    the slower of its compute and streaming shares; the min-latency kernel only up to 256 tokens."""
    plan = ServePlan(tp=1, dp=8, ep=8, batch=16)
    k = moe_kernels("B200", MoeBackend.CUTLASS, 16.0, 32.0)[0]
    s = step(plan, moe_backend=MoeBackend.CUTLASS)
    assert s.experts.fixed_s == pytest.approx(k.fixed_s * DSR1.moe_layers)
    assert s.experts.time_s == pytest.approx(s.experts.fixed_s + max(s.experts.compute_s, s.experts.memory_s))
    assert moe_kernels("B200", MoeBackend.TRTLLM, 300.0, 32.0)[0].backend is MoeBackend.CUTLASS  # past 256
    assert moe_kernels("H100", None, 16.0, 32.0) == ()  # no measurement: the generic roofline
    either = step(plan)  # no backend named: the faster measured kernel
    assert either.experts.time_s <= min(step(plan, moe_backend=b).experts.time_s for b in MoeBackend) + 1e-12


@pytest.mark.parametrize(
    ("experts_per_gpu", "ep_row"),
    [(32.0, 32), (30.0, 32), (1.0, 1), (256.0, 256)],
    ids=["ep8", "near-ep8", "one", "all"],
)
def test_a_kernel_fit_is_the_nearest_measured_experts_per_gpu(experts_per_gpu: float, ep_row: int) -> None:
    rows = dict(MEASURED_MOE_KERNELS[("GB200", MoeBackend.CUTLASS)])
    assert moe_kernels("GB200", MoeBackend.CUTLASS, 64.0, experts_per_gpu) == (rows[ep_row],)
