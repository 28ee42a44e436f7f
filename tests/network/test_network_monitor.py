"""The NetworkMonitor: per-job traffic, link load, spreading over spines, and clean removal.

On ``small_cluster`` (conftest.py)::

      region 0: rack 0 [n0][n1]   rack 1 [n2][n3]      each rack: 800 Gb/s up and 800 down,
      region 1: rack 2 [n4][n5]   rack 3 [n6][n7]      200 Gb/s per spine plane (4 planes)

A ring of 4 + 4 GPUs with S = 1 GB at 10 steps/s puts E = 1.75 GB per step on each of its two
inter-rack edges: 1.75e9 * 10 * 8 / 1e9 = 140 Gb/s per flow.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from rackscale.model import CommProfile, GPUCluster, JobSpec, Placement, inference, training
from rackscale.network import Link, NetworkMonitor, TrafficTotals

PlaceFn = Callable[..., Placement]
GB = 1e9


def ring(name: str, gpus: int, collective: str = "ring") -> JobSpec:
    return training(name, gpus, comm=CommProfile(bytes_per_step=GB, collective=collective))


def test_flow_rates_and_uplink_load(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    traffic = mon.add_job(ring("a", 8), place((0, 4), (2, 4)), steps_per_s=10)
    assert mon.traffic("a") == traffic and "a" in mon and len(mon) == 1 and mon.jobs == ("a",)
    assert [r.gbps for r in mon.routes("a")] == pytest.approx([140.0, 140.0])
    assert mon.rack_uplink_load_gbps(0) == pytest.approx(280.0)  # 140 out + 140 in
    assert mon.uplink_utilisation(0) == pytest.approx(140.0 / 800.0)
    assert mon.rack_uplink_load_gbps(2) == 0.0 and mon.uplink_utilisation(2) == 0.0


def test_adding_jobs_fills_spines_one_after_another(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    spines = []
    for i in range(5):
        mon.add_job(ring(f"j{i}", 8), place((0, 4), (2, 4)), steps_per_s=10)
        spines.append({r.path.spine for r in mon.routes(f"j{i}")})
    # 140 of 200 Gb/s used: the next job's flows do not fit there and move to an idle plane.
    assert spines[:4] == [{0}, {1}, {2}, {3}]
    # Every plane has 60 Gb/s spare: the fifth job still runs, on the roomiest (then fastest) plane.
    fifth = mon.routes("j4")
    assert all(not r.fits for r in fifth) and {r.path.spine for r in fifth} == {0}
    assert mon.load.gbps(Link.up(0, 0)) == pytest.approx(280.0)
    assert mon.uplink_utilisation(0) == pytest.approx(5 * 140.0 / 800.0)


def test_cross_region_flows_load_the_backbone(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    mon.add_job(ring("x", 8), place((0, 4), (4, 4)), steps_per_s=10)
    assert mon.load.gbps(Link.backbone(0, 1, 0)) == pytest.approx(140.0)
    assert mon.load.gbps(Link.backbone(1, 0, 0)) == pytest.approx(140.0)
    assert mon.load.gbps(Link.up(0, 0)) == pytest.approx(140.0)
    assert mon.load.gbps(Link.down(2, 0)) == pytest.approx(140.0)


def test_totals_weight_the_share_by_bytes_per_second(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    assert mon.totals() == TrafficTotals() and mon.totals().intra_rack_share == 1.0
    mon.add_job(ring("inside", 8), place((0, 4), (1, 4)), steps_per_s=1)  # 14 GB NVLink per step
    mon.add_job(ring("split", 8), place((4, 4), (6, 4)), steps_per_s=3)  # 10.5 NVLink + 3.5 RDMA
    t = mon.totals()
    assert t.jobs == 2
    assert (t.nvlink, t.rdma, t.backbone) == pytest.approx((24.5 * GB, 3.5 * GB, 0.0))
    assert t.nvlink_bytes_per_s == pytest.approx((14 + 31.5) * GB)
    assert t.rdma_bytes_per_s == pytest.approx(10.5 * GB)
    assert t.intra_rack_share == pytest.approx(45.5 / 56.0)


def test_hottest_uplinks(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    mon.add_job(ring("fast", 8), place((0, 4), (2, 4)), steps_per_s=10)  # racks 0, 1 at 140 Gb/s
    mon.add_job(ring("slow", 8), place((4, 4), (6, 4)), steps_per_s=5)  # racks 2, 3 at 70 Gb/s
    mon.add_job(ring("local", 4), place((1, 4)), steps_per_s=100)  # NVLink only: no uplink load
    assert [u.rack for u in mon.hottest_uplinks(1)] == [0]
    hot = mon.hottest_uplinks(10)
    assert [u.rack for u in hot] == [0, 1, 2, 3]
    assert [u.utilisation for u in hot] == pytest.approx([0.175, 0.175, 0.0875, 0.0875])
    assert hot[0].egress_gbps == hot[0].ingress_gbps == pytest.approx(140.0)
    assert hot[0].capacity_gbps == pytest.approx(800.0) and hot[0].load_gbps == pytest.approx(280.0)
    assert mon.hottest_uplinks(0) == ()


def _mixed_jobs(place: PlaceFn) -> list[tuple[JobSpec, Placement, float]]:
    tp8 = inference("tp", 1, gpus_per_replica=8, comm=CommProfile(bytes_per_step=GB))
    return [
        (ring("ring", 8), place((0, 4), (2, 4)), 10.0),
        (ring("hier", 16, "hierarchical"), place((1, 4), (3, 4), (5, 4), (7, 4)), 7.0),
        (tp8, place((2, 4), (4, 4)), 3.3),
        (ring("local", 8), place((6, 4), (7, 4)), 2.0),
        (ring("idle", 8), place((0, 4), (6, 4)), 0.0),
    ]


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(["ring", "hier", "tp", "local", "idle"], id="fifo"),
        pytest.param(["idle", "local", "tp", "hier", "ring"], id="lifo"),
        pytest.param(["hier", "idle", "ring", "local", "tp"], id="shuffled"),
    ],
)
def test_remove_returns_every_load_to_zero(small_cluster: GPUCluster, place: PlaceFn, order: list[str]) -> None:
    mon = NetworkMonitor(small_cluster)
    for spec, placement, rate in _mixed_jobs(place):
        mon.add_job(spec, placement, steps_per_s=rate)
    assert len(mon.load) > 0 and mon.totals().jobs == 5
    for name in order:
        removed = mon.remove_job(name)
        assert removed.job == name and name not in mon
    assert len(mon) == 0 and len(mon.load) == 0
    assert mon.totals() == TrafficTotals()
    assert mon.hottest_uplinks(4) == ()
    assert all(mon.rack_uplink_load_gbps(r.index) == 0.0 for r in small_cluster.racks)


def test_remove_restores_the_load_before_the_add(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    jobs = _mixed_jobs(place)
    for spec, placement, rate in jobs[:2]:
        mon.add_job(spec, placement, steps_per_s=rate)
    before, totals = dict(mon.load.items()), mon.totals()
    spec, placement, rate = jobs[2]
    mon.add_job(spec, placement, steps_per_s=rate)
    mon.remove_job(spec.name)
    # Exactly, not approximately: loads and totals are kept as exact sums.
    assert dict(mon.load.items()) == before
    assert mon.totals() == totals


def test_a_job_at_zero_steps_per_second_loads_no_link(small_cluster: GPUCluster, place: PlaceFn) -> None:
    mon = NetworkMonitor(small_cluster)
    mon.add_job(ring("paused", 8), place((0, 4), (2, 4)), steps_per_s=0.0)
    assert mon.routes("paused") == () and len(mon.load) == 0
    assert mon.totals().rdma == pytest.approx(3.5 * GB) and mon.totals().rdma_bytes_per_s == 0.0


@pytest.mark.parametrize(
    ("name", "rate", "error"),
    [
        pytest.param("a", 1.0, "already monitored", id="duplicate"),
        pytest.param("b", -1.0, "steps_per_s", id="negative-rate"),
        pytest.param("b", math.nan, "steps_per_s", id="nan-rate"),
        pytest.param("b", math.inf, "steps_per_s", id="infinite-rate"),
        pytest.param("b", 1e300, "overflow", id="overflowing-rate"),
    ],
)
def test_add_rejects(small_cluster: GPUCluster, place: PlaceFn, name: str, rate: float, error: str) -> None:
    mon = NetworkMonitor(small_cluster)
    mon.add_job(ring("a", 8), place((0, 4), (2, 4)), steps_per_s=1.0)
    snapshot = dict(mon.load.items())
    with pytest.raises(ValueError, match=error):
        mon.add_job(ring(name, 8), place((0, 4), (2, 4)), steps_per_s=rate)
    assert dict(mon.load.items()) == snapshot and mon.jobs == ("a",)


def test_an_overflowing_rate_inside_one_rack_is_rejected_too(small_cluster: GPUCluster, place: PlaceFn) -> None:
    # Nodes 0 and 1 are one rack: no inter-rack flow, only NVLink bytes, and those overflow.
    mon = NetworkMonitor(small_cluster)
    with pytest.raises(ValueError, match="overflow"):
        mon.add_job(ring("b", 8), place((0, 4), (1, 4)), steps_per_s=1e300)
    assert mon.jobs == () and mon.totals().nvlink == 0.0


def test_unknown_jobs_raise_key_error(small_cluster: GPUCluster) -> None:
    mon = NetworkMonitor(small_cluster)
    for query in (mon.remove_job, mon.traffic, mon.routes):
        with pytest.raises(KeyError):
            query("ghost")
