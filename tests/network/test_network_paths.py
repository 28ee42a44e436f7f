"""Candidate paths between racks and the choice among them.

On ``small_cluster`` (conftest.py) each rack has 800 Gb/s of uplinks per direction over 4 spine
planes, so each up/down link holds 200 Gb/s; each backbone link 200 Gb/s. RDMA hops cost 5 us idle,
backbone hops 50 us::

    rack 0 --up(0,s)--> [spine s] --down(1,s)--> rack 1                     (region 0, s = 0..3)
    rack 0 --up(0,s)--> [spine s] ==backbone(0->1, s)==> [spine s] --down(2,s)--> rack 2
"""

from __future__ import annotations

import math

import pytest

from rackscale.model import GPUCluster
from rackscale.network import (
    QUEUE_CAP,
    Link,
    LinkLoad,
    Path,
    get_low_latency_paths,
    hop_latency_us,
    link_capacity_gbps,
    select_best_path,
    tier_p99_latency_s,
)


def load_of(by_link: dict[str, float]) -> LinkLoad:
    """``{"up 0 1": 150}``: 150 Gb/s on rack 0's uplink to spine 1; ``"down 1 2"`` rack 1's downlink
    from spine 2; ``"bb 0 1 3"`` the backbone link from region 0 to region 1 on spine plane 3."""
    load = LinkLoad()
    for key, gbps in by_link.items():
        kind, *ix = key.split()
        ints = [int(i) for i in ix]
        if kind == "up":
            load.add_flow(Link.up(*ints), gbps)
        elif kind == "down":
            load.add_flow(Link.down(*ints), gbps)
        else:
            load.add_flow(Link.backbone(*ints), gbps)
    return load


def test_idle_paths_in_a_region(small_cluster: GPUCluster) -> None:
    paths = get_low_latency_paths(small_cluster, src_rack=0, dst_rack=1, load=LinkLoad())
    assert [p.spine for p in paths] == [0, 1, 2, 3]
    assert all(p.latency_us == pytest.approx(2 * 5.0) for p in paths)
    assert all(p.spare_gbps == pytest.approx(200.0) for p in paths)
    assert paths[2].links == (Link.up(0, 2), Link.down(1, 2))


def test_idle_paths_across_regions_add_the_backbone(small_cluster: GPUCluster) -> None:
    paths = get_low_latency_paths(small_cluster, src_rack=3, dst_rack=0, load=LinkLoad())
    assert len(paths) == small_cluster.spines_per_region
    assert paths[0].links == (Link.up(3, 0), Link.backbone(1, 0, 0), Link.down(0, 0))
    assert paths[0].latency_us == pytest.approx(2 * 5.0 + 50.0)


def test_capacities(small_cluster: GPUCluster) -> None:
    assert link_capacity_gbps(small_cluster, Link.up(0, 0)) == pytest.approx(800.0 / 4)
    assert link_capacity_gbps(small_cluster, Link.down(3, 1)) == pytest.approx(800.0 / 4)
    assert link_capacity_gbps(small_cluster, Link.backbone(0, 1, 2)) == pytest.approx(200.0)


@pytest.mark.parametrize(
    ("utilisation", "factor"),
    [
        pytest.param(0.0, 1.0, id="idle"),
        pytest.param(0.5, 2.0, id="half"),
        pytest.param(0.75, 4.0, id="three-quarters"),
        pytest.param(0.95, QUEUE_CAP, id="capped"),
        pytest.param(3.0, QUEUE_CAP, id="overloaded"),
        pytest.param(float("inf"), QUEUE_CAP, id="no-capacity"),
    ],
)
def test_hop_latency_grows_with_load_and_is_capped(utilisation: float, factor: float) -> None:
    assert hop_latency_us(5.0, utilisation) == pytest.approx(5.0 * factor)


# (src, dst, load, required Gb/s, expected spine or None, expected best spare)
CHOICES = [
    pytest.param(0, 1, {}, 100.0, 0, 200.0, id="idle-takes-spine-0"),
    # Spine 0's uplink at 75%: 20 + 5 us, and only 50 Gb/s spare; spine 1 is idle.
    pytest.param(0, 1, {"up 0 0": 150.0}, 100.0, 1, 200.0, id="loaded-spine-moves-to-next"),
    # Spine 0: one hop at 60% (12.5 + 5 = 17.5 us, 80 spare). Spine 1: both hops at 50% (20 us, 100
    # spare). Spines 2 and 3 full. 90 Gb/s fits only spine 1 although spine 0 is faster.
    pytest.param(
        0,
        1,
        {"up 0 0": 120.0, "up 0 1": 100.0, "down 1 1": 100.0, "up 0 2": 200.0, "up 0 3": 200.0},
        90.0,
        1,
        100.0,
        id="fastest-lacks-room-next-fits",
    ),
    pytest.param(0, 1, {"up 0 0": 100.0}, 100.0, 1, 200.0, id="half-loaded-spine-loses-to-idle"),
    pytest.param(
        0, 1, {"up 0 0": 100.0, "up 0 1": 100.0, "up 0 2": 100.0, "up 0 3": 100.0}, 100.0, 0, 100.0, id="exact-fit"
    ),
    pytest.param(
        0, 1, {"up 0 0": 200.0, "up 0 1": 200.0, "down 1 2": 200.0, "up 0 3": 250.0}, 10.0, None, 0.0, id="all-full"
    ),
    pytest.param(
        0,
        1,
        {"up 0 0": 190.0, "up 0 1": 180.0, "up 0 2": 170.0, "down 1 3": 160.0},
        50.0,
        None,
        40.0,
        id="none-fits-reports-best-spare",
    ),
    # Across regions the 200 Gb/s backbone link of each plane bounds the path.
    pytest.param(0, 2, {"bb 0 1 0": 150.0}, 100.0, 1, 200.0, id="loaded-backbone-moves-to-next"),
    pytest.param(
        0,
        2,
        {"bb 0 1 0": 200.0, "bb 0 1 1": 200.0, "bb 0 1 2": 200.0, "bb 0 1 3": 195.0},
        10.0,
        None,
        5.0,
        id="backbone-full",
    ),
]


