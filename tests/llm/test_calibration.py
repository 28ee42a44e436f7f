"""The fitted constants are what their fits give: a constant cannot drift to make another test pass."""

from __future__ import annotations

import pytest

from rackscale.llm import calibration as cal
from rackscale.llm.decode import Efficiency


def test_the_serving_constants_are_the_fits_on_their_points() -> None:
    compute, overhead = cal.fit_serving()
    assert compute == pytest.approx(cal.SERVING_COMPUTE, abs=5e-4)
    assert overhead == pytest.approx(cal.SERVING_STEP_OVERHEAD_S, abs=2e-5)
    eff = Efficiency(compute=cal.SERVING_COMPUTE, step_overhead_s=cal.SERVING_STEP_OVERHEAD_S)
    assert cal.serving_peak(cal.SERVING_POINT, eff) == pytest.approx(cal.SERVING_POINT.tok_s_gpu, rel=0.01)
    assert cal.fastest(cal.SERVING_OVERHEAD_POINT, eff) == pytest.approx(cal.SERVING_OVERHEAD_INTERACTIVITY, rel=0.01)


def test_the_training_constant_is_the_fit_on_its_one_point() -> None:
    assert cal.fit_training_compute() == pytest.approx(cal.TRAINING_COMPUTE, abs=5e-4)


@pytest.mark.parametrize(
    ("low", "high", "measure"),
    [
        (Efficiency(compute=0.2), Efficiency(compute=0.4), "peak"),
        (Efficiency(step_overhead_s=8e-3), Efficiency(step_overhead_s=2e-3), "fastest"),
    ],
    ids=["compute-raises-the-peak", "overhead-caps-interactivity"],
)
def test_each_fitted_constant_moves_the_figure_it_is_fitted_on(low: Efficiency, high: Efficiency, measure: str) -> None:
    if measure == "peak":
        assert cal.serving_peak(cal.SERVING_POINT, high) > 1.5 * cal.serving_peak(cal.SERVING_POINT, low)
    else:
        assert cal.fastest(cal.SERVING_OVERHEAD_POINT, high) > 1.5 * cal.fastest(cal.SERVING_OVERHEAD_POINT, low)
