"""Replaying a serving recipe, and reading an envelope the way InferenceX's dashboard reads it."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackscale.bench.perf_published import _IX_ISO, INFERENCEX_DSR1_POINTS
from rackscale.llm.calibration import SERVING_COMPUTE_RUN, SERVING_OVERHEAD_RUN, serving_efficiency
from rackscale.llm.decode import DEEPSEEK_MTP
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.precision import Precision
from rackscale.llm.recipes import DisaggRecipe, RecipeError, decode_layouts, envelope, monotone_at, replay
from rackscale.llm.serving import ServeWorkload

DSR1 = ServeWorkload(model=model_named("deepseek-r1"), precision=Precision.FP4, isl=922, osl=922, mtp=DEEPSEEK_MTP)
GB200 = system_named("gb200")
EFF = serving_efficiency(GB200.gpu)
WIDE = DisaggRecipe(
    concurrency=2253, prefill_gpus=12, prefill_tp=12, decode_gpus=32, decode_ep=32, attention_dp=True,
    mtp_drafts=1, max_batch_per_rank=64, eplb=True,
)  # fmt: skip


@pytest.mark.parametrize(("system", "column"), [("gb200", 1), ("b200", 2)], ids=["gb200", "b200"])
def test_the_published_iso_table_is_the_monotone_cubic_through_the_published_runs(system: str, column: int) -> None:
    """The post's iso-interactivity table is read off its runs by d3's monotone cubic: the same reading of the
    same runs gives every published value (to the post's rounding). This is what the model's replay reads too."""
    runs = envelope((p.tok_s_user, p.tok_s_gpu) for p in INFERENCEX_DSR1_POINTS if p.system == system)
    for row in _IX_ISO:
        published, x = row[column], float(row[0])
        got = monotone_at(runs, x)
        if got is None:  # outside the runs (B200's 300 row is not in the table's data)
            continue
        assert got == pytest.approx(published, rel=0.005, abs=1.0), (system, x)


def test_a_straight_line_read_would_not_match() -> None:
    """The point of the test above: the 125 tok/s/user figure is far from a linear read between the runs."""
    runs = envelope((p.tok_s_user, p.tok_s_gpu) for p in INFERENCEX_DSR1_POINTS if p.system == "gb200")
    (x0, y0), (x1, y1) = next((a, b) for a, b in itertools.pairwise(runs) if a[0] <= 125 <= b[0])
    linear = y0 + (y1 - y0) * (125 - x0) / (x1 - x0)
    assert abs(linear / 4130 - 1) > 0.1
    assert monotone_at(runs, 125) == pytest.approx(4130, rel=0.002)


@given(st.lists(st.tuples(st.integers(0, 1000), st.floats(0, 1e5)), min_size=2, max_size=12, unique_by=lambda p: p[0]))
def test_the_monotone_cubic_passes_through_its_points_and_never_leaves_their_range(
    raw: list[tuple[int, float]],
) -> None:
    points = sorted((float(x), y) for x, y in raw)
    for x, y in points:
        got = monotone_at(points, x)
        assert got is not None and got == pytest.approx(y, rel=1e-9, abs=1e-6)
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        mid = monotone_at(points, (x0 + x1) / 2)
        assert mid is not None and min(y0, y1) - 1e-6 <= mid <= max(y0, y1) + 1e-6
    assert monotone_at(points, points[0][0] - 1) is None
    assert monotone_at(points, points[-1][0] + 1) is None


def test_envelope_keeps_the_pareto_frontier() -> None:
    frontier = envelope([(10, 100), (20, 80), (15, 70), (30, 10), (5, 90)])
    assert frontier == ((10, 100), (20, 80), (30, 10))


def test_the_decode_pool_holds_what_littles_law_puts_there() -> None:
    out = replay(DSR1, GB200, WIDE, eff=EFF)
    decode_s = DSR1.osl / out.interactivity
    assert out.decoding_users == pytest.approx(out.requests_s * decode_s, rel=1e-3)
    assert out.decoding_users <= 64 * 32 + 1e-6  # the runtime's batch cap
    assert out.total_tok_s_gpu == pytest.approx(out.output_tok_s_gpu * 2)  # ISL == OSL


@pytest.mark.parametrize(
    ("change", "effect"),
    [
        ({"concurrency": 400}, "fewer users decode faster"),
        ({"max_batch_per_rank": 16}, "a tighter cap decodes faster"),
        ({"eplb": False}, "without the balancer the busiest GPU is slower"),
        ({"mtp_drafts": 0}, "without drafts each step emits one token"),
    ],
    ids=["concurrency", "batch-cap", "eplb", "no-mtp"],
)
def test_each_recipe_setting_moves_interactivity_the_right_way(change: dict[str, object], effect: str) -> None:
    base = replay(DSR1, GB200, WIDE, eff=EFF)
    other = replay(DSR1, GB200, replace(WIDE, **change), eff=EFF)  # type: ignore[arg-type]
    if effect.startswith(("fewer", "a tighter")):
        assert other.interactivity > base.interactivity, effect
    else:
        assert other.interactivity < base.interactivity, effect


def test_a_small_prefill_pool_caps_the_request_rate() -> None:
    starved = replay(DSR1, GB200, replace(WIDE, prefill_gpus=4, prefill_tp=4), eff=EFF)
    assert starved.prefill_bound
    assert starved.requests_s < replay(DSR1, GB200, WIDE, eff=EFF).requests_s


def test_the_calibration_runs_are_the_posts_own_rows() -> None:
    for run in (SERVING_OVERHEAD_RUN, SERVING_COMPUTE_RUN):
        row = next(p for p in INFERENCEX_DSR1_POINTS if p.system == run.system and p.conc == run.recipe.concurrency)
        r = run.recipe
        assert (r.prefill_gpus, r.prefill_tp, r.decode_gpus, r.decode_ep) == (
            row.prefill_gpus, row.prefill_tp, row.decode_gpus, row.decode_ep,
        )  # fmt: skip
        assert (r.attention_dp, r.mtp_drafts, r.max_batch_per_rank, r.eplb) == (
            row.attention_dp, row.mtp_drafts, row.max_batch_per_rank, row.eplb,
        )  # fmt: skip
        assert run.tok_s_user == row.tok_s_user


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        (replace(WIDE, decode_ep=3), "does not divide"),
        (replace(WIDE, decode_gpus=30), "do not divide into instances"),
        (replace(WIDE, concurrency=0), "at least 1"),
        (replace(WIDE, mtp_drafts=-1), "mtp_drafts"),
        (replace(WIDE, decode_ep=32, attention_dp=False), "wider than"),
    ],
    ids=["ep-not-dividing-experts", "pool-not-dividing", "no-users", "negative-drafts", "tp-too-wide"],
)
def test_a_recipe_the_model_cannot_run_is_one_error(recipe: DisaggRecipe, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        replay(DSR1, GB200, recipe, eff=EFF)


def test_layouts_are_attention_dp_or_attention_tp_over_the_ep_group() -> None:
    both = decode_layouts(DSR1, 8)
    assert {(p.tp, p.dp, p.ep) for p in both} == {(1, 8, 8), (8, 1, 8)}
    assert [(p.tp, p.dp) for p in decode_layouts(DSR1, 8, True)] == [(1, 8)]
    assert [(p.tp, p.dp) for p in decode_layouts(DSR1, 8, False)] == [(8, 1)]


def test_replay_is_finite_for_every_published_run() -> None:
    for p in INFERENCEX_DSR1_POINTS:
        recipe = DisaggRecipe(
            concurrency=p.conc, prefill_gpus=p.prefill_gpus, prefill_tp=p.prefill_tp, decode_gpus=p.decode_gpus,
            decode_ep=p.decode_ep, attention_dp=p.attention_dp, mtp_drafts=p.mtp_drafts,
            max_batch_per_rank=p.max_batch_per_rank, eplb=p.eplb,
        )  # fmt: skip
        out = replay(DSR1, system_named(p.system), recipe, eff=EFF)
        assert math.isfinite(out.interactivity) and out.interactivity > 0
        assert math.isfinite(out.total_tok_s_gpu) and out.total_tok_s_gpu > 0
