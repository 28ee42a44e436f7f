"""Cordoned nodes: no placement there by any profile's placer, what runs there goes on, and the GPUs are not
failed (the KPIs read failures and cordons apart).

The cluster is 2 racks of 2 nodes of 4 GPUs; node indexes run rack by rack, and n0..n2 are cordoned::

    region-0
    ├── r000: n0 [cccc] n1 [cccc]        (c cordoned, . free)
    └── r001: n2 [cccc] n3 [....]
"""

from __future__ import annotations

import pytest

from rackscale.host.host import ClusterHost
from rackscale.model import ClusterState, GPUCluster, JobSpec, NodeAlloc, Placement, batch, inference, training
from rackscale.scheduler.framework import PROFILES

CORDONED = (0, 1, 2)


def cluster() -> GPUCluster:
    return GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)


JOBS: list[tuple[JobSpec, bool]] = [
    (training("gang4", 4), True),  # fits n3
    (training("gang8", 8), False),  # needs two nodes: only one is open
    (batch("half", gpu_milli=500), True),  # a shared GPU slice
    (inference("svc", 2), True),
]


@pytest.mark.parametrize("policy", sorted(PROFILES), ids=sorted(PROFILES))
@pytest.mark.parametrize(("job", "fits"), JOBS, ids=[j.name for j, _ in JOBS])
def test_no_profile_places_on_a_cordoned_node(policy: str, job: JobSpec, fits: bool) -> None:
    host = ClusterHost(cluster(), policy=policy)
    host.cordon(CORDONED, now=0.0, reason="firmware")
    host.submit(job)
    host.cycle(1.0)
    rj = host.state.running.get(job.name)
    if fits:
        assert rj is not None, f"{policy} did not place {job.name} on the open node"
        assert {a.node for a in rj.placement.allocs} == {3}
    else:
        assert rj is None
    host.state.check_invariants()


def test_cordon_keeps_running_jobs_and_frees_nothing_for_placement() -> None:
    st = ClusterState(cluster())
    st.allocate(training("a", 2), Placement("a", (NodeAlloc(0, (0, 1)),), 2), now=0.0)
    assert st.cordon_node(0) == {"a"}
    assert "a" in st.running  # it goes on
    assert st.node_whole[0] == 0 and 0 not in st.node_index["GB200"].buckets[2]
    assert st.rack_whole[0] == 4  # only n1's GPUs
    assert st.failed_gpus_count == 0
    assert st.cordoned_idle_count == 2  # n0's two free GPUs: out of service, not failed
    assert st.fits(NodeAlloc(0, (2,))) == "node r000-n00 is cordoned"
    st.check_invariants()
    st.release("a")  # a job ending on a cordoned node gives its GPUs to no one
    assert st.node_whole[0] == 0 and st.cordoned_idle_count == 4
    st.check_invariants()
    st.uncordon_node(0)
    assert st.node_whole[0] == 4 and st.cordoned_idle_count == 0 and st.rack_whole[0] == 8
    st.check_invariants()


@pytest.mark.parametrize(
    "order",
    [
        ("cordon", "fail", "recover", "uncordon"),
        ("fail", "cordon", "uncordon", "recover"),
        ("cordon", "fail", "uncordon", "recover"),
    ],
    ids=["repaired-while-cordoned", "cordoned-while-failed", "uncordoned-while-failed"],
)
def test_cordon_and_failure_of_one_node_are_counted_apart(order: tuple[str, ...]) -> None:
    st = ClusterState(cluster())
    expected_failed = {"fail": 4, "recover": 0}
    failed = 0
    for step in order:
        if step == "cordon":
            st.cordon_node(1)
        elif step == "uncordon":
            st.uncordon_node(1)
        elif step == "fail":
            st.fail_node(1)
        else:
            st.recover_node(1)
        failed = expected_failed.get(step, failed)
        assert st.failed_gpus_count == failed, step
        # Down while failed or cordoned; idle-but-cordoned GPUs only while cordoned and not failed.
        assert st.node_down[1] == (st.node_failed[1] or st.node_cordoned[1])
        assert st.cordoned_idle_count == (4 if st.node_cordoned[1] and not st.node_failed[1] else 0)
        st.check_invariants()
    assert st.node_whole[1] == 4 and not st.node_down[1]


def test_a_failed_gpu_on_a_cordoned_node_is_failed_not_idle() -> None:
    st = ClusterState(cluster())
    st.cordon_node(2)
    st.fail_gpu(2, 3)
    assert st.failed_gpus_count == 1 and st.cordoned_idle_count == 3
    st.check_invariants()
    st.uncordon_node(2)
    assert st.node_whole[2] == 3
    st.check_invariants()


def test_idle_rate_leaves_cordoned_free_gpus_out() -> None:
    """Half the cluster cordoned and empty, a job waits for more than the rest: the cordoned GPUs are
    neither available nor idle (else a drain would read as waste)."""
    host = ClusterHost(cluster())
    host.cordon((0, 1), now=0.0, reason="maintenance")
    host.submit(training("big", 16))  # cannot fit while cordoned
    host.account(0.0)
    host.cycle(0.0)
    host.account(100.0)
    assert host.kpi.available_gpu_s == pytest.approx(8 * 100.0)
    assert host.kpi.idle_waiting_gpu_s == pytest.approx(8 * 100.0)
