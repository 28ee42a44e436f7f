"""The published figures are self-consistent: each derived number agrees with the numbers it is derived from.

The catalogue copies numbers from documents (docs/perf-published.md). A typo in one of them would make the
performance model chase a figure nobody published; these tests catch the typos that leave a trace: a ratio
that is not its two values, a cost that is not its throughput at the quoted rate, a parallel layout that
does not multiply to the GPU count, a parameter count the paper's own formula does not give.
"""

from __future__ import annotations

from decimal import Decimal
from itertools import pairwise

import pytest

from rackscale.bench import perf_published as pub
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.serving import ServingMode
from rackscale.model.errors import RackscaleError

SERVING = pub.SERVING_FIGURES
TRAINING = pub.TRAINING_FIGURES
POINTS = pub.INFERENCEX_DSR1_POINTS
ISO = tuple(f for f in SERVING if f.key.startswith("inferencex-") and f.interactivity is not None)


def _unit(value: float) -> float:
    """The step a published number was rounded to: 1 for 941, 0.1 for 14659.4, 0.01 for 2327.47."""
    exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    return 10.0 ** min(int(exponent), 0)


@pytest.mark.parametrize("fig", SERVING, ids=[f.key for f in SERVING])
def test_each_ratio_is_its_two_values_within_rounding(fig: pub.ServingFigure) -> None:
    exact = fig.value_a / fig.value_b
    # The ratio is rounded to 0.01 and each value to its own last digit, which moves the ratio by up to
    # ratio * (half a unit / value) on each side (InferenceX's 250 row: 186 / 193 = 0.964, published 0.97).
    slack = 0.005 + exact * (0.5 * _unit(fig.value_a) / fig.value_a + 0.5 * _unit(fig.value_b) / fig.value_b)
    assert abs(fig.ratio - exact) <= slack + 1e-9


@pytest.mark.parametrize("fig", SERVING, ids=[f.key for f in SERVING])
def test_each_serving_figure_names_its_source_and_conditions(fig: pub.ServingFigure) -> None:
    assert fig.url.startswith("https://")
    assert fig.source and len(fig.conditions) > 100
    model_named(fig.model)  # a built-in, so the model can be run on it
    for system in (fig.system_a, fig.system_b):
        system_named(system)
    assert fig.isl > 0 and fig.osl > 0 and fig.value_a > 0 and fig.value_b > 0
    assert {fig.mode, fig.b_mode} <= {ServingMode.AGGREGATED, ServingMode.DISAGGREGATED}


@pytest.mark.parametrize("fig", [f for f in SERVING if f.tpot_s is not None], ids=lambda f: f.key)
def test_a_tpot_bound_is_read_as_its_interactivity(fig: pub.ServingFigure) -> None:
    assert fig.interactivity == pytest.approx(1.0 / fig.tpot_s)  # type: ignore[operator]
    assert fig.ttft_s is not None and fig.ttft_s > 0  # every MLPerf LLM scenario bounds both


def test_keys_are_unique_and_looked_up() -> None:
    keys = [f.key for f in SERVING] + [f.key for f in TRAINING] + [q.key for q in pub.QUALITATIVE]
    assert len(keys) == len(set(keys))
    assert pub.serving_figure("inferencex-dsr1-fp4-125").value_b == 941
    assert pub.training_figure("megatron-t2-175b-384").tflops_per_gpu == 153


@pytest.mark.parametrize(
    "lookup, key",
    [(pub.serving_figure, "inferencex-dsr1-fp4-126"), (pub.training_figure, "megatron-175b"), (pub.serving_figure, 7)],
    ids=["serving-typo", "training-unknown", "not-text"],
)
def test_an_unknown_key_is_refused_with_the_choices(lookup, key) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(pub.UnknownFigureError) as err:
        lookup(key)
    assert isinstance(err.value, ValueError) and isinstance(err.value, RackscaleError)
    assert "choose one of" in str(err.value)


def test_the_iso_table_supports_the_headline() -> None:
    """'Up to 4.4x throughput per GPU at 125 tok/s/user' (the post's title), and B200 'about 1.2x' ahead
    above 250 tok/s/user (its FAQ)."""
    best = max(ISO, key=lambda f: f.ratio)
    assert best.interactivity == 125 and round(best.ratio, 1) == 4.4
    assert round(1 / pub.serving_figure("inferencex-dsr1-fp4-275").ratio, 1) == 1.2


@pytest.mark.parametrize("side", ["a", "b"])
def test_iso_throughput_falls_as_interactivity_rises(side: str) -> None:
    values = [getattr(f, f"value_{side}") for f in sorted(ISO, key=lambda f: f.interactivity or 0.0)]
    assert all(hi > lo for hi, lo in pairwise(values))


@pytest.mark.parametrize("point", POINTS, ids=[f"{p.system}-conc{p.conc}" for p in POINTS])
def test_each_measured_run_is_consistent(point: pub.ParetoPoint) -> None:
    assert point.tpot_ms == pytest.approx(1000.0 / point.tok_s_user, rel=0.005)
    rate = pub.TCO_USD_PER_GPU_HOUR[point.system]
    assert point.usd_per_mtok == pytest.approx(rate * 1e6 / (3600.0 * point.tok_s_gpu), rel=0.01, abs=0.005)
    assert point.decode_gpus % point.decode_ep == 0  # whole expert-parallel groups


