"""Bytes per step per tier for each collective model (see docs/network.md for the formulas).

All cases run on ``small_cluster`` (conftest.py)::

      region 0: rack 0 [n0][n1]   rack 1 [n2][n3]
      region 1: rack 2 [n4][n5]   rack 3 [n6][n7]       4 GPUs per node

with S = 1000 bytes per step. A ring of N GPUs puts E = 2(N-1)/N * S on each of its N edges.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rackscale.model import CommProfile, GPUCluster, JobSpec, Placement, batch, inference, training
from rackscale.network import Flow, Tier, traffic_for

PlaceFn = Callable[..., Placement]

S = 1000.0


def ring(gpus: int) -> JobSpec:
    return training("j", gpus, comm=CommProfile(bytes_per_step=S, collective="ring"))


def hier(gpus: int) -> JobSpec:
    return training("j", gpus, comm=CommProfile(bytes_per_step=S, collective="hierarchical"))


def tp(replicas: int, gpus_per_replica: int) -> JobSpec:
    return inference("j", replicas, gpus_per_replica=gpus_per_replica, comm=CommProfile(bytes_per_step=S))


# (spec, slices as (node, gpus[, milli]), expected (nvlink, rdma, backbone))
CASES = [
    # 8 GPUs in rack 0: all 8 ring edges on NVLink, E = 1750.
    pytest.param(ring(8), [(0, 4), (1, 4)], (14_000, 0, 0), id="ring-8-one-rack"),
    # 4 + 4 in racks 0 and 1 (one region): 2 of the 8 edges cross racks on RDMA.
    pytest.param(ring(8), [(0, 4), (2, 4)], (10_500, 3_500, 0), id="ring-4+4-two-racks-one-region"),
    # 4 + 4 in racks 0 and 2 (two regions): both crossing edges cross regions.
    pytest.param(ring(8), [(0, 4), (4, 4)], (10_500, 0, 3_500), id="ring-4+4-across-regions"),
    # 4 x 4 over all racks: N = 16, E = 1875; edges 0->1, 2->3 RDMA, 1->2, 3->0 backbone.
    pytest.param(ring(16), [(0, 4), (2, 4), (4, 4), (6, 4)], (22_500, 3_750, 3_750), id="ring-4x4-four-racks"),
    # 3 + 1: N = 4, E = 1500; the lone GPU in rack 1 has both its edges off-rack.
    pytest.param(ring(4), [(0, 3), (2, 1)], (3_000, 3_000, 0), id="ring-3+1-uneven"),
    # Two shared GPUs count as one participant each: N = 2, E = 1000, both edges cross racks.
    pytest.param(ring(2), [(0, 1, 500), (2, 1, 500)], (0, 2_000, 0), id="ring-fractional-participants"),
    pytest.param(ring(1), [(0, 1)], (0, 0, 0), id="ring-single-gpu"),
    # Hierarchical: 2(n_i-1)S per rack on NVLink, 2(r-1)S across racks.
    pytest.param(hier(8), [(0, 4), (1, 4)], (14_000, 0, 0), id="hier-8-one-rack"),
    pytest.param(hier(8), [(0, 4), (2, 4)], (12_000, 2_000, 0), id="hier-4+4-two-racks-one-region"),
    pytest.param(hier(8), [(0, 4), (4, 4)], (12_000, 0, 2_000), id="hier-4+4-across-regions"),
    # r = 4, g = 2: 6000 across racks, 1500 per rack-ring edge, half of the edges cross regions.
    pytest.param(hier(16), [(0, 4), (2, 4), (4, 4), (6, 4)], (24_000, 3_000, 3_000), id="hier-4x4-four-racks"),
    # Inference: each TP group rings S among its own GPUs; replicas do not talk.
    pytest.param(tp(2, 4), [(0, 4), (2, 4)], (12_000, 0, 0), id="tp4-two-replicas-each-in-a-rack"),
    pytest.param(tp(1, 8), [(0, 4), (1, 4)], (14_000, 0, 0), id="tp8-one-rack-two-nodes"),
    pytest.param(tp(1, 8), [(1, 4), (2, 4)], (10_500, 3_500, 0), id="tp8-split-across-racks"),
    pytest.param(tp(4, 1), [(0, 4)], (0, 0, 0), id="inference-1-gpu-replicas"),
    pytest.param(
        inference("j", 2, gpu_milli=500, comm=CommProfile(bytes_per_step=S)),
        [(0, 1, 500), (2, 1, 500)],
        (0, 0, 0),
        id="inference-fractional-replicas",
    ),
    pytest.param(
        batch("j", gpus=4, tasks=2, comm=CommProfile(bytes_per_step=S)), [(0, 4), (4, 4)], (0, 0, 0), id="batch"
    ),
]


@pytest.mark.parametrize(("spec", "slices", "expected"), CASES)
def test_bytes_per_tier(
    small_cluster: GPUCluster,
    place: PlaceFn,
    spec: JobSpec,
    slices: list[tuple[int, ...]],
    expected: tuple[float, float, float],
) -> None:
    t = traffic_for(small_cluster, spec=spec, placement=place(*slices))
    assert (t.nvlink, t.rdma, t.backbone) == pytest.approx(expected)
    assert t.total == pytest.approx(sum(expected))
    assert t.intra_rack_share == pytest.approx(expected[0] / sum(expected) if sum(expected) else 1.0)
    # Every inter-rack byte leaves one rack and enters another.
    assert sum(b for _, b in t.uplink_bytes) == pytest.approx(2 * t.inter_rack)


@pytest.mark.parametrize(
    "slices",
    [
        pytest.param([(0, 4), (2, 4)], id="4+4-one-region"),
        pytest.param([(0, 4), (4, 4)], id="4+4-two-regions"),
        pytest.param([(0, 2), (2, 4), (4, 1)], id="2+4+1-three-racks"),
        pytest.param([(0, 4), (2, 4), (4, 4), (6, 4)], id="4x4-four-racks"),
    ],
)
def test_hierarchical_moves_fewer_inter_rack_bytes_than_ring(
    small_cluster: GPUCluster, place: PlaceFn, slices: list[tuple[int, int]]
) -> None:
    gpus = sum(g for _, g in slices)
    p = place(*slices)
    flat = traffic_for(small_cluster, spec=ring(gpus), placement=p)
    tree = traffic_for(small_cluster, spec=hier(gpus), placement=p)
    assert tree.inter_rack < flat.inter_rack


def test_eight_gpus_in_one_rack_stay_on_nvlink(small_cluster: GPUCluster, place: PlaceFn) -> None:
    t = traffic_for(small_cluster, spec=ring(8), placement=place((2, 4), (3, 4)))
    assert t.intra_rack_share == 1.0
    assert t.racks == (1,) and t.regions == (0,)
    assert t.flows == () and t.uplink_bytes == ()


def test_ring_edges_visit_racks_region_by_region(small_cluster: GPUCluster, place: PlaceFn) -> None:
    # Slices listed out of order: the ring still runs 0 -> 1 -> 2 -> 3 -> 0.
    t = traffic_for(small_cluster, spec=ring(16), placement=place((6, 4), (0, 4), (4, 4), (2, 4)))
    assert t.flows == (
        Flow(0, 1, 1875.0, Tier.RDMA),
        Flow(1, 2, 1875.0, Tier.BACKBONE),
        Flow(2, 3, 1875.0, Tier.RDMA),
        Flow(3, 0, 1875.0, Tier.BACKBONE),
    )
    assert t.racks == (0, 1, 2, 3) and t.regions == (0, 1)
    assert t.uplink_bytes == ((0, 3750.0), (1, 3750.0), (2, 3750.0), (3, 3750.0))
    assert t.uplink_bytes_of(2) == 3750.0 and t.uplink_bytes_of(9) == 0.0


def test_no_bytes_still_reports_where_the_job_is(small_cluster: GPUCluster, place: PlaceFn) -> None:
    t = traffic_for(small_cluster, spec=batch("b", gpus=4, tasks=2), placement=place((0, 4), (7, 4)))
    assert t.total == 0 and t.intra_rack_share == 1.0
    assert t.racks == (0, 3) and t.regions == (0, 1)


@pytest.mark.parametrize(
    ("comm", "message"),
    [
        pytest.param(CommProfile(bytes_per_step=S, collective="tree"), "unknown collective", id="collective"),
        pytest.param(CommProfile(bytes_per_step=-1.0), "bytes_per_step", id="negative-bytes"),
        pytest.param(CommProfile(bytes_per_step=float("nan")), "bytes_per_step", id="nan-bytes"),
        pytest.param(CommProfile(bytes_per_step=float("inf")), "bytes_per_step", id="infinite-bytes"),
    ],
)
def test_rejects_malformed_profiles(small_cluster: GPUCluster, place: PlaceFn, comm: CommProfile, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        traffic_for(small_cluster, spec=training("j", 4, comm=comm), placement=place((0, 4)))
