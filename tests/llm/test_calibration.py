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
    for run in (cal.SERVING_COMPUTE_RUN, cal.SERVING_OVERHEAD_RUN):
        assert cal.run_interactivity(run, eff) == pytest.approx(run.tok_s_user, rel=0.01), run.key


def test_the_training_constant_is_the_fit_on_its_one_point() -> None:
    assert cal.fit_training_compute() == pytest.approx(cal.TRAINING_COMPUTE, abs=5e-4)


@pytest.mark.parametrize(
    ("low", "high", "measure"),
    [
        (Efficiency(compute=0.1, step_overhead_s=5e-3), Efficiency(compute=0.3, step_overhead_s=5e-3), "compute"),
        (Efficiency(compute=0.2, step_overhead_s=12e-3), Efficiency(compute=0.2, step_overhead_s=2e-3), "overhead"),
    ],
    ids=["compute-speeds-the-compute-bound-run", "overhead-caps-the-lone-user"],
)
def test_each_fitted_constant_moves_the_run_it_is_fitted_on(low: Efficiency, high: Efficiency, measure: str) -> None:
    run = cal.SERVING_COMPUTE_RUN if measure == "compute" else cal.SERVING_OVERHEAD_RUN
    assert cal.run_interactivity(run, high) > 1.5 * cal.run_interactivity(run, low)
