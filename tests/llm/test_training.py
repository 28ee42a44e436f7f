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


def test_a_larger_nvlink_domain_never_trains_slower() -> None:
    """The best plan for 512 GPUs at each domain size: more GPUs under NVLink never lowers tokens/s. At 72, 64
    data-parallel ranks of TP4 x PP2 (nine to a domain) once lay 7 domains of nine and one of one, whose NIC
    carried the whole gradient shard: 72 read slower than 64."""
    work = TrainWorkload(model=model_named("llama-3.1-70b"), precision=Precision.BF16, seq_len=4096, global_batch=1024)
    rates = []
    for domain in (8, 16, 32, 64, 72, 96, 144):
        s = system_named(f"h100:{domain}")
        choice = best_train_plan(work, s, gpus=512, links=links_of(s), eff=training_efficiency(s.gpu))
        assert choice is not None
        rates.append(choice.step.tokens_per_s)
    assert rates == sorted(rates), rates


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


LONG = TrainWorkload(model=model_named("llama-3.1-405b"), precision=Precision.BF16, seq_len=131_072, global_batch=16)


def test_context_parallel_ranks_split_the_sequence_and_gather_its_keys_and_values() -> None:
    """CP 16 against the same GPUs as DP: the compute per GPU is the same (the work is the same), each rank's TP
    all-reduces carry a sixteenth of the tokens, and the K/V all-gathers appear, on the NIC of 8-GPU nodes."""
    as_dp = _step("h100", TrainPlan(tp=8, pp=16, dp=16, virtual_stages=8), LONG)
    as_cp = _step("h100", TrainPlan(tp=8, cp=16, pp=16, dp=1, virtual_stages=8), LONG)
    assert as_cp.gpus == as_dp.gpus == 2048
    assert as_cp.compute_s == pytest.approx(as_dp.compute_s)
    assert as_dp.cp_comm_s == 0.0 < as_cp.cp_comm_s
    # a sixteenth of a sequence per all-reduce, 16 times as many (the fixed latency aside): the same bytes
    assert as_cp.tp_comm_s == pytest.approx(as_dp.tp_comm_s, rel=0.01)
    assert as_cp.step_s == pytest.approx(
        as_cp.compute_s + as_cp.bubble_s + as_cp.tp_comm_s + as_cp.pp_comm_s + as_cp.dp_comm_s + as_cp.cp_comm_s
    )


def test_context_parallel_gathers_over_nvlink_inside_a_domain() -> None:
    """On NVL72 a CP group of 8 TP-8 ranks (64 GPUs) lies inside one domain: the same gathers are cheaper
    than across 8-GPU nodes, where each member sits in its own node and sends over the NIC."""
    plan = TrainPlan(tp=8, cp=8, pp=16, dp=1, virtual_stages=8)
    nodes = _step("b200", plan, LONG)
    rack = _step("b200:72", plan, LONG)
    assert 0.0 < rack.cp_comm_s < nodes.cp_comm_s / 5
    assert rack.compute_s == pytest.approx(nodes.compute_s)


def test_context_parallel_shrinks_activation_memory_and_counts_in_the_data_parallel_layout() -> None:
    plain = TrainPlan(tp=8, pp=16, dp=1)
    split = TrainPlan(tp=8, cp=16, pp=16, dp=1)
    assert train_memory_bytes(LONG, split) < train_memory_bytes(LONG, plain) / 4
    assert split.shard_gpus == 2048 and split.as_dict()["cp"] == 16


def test_interleaved_stages_shrink_the_bubble_as_llama3_states() -> None:
    """Llama 3 section 3.3.2: the bubble of an interleaved schedule is (PP - 1) / (V x M)."""
    work = TrainWorkload(model=model_named("llama-3.1-405b"), precision=Precision.BF16, seq_len=8192, global_batch=2048)
    one = _step("h100", TrainPlan(tp=8, pp=16, dp=64), work)
    eight = _step("h100", TrainPlan(tp=8, pp=16, dp=64, virtual_stages=8), work)
    assert one.bubble_s / one.compute_s == pytest.approx(15 / 32)
    assert eight.bubble_s / eight.compute_s == pytest.approx(15 / 256)


