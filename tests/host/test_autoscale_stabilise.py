"""The autoscaler's pure decisions (host/autoscale.py): replicas from a load, and the HPA's stabilisation
windows (scale-up: the lowest recommendation of the up window; scale-down: the highest of the down window,
300 s by default), table-driven. Each row feeds ``(time, raw recommendation, current replicas)`` in order
and lists what the stabiliser answers."""

from __future__ import annotations

import pytest

from rackscale.host.autoscale import HPA_DEFAULT, Load, ScaleBehaviour, Stabiliser, describe, replicas_for
from rackscale.model.workload import LoadMetric

Step = tuple[float, int, int]  # (now, desired, current)

CASES: list[tuple[ScaleBehaviour, list[Step], list[int]]] = [
    # A rise acts at once (no up window).
    (HPA_DEFAULT, [(0, 4, 2)], [4]),
    # First sight counts the current size: a service just seen is not scaled down in its first 300 s ...
    (HPA_DEFAULT, [(0, 1, 4), (150, 1, 4), (299, 1, 4)], [4, 4, 4]),
    # ... and is once they have passed (the window's edge is outside it, as the HPA's After(cutoff)).
    (HPA_DEFAULT, [(0, 1, 4), (300, 1, 4)], [4, 1]),
    # A dip shorter than the window removes nothing: the 8 of t=100 holds until t=400 has passed.
    (HPA_DEFAULT, [(0, 8, 8), (100, 8, 8), (200, 2, 8), (350, 2, 8), (400, 2, 8), (401, 2, 8)], [8, 8, 8, 8, 2, 2]),
    # Down to the highest of the window, not to the newest: 8, 6, 3 -> 6 once the 8 is out.
    (HPA_DEFAULT, [(0, 8, 8), (100, 6, 8), (200, 3, 8), (301, 3, 8)], [8, 8, 8, 6]),
    # A flapping load (up, down, up every 60 s) never scales down within the window.
    (HPA_DEFAULT, [(t, 6 if i % 2 else 2, 6) for i, t in enumerate(range(0, 300, 60))], [6, 6, 6, 6, 6]),
    # An up window holds a scale-up to the lowest recent recommendation.
    (ScaleBehaviour(up_window_s=60), [(0, 2, 2), (30, 5, 2), (61, 5, 2)], [2, 2, 5]),
    # No windows (the simulator's): the raw recommendation, whatever came before.
    (ScaleBehaviour(up_window_s=0, down_window_s=0), [(0, 8, 8), (1, 1, 8), (2, 9, 1)], [8, 1, 9]),
]
IDS = [
    "up-at-once",
    "first-window-holds",
    "first-window-ends",
    "short-dip-ignored",
    "down-to-window-max",
    "flapping-held",
    "up-window",
    "no-windows",
]


@pytest.mark.parametrize(("behaviour", "steps", "want"), CASES, ids=IDS)
def test_stabilisation(behaviour: ScaleBehaviour, steps: list[Step], want: list[int]) -> None:
    s = Stabiliser()
    got = [s.stabilise(now=t, desired=d, current=c, behaviour=behaviour) for t, d, c in steps]
    assert got == want


def test_history_keeps_only_what_a_window_can_read() -> None:
    s = Stabiliser()
    for t in range(0, 3600, 15):
        s.stabilise(now=float(t), desired=3, current=3, behaviour=HPA_DEFAULT)
    assert len(s.history) <= 300 // 15 + 1


TPS, RPS, LAT = LoadMetric.TOKENS_PER_SECOND, LoadMetric.REQUESTS_PER_SECOND, LoadMetric.LATENCY_SECONDS


@pytest.mark.parametrize(
    ("metric", "value", "target", "current", "lo", "hi", "want"),
    [
        (TPS, 3100.0, 2000.0, 2, 1, 16, 2),  # a total rate over a per-replica target: ceil(3100/2000)
        (TPS, 6200.0, 2000.0, 2, 1, 16, 4),  # the load doubles: 4 replicas
        (TPS, 0.0, 2000.0, 4, 2, 16, 2),  # no traffic: the floor
        (RPS, 1e9, 1.0, 1, 1, 16, 16),  # the ceiling
        (LAT, 0.8, 0.4, 3, 1, 16, 6),  # a latency twice its target doubles the replicas
        (LAT, 0.1, 0.4, 8, 1, 16, 2),  # a quarter of it: a quarter of them
    ],
    ids=["rate", "rate-doubles", "zero-floor", "ceiling", "latency-up", "latency-down"],
)
def test_replicas_for_a_load(
    metric: LoadMetric, value: float, target: float, current: int, lo: int, hi: int, want: int
) -> None:
    load = Load(value=value, metric=metric, source="prometheus")
    assert replicas_for(load=load, target=target, current=current, lo=lo, hi=hi) == want


def test_an_event_names_the_load_the_target_and_the_source() -> None:
    tps = describe(Load(value=3100.0, metric=TPS, source="prometheus"), 2000.0)
    assert tps == "load 3,100 tokens/s (prometheus), target 2,000 tokens/s per replica"
    lat = describe(Load(value=0.8, metric=LAT, source="prometheus"), 0.5)
    assert lat == "load 0.8 s (prometheus) over target 0.5 s"
