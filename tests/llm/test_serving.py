"""Serving curves: plans that fit, the Pareto frontier, TTFT bounds and where the NVLink domain matters."""

from __future__ import annotations

import pytest

from rackscale.llm.calibration import serving_efficiency
from rackscale.llm.decode import DEEPSEEK_MTP, Efficiency, decode_step
from rackscale.llm.fabric import Span
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.plans import ServePlan, gpu_memory, max_batch
from rackscale.llm.precision import Precision
from rackscale.llm.serving import ServeWorkload, ServingMode, links_of, serve_curve

DSR1 = ServeWorkload(model=model_named("deepseek-r1"), precision=Precision.FP4, isl=1024, osl=1024, mtp=DEEPSEEK_MTP)
L70 = ServeWorkload(model=model_named("llama-3.1-70b"), precision=Precision.FP8, isl=1024, osl=1024)


def _eff(system: str) -> Efficiency:
    return serving_efficiency(system_named(system).gpu)


@pytest.mark.parametrize(
    ("model", "precision", "system", "plan", "fits"),
    [
        ("llama-3.1-405b", Precision.BF16, "h100", ServePlan(tp=1), False),
        ("llama-3.1-405b", Precision.BF16, "h100", ServePlan(tp=8), False),  # 810 GB of weights > 8 x 72 GB
        ("llama-3.1-405b", Precision.FP8, "h200", ServePlan(tp=8), True),
        ("llama-3.1-70b", Precision.BF16, "h100", ServePlan(tp=2), True),
        ("deepseek-r1", Precision.FP8, "h100", ServePlan(tp=8), False),  # 671 GB at FP8 > 8 x 72 GB
        ("deepseek-r1", Precision.FP4, "b200", ServePlan(tp=1, dp=8, ep=8), True),
    ],
    ids=["405b-1gpu", "405b-bf16-8xh100", "405b-fp8-8xh200", "70b-tp2", "r1-fp8-8xh100", "r1-fp4-ep8"],
)
def test_plans_fit_hbm_or_not(model: str, precision: Precision, system: str, plan: ServePlan, fits: bool) -> None:
    s = system_named(system)
    assert (max_batch(model_named(model), precision, plan, context=2048, hbm_bytes=s.gpu.hbm_bytes) >= 1) is fits


def test_expert_parallel_shards_the_experts_and_dp_attention_replicates_attention() -> None:
    m = model_named("deepseek-r1")
    ep8 = gpu_memory(m, Precision.FP4, ServePlan(tp=1, dp=8, ep=8), context=0)
    ep32 = gpu_memory(m, Precision.FP4, ServePlan(tp=1, dp=32, ep=32), context=0)
    tp8 = gpu_memory(m, Precision.FP4, ServePlan(tp=8, dp=1, ep=8), context=0)
    assert ep32.expert_weights == pytest.approx(ep8.expert_weights / 4)
    assert ep8.shared_weights == pytest.approx(ep32.shared_weights)  # attention whole on every DP rank
    assert tp8.shared_weights < ep8.shared_weights / 4


def test_curve_is_a_pareto_frontier_and_best_at_falls_with_interactivity() -> None:
    s = system_named("h200")
    curve = serve_curve(L70, s, eff=_eff("h200"))
    xs = [p.interactivity for p in curve.points]
    ys = [p.tok_s_gpu for p in curve.points]
    assert xs == sorted(xs, reverse=True)
    assert ys == sorted(ys)  # higher interactivity, fewer tokens per GPU: nothing dominated is kept
    best = [curve.best_at(x) for x in (10, 30, 60, 100)]
    rates = [p.tok_s_gpu for p in best if p is not None]
    assert rates == sorted(rates, reverse=True) and len(rates) >= 3
    assert curve.best_at(1e6) is None  # a target no plan reaches


