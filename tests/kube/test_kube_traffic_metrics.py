"""The Kubernetes scheduler's traffic and network series (serve's names: ``rackscale_traffic_bytes_total{tier}``,
``rackscale_intra_rack_traffic_ratio``, ``rackscale_uplink_utilization_ratio{rack}``,
``rackscale_network_latency_p99_seconds{tier}``): **modelled** from where rackscale's running gangs' pods are,
integrated between snapshots as the GPU-seconds are.

Nodes as the fake API server's (tests/kube/conftest.py): 8 GPUs each, 4 per rack (clique), racks 0-1 in region-a
and rack 2 in region-b. A ring over N GPUs in r racks and g regions has N - r NVLink edges, r - g RDMA edges and g
backbone edges, each carrying the same bytes: the shares below follow (docs/network.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.kube.conftest import add_racks, node, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer

from rackscale.cli.kube_metrics import kube_registry
from rackscale.kube.cluster import LabelKeys, build_cluster, topology_signature
from rackscale.kube.observed import gpu_use
from rackscale.kube.pods import node_name, pod_key
from rackscale.kube.scheduler import KubeScheduler
from rackscale.kube.snapshot import RunningGang, build_snapshot
from rackscale.kube.traffic import NetworkUse, TierBytes, network_use, running_gang
from rackscale.model.topology import GPUCluster

Start = Callable[..., KubeScheduler]
Obj = dict[str, Any]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
TIERS = ("nvlink", "rdma", "backbone")
NETWORK_SERIES = (
    "rackscale_traffic_bytes_total",
    "rackscale_intra_rack_traffic_ratio",
    "rackscale_uplink_utilization_ratio",
    "rackscale_network_latency_p99_seconds",
)


def _nodes() -> dict[str, Obj]:
    out = {}
    for r, region in ((0, "region-a"), (1, "region-a"), (2, "region-b")):
        for n in range(4):
            out[f"r{r}-n{n}"] = node(f"r{r}-n{n}", f"clique-{r}", region=region)
    return out


def _cluster(nodes: dict[str, Obj]) -> GPUCluster:
    return build_cluster(topology_signature(nodes.values(), LabelKeys()), LabelKeys())


def _bound(prefix: str, on: list[str], **kw: Any) -> list[Obj]:
    return [pod(f"{prefix}-{i}", node_name=n, **kw) for i, n in enumerate(on)]


def _network(pods: list[Obj]) -> NetworkUse:
    """What a snapshot of ``pods`` (bound where their nodeName says) shows, as the scheduler builds it."""
    nodes = _nodes()
    cluster = _cluster(nodes)
    snap = build_snapshot(
        cluster,
        nodes=nodes,
        pods={pod_key(p): p for p in pods},
        where=lambda key, p: node_name(p),
        labels=LabelKeys(),
        gang_of=lambda key, p: running_gang(p, scheduler="rackscale"),
    )
    return gpu_use(snap.state, at=0.0, waiting=False, before=None, gangs=snap.gangs).network


def _gone(p: Obj) -> Obj:
    p["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return p


RACK0 = ["r0-n0", "r0-n1", "r0-n2", "r0-n3"]
SPLIT = ["r0-n2", "r0-n3", "r1-n0", "r1-n1"]  # 16 GPUs in rack 0, 16 in rack 1: 2 of 32 ring edges cross
REGIONS = ["r0-n0", "r2-n0"]  # 8 GPUs in region-a, 8 in region-b: 2 of 16 edges cross regions


@pytest.mark.parametrize(
    ("pods", "tiers", "share"),
    [
        pytest.param(_bound("t", RACK0, group="t"), {"nvlink"}, 1.0, id="gang-in-one-rack-nvlink-only"),
        pytest.param(_bound("t", SPLIT, group="t"), {"nvlink", "rdma"}, 30 / 32, id="gang-split-over-two-racks-rdma"),
        pytest.param(_bound("t", REGIONS, group="t"), {"nvlink", "backbone"}, 14 / 16, id="gang-across-regions"),
        pytest.param(_bound("t", ["r0-n0"], group="t"), {"nvlink"}, 1.0, id="gang-of-one-8-gpu-pod-nvlink"),
        pytest.param(_bound("t", ["r0-n0", "r1-n0"], group="t", gpus=1), {"rdma"}, 0.0, id="two-1-gpu-pods-split"),
        pytest.param(_bound("t", ["r0-n0", "r1-n0"]), set(), None, id="lone-pods-are-batch-jobs-nothing"),
        pytest.param(_bound("t", ["r0-n0"], group="t", gpus=1), set(), None, id="one-gpu-gang-nothing"),
        pytest.param(
            _bound("o", SPLIT, group="o", scheduler="default-scheduler"), set(), None, id="other-schedulers-not-counted"
        ),
        pytest.param(
            [*_bound("t", RACK0[:3], group="t"), _gone(pod("t-3", node_name="r1-n0", group="t"))],
            {"nvlink"},
            1.0,
            id="a-member-being-deleted-not-counted",
        ),
        pytest.param(
            [pod("t-0", node_name="r0-n0", group="t", namespace="a"), pod("t-1", node_name="r1-n0", group="t")],
            {"nvlink"},
            1.0,
            id="a-group-is-per-namespace",
        ),
    ],
)
def test_the_tiers_a_placement_loads(pods: list[Obj], tiers: set[str], share: float | None) -> None:
    net = _network(pods)
    per_s = {t: getattr(net.per_s, t) for t in TIERS}
    assert {t for t, v in per_s.items() if v > 0} == tiers
    assert all(v >= 0 for v in per_s.values())
    if share is None:
        assert net.per_s.total == 0
    else:
        assert net.per_s.nvlink / net.per_s.total == pytest.approx(share)
    assert bool(net.uplinks) == bool(net.per_s.rdma or net.per_s.backbone)  # only flows between racks load them


def test_two_gangs_weigh_by_their_bytes() -> None:
    """The share over two gangs is bytes-weighted (serve's): between the split gang's 30/32 and the packed one's 1."""
    packed, split = _network(_bound("a", RACK0, group="a")), _network(_bound("b", SPLIT, group="b"))
    both = _network([*_bound("a", RACK0[:2], group="a"), *_bound("b", ["r1-n2", "r1-n3", "r2-n2", "r2-n3"], group="b")])
    assert packed.per_s.rdma == 0 and split.per_s.rdma > 0
    assert 0.9 < both.per_s.nvlink / both.per_s.total < 1.0


def test_the_uplinks_of_a_split_gang_carry_its_flows() -> None:
    """Racks 0 and 1 carry the split gang's two inter-rack edges; rack 2 carries none, and the fabric tiers' p99
    queues behind the busiest uplink."""
    net = _network(_bound("t", SPLIT, group="t"))
    assert set(net.uplinks) == {0, 1}
    assert all(0 < u < 1 for u in net.uplinks.values())
    assert net.busiest_uplink == max(net.uplinks.values())
    assert _network(_bound("t", RACK0, group="t")).uplinks == {}


def test_gangs_sharing_thin_uplinks_are_slowed_as_serve_slows_them() -> None:
    """Two racks of 8 nodes with one 100 Gb/s uplink each (a fabric thinner than a kube cluster's default of one
    per GPU): one split gang alone loads it about half; four load it past its capacity, and each steps slower
    (serve's contention), so they move less than four times one alone."""
    c = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=8, gpus_per_node=8, uplinks_per_rack=1)
    gangs = [RunningGang(job=f"group:d/g{i}", gpus=((i, 8), (8 + i, 8))) for i in range(4)]
    one = network_use(c, gangs[:1], at=0.0, before=None)
    four = network_use(c, gangs, at=0.0, before=None)
    assert 0 < one.busiest_uplink < 1 < four.busiest_uplink
    assert four.per_s.rdma < 4 * one.per_s.rdma * 0.99


