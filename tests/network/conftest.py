"""Shared topology for the network tests.

``small_cluster`` is ``GPUCluster.uniform(regions=2, racks_per_region=2, nodes_per_rack=2,
gpus_per_node=4)``; indexes are assigned region by region, rack by rack::

            region 0                              region 1
    +---------------------------+       +---------------------------+
    |  rack 0        rack 1     |       |  rack 2        rack 3     |
    | [n0][n1]      [n2][n3]    |       | [n4][n5]      [n6][n7]    |
    +-----||------------||------+       +-----||------------||------+
          ||  spines 0..3  ||    backbone     ||  spines 0..3  ||
          ++=====[s0..s3]==++================++=====[s0..s3]==++

Each node has 4 GPUs, so each rack 8 GPUs and 8 RDMA uplinks of 100 Gb/s: 800 Gb/s per direction,
200 Gb/s per spine plane. One 200 Gb/s backbone link per spine plane and direction joins the regions.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rackscale.model import GPUCluster, NodeAlloc, Placement

PlaceFn = Callable[..., Placement]


@pytest.fixture(scope="session")
def small_cluster() -> GPUCluster:
    return GPUCluster.uniform(regions=2, racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


def make_placement(*slices: tuple[int, int] | tuple[int, int, int], job: str = "j", units: int = 0) -> Placement:
    """``make_placement((node, gpus), ...)`` whole GPUs 0..gpus-1 of each node; ``(node, 1, milli)`` a
    shared slice of GPU 0."""
    allocs = []
    for s in slices:
        node, gpus = s[0], s[1]
        milli = s[2] if len(s) == 3 else 1000
        allocs.append(NodeAlloc(node=node, gpus=tuple(range(gpus)), milli=milli))
    return Placement(job=job, allocs=tuple(allocs), units=units or sum(s[1] for s in slices))


@pytest.fixture(scope="session")
def place() -> PlaceFn:
    return make_placement
