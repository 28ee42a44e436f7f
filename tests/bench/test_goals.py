"""Issue 13's goals judged on per-seed runs (``bench.goals.judge``), with the paired comparisons worked by hand.

t(0.975, df) from the NIST/SEMATECH table: df 1 = 12.706, df 2 = 4.303.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from rackscale.bench.goals import judge, paired

Run = dict[str, Any]


def run(seed: int, **kpis: float) -> Run:
    base: Run = {
        "seed": seed,
        "idle_rate": 0.04,
        "intra_rack_traffic_share": 0.95,
        "single_rack_share": 0.95,
        "mean_jct_s": 100.0,
        "training_samples_per_s": 10.0,
        "makespan_s": 1000.0,
        "slo_attainment": 0.98,
        "interactivity_slo_attainment": None,
        "ttft_slo_attainment": None,
        "lost_gpu_hours": 1.0,
    }
    return base | kpis


def verdict(results: list[Run], goal: str) -> Run:
    return next(v for v in results if v["goal"].startswith(goal))


def test_thresholds_are_judged_on_the_worst_run() -> None:
    got = judge({"rackscale": {"runs": [run(0), run(1, idle_rate=0.06)]}, "first-fit": {"runs": [run(0), run(1)]}})
    idle = verdict(got, "idle rate")
    assert idle["met"] is False and idle["value"] == pytest.approx(0.06)
    assert verdict(got, "intra-rack")["met"] is True


def test_jct_counts_seeds_won_and_pairs_each_baseline() -> None:
    #   seed:        0     1
    #   rackscale   90   110
    #   tiresias   100   100   -> -10 %, +10 %: mean 0, s = 0.1414, t(1) = 12.706: 0 ± 1.2706
    #   first-fit  200   200   -> -55 %, -45 %: mean -50 %, s = 0.0707: ± 0.6353
    ours = [run(0, mean_jct_s=90.0), run(1, mean_jct_s=110.0)]
    got = verdict(
        judge(
            {
                "rackscale": {"runs": ours},
                "tiresias": {"runs": [run(0), run(1)]},
                "first-fit": {"runs": [run(0, mean_jct_s=200.0), run(1, mean_jct_s=200.0)]},
            }
        ),
        "mean JCT",
    )
    assert got["value"] == {"tiresias": "1/2", "first-fit": "2/2"} and got["met"] is False
    t = got["paired"]["tiresias"]
    assert t["mean"] == pytest.approx(0.0, abs=1e-12) and t["seeds"] == 2
    assert t["ci95"] == pytest.approx(12.706 * math.sqrt(0.02) / math.sqrt(2))
    f = got["paired"]["first-fit"]
    assert f["mean"] == pytest.approx(-0.5) and f["ci95"] == pytest.approx(12.706 * math.sqrt(0.005) / math.sqrt(2))
    assert "tiresias +0.00 ± 127.06 % over 2 seed(s)" in got["detail"]


@pytest.mark.parametrize(
    ("ours", "theirs", "met", "noise"),
    [
        # 10.1 / 10.2 / 10.3 against 10 on each seed: +1, +2, +3 %: mean +2 %, s 1 %, t(2) = 4.303: ± 2.48 %
        ([10.1, 10.2, 10.3], [10.0, 10.0, 10.0], True, True),
        # +10.0, +10.1, +10.2 %: mean +10.1 %, s 0.1 %: ± 0.25 %, far from zero
        ([11.0, 11.01, 11.02], [10.0, 10.0, 10.0], True, False),
        ([9.0, 9.01, 9.02], [10.0, 10.0, 10.0], False, False),
        # identical on every seed: the difference is exact, not noise
        ([10.0, 10.0, 10.0], [10.0, 10.0, 10.0], True, False),
    ],
    ids=["met-within-noise", "met-clearly", "missed-clearly", "equal"],
)
def test_throughput_is_paired_with_the_best_baseline(
    ours: list[float], theirs: list[float], met: bool, noise: bool
) -> None:
    worse = [run(s, training_samples_per_s=1.0) for s in range(3)]
    got = verdict(
        judge(
            {
                "rackscale": {"runs": [run(s, training_samples_per_s=x) for s, x in enumerate(ours)]},
                "tiresias": {"runs": [run(s, training_samples_per_s=x) for s, x in enumerate(theirs)]},
                "first-fit": {"runs": worse},
            }
        ),
        "training throughput",
    )
    assert got["met"] is met and got["within_noise"] is noise
    assert list(got["paired"]) == ["tiresias"]  # the best baseline decides, not first-fit


def test_slo_is_paired_in_points() -> None:
    # +1.0, +1.1, +1.2 pt: mean +1.1 pt, s 0.1 pt, t(2) = 4.303: ± 0.248 pt
    ours = [run(s, slo_attainment=0.98 + x) for s, x in enumerate((0.010, 0.011, 0.012))]
    got = verdict(
        judge({"rackscale": {"runs": ours}, "kueue-tas": {"runs": [run(s) for s in range(3)]}}), "slo attainment"
    )
    d = got["paired"]["kueue-tas"]
    assert d["mean"] == pytest.approx(0.011) and d["ci95"] == pytest.approx(4.303 * 0.001 / math.sqrt(3))
    assert got["met"] is True and got["within_noise"] is False
    assert "+1.10 ± 0.25 pt over 3 seed(s)" in got["detail"]


def test_only_seeds_both_ran_are_paired() -> None:
    ours = [run(0, mean_jct_s=50.0), run(1, mean_jct_s=50.0), run(2, mean_jct_s=None)]  # type: ignore[arg-type]
    theirs = [run(1, mean_jct_s=100.0), run(2, mean_jct_s=100.0), run(3, mean_jct_s=100.0)]
    d = paired(ours, theirs, "mean_jct_s", relative=True)
    assert d == {"mean": pytest.approx(-0.5), "ci95": None, "seeds": 1}
    assert paired(ours, [run(7)], "mean_jct_s", relative=True) is None
