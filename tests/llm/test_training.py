"""Training steps: compute at an MFU, pipeline bubbles, TP all-reduces, and DP all-reduce bytes per NIC
that shrink as the NVLink domain grows."""

from __future__ import annotations

import pytest

from rackscale.llm.calibration import training_efficiency
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.precision import Precision
from rackscale.llm.serving import links_of
from rackscale.llm.train_plans import best_train_plan, train_memory_bytes
from rackscale.llm.training import TrainPlan, TrainWorkload, train_step

WORK = TrainWorkload(model=model_named("llama-3.1-70b"), precision=Precision.BF16, seq_len=4096, global_batch=512)


def _step(system: str, plan: TrainPlan, work: TrainWorkload = WORK):  # type: ignore[no-untyped-def]
    s = system_named(system)
    return train_step(
        work, plan, gpu=s.gpu, links=links_of(s), domain_gpus=s.domain_gpus, eff=training_efficiency(s.gpu)
    )


def test_more_micro_batches_shrink_the_bubble() -> None:
    few = _step("h100", TrainPlan(tp=8, pp=8, dp=4, micro_batch=16))
    many = _step("h100", TrainPlan(tp=8, pp=8, dp=4, micro_batch=1))
    assert few.bubble_s / few.compute_s == pytest.approx(7 / 8)
    assert many.bubble_s / many.compute_s == pytest.approx(7 / 128)


def test_dp_all_reduce_bytes_per_nic_shrink_with_the_domain() -> None:
    """The same TP8 x DP32 plan: on 8-GPU nodes each node holds one DP rank per TP position; on NVL72 a
    domain holds nine, so each NIC carries a ninth of the inter-domain bytes."""
    plan = TrainPlan(tp=8, pp=1, dp=32, micro_batch=1, recompute=True)
    nodes = _step("b200", plan)
    rack = _step("b200:72", plan)
    assert rack.compute_s == pytest.approx(nodes.compute_s)
    assert rack.dp_comm_s < nodes.dp_comm_s / 4


def test_recomputation_costs_a_forward_pass() -> None:
    plain = _step("h100", TrainPlan(tp=8, pp=4, dp=8))
    again = _step("h100", TrainPlan(tp=8, pp=4, dp=8, recompute=True))
    assert again.counted_flops / plain.counted_flops == pytest.approx(4 / 3)
    assert again.mfu < plain.mfu


def test_a_batch_that_does_not_split_is_refused() -> None:
    with pytest.raises(ValueError, match="global batch 512"):
        _step("h100", TrainPlan(tp=8, dp=3))


def test_the_plan_search_fits_hbm_and_is_the_fastest_it_tried() -> None:
    s = system_named("h100")
    choice = best_train_plan(WORK, s, gpus=64, links=links_of(s), eff=training_efficiency(s.gpu))
    assert choice is not None
    assert choice.memory_bytes <= s.gpu.hbm_bytes * 0.9
    assert choice.plan.gpus == 64
    # a plan that holds the whole model on one GPU does not fit: 70B x 16 bytes of states
    assert train_memory_bytes(WORK, TrainPlan(tp=1, pp=1, dp=64)) > s.gpu.hbm_bytes
    # the chosen plan beats a deliberately poor one that fits
    poor = _step("h100", TrainPlan(tp=8, pp=8, dp=1, micro_batch=1, recompute=True))
    assert choice.step.step_s < poor.step_s


MOE = TrainWorkload(model=model_named("deepseek-v3"), precision=Precision.FP8, seq_len=4096, global_batch=1024)


def test_expert_parallel_all_to_all_runs_on_the_tier_its_group_spans() -> None:
    """EP16 of one-GPU model shards: two 8-GPU nodes (the NIC) or one 72-GPU domain (NVLink)."""
    plan = TrainPlan(tp=1, pp=1, dp=64, ep=16, recompute=True)
    nodes = _step("b200", plan, MOE)
    rack = _step("b200:72", plan, MOE)
    assert nodes.ep_comm_s > 5 * rack.ep_comm_s > 0
    assert nodes.compute_s == pytest.approx(rack.compute_s)
    # EP inside one node costs NVLink time only
    inside = _step("b200", TrainPlan(tp=1, pp=1, dp=64, ep=8, recompute=True), MOE)
    assert inside.ep_comm_s < nodes.ep_comm_s / 5


def test_expert_parallel_shards_expert_states_and_needs_a_moe_model() -> None:
    one = train_memory_bytes(MOE, TrainPlan(tp=1, pp=16, dp=32, ep=1, recompute=True))
    wide = train_memory_bytes(MOE, TrainPlan(tp=1, pp=16, dp=32, ep=32, recompute=True))
    assert wide < one / 10
    with pytest.raises(ValueError, match="ep 8 needs a MoE model"):
        _step("h100", TrainPlan(tp=8, dp=8, ep=8))
