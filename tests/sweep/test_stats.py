"""Seeds' means and 95 % confidence intervals, and the paired comparison, against values worked by hand.

t(0.975, df) from the NIST/SEMATECH table: df 1 = 12.706, df 2 = 4.303, df 3 = 3.182.
"""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.sim.stats import estimate, t975
from rackscale.sweep.results import aggregate, compare


def rec(policy: str, seed: int, jct: float | None, racks: int = 1) -> dict[str, Any]:
    return {"key": f"{policy}-{seed}-{racks}", "status": "ok", "options": {"policy": policy, "seed": seed,
            "racks": racks}, "kpis": {"mean_jct_s": jct}}  # fmt: skip


@pytest.mark.parametrize(
    ("values", "mean", "half"),
    [
        # s = sqrt(((1.5^2 + 0.5^2) * 2) / 3) = 1.29099; s / sqrt(4) = 0.645497; x 3.182 = 2.05397
        ([1.0, 2.0, 3.0, 4.0], 2.5, 2.05397),
        # s = sqrt(2) / sqrt(1)... values 10, 12: s = 1.41421, / sqrt(2) = 1.0; x 12.706
        ([10.0, 12.0], 11.0, 12.706),
        ([5.0, 5.0, 5.0], 5.0, 0.0),
        ([7.0], 7.0, None),
    ],
    ids=["four-values", "two-values", "no-spread", "one-value"],
)
def test_estimate(values: list[float], mean: float, half: float | None) -> None:
    e = estimate(values)
    assert e is not None and e.n == len(values) and e.mean == pytest.approx(mean)
    assert e.ci95 == (None if half is None else pytest.approx(half, abs=1e-4))


@pytest.mark.parametrize(("df", "t"), [(1, 12.706), (3, 3.182), (30, 2.042), (35, 2.042), (45, 2.021), (10**4, 1.96)],
                         ids=["df1", "df3", "df30", "df35-next-smaller", "df45", "normal"])  # fmt: skip
def test_t_table(df: int, t: float) -> None:
    assert t975(df) == t


def test_aggregate_groups_by_everything_but_the_seed() -> None:
    recs = [rec("a", 0, 1.0), rec("a", 1, 2.0), rec("a", 2, 3.0), rec("a", 3, 4.0), rec("a", 0, 9.0, racks=2)]
    recs.append({**rec("a", 4, 100.0), "status": "failed"})  # not counted
    groups = {g["options"]["racks"]: g for g in aggregate(recs, ["mean_jct_s"])}
    assert groups[1]["seeds"] == [0, 1, 2, 3] and groups[1]["mean_jct_s"]["mean"] == pytest.approx(2.5)
    assert groups[1]["mean_jct_s"]["ci95"] == pytest.approx(2.05397, abs=1e-4)
    assert groups[2]["mean_jct_s"] == {"n": 1, "mean": 9.0, "ci95": None}


def test_comparison_is_paired_by_seed() -> None:
    # baseline 10, 10, 10; policy 8, 9, 10 -> -20 %, -10 %, 0 %: mean -10 %, s = 10, se = 5.7735, x 4.303
    recs = [rec("base", s, 10.0) for s in range(3)] + [rec("new", s, x) for s, x in enumerate([8.0, 9.0, 10.0])]
    recs.append(rec("new", 7, 1.0))  # no baseline for seed 7: not paired
    recs.append(rec("base", 0, 20.0, racks=2))  # another group, no pair at all
    [c] = compare(recs, baseline="base", kpis=["mean_jct_s"])
    assert (c["policy"], c["n"], c["options"]) == ("new", 3, {"racks": 1})
    assert c["mean_pct"] == pytest.approx(-10.0) and c["ci95_pct"] == pytest.approx(24.843, abs=1e-3)
    assert c["text"] == "new vs base: mean_jct_s -10.0 % ± 24.8 % (3 paired seeds)"


def test_comparison_skips_missing_and_zero_baselines() -> None:
    recs = [rec("base", 0, 0.0), rec("new", 0, 5.0), rec("base", 1, None), rec("new", 1, 5.0)]
    assert compare(recs, baseline="base", kpis=["mean_jct_s"]) == []