def test_a_ttft_bound_keeps_only_points_that_meet_it() -> None:
    s = system_named("h100")
    long_prompts = ServeWorkload(model=model_named("llama-3.1-70b"), precision=Precision.FP8, isl=32_000, osl=256)
    free = serve_curve(long_prompts, s, eff=_eff("h100"), mode=ServingMode.AGGREGATED)
    limit = max(p.ttft_s for p in free.points) / 2  # a bound the unbounded curve breaks
    bound = serve_curve(
        ServeWorkload(model=long_prompts.model, precision=Precision.FP8, isl=32_000, osl=256, ttft_s=limit),
        s,
        eff=_eff("h100"),
        mode=ServingMode.AGGREGATED,
    )
    assert bound.points and all(p.ttft_s <= limit for p in bound.points)
    assert any(p.ttft_s > limit for p in free.points)


def test_disaggregated_users_do_not_see_prefill_and_aggregated_ones_do() -> None:
    s = system_named("b200")
    agg = serve_curve(L70, s, eff=_eff("b200"), mode=ServingMode.AGGREGATED)
    dis = serve_curve(L70, s, eff=_eff("b200"), mode=ServingMode.DISAGGREGATED)
    assert all(p.mode is ServingMode.AGGREGATED for p in agg.points)
    for p in agg.points:
        assert p.interactivity == pytest.approx(1.0 / p.step.step_s * (1 - p.prefill_share))
    for p in dis.points:
        assert p.interactivity == pytest.approx(1.0 / p.step.step_s)
        assert p.prefill_plan is not None


def test_a_tp16_replica_split_over_two_domains_runs_its_all_reduce_on_the_nic() -> None:
    """
    one NVL72 domain: [ 16 GPUs ]            two 8-GPU domains: [ 8 ] -- NIC -- [ 8 ]
    """
    s = system_named("gb200")
    m, plan = model_named("llama-3.1-405b"), ServePlan(tp=16, batch=64)
    kw = dict(gpu=s.gpu, links=links_of(s), context=2048.0, eff=_eff("gb200"))
    inside = decode_step(m, Precision.FP8, plan, span=Span((16,)), **kw)  # type: ignore[arg-type]
    split = decode_step(m, Precision.FP8, plan, span=Span((8, 8)), **kw)  # type: ignore[arg-type]
    assert split.tp_comm_s > 5 * inside.tp_comm_s
    assert split.step_s > inside.step_s
    assert split.compute_s == inside.compute_s and split.memory_s == inside.memory_s


def test_wide_expert_parallel_needs_the_nvlink_domain() -> None:
    """B200 chips in a 72-GPU domain (the what-if) beat the same chips in 8-GPU nodes at 150 tok/s/user:
    the rack keeps wide EP on NVLink (fewer expert bytes per GPU per step); the node's EP16 pays the NIC."""
    node = serve_curve(DSR1, system_named("b200"), eff=_eff("b200"), mode=ServingMode.DISAGGREGATED)
    rack = serve_curve(DSR1, system_named("b200:72"), eff=_eff("b200"), mode=ServingMode.DISAGGREGATED)
    a, b = rack.best_at(150), node.best_at(150)
    assert a is not None and b is not None
    assert a.tok_s_gpu > 1.3 * b.tok_s_gpu
    assert a.plan.ep > 8
    # the same wide plan on the node pays its all-to-all on the NIC
    wide = a.plan
    kw = dict(gpu=system_named("b200").gpu, context=1536.0, eff=_eff("b200"), mtp=DSR1.mtp)
    on_rack = decode_step(DSR1.model, DSR1.precision, wide, links=links_of(system_named("b200:72")),
                          span=Span.packed(wide.gpus, 72), **kw)  # type: ignore[arg-type]  # fmt: skip
    on_node = decode_step(DSR1.model, DSR1.precision, wide, links=links_of(system_named("b200")),
                          span=Span.packed(wide.gpus, 8), **kw)  # type: ignore[arg-type]  # fmt: skip
    # at a few users per GPU both pay the all-to-all's fixed latency (25 us on NVLink): the NIC's share still
    # makes the node's several times the rack's
    assert on_node.ep_comm_s > 2.5 * on_rack.ep_comm_s


def test_max_decode_ep_holds_the_plan_to_a_published_run() -> None:
    held = serve_curve(DSR1, system_named("b200"), eff=_eff("b200"), mode=ServingMode.DISAGGREGATED, max_decode_ep=8)
    assert held.points and all(p.plan.ep <= 8 for p in held.points)
