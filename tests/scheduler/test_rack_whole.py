"""Placement that keeps racks whole (issue 13): replicas spread only as far as ``spread_racks`` asks, then
pack; shared-GPU and one-node batch units stay off racks no job uses while a rack in use holds them; and
so the two 72-GPU gangs of the examples each find a whole rack.

Diagrams: ``x`` a GPU held whole, ``~`` a GPU partly held by shared slices, ``.`` free. ``after`` is
checked against ``render(state)`` once the cycle's decisions are applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from builders import ClusterBuilder, NodeRef, diagram, node_index, placed, racks_of, render, run_cycle

from rackscale.loaders import load_cluster, load_jobs
from rackscale.model import ClusterState, GPUCluster, JobSpec, batch, inference, training
from rackscale.scheduler.placement.request import nodes_ascending, nodes_sparing_racks

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class Case:
    cluster: ClusterBuilder
    jobs: list[JobSpec]
    want_nodes: dict[str, list[NodeRef]] = field(default_factory=dict)  # job -> its (rack, node)s, in any order
    want_racks: dict[str, list[int]] = field(default_factory=dict)  # job -> every rack it holds after the cycle
    want_rack_count: dict[str, int] = field(default_factory=dict)
    after: str | None = None


def check(case: Case) -> None:
    state = case.cluster.build()
    d = run_cycle(state, case.jobs)
    for name, refs in case.want_nodes.items():
        got = sorted(a.node for a in placed(d, name).placement.allocs)
        assert got == sorted(node_index(state, *r) for r in refs), name
    for name, racks in case.want_racks.items():  # all the job's racks (a scale-up's decision has the new part)
        assert list(state.running[name].racks) == racks, name
    for name, k in case.want_rack_count.items():
        assert len(racks_of(state, placed(d, name).placement)) == k, name
    if case.after is not None:
        assert render(state) == diagram(case.after)


def four_racks() -> ClusterBuilder:
    """Four racks of 4 nodes x 2 GPUs, each rack fuller than the one before::

    region-0
    ├── r000: n00 [..] n01 [..] n02 [..] n03 [..]   8 free (no job: whole)
    ├── r001: n00 [x.] n01 [..] n02 [..] n03 [..]   7 free
    ├── r002: n00 [xx] n01 [..] n02 [..] n03 [..]   6 free
    └── r003: n00 [xx] n01 [x.] n02 [..] n03 [..]   5 free
    """
    return (
        ClusterBuilder()
        .racks(4)
        .nodes_per_rack(4)
        .gpus_per_node(2)
        .with_running("b", on={(1, 0): 1})
        .with_running("a", on={(2, 0): 2})
        .with_running("c", on={(3, 0): 2, (3, 1): 1})
    )


def svc(replicas: int, spread: int) -> JobSpec:
    return inference("svc", replicas, gpus_per_replica=1, spread_racks=spread)


# ---------------------------------------------------------------------- replicas: as wide as asked, then pack

REPLICAS = {
    # The fullest rack (r003) takes the first replica on its fullest node, the next ones on its other nodes.
    "spread-1-one-rack": Case(
        four_racks(),
        [svc(3, 1)],
        want_nodes={"svc": [(3, 1), (3, 2), (3, 3)]},
        after="""
            region-0
            ├── r000: n00 [..] n01 [..] n02 [..] n03 [..]
            ├── r001: n00 [x.] n01 [..] n02 [..] n03 [..]
            ├── r002: n00 [xx] n01 [..] n02 [..] n03 [..]
            └── r003: n00 [xx] n01 [xx] n02 [x.] n03 [x.]
        """,
    ),
    # Node anti-affinity stays: once r003 has no node without a replica, the next rack (the fullest, r002)
    # rather than a second replica on one node.
    "spread-1-node-anti-affinity-first": Case(
        four_racks(),
        [svc(4, 1)],
        want_nodes={"svc": [(3, 1), (3, 2), (3, 3), (2, 1)]},
    ),
    # Two racks (the two fullest), then the third replica packs into the fuller of the two (r003).
    "spread-2-two-racks-then-pack": Case(
        four_racks(),
        [svc(3, 2)],
        want_nodes={"svc": [(3, 1), (2, 1), (3, 2)]},
        after="""
            region-0
            ├── r000: n00 [..] n01 [..] n02 [..] n03 [..]
            ├── r001: n00 [x.] n01 [..] n02 [..] n03 [..]
            ├── r002: n00 [xx] n01 [x.] n02 [..] n03 [..]
            └── r003: n00 [xx] n01 [xx] n02 [x.] n03 [..]
        """,
    ),
    "spread-3-three-racks": Case(four_racks(), [svc(3, 3)], want_nodes={"svc": [(3, 1), (2, 1), (1, 0)]}),
    # The fourth replica packs into the fullest of the three racks; the rack no job uses stays whole.
    "spread-3-then-pack-the-fullest": Case(
        four_racks(),
        [svc(4, 3)],
        want_nodes={"svc": [(3, 1), (2, 1), (1, 0), (3, 2)]},
        after="""
            region-0
            ├── r000: n00 [..] n01 [..] n02 [..] n03 [..]
            ├── r001: n00 [xx] n01 [..] n02 [..] n03 [..]
            ├── r002: n00 [xx] n01 [x.] n02 [..] n03 [..]
            └── r003: n00 [xx] n01 [xx] n02 [x.] n03 [..]
        """,
    ),
    # A spread wider than the cluster is a wish, no error: every rack once, then the fullest again.
    "spread-wider-than-the-cluster": Case(
        four_racks(),
        [svc(5, 9)],
        want_racks={"svc": [0, 1, 2, 3]},
        want_nodes={"svc": [(3, 1), (2, 1), (1, 0), (0, 0), (3, 2)]},
    ),
    # Racks used by the job already count: a running service on r001 and r002 (spread 2) scales up into them.
    "scale-up-packs-into-the-jobs-racks": Case(
        four_racks().with_running("svc", spec=svc(2, 2), on={(1, 1): 1, (2, 1): 1}),
        [svc(4, 2)],
        want_racks={"svc": [1, 2]},
        after="""
            region-0
            ├── r000: n00 [..] n01 [..] n02 [..] n03 [..]
            ├── r001: n00 [x.] n01 [x.] n02 [..] n03 [..]
            ├── r002: n00 [xx] n01 [x.] n02 [x.] n03 [x.]
            └── r003: n00 [xx] n01 [x.] n02 [..] n03 [..]
        """,
    ),
    # Fractional replicas spread over racks the same way. r002: n00 [xx..] n01 [x...]; the first replica
    # opens a GPU on the fullest node (n00); spread 1 keeps the second in r002 (on n01: node anti-affinity),
    # spread 2 sends it to another rack though r002 still has room.
    "fractional-replicas-spread-1": Case(
        ClusterBuilder().racks(3).with_running("a", on={(2, 0): 2, (2, 1): 1}),
        [inference("svc", 2, gpu_milli=500, spread_racks=1)],
        want_nodes={"svc": [(2, 0), (2, 1)]},
    ),
    "fractional-replicas-spread-2": Case(
        ClusterBuilder().racks(3).with_running("a", on={(2, 0): 2, (2, 1): 1}),
        [inference("svc", 2, gpu_milli=500, spread_racks=2)],
        want_rack_count={"svc": 2},
    ),
}


@pytest.mark.parametrize("case", list(REPLICAS.values()), ids=list(REPLICAS))
def test_replicas_spread_as_wide_as_asked_then_pack(case: Case) -> None:
    check(case)


# ---------------------------------------------------------------------- shared GPUs and batch: racks in use first


def one_rack_in_use() -> ClusterBuilder:
    """::

    region-0
    ├── r000: n00 [....] n01 [....]   no job: whole
    ├── r001: n00 [xxxx] n01 [....]   in use
    └── r002: n00 [....] n01 [....]   no job: whole
    """
    return ClusterBuilder().racks(3).with_running("a", on={(1, 0): 4})


SHARING = {
    # Three half-GPU pods: the first opens a GPU in the rack in use, the second shares it, the third opens
    # the next GPU of the same node (the fullest); the whole racks stay whole.
    "shared-pods-go-to-the-rack-in-use": Case(
        one_rack_in_use(),
        [batch("s", gpu_milli=500, tasks=3)],
        after="""
            region-0
            ├── r000: n00 [....] n01 [....]
            ├── r001: n00 [xxxx] n01 [~~..]
            └── r002: n00 [....] n01 [....]
        """,
    ),
    # Racks in use hold no room: a whole rack is taken (the pods still run).
    "shared-pods-take-a-whole-rack-only-when-none-in-use-fits": Case(
        ClusterBuilder().racks(3).with_running("a", on={(1, 0): 4, (1, 1): 4}),
        [batch("s", gpu_milli=500, tasks=2)],
        want_rack_count={"s": 1},
    ),
    "one-node-batch-tasks-go-to-the-rack-in-use": Case(
        one_rack_in_use(),
        [batch("b", gpus=2, tasks=2)],
        want_nodes={"b": [(1, 1)]},
    ),
    # r001 and r002 both in use: a 4-GPU task takes the free node of the fuller one (r001, 4 free).
    "batch-takes-the-fullest-rack-in-use": Case(
        one_rack_in_use().with_running("c", on={(2, 0): 2}),
        [batch("b", gpus=4, tasks=1)],
        want_nodes={"b": [(1, 1)]},
    ),
    # A task that fits a partly free node still fills that fragment first (fullest node first).
    "batch-fills-fragments-before-free-nodes": Case(
        one_rack_in_use().with_running("c", on={(2, 0): 3}),
        [batch("b", gpus=1, tasks=1)],
        want_nodes={"b": [(2, 0)]},
    ),
}


@pytest.mark.parametrize("case", list(SHARING.values()), ids=list(SHARING))
def test_shared_and_batch_units_keep_off_whole_racks(case: Case) -> None:
    check(case)


def test_one_node_racks_keep_the_fullest_node_order() -> None:
    """On a cluster of one-node racks (openb, Kubernetes without clique labels) a rack is a node: the rack
    rule is moot and the order is ``nodes_ascending``'s, so ``rackscale pack`` is unchanged."""
    b = ClusterBuilder().racks(5).nodes_per_rack(1).gpus_per_node(8).with_running("a", on={(3, 0): 5})
    state = b.with_running("c", on={(1, 0): 2}).build()
    for need in (1, 3, 4):
        assert list(nodes_sparing_racks(state, ("GB200",), need)) == list(nodes_ascending(state, ("GB200",), need))


