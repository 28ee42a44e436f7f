"""The Kubernetes scheduler's GPU series (serve's names: ``rackscale_gpus{state}``, per rack, utilisation and the
idle rate's GPU-seconds): what a snapshot of the caches shows, and how the idle rate's terms accrue."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from tests.kube.conftest import FAST, add_racks, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer

from rackscale.cli.kube_metrics import kube_registry
from rackscale.kube.observed import GpuSeconds, gpu_use
from rackscale.kube.scheduler import KubeScheduler
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import batch

Start = Callable[..., KubeScheduler]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _state(*, used: int = 0, failed_node: bool = False, cordoned_node: bool = False) -> ClusterState:
    """One rack of two nodes of 8 GPUs: ``used`` GPUs held, node 0's first; node 1 failed or cordoned."""
    st = ClusterState(GPUCluster.uniform(racks_per_region=1, regions=1, gpus_per_node=8, nodes_per_rack=2))
    if used:
        allocs = tuple(NodeAlloc(n, tuple(range(k))) for n, k in ((0, min(used, 8)), (1, used - 8)) if k > 0)
        st.allocate(batch("j", gpus=used), Placement("j", allocs, 1), now=0.0)
    if failed_node:
        st.fail_node(1)
    if cordoned_node:
        st.cordon_node(1)
    return st


@pytest.mark.parametrize(
    ("st", "want"),
    [
        pytest.param(_state(), (0, 16, 0, 0), id="empty"),
        pytest.param(_state(used=8), (8, 8, 0, 0), id="half-used"),
        pytest.param(_state(used=4, failed_node=True), (4, 4, 0, 8), id="a-node-failed"),
        pytest.param(_state(used=4, cordoned_node=True), (4, 4, 8, 0), id="a-node-cordoned"),
    ],
)
def test_the_gpus_by_state_add_up_to_the_cluster(st: ClusterState, want: tuple[int, int, int, int]) -> None:
    u = gpu_use(st, at=0.0, waiting=False, before=None)
    assert (u.allocated, u.free, u.cordoned, u.failed) == want
    assert sum(want) == 16
    assert [(r.gpus, r.allocated) for r in u.racks] == [(16, want[0])]


def test_the_idle_rate_counts_free_gpus_only_while_a_gang_waits() -> None:
    """0-10 s: 8 of 16 GPUs free while a gang waits; 10-30 s: nothing waits; then 4 free while one waits."""
    a = gpu_use(_state(used=8), at=0.0, waiting=True, before=None)
    assert a.seconds(10.0) == GpuSeconds(available=160.0, available_waiting=160.0, idle_waiting=80.0)
    b = gpu_use(_state(used=8), at=10.0, waiting=False, before=a)
    c = gpu_use(_state(used=12), at=30.0, waiting=True, before=b)
    assert c.counted == GpuSeconds(available=480.0, available_waiting=160.0, idle_waiting=80.0)
    assert c.seconds(40.0) == GpuSeconds(available=640.0, available_waiting=320.0, idle_waiting=120.0)
    assert c.seconds(25.0) == c.counted  # never backwards (a scrape's clock read before the cycle's)


def _samples(s: KubeScheduler) -> Samples:
    return {(x.name, frozenset(x.labels.items())): x.value for f in kube_registry(s).collect() for x in f.samples}


def _gpus(got: Samples) -> dict[str, float]:
    return {dict(labels)["state"]: v for (name, labels), v in got.items() if name == "rackscale_gpus"}


def _two_racks_one_node_cordoned_8_gpus_held(fake: FakeAPIServer) -> None:
    """Two racks of two 8-GPU nodes; r1-n1 cordoned; another scheduler's pod holds r0-n0's 8 GPUs."""
    add_racks(fake, racks=2, nodes=2)
    cordoned = fake.get("nodes", "r1-n1")
    assert cordoned is not None
    cordoned["spec"]["unschedulable"] = True
    fake.put("nodes", cordoned)
    fake.put("pods", pod("x-0", scheduler="default-scheduler", node_name="r0-n0"))


