"""Our options -> LoadGen's TestSettings (read back from the real library's object), and the cost
efficiency priced from a cluster spec."""

from __future__ import annotations

from typing import Any

import pytest

from rackscale.loadgen.cost import CostError, cost_efficiency
from rackscale.loadgen.settings import RunOptions, Scenario, SettingsError, to_test_settings
from rackscale.model.topology import GPUCluster, Pricing


@pytest.mark.parametrize(
    ("opts", "fields"),
    [
        (
            RunOptions(
                scenario=Scenario.SERVER,
                target_qps=250,
                latency_bound_ms=15,
                latency_percentile=99,
                min_duration_s=2.5,
                min_query_count=300,
            ),
            {
                "server_target_qps": 250.0,
                "server_target_latency_ns": 15_000_000,
                "server_target_latency_percentile": 0.99,
                "min_duration_ms": 2500,
                "min_query_count": 300,
                "max_duration_ms": 0,
            },
        ),
        (
            RunOptions(scenario=Scenario.OFFLINE, target_qps=1234.5, min_duration_s=1, max_duration_s=3),
            {"offline_expected_qps": 1234.5, "min_duration_ms": 1000, "max_duration_ms": 3000},
        ),
        (
            RunOptions(scenario=Scenario.SINGLE_STREAM, latency_bound_ms=0.25, latency_percentile=90),
            {"single_stream_expected_latency_ns": 250_000, "single_stream_target_latency_percentile": 0.9},
        ),
    ],
    ids=["server", "offline", "single-stream"],
)
def test_options_become_loadgen_s_fields(lg: Any, opts: RunOptions, fields: dict[str, Any]) -> None:
    ts = to_test_settings(opts, lg)
    assert ts.scenario == getattr(lg.TestScenario, opts.scenario.value)
    assert ts.mode == lg.TestMode.PerformanceOnly
    for name, want in fields.items():
        assert getattr(ts, name) == pytest.approx(want), name


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"target_qps": -1.0}, "--target-qps"),
        ({"target_qps": float("inf")}, "--target-qps"),
        ({"latency_bound_ms": 0.0}, "--latency-bound-ms"),
        ({"latency_percentile": 0.0}, "--latency-percentile"),
        ({"min_duration_s": float("nan")}, "--duration-s"),
        ({"max_duration_s": 0.5, "min_duration_s": 1.0}, "--max-duration-s"),
        ({"min_query_count": True}, "--min-queries"),
        ({"sample_count": 2_000_000}, "--sample-count"),
        ({"concurrency": 0}, "--concurrency"),
    ],
    ids=[
        "qps-negative",
        "qps-inf",
        "bound-zero",
        "percentile-zero",
        "duration-nan",
        "max-below-min",
        "queries-bool",
        "samples-too-many",
        "concurrency-zero",
    ],
)
def test_a_bad_option_names_itself(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(SettingsError) as e:
        RunOptions(scenario=Scenario.SERVER, **kwargs)
    assert e.value.option == option and str(e.value).startswith(option)


def cluster(price: float, currency: str = "USD") -> GPUCluster:
    # 1 region x 2 racks x 18 nodes x 4 GPUs = 144 GPUs
    return GPUCluster.uniform(
        name="two-racks", racks_per_region=2, pricing=Pricing(per_gpu_hour=price, currency=currency)
    )


@pytest.mark.parametrize(
    ("price", "gpus", "throughput", "per_hour", "seed", "per_currency"),
    [
        (2.0, 8, 1000.0, 16.0, 1000 / (16 * 3600), 1000 * 3600 / 16),
        (2.0, None, 72.0, 288.0, 72 / (288 * 3600), 72 * 3600 / 288),  # default: every GPU of the cluster
        (0.0, 8, 50.0, 0.0, None, None),  # free GPUs: no efficiency to divide by
    ],
    ids=["eight-gpus", "whole-cluster", "free"],
)
def test_cost_efficiency(
    price: float, gpus: int | None, throughput: float, per_hour: float, seed: float | None, per_currency: float | None
) -> None:
    c = cost_efficiency(cluster=cluster(price), throughput=throughput, gpus=gpus)
    assert (c.cost_per_hour, c.currency) == (per_hour, "USD")
    assert c.seed_efficiency == (None if seed is None else pytest.approx(seed))
    assert c.samples_per_currency == (None if per_currency is None else pytest.approx(per_currency))


@pytest.mark.parametrize("gpus", [0, 145, -3], ids=["zero", "more-than-the-cluster", "negative"])
def test_gpus_outside_the_cluster_are_refused(gpus: int) -> None:
    with pytest.raises(CostError, match="--gpus must be from 1 to 144"):
        cost_efficiency(cluster=cluster(1.0), throughput=10.0, gpus=gpus)