def test_b200_decode_never_leaves_its_nvlink_node() -> None:
    """The published B200 recipes keep decode EP inside one 8-GPU node; only GB200 runs EP16 and EP32."""
    node = system_named("b200").domain_gpus
    assert max(p.decode_ep for p in POINTS if p.system == "b200") <= node
    assert max(p.decode_ep for p in POINTS if p.system == "gb200") > node


def test_the_peak_figure_is_each_systems_best_measured_run() -> None:
    peak = pub.serving_figure("inferencex-dsr1-fp4-peak")
    best = {s: max(p.tok_s_gpu for p in POINTS if p.system == s) for s in ("gb200", "b200")}
    assert (peak.value_a, peak.value_b) == (best["gb200"], best["b200"])


def test_the_cost_gap_at_125_is_the_throughput_gap_over_the_rates() -> None:
    """The post: 'the 4.39x throughput peak (3.87x cost gap) at 125 tok/s/user'."""
    fig = pub.serving_figure("inferencex-dsr1-fp4-125")
    rate = pub.TCO_USD_PER_GPU_HOUR
    gap = (rate["b200"] / fig.value_b) / (rate["gb200"] / fig.value_a)
    assert round(gap, 2) == 3.87


def test_qualitative_figures_have_sources() -> None:
    assert pub.QUALITATIVE
    assert all(q.url.startswith("https://") and len(q.text) > 40 for q in pub.QUALITATIVE)


@pytest.mark.parametrize("fig", TRAINING, ids=[f.key for f in TRAINING])
def test_each_training_layout_multiplies_to_its_gpus(fig: pub.TrainingFigure) -> None:
    assert fig.tp * fig.pp * fig.dp * fig.cp == fig.gpus
    assert fig.global_batch % fig.dp == 0
    assert fig.url.startswith("https://") and len(fig.conditions) > 100
    system_named(fig.system)
    if fig.arch is None:
        model_named(fig.model)


@pytest.mark.parametrize("fig", [f for f in TRAINING if f.peak_fraction is not None], ids=lambda f: f.key)
def test_each_share_of_peak_is_the_rate_over_the_peak(fig: pub.TrainingFigure) -> None:
    # Megatron prints TFLOP/s to the unit; Llama 3's Table 4 only multiples of 10 (400 -> 41 % needs >= 405).
    unit = 10.0 if fig.key.startswith("llama3") else 1.0
    assert fig.peak_fraction == pytest.approx(
        fig.tflops_per_gpu / fig.peak_tflops, abs=0.005 + unit / 2 / fig.peak_tflops
    )


@pytest.mark.parametrize("fig", [f for f in TRAINING if f.aggregate_pflops is not None], ids=lambda f: f.key)
def test_each_aggregate_is_the_per_gpu_rate_times_the_gpus(fig: pub.TrainingFigure) -> None:
    assert fig.aggregate_pflops == pytest.approx(fig.tflops_per_gpu * fig.gpus / 1000, abs=0.5 * fig.gpus / 1000 + 0.05)


@pytest.mark.parametrize("fig", [f for f in TRAINING if f.arch is not None], ids=lambda f: f.key)
def test_each_parameter_count_is_the_papers_eq2(fig: pub.TrainingFigure) -> None:
    arch = fig.arch
    assert arch is not None
    layers, h, v, s = arch.layers, arch.hidden, arch.vocab, fig.seq_len
    params = 12 * layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))
    assert params / 1e9 == pytest.approx(arch.params_b, abs=0.06)


@pytest.mark.parametrize("fig", [f for f in TRAINING if f.arch is not None], ids=lambda f: f.key)
def test_megatron_flops_is_eq3_and_mfu_drops_the_recompute_pass(fig: pub.TrainingFigure) -> None:
    arch = fig.arch
    assert arch is not None
    b, s, layers, h, v = fig.global_batch, fig.seq_len, arch.layers, arch.hidden, arch.vocab
    eq3 = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert pub.megatron_flops(arch=arch, global_batch=b, seq_len=s, recompute=True) == pytest.approx(eq3)
    mfu = pub.model_flops_utilisation(fig)
    assert mfu is not None
    # Three passes of four for the layers; the logit layer (not recomputed) keeps the ratio just above 3/4.
    assert 0.75 < mfu / (fig.tflops_per_gpu / fig.peak_tflops) < 0.80


def test_a_source_mfu_is_returned_as_published() -> None:
    fig = pub.training_figure("llama3-405b-16384-128k")
    assert pub.model_flops_utilisation(fig) == fig.mfu
    assert fig.counts_recompute is False and fig.seq_len * fig.global_batch == 16 * 2**20


def test_llama3_interleaving_depth_is_the_one_its_layer_count_allows() -> None:
    """126 layers plus the embedding-only and output-only chunks fill PP x V chunks of one layer each."""
    model = model_named("llama-3.1-405b")
    for fig in (f for f in TRAINING if f.key.startswith("llama3")):
        assert fig.pp * fig.virtual_stages == model.layers + 2