def test_the_series_follow_the_cluster_and_the_wait(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """
    clique-0: r0-n0 [x-0: another scheduler's, 8 GPUs]  r0-n1 [........]
    clique-1: r1-n0 [........]                          r1-n1 [........] cordoned

    A pod asking for 16 GPUs on one node waits: 16 GPUs free, 8 allocated, 8 cordoned; the idle rate is 16/24
    while it waits. Once it is deleted, the free GPUs no longer count as idle.
    """
    _two_racks_one_node_cordoned_8_gpus_held(fake)
    s = start_scheduler()
    fake.put("pods", pod("big", gpus=16))
    wait_for(lambda: "default" in s.waiting.queues, what="the big pod waiting")
    got = _samples(s)
    assert _gpus(got) == {"allocated": 8, "free": 16, "cordoned": 8, "failed": 0}
    racks = {dict(labels)["rack"]: v for (name, labels), v in got.items() if name == "rackscale_rack_gpus_allocated"}
    assert racks == {"clique-0": 8, "clique-1": 0}
    assert got[("rackscale_gpu_utilization_ratio", frozenset())] == pytest.approx(8 / 24)
    wait_for(lambda: _samples(s)[("rackscale_gpu_idle_while_waiting_seconds_total", frozenset())] > 0.2, what="time")
    assert _samples(s)[("rackscale_idle_rate_ratio", frozenset())] == pytest.approx(16 / 24)
    fake.delete("pods", "default/big")
    wait_for(lambda: s.use is not None and not s.use.waiting, what="a cycle with nothing waiting")
    before = _samples(s)
    wait_for(
        lambda: (
            _samples(s)[("rackscale_gpu_available_seconds_total", frozenset())]
            > before[("rackscale_gpu_available_seconds_total", frozenset())] + 2.0
        ),
        what="time passing",
    )
    after = _samples(s)
    for name in (
        "rackscale_gpu_idle_while_waiting_seconds_total",
        "rackscale_gpu_available_while_waiting_seconds_total",
    ):
        assert after[(name, frozenset())] == before[(name, frozenset())]  # nothing waits: these stand still


def test_a_standby_exports_no_gpu_series(fake: FakeAPIServer, start_scheduler: Start) -> None:
    add_racks(fake, racks=1, nodes=1)
    leader = start_scheduler()
    fake.put("pods", pod("p", gpus=4))
    wait_for(lambda: leader.use is not None, what="the leader's first view")
    standby = start_scheduler()
    wait_for(lambda: all(standby.synced.values()), what="the standby's caches")
    assert not [k for k in _samples(standby) if k[0].startswith("rackscale_gpu") or k[0].startswith("rackscale_rack")]
    assert _gpus(_samples(leader))["allocated"] in (0, 4)


@pytest.mark.parametrize(
    ("price", "want"),
    [
        pytest.param(None, None, id="no-price-no-series"),
        pytest.param(2.5, 32 * 2.5, id="every-gpu-x-the-price"),
        pytest.param(0.0, 0.0, id="free"),
    ],
)
def test_the_cost_per_hour_is_the_operators_price_x_every_gpu(
    fake: FakeAPIServer, start_scheduler: Start, price: float | None, want: float | None
) -> None:
    """Two racks of two 8-GPU nodes, one cordoned, 8 GPUs held: the cost counts all 32 GPUs, as serve's counts its
    cluster's (what it pays for, used or not); a standby says nothing."""
    _two_racks_one_node_cordoned_8_gpus_held(fake)
    config = dataclasses.replace(FAST, price_per_gpu_hour=price)
    s = start_scheduler(config)
    wait_for(lambda: s.use is not None and s.use.allocated == 8, what="the first view")
    assert _samples(s).get(("rackscale_cost_per_hour", frozenset())) == want
    standby = start_scheduler(config)
    wait_for(lambda: all(standby.synced.values()), what="the standby's caches")
    assert ("rackscale_cost_per_hour", frozenset()) not in _samples(standby)
