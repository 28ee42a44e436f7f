"""The runtime predictor's ratios (host/predicted.py): a job's run over its prediction, in fixed buckets."""

from __future__ import annotations

import math

import pytest

from rackscale.host.predicted import RATIO_BUCKETS, PredictionRatios


@pytest.mark.parametrize(
    ("run_s", "predicted_s", "le"),
    [
        pytest.param(100.0, 100.0, 1.25, id="exact"),
        pytest.param(125.0, 100.0, 1.25, id="on-a-bound-is-in-it"),
        pytest.param(126.0, 100.0, 2.0, id="just-over-a-bound"),
        pytest.param(0.0, 100.0, 0.125, id="ended-at-once"),
        pytest.param(1e9, 1.0, math.inf, id="far-over"),
    ],
)
def test_a_ratio_lands_in_the_smallest_bucket_that_holds_it(run_s: float, predicted_s: float, le: float) -> None:
    r = PredictionRatios()
    r.observe(run_s=run_s, predicted_s=predicted_s)
    cum = r.cumulative()
    assert next(b for b, n in cum if n) == le
    assert cum[-1] == (math.inf, 1) and r.total == pytest.approx(run_s / predicted_s)


@pytest.mark.parametrize(
    ("run_s", "predicted_s"),
    [
        pytest.param(100.0, 0.0, id="zero-prediction"),
        pytest.param(100.0, math.nan, id="nan-prediction"),
        pytest.param(math.inf, 100.0, id="infinite-run"),
        pytest.param(-1.0, 100.0, id="negative-run"),
    ],
)
def test_no_ratio_is_counted_without_a_finite_positive_prediction_and_run(run_s: float, predicted_s: float) -> None:
    r = PredictionRatios()
    r.observe(run_s=run_s, predicted_s=predicted_s)
    assert r.count == 0 and r.total == 0.0


def test_the_buckets_are_cumulative_and_end_at_inf() -> None:
    r = PredictionRatios()
    for ratio in (0.1, 0.3, 0.3, 1.0, 3.0, 100.0):
        r.observe(run_s=ratio * 10.0, predicted_s=10.0)
    cum = r.cumulative()
    assert [le for le, _ in cum] == list(RATIO_BUCKETS)
    assert [n for _, n in cum] == [1, 1, 3, 3, 4, 4, 5, 5, 6]
