"""The idle rate and its parts (DESIGN section 5): idle while work waits, the part of it a waiting job could
have used now (``idle_fitting_rate``), and idle with no work waiting, from the accumulator's intervals."""

from __future__ import annotations

import pytest

from rackscale.host.kpis import KpiAccumulator

# (intervals as (dt, healthy, allocated, waiting demand, smallest waiting job fits), idle, fitting, no work)
CASES = [
    pytest.param([(10, 100, 100, 8, False)], 0.0, 0.0, 0.0, id="full-cluster-nothing-idles"),
    pytest.param([(10, 100, 60, 8, True)], 0.08, 0.08, 0.32, id="small-job-fits-but-waits"),
    pytest.param([(10, 100, 60, 256, False)], 0.40, 0.0, 0.0, id="gang-waits-for-a-drain"),
    pytest.param([(10, 100, 60, 256, False), (10, 100, 60, 8, True)], 0.24, 0.04, 0.16, id="drain-then-a-fitting-job"),
    pytest.param([(10, 100, 60, 0, False)], 0.0, 0.0, 0.40, id="no-work-is-not-idle-while-waiting"),
]


@pytest.mark.parametrize(("intervals", "idle", "fitting", "no_work"), CASES)
def test_idle_parts(
    intervals: list[tuple[float, float, float, float, bool]], idle: float, fitting: float, no_work: float
) -> None:
    acc = KpiAccumulator()
    for dt, healthy, allocated, demand, fits in intervals:
        acc.interval(dt=dt, healthy=healthy, allocated=allocated, waiting_demand=demand, smallest_fits=fits)
    k = acc.kpis(makespan_s=sum(i[0] for i in intervals), cluster_gpus=100, price_per_gpu_hour=1.0)
    assert k.idle_rate == pytest.approx(idle)
    assert k.idle_fitting_rate == pytest.approx(fitting)
    assert k.idle_no_work_share == pytest.approx(no_work)
    assert k.idle_fitting_rate is not None and k.idle_rate is not None and k.idle_fitting_rate <= k.idle_rate
