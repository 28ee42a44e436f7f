"""The placement benchmark in --quick mode: the report's shape and sanity, never its timings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.bench.placement import (
    LARGE_TAIL,
    PHILLY_SIZES,
    RACK_GPUS,
    BenchConfig,
    Workload,
    cluster_for,
    run_config,
)
from rackscale.cli.bench import app

RESULT_KEYS = (
    "decisions_per_s",
    "p50_us",
    "p99_us",
    "p99_us_le72",
    "p99_us_gt72",
    "cycle_10k_pending_ms",
    "cycle_10k_from_list_ms",
    "peak_rss_mb",
    "single_domain_share",
    "placed",
    "failed",
)


@pytest.fixture(scope="module")
def quick_report() -> dict[str, Any]:
    """``rackscale bench placement --quick --json`` (each config in its own process), parsed."""
    done = CliRunner().invoke(app, ["placement", "--quick", "--json"])
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)  # stdout holds only the JSON (progress is on stderr)
    return report


def test_report_has_every_key_for_each_policy(quick_report: dict[str, Any]) -> None:
    assert {"cpu_count", "python"} <= set(quick_report["machine"])
    results = quick_report["results"]
    assert set(results) == {"720", "1440"}
    for by_policy in results.values():
        assert set(by_policy) == {"rackscale", "first-fit"}
        for res in by_policy.values():
            missing = [k for k in RESULT_KEYS if k not in res]
            assert not missing, missing


def test_counts_are_positive(quick_report: dict[str, Any]) -> None:
    for by_policy in quick_report["results"].values():
        for res in by_policy.values():
            assert res["placed"] > 0
            assert res["failed"] >= 0
            assert res["placed"] + res["failed"] == res["decisions"] > 0
            assert res["decisions_per_s"] > 0
            assert res["p50_us"] > 0 and res["p99_us"] >= res["p50_us"]
            assert res["cycle_10k_pending_ms"] > 0 and res["cycle_10k_from_list_ms"] > 0
            assert res["peak_rss_mb"] > 0


def test_rackscale_keeps_small_jobs_in_one_rack_at_least_as_often_as_first_fit(
    quick_report: dict[str, Any],
) -> None:
    for by_policy in quick_report["results"].values():
        ours, baseline = by_policy["rackscale"], by_policy["first-fit"]
        assert 0 < ours["single_domain_share"] <= 1
        assert ours["single_domain_share"] >= baseline["single_domain_share"]


def test_in_process_run_holds_the_cluster_near_ninety_percent() -> None:
    res = run_config(BenchConfig(gpus=1_440, policy="rackscale", decisions=200, pending=100, seed=3))
    assert res["racks"] == 20 and res["regions"] == 1
    assert res["decisions_le72"] + res["decisions_gt72"] == 200
    assert 0.5 < res["mean_utilisation"] <= 0.91


def test_clusters_are_whole_racks_in_regions_of_at_most_256() -> None:
    small = cluster_for(gpus=10_000)
    assert (len(small.racks), len(small.regions)) == (139, 1)
    big = cluster_for(gpus=100_000)
    assert len(big.racks) == 1_389 and big.total_gpus == 1_389 * RACK_GPUS
    assert len(big.regions) == 6 and max(len(g.racks) for g in big.regions) <= 256


def test_workload_is_seeded_and_drawn_from_philly_plus_the_tail() -> None:
    def sizes(seed: int) -> list[int]:
        w = Workload(seed=seed)
        return [w.next_job(now=0.0).total_gpus for _ in range(2_000)]

    first = sizes(7)
    assert first == sizes(7)
    assert set(first) <= set(PHILLY_SIZES) | set(LARGE_TAIL)
    assert first.count(1) / len(first) > 0.85  # Philly: 93 % of jobs ask for one GPU


def test_unknown_policy_is_rejected() -> None:
    done = CliRunner().invoke(app, ["placement", "--quick", "--policy", "no-such-policy"])
    assert done.exit_code != 0