G_RACK = (RunningGang(job="group:d/a", gpus=((0, 8), (1, 8))),)
G_SPLIT = (RunningGang(job="group:d/a", gpus=((0, 8), (4, 8))),)


def test_bytes_accrue_between_snapshots_at_each_snapshots_rates() -> None:
    """0-10 s: a gang in one rack; 10 s on: the same gang split over two racks (recreated elsewhere). A scrape at
    15 s adds 5 s at the second snapshot's rates to the bytes counted up to 10 s; a term as leader starts at 0."""
    c = _cluster(_nodes())
    a = network_use(c, G_RACK, at=0.0, before=None)
    assert a.counted == TierBytes()
    assert a.moved(10.0) == TierBytes(nvlink=a.per_s.nvlink * 10)
    b = network_use(c, G_SPLIT, at=10.0, before=a)
    assert b.per_s.rdma > 0  # recomputed for the new placement, not the last one's rates
    assert b.counted == a.moved(10.0)
    got = b.moved(15.0)
    assert got.nvlink == pytest.approx(a.per_s.nvlink * 10 + b.per_s.nvlink * 5)
    assert got.rdma == pytest.approx(b.per_s.rdma * 5)
    assert b.moved(5.0) == b.counted  # never backwards (a scrape's clock read before the cycle's)
    same = network_use(c, G_SPLIT, at=20.0, before=b)
    assert same.per_s == b.per_s and same.counted == b.moved(20.0)
    assert network_use(c, G_SPLIT, at=30.0, before=None).counted == TierBytes()


# ------------------------------------------------------------------------------------ the scheduler, scraped
def _samples(s: KubeScheduler) -> Samples:
    return {(x.name, frozenset(x.labels.items())): x.value for f in kube_registry(s).collect() for x in f.samples}


def _traffic(got: Samples) -> dict[str, float]:
    return {dict(labels)["tier"]: v for (name, labels), v in got.items() if name == "rackscale_traffic_bytes_total"}


def _by(got: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in got.items() if n == name}


