"""Properties that hold for any placement on any small cluster.

Clusters are drawn as ``regions x racks_per_region x nodes_per_rack x gpus_per_node`` (each at most 3 x
3 x 3 x 4); a placement takes some GPUs (or a shared slice) from some nodes, e.g. on 2 x 2 x 1 x 4::

    region 0: rack 0 [n0: GG..]  rack 1 [n1: ....]
    region 1: rack 2 [n2: G...]  rack 3 [n3: s...]      G whole GPU, s shared slice, . free
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.model import CommProfile, GPUCluster, JobSpec, NodeAlloc, Placement, batch, inference, training
from rackscale.network import NetworkMonitor, TrafficTotals, traffic_for

clusters = st.builds(
    GPUCluster.uniform,
    regions=st.integers(1, 3),
    racks_per_region=st.integers(1, 3),
    nodes_per_rack=st.integers(1, 3),
    gpus_per_node=st.integers(1, 4),
    spines_per_region=st.integers(1, 4),
)


@st.composite
def job_on(draw: st.DrawFn, cluster: GPUCluster, name: str = "j") -> tuple[JobSpec, Placement]:
    nodes = draw(st.lists(st.sampled_from(cluster.nodes), min_size=1, max_size=len(cluster.nodes), unique=True))
    allocs = []
    for node in nodes:
        if draw(st.booleans()):
            allocs.append(NodeAlloc(node.index, tuple(range(draw(st.integers(1, node.gpus))))))
        else:
            allocs.append(NodeAlloc(node.index, (0,), milli=draw(st.integers(1, 999))))
    placement = Placement(job=name, allocs=tuple(allocs), units=len(allocs))
    comm = CommProfile(
        bytes_per_step=draw(st.floats(0, 1e12, allow_nan=False)),
        collective=draw(st.sampled_from(["ring", "hierarchical"])),
    )
    kind = draw(st.sampled_from(["training", "inference", "batch"]))
    if kind == "training":
        spec = training(name, 1, comm=comm)
    elif kind == "inference":
        spec = inference(name, 1, gpus_per_replica=draw(st.integers(1, 8)), comm=comm)
    else:
        spec = batch(name, comm=comm)
    return spec, placement


@st.composite
def jobs(draw: st.DrawFn) -> tuple[GPUCluster, JobSpec, Placement]:
    cluster = draw(clusters)
    spec, placement = draw(job_on(cluster))
    return cluster, spec, placement


@settings(max_examples=300, deadline=None)
@given(jobs())
def test_bytes_are_non_negative_and_the_share_is_nvlink_over_total(job: tuple[GPUCluster, JobSpec, Placement]) -> None:
    cluster, spec, placement = job
    t = traffic_for(cluster, spec=spec, placement=placement)
    assert t.nvlink >= 0 and t.rdma >= 0 and t.backbone >= 0
    assert all(f.bytes_per_step >= 0 for f in t.flows)
    assert 0.0 <= t.intra_rack_share <= 1.0
    if t.total > 0:
        assert t.intra_rack_share == pytest.approx(t.nvlink / t.total)
    else:
        assert t.intra_rack_share == 1.0
    assert sum(b for _, b in t.uplink_bytes) == pytest.approx(2 * t.inter_rack)
    if len(t.regions) == 1:
        assert t.backbone == 0
    if len(t.racks) == 1:
        assert t.inter_rack == 0


@settings(max_examples=200, deadline=None)
@given(jobs())
def test_a_ring_moves_2_n_minus_1_times_s(job: tuple[GPUCluster, JobSpec, Placement]) -> None:
    cluster, spec, placement = job
    if spec.kind.value != "training" or spec.comm.collective != "ring":
        return
    n = sum(len(a.gpus) if a.milli == 1000 else 1 for a in placement.allocs)
    t = traffic_for(cluster, spec=spec, placement=placement)
    assert t.total == pytest.approx(2 * (n - 1) * spec.comm.bytes_per_step)


@settings(max_examples=200, deadline=None)
@given(jobs(), st.floats(0, 1e3, allow_nan=False))
def test_monitor_add_then_remove_leaves_no_load(job: tuple[GPUCluster, JobSpec, Placement], rate: float) -> None:
    cluster, spec, placement = job
    mon = NetworkMonitor(cluster)
    t = mon.add_job(spec, placement, steps_per_s=rate)
    egress = sum(mon.uplink(r).egress_gbps for r in t.racks)
    assert egress == pytest.approx(t.inter_rack * rate * 8 / 1e9)
    mon.remove_job(spec.name)
    assert len(mon.load) == 0 and mon.hottest_uplinks(len(cluster.racks)) == ()


@st.composite
def workloads(draw: st.DrawFn) -> tuple[GPUCluster, list[tuple[JobSpec, Placement, float]], list[int]]:
    cluster = draw(clusters)
    count = draw(st.integers(1, 6))
    work = [(*draw(job_on(cluster, f"j{i}")), draw(st.floats(0, 1e3, allow_nan=False))) for i in range(count)]
    return cluster, work, draw(st.permutations(range(count)))


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_any_removal_order_returns_the_monitor_to_empty(
    case: tuple[GPUCluster, list[tuple[JobSpec, Placement, float]], list[int]],
) -> None:
    cluster, work, order = case
    mon = NetworkMonitor(cluster)
    for spec, placement, rate in work:
        mon.add_job(spec, placement, steps_per_s=rate)
    assert 0.0 <= mon.totals().intra_rack_share <= 1.0
    for i in order:
        mon.remove_job(work[i][0].name)
    assert len(mon.load) == 0 and mon.totals() == TrafficTotals()