@pytest.mark.parametrize(("src", "dst", "loads", "required", "spine", "best_spare"), CHOICES)
def test_select_best_path(
    small_cluster: GPUCluster,
    src: int,
    dst: int,
    loads: dict[str, float],
    required: float,
    spine: int | None,
    best_spare: float,
) -> None:
    paths = get_low_latency_paths(small_cluster, src_rack=src, dst_rack=dst, load=load_of(loads))
    assert paths == sorted(paths, key=lambda p: p.latency_us)
    choice = select_best_path(paths, required)
    assert choice.required_gbps == required
    assert choice.best_spare_gbps == pytest.approx(best_spare)
    assert choice.roomiest is not None and choice.roomiest.spare_gbps == pytest.approx(best_spare)
    if spine is None:
        assert not choice.fits and choice.path is None
    else:
        assert choice.fits and choice.path is not None
        assert choice.path.spine == spine
        assert choice.path.spare_gbps >= required


def test_select_best_path_does_not_need_sorted_input(small_cluster: GPUCluster) -> None:
    paths = get_low_latency_paths(small_cluster, src_rack=1, dst_rack=0, load=load_of({"up 1 0": 150.0}))
    choice = select_best_path(list(reversed(paths)), 10.0)
    assert choice.path is not None and choice.path.spine == 1


def test_no_candidates_is_an_answer_not_an_error() -> None:
    choice = select_best_path([], 1.0)
    assert choice == select_best_path((), 1.0)
    assert not choice.fits and choice.best_spare_gbps == 0.0 and choice.roomiest is None


def test_overloaded_link_reports_utilisation_above_one(small_cluster: GPUCluster) -> None:
    paths: list[Path] = get_low_latency_paths(small_cluster, src_rack=0, dst_rack=1, load=load_of({"up 0 0": 300.0}))
    worst = paths[-1]
    assert worst.spine == 0 and worst.utilisation == pytest.approx(1.5) and worst.spare_gbps == 0.0
    assert worst.latency_us == pytest.approx(5.0 * QUEUE_CAP + 5.0)


def test_a_rack_has_no_fabric_path_to_itself(small_cluster: GPUCluster) -> None:
    with pytest.raises(ValueError, match="NVLink"):
        get_low_latency_paths(small_cluster, src_rack=2, dst_rack=2, load=LinkLoad())


def test_a_cluster_without_spines_cannot_route() -> None:
    cluster = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=1, spines_per_region=0)
    with pytest.raises(ValueError, match="no spine"):
        get_low_latency_paths(cluster, src_rack=0, dst_rack=1, load=LinkLoad())


def test_link_load_returns_to_exactly_zero() -> None:
    load = LinkLoad()
    link = Link.up(0, 0)
    for gbps in (0.1, 0.2, 0.3):
        load.add_flow(link, gbps)
    for gbps in (0.3, 0.1, 0.2):
        load.remove_flow(link, gbps)
    assert load.gbps(link) == 0.0 and load.flows(link) == 0 and len(load) == 0
    with pytest.raises(KeyError):
        load.remove_flow(link, 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        load.add_flow(link, -1.0)


LN100 = math.log(100.0)


@pytest.mark.parametrize(
    ("busiest", "want_us"),
    [
        pytest.param(0.0, {"nvlink": 1.0, "rdma": 5.0, "backbone": 50.0}, id="idle-fabric"),
        pytest.param(0.5, {"nvlink": 1.0, "rdma": 5.0 * (1 + LN100), "backbone": 50.0 * (1 + LN100)}, id="half"),
        pytest.param(
            3.0, {"nvlink": 1.0, "rdma": 5.0 * (1 + 99 * LN100), "backbone": 50.0 * (1 + 99 * LN100)}, id="over"
        ),
    ],
)
def test_the_p99_of_a_tier_queues_behind_the_busiest_uplink(busiest: float, want_us: dict[str, float]) -> None:
    """serve's and the Kubernetes scheduler's rackscale_network_latency_p99_seconds: latency x
    (1 + ln(100) u / (1 - u)), u the busiest uplink's utilisation capped at 0.99; NVLink's load is not modelled."""
    got = tier_p99_latency_s(GPUCluster.uniform(racks_per_region=2, nodes_per_rack=1), busiest)
    assert got == pytest.approx({tier: us * 1e-6 for tier, us in want_us.items()})