def _moving(s: KubeScheduler) -> bool:
    return s.use is not None and s.use.network.per_s.total > 0


def test_a_gang_bound_in_one_rack_moves_nvlink_bytes_only(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=2, nodes=4)
    s = start_scheduler()
    for i in range(4):
        fake.put("pods", pod(f"train-{i}", group="train", min_member=4))
    wait_for(lambda: _moving(s), what="the bound gang in a snapshot")
    wait_for(lambda: _traffic(_samples(s))["nvlink"] > 0, what="bytes")
    got = _samples(s)
    assert _traffic(got)["rdma"] == 0 and _traffic(got)["backbone"] == 0
    assert got[("rackscale_intra_rack_traffic_ratio", frozenset())] == 1.0
    assert _by(got, "rackscale_uplink_utilization_ratio", "rack") == {"clique-0": 0.0, "clique-1": 0.0}
    assert _by(got, "rackscale_network_latency_p99_seconds", "tier") == pytest.approx(
        {"nvlink": 1e-6, "rdma": 5e-6, "backbone": 50e-6}  # the default tiers, unloaded
    )


def test_a_gang_split_over_racks_moves_rdma_bytes_and_counts_at_its_rate(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """Another scheduler's pods (a pod group of theirs, split over both racks) leave two nodes free in each rack:
    the gang of 4 x 8 GPUs splits, 2 of its 32 ring edges on RDMA. Theirs move nothing here. Between two scrapes
    the counters grow by the modelled rate x the time between them."""
    add_racks(fake, racks=2, nodes=4)
    for i, n in enumerate(["r0-n0", "r0-n1", "r1-n0", "r1-n1"]):
        fake.put("pods", pod(f"other-{i}", scheduler="default-scheduler", group="other", node_name=n))
    s = start_scheduler()
    for i in range(4):
        fake.put("pods", pod(f"train-{i}", group="train", min_member=4))
    wait_for(lambda: _moving(s), what="the bound gang in a snapshot")
    assert s.use is not None
    net = s.use.network
    assert [g.job for g in net.gangs] == ["group:default/train"]  # theirs are not rackscale's gangs
    t0 = s.elapsed()
    first = _samples(s)
    t1 = s.elapsed()
    wait_for(lambda: s.elapsed() > t1 + 0.5, what="time passing")
    t2 = s.elapsed()
    second = _samples(s)
    t3 = s.elapsed()
    assert s.use.network.per_s == net.per_s  # the same placement all along
    for tier in ("nvlink", "rdma"):
        grown = _traffic(second)[tier] - _traffic(first)[tier]
        rate = getattr(net.per_s, tier)
        assert rate > 0
        assert rate * (t2 - t1) <= grown * (1 + 1e-9) and grown <= rate * (t3 - t0) * (1 + 1e-9), tier
    assert _traffic(second)["backbone"] == 0
    assert second[("rackscale_intra_rack_traffic_ratio", frozenset())] == pytest.approx(30 / 32)
    uplinks = _by(second, "rackscale_uplink_utilization_ratio", "rack")
    assert uplinks["clique-0"] > 0 and uplinks["clique-1"] > 0
    assert _by(second, "rackscale_network_latency_p99_seconds", "tier")["rdma"] > 5e-6  # queued behind them


def test_a_standby_exports_no_network_series_and_a_new_leader_counts_from_0(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """a leads and its gang moves bytes; b, a standby, exports none. a hangs (stops renewing): deposed, it exports
    none either, though it keeps its last view; b takes over. Then b hangs and a leads again: its counters start
    at 0 in its new term, not from what it counted in its first (nor at that term's rate through the gap)."""
    add_racks(fake, racks=1, nodes=4)
    a = start_scheduler()
    for i in range(2):
        fake.put("pods", pod(f"train-{i}", group="train", min_member=2))
    wait_for(lambda: _moving(a), what="the leader's gang moving bytes")
    b = start_scheduler()
    wait_for(lambda: all(b.synced.values()), what="the standby's caches")
    assert {name for name, _ in _samples(a)} >= set(NETWORK_SERIES)
    assert not {name for name, _ in _samples(b)} & set(NETWORK_SERIES)
    hang = b.elapsed()
    a.renewing = False
    wait_for(lambda: b.is_leader and _moving(b), timeout=10, what="b takes over and sees the gang")
    assert a.use is not None and not a.is_leader
    assert not {name for name, _ in _samples(a)} & set(NETWORK_SERIES)
    assert b.use is not None
    assert 0 <= _traffic(_samples(b))["nvlink"] <= b.use.network.per_s.nvlink * (b.elapsed() - hang)
    hang = a.elapsed()
    a.renewing, b.renewing = True, False
    wait_for(lambda: a.is_leader and a.use is not None and a.use.at > hang, timeout=10, what="a leads again")
    assert a.use is not None
    assert 0 <= _traffic(_samples(a))["nvlink"] <= a.use.network.per_s.nvlink * (a.elapsed() - hang)
