"""The cached ``/metrics`` text (service/metrics_text.py) is byte for byte ``generate_latest``'s, scrape after
scrape, as values change and series come and go: label escaping, special values, counters, histograms and
the live service's own families included."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tests.service.conftest import LiveService, wait_for

from rackscale.service.metrics_text import CachedExposition

# Label values a cluster spec or a job name may carry into a series.
HOSTILE_LABELS = ('r"0"', "back\\slash", "new\nline", "équipe", "", "a,b=c", "}{")
VALUES = (72, 65.5, 0.0, -0.0, math.inf, -math.inf, math.nan, 1e20, 1.5e-7, 123456789.0, -3.25, 1e6, 999999.0)


@dataclass(eq=False)
class Families(Collector):
    """A registry whose families are set by the test: gauges per (name, labels) -> value."""

    gauges: dict[tuple[str, ...], float] = field(default_factory=dict)
    plain: float = 1.0
    stamped: float = 2.0

    def collect(self) -> Iterator[Metric]:
        per_rack = GaugeMetricFamily("t_rack_gpus", 'GPUs per "rack"\nand\\region.', labels=["rack", "region"])
        for labels, v in self.gauges.items():
            per_rack.add_metric(list(labels), v)
        yield per_rack
        yield GaugeMetricFamily("t_plain", "No labels.", value=self.plain)
        stamped = GaugeMetricFamily("t_stamped", "With a timestamp.", labels=["k"])
        stamped.add_metric(["x"], self.stamped, timestamp=1_700_000_000.5)
        yield stamped
        counter = CounterMetricFamily("t_events", "Counted.", labels=["kind"])
        counter.add_metric(["a"], 3.0)
        yield counter


def _registry(families: Families) -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    r.register(families)
    h = Histogram("t_cycle_seconds", "A histogram.", buckets=(0.1, 1.0), registry=r)
    h.observe(0.5)
    return r


def _scrapes() -> Iterator[tuple[str, dict[tuple[str, ...], float]]]:
    """Scrape by scrape: the per-rack gauges as they change."""
    labels = [(f"r{i:03d}", region) for i, region in enumerate(HOSTILE_LABELS)]
    first = {lab: VALUES[i % len(VALUES)] for i, lab in enumerate(labels)}
    yield "first scrape: every series new", first
    yield "the same values again: every line kept", dict(first)
    changed = {lab: VALUES[(i + 3) % len(VALUES)] for i, lab in enumerate(labels)}
    yield "every value changed, zeros of both signs among them", changed
    fewer = dict(list(changed.items())[:3]) | {("r-new", "region \\ new"): 7.0}
    yield "series gone and a new one", fewer
    yield "the gone series back, at -0.0 and 0", changed | {labels[5]: -0.0, labels[6]: 0}


def test_each_scrape_is_generate_latests_bytes() -> None:
    families = Families()
    registry = _registry(families)
    cached = CachedExposition()
    for what, gauges in _scrapes():
        families.gauges = gauges
        families.plain += 1
        families.stamped *= -1
        assert cached.render(registry) == generate_latest(registry), what


@pytest.mark.parametrize("v", VALUES, ids=[repr(v) for v in VALUES])
def test_a_value_after_another_is_written_as_generate_latest_writes_it(v: float) -> None:
    families = Families(gauges={("r0", "x"): 1.0})
    registry = _registry(families)
    cached = CachedExposition()
    cached.render(registry)
    families.gauges = {("r0", "x"): v}
    assert cached.render(registry) == generate_latest(registry)


def test_zeros_of_either_sign_in_turn() -> None:
    """-0.0 == 0.0 in Python but the text format writes them apart: a kept line is not reused across them."""
    families = Families()
    registry = _registry(families)
    cached = CachedExposition()
    for v in (0.0, -0.0, 0.0, 0, -0.0, 1.0, -0.0):
        families.gauges = {("r0", "x"): v, ("r1", "x"): -v}
        assert cached.render(registry) == generate_latest(registry), v


class _Replay(Collector):
    """The families one collection of another collector gave, every time (the service's gauges read the
    clock: two collections differ)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.families = list(source.collect())

    def collect(self) -> list[Metric]:
        return self.families


def test_the_services_own_families(service: LiveService) -> None:
    c = service.client()
    metrics = service.svc.ctx.metrics
    assert metrics is not None
    cached = CachedExposition()
    for i, job in enumerate(
        (
            {"name": "gang", "kind": "training", "gpus": 72, "durationEstimateSeconds": 1e7},
            {"name": "chat", "kind": "inference", "replicas": 2, "gpusPerReplica": 2},
        )
    ):
        assert c.post("/v1/jobs", json=job).status_code == 201
        wait_for(lambda n=i + 1: c.get("/v1/cluster").json()["running"] == n, what=f"{job['name']} running")
        replay = _Replay(metrics.registry)
        assert cached.render(replay) == generate_latest(replay)
    # And through the endpoint: a scrape parses, with the per-rack series in it.
    text = c.get("/metrics").text
    assert 'rackscale_rack_gpus_allocated{rack="' in text