def test_activation_memory_grows_linearly_with_the_sequence_as_fused_attention_keeps_no_scores() -> None:
    """Korthikanti et al.'s 34 s h / tp bytes per layer and micro-batch in flight; the a s^2 attention scores
    of their eq. 2 are never stored by a fused (flash) attention kernel, so doubling s doubles activations."""
    plan = TrainPlan(tp=8, pp=16, dp=1)
    model = model_named("llama-3.1-405b")

    def memory(seq: int) -> float:
        return train_memory_bytes(
            TrainWorkload(model=model, precision=Precision.BF16, seq_len=seq, global_batch=16), plan
        )

    # the states (weights, gradients, optimizer) do not depend on the sequence: differences are activations
    one, two, four = memory(8192), memory(16384), memory(32768)
    assert four - two == pytest.approx(2 * (two - one))
    per_layer = 34 * 8192 * model.hidden / 8
    assert two - one == pytest.approx(per_layer * model.layers / 16 * 16)  # 126/16 layers, 16 micro-batches in flight


def test_unfused_attention_moves_the_scores_through_hbm_and_fused_attention_does_not() -> None:
    """Without a fused kernel each head's s x s scores go through HBM 6.5 times forward and 9.5 times backward
    (6.5 more when recomputing), at the memory share of the HBM bandwidth: four times the time at twice the
    sequence; with FlashAttention, none."""
    model = model_named("llama-3.1-70b")
    plan = TrainPlan(tp=8, pp=4, dp=8, recompute=True)
    a100 = system_named("a100")

    def unfused(seq: int, batch: int) -> float:
        work = TrainWorkload(
            model=model, precision=Precision.BF16, seq_len=seq, global_batch=batch, fused_attention=False
        )
        return _step("a100", plan, work).attention_hbm_s

    m = 512 // 8  # micro-batches per step
    scores = model.heads / 8 * 4096 * 4096 * 2  # bytes of one micro-batch's scores on one TP rank, per layer
    passes = 6.5 * 2 + 9.5
    eff = training_efficiency(a100.gpu)
    want = m * model.layers / 4 * passes * scores / (a100.gpu.hbm_bytes_per_s * eff.memory)
    assert unfused(4096, 512) == pytest.approx(want)
    assert unfused(8192, 256) == pytest.approx(2 * unfused(4096, 512))  # same tokens: half the sequences, s^2 x4
    fused = _step("a100", plan)
    assert fused.attention_hbm_s == 0.0
    slow = _step("a100", plan, TrainWorkload(model=model, precision=Precision.BF16, seq_len=4096, global_batch=512,
                                            fused_attention=False))  # fmt: skip
    assert slow.step_s == pytest.approx(fused.step_s + slow.attention_hbm_s * (1 + 3 / m))  # its bubble grows too


def test_unfused_attention_keeps_the_scores_for_the_backward_pass() -> None:
    """Korthikanti et al.'s 5 a s^2 bytes per layer and micro-batch (over tp) come back without a fused kernel."""
    model = model_named("llama-3.1-70b")
    plan = TrainPlan(tp=8, pp=4, dp=1)

    def memory(fused: bool) -> float:
        work = TrainWorkload(model=model, precision=Precision.BF16, seq_len=4096, global_batch=4, fused_attention=fused)
        return train_memory_bytes(work, plan)

    in_flight, layers = 4, model.layers / 4
    assert memory(False) - memory(True) == pytest.approx(5 * model.heads * 4096 * 4096 / 8 * layers * in_flight)


@pytest.mark.parametrize(
    ("system", "fused", "share"),
    [("h100", True, 0.35), ("h100", False, None), ("a100", True, None), ("gb200", True, None)],
    ids=["h100-flash-attention", "h100-unfused", "a100-unmeasured", "gb200-unmeasured"],
)
def test_fused_attention_runs_at_its_measured_share_of_the_peak(system: str, fused: bool, share: float | None) -> None:
    """H100's fused attention at FlashAttention-2's measured 35 % of the peak; elsewhere (no measurement, or
    unfused attention, whose FLOPs are GEMMs) at the fitted compute share."""
    s = system_named(system)
    eff = training_efficiency(s.gpu)
    work = TrainWorkload(
        model=model_named("llama-3.1-70b"), precision=Precision.BF16, seq_len=8192, global_batch=256,
        fused_attention=fused,
    )  # fmt: skip
    plan = TrainPlan(tp=8, pp=4, dp=8)
    step = _step(system, plan, work)
    linear = 2.0 * work.model.active_params() * 256 * 8192
    attention = work.model.attention_flops_per_token(8192 / 2.0) * 256 * 8192
    peak = s.gpu.flops(Precision.BF16) * plan.gpus
    want = 3 * (linear / eff.compute + attention / (share or eff.compute)) / peak
    assert step.compute_s == pytest.approx(want)
    assert attention / (linear + attention) > 0.05  # enough attention at 8k for the share to matter