def test_the_sparing_order_lists_every_node_with_room_once() -> None:
    """The order is a permutation of ``nodes_ascending``'s nodes: racks in use first, whole racks last."""
    state = four_racks().build()
    for need in (0, 1, 2, 3):
        got = list(nodes_sparing_racks(state, ("GB200",), need))
        assert sorted(got) == sorted(nodes_ascending(state, ("GB200",), need))
        whole = [n for n in got if not state.rack_jobs[state.cluster.nodes[n].rack]]
        assert got[len(got) - len(whole) :] == whole, "nodes of racks no job uses come last"


# ---------------------------------------------------------------------- the reproduction (issue 13)


@pytest.mark.parametrize(
    "cluster",
    [
        GPUCluster.uniform(name="nvl72-x4", racks_per_region=4),  # the service's default cluster
        load_cluster(EXAMPLES / "cluster-nvl72.yaml"),  # 2 regions x 4 racks
    ],
    ids=["default-nvl72-x4", "example-nvl72-2x4"],
)
def test_the_examples_leave_two_racks_whole_for_two_72_gpu_gangs(cluster: GPUCluster) -> None:
    """inference.yaml (8 one-GPU replicas), batch-shared.yaml (16 half-GPU tasks), then two 72-GPU gangs
    (train-72.yaml). Before: the replicas went to every rack and the shared tasks to two of them, so no
    rack was whole and each gang was split over two racks::

        r000 [svc 2 + tasks]  r001 [svc 2]  r002 [svc 2]  r003 [svc 2 + tasks]  -> gangs on r000+r002, r000+r001

    Now the replicas span two racks (spread 2) and the tasks join them; each gang has a rack of its own::

        r000 [svc + tasks]  r001 [svc]  r002 [gang 0]  r003 [gang 1]
    """
    state = ClusterState(cluster)
    run_cycle(state, load_jobs(EXAMPLES / "inference.yaml") + load_jobs(EXAMPLES / "batch-shared.yaml"))
    svc_racks = set(state.running["chat-serving"].racks)
    assert len(svc_racks) == 2
    assert set(state.running["embed-corpus"].racks) <= svc_racks, "the shared tasks keep to racks in use"
    train = load_jobs(EXAMPLES / "train-72.yaml")[0]
    gangs = [replace(train, name=f"train-{i}", submit_time=1.0) for i in range(2)]
    d = run_cycle(state, gangs, now=1.0)  # at submission: no split wait is needed
    racks = [racks_of(state, placed(d, g.name).placement) for g in gangs]
    assert all(len(r) == 1 for r in racks), racks
    assert not (set(racks[0] + racks[1]) & svc_racks) and racks[0] != racks[1]


def test_training_gangs_are_unchanged_by_the_spread() -> None:
    """A gang that fits one rack still takes the fullest rack that holds it (``spread_racks`` is read by
    replicas only)."""
    state = four_racks().build()
    d = run_cycle(state, [training("t", 4)])
    assert racks_of(state, placed(d, "t").placement) == [3]
