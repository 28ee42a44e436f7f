"""The ``volcano`` baseline: one case per rule read in Volcano's source (docs/baselines.md, ``volcano``).

Each case asks the placer for one placement group on a cluster drawn in its docstring or table comment
(checked against ``render``). Volcano breaks ties at random (nodes, HyperNodes), so a case asserts what the
rule decides (a rack, a region, GPUs per rack) and, where the rule is the random draw itself, what many
seeds give together. The shared properties (random worlds, no double allocation) run in
``test_peer_baselines.py`` with the other peers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from builders import ClusterBuilder, diagram, placed, render, run_cycle
from test_peer_baselines import by_node, request, two_regions

from rackscale.model import ClusterState, GPUCluster, NodeAlloc, NodeDecl, Placement, Resources, training
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.volcano import GRADIENTS, Mode, Tier, Volcano, binpack, network_topology

SEEDS = range(24)


def by_rack(state: ClusterState, allocs: Sequence[NodeAlloc] | None) -> dict[int, int] | None:
    if allocs is None:
        return None
    out: dict[int, int] = {}
    for a in allocs:
        r = state.cluster.nodes[a.node].rack
        out[r] = out.get(r, 0) + (len(a.gpus) if a.milli == 1000 else 1)
    return out


def by_region(state: ClusterState, allocs: Sequence[NodeAlloc] | None) -> list[int]:
    got = by_rack(state, allocs)
    assert got is not None
    out: dict[int, int] = {}
    for r, k in got.items():
        g = state.cluster.racks[r].region
        out[g] = out.get(g, 0) + k
    return sorted(out.values())


def over_seeds(state: ClusterState, req: GroupRequest) -> list[dict[int, int] | None]:
    return [by_rack(state, Volcano(seed).place(state, req)) for seed in SEEDS]


# ---------------------------------------------------------------------------------------------- mapping
@pytest.mark.parametrize(
    ("req", "mode"),
    [
        (request(4, one_rack=True, one_region=True), Mode.HARD_RACK),
        (request(4, one_rack=True), Mode.HARD_RACK),
        (request(4, one_region=True), Mode.HARD_REGION),
        (request(4, one_region=True, prefer_one_rack=True), Mode.HARD_REGION),
        (request(4, prefer_one_rack=True), Mode.SOFT),
        (request(4), Mode.NONE),  # a preferred region alone: soft mode names no tier
        (request(4, prefer_one_region=False), Mode.NONE),
    ],
    ids=["required rack", "one rack (a replica)", "required region", "required region, preferred rack",
         "preferred rack", "preferred region", "no wish"],
)  # fmt: skip
def test_requests_map_to_network_topology(req: GroupRequest, mode: Mode) -> None:
    assert network_topology(req) is mode


def test_gradients_go_up_from_tier_one() -> None:
    """hard highestTierAllowed t: tiers 1..t; soft: converted to the highest tier, the virtual root included."""
    assert GRADIENTS[Mode.HARD_RACK] == (Tier.RACK,)
    assert GRADIENTS[Mode.HARD_REGION] == (Tier.RACK, Tier.REGION)
    assert GRADIENTS[Mode.SOFT] == (Tier.RACK, Tier.REGION, Tier.CLUSTER)


@pytest.mark.parametrize(
    ("used", "request_", "capacity", "want"),
    [(4.0, 4.0, 16.0, 0.5), (12.0, 4.0, 16.0, 1.0), (13.0, 4.0, 16.0, 0.0), (0.0, 1.0, 0.0, 0.0)],
    ids=["half full after", "full after", "does not fit: zero", "no capacity"],
)
def test_binpack_score(used: float, request_: float, capacity: float, want: float) -> None:
    assert binpack(used, request_, capacity) == want


# ---------------------------------------------------------------------------------------------- hard, tier 1
# TWO_REGIONS and two_regions(): test_peer_baselines.py's (free GPUs: racks 2, 8, 5, 16; regions 10, 21).


HARD_CASES: list[tuple[str, GroupRequest, dict[int, int] | None]] = [
    # binpack (used + 3) / 16: rack 0 cannot hold 3; rack 2 (11 used) beats rack 1 (8) and rack 3 (0).
    ("required rack: the fullest rack that holds the gang", request(3, one_rack=True, one_region=True), {2: 3}),
    ("required rack: a two-GPU gang counts pods (rack 2: 5 free GPUs, room for 2 pods)",
     request(3, gpus=2, one_rack=True, one_region=True), {1: 6}),
    ("required rack, no rack holds it: waits (never a tier up)", request(17, one_rack=True, one_region=True), None),
    ("required rack: a reserved rack is skipped", request(3, one_rack=True, exclude_racks=frozenset({2})), {1: 3}),
    ("required rack: only the racks preemption freed", request(3, one_rack=True, only_racks=frozenset({3})),
     {3: 3}),
    ("required region: a rack that holds it first (tier 1 before tier 2)", request(9, one_region=True), {3: 9}),
    ("required region, no region holds it: waits", request(22, one_region=True), None),
]  # fmt: skip


@pytest.mark.parametrize(("req", "want"), [c[1:] for c in HARD_CASES], ids=[c[0] for c in HARD_CASES])
def test_hard_mode(req: GroupRequest, want: dict[int, int] | None) -> None:
    """On ``TWO_REGIONS``; every seed gives the same racks."""
    state = two_regions()
    assert {str(got) for got in over_seeds(state, req)} == {str(want)}


# Region 1 (21 free) is the only region that holds 17; inside it the first task's rack is filled, then the other.
IN_REGION_1 = {str({2: 5, 3: 12}), str({2: 1, 3: 16})}


def test_required_region_when_no_rack_holds_the_gang() -> None:
    """On ``TWO_REGIONS``: 17 GPUs, no rack holds them (16 at most): region 1, one of its racks filled."""
    state = two_regions()
    assert {str(g) for g in over_seeds(state, request(17, one_region=True))} == IN_REGION_1


UNEVEN = """
    region-0
    ├── small: n00 [xx..] n01 [xx..]
    └── large: n00 [xxxx] n01 [xxxx] n02 [xxx.] n03 [....]
"""  # for 2 GPUs: small, 4 free of 8, (4 + 2) / 8 = 0.75; large, 5 free of 16, (11 + 2) / 16 = 0.81
UNEVEN_SMALL_FULLER = """
    region-0
    ├── small: n00 [xxx.] n01 [xx..]
    └── large: n00 [xxxx] n01 [xxxx] n02 [xxx.] n03 [....]
"""  # for 2 GPUs: small, 3 free of 8, (5 + 2) / 8 = 0.88; large, 5 free of 16, (11 + 2) / 16 = 0.81


def uneven_racks(small: tuple[int, int], drawn: str) -> ClusterState:
    """A rack of 2 nodes and one of 4: the binpack score is a share of the rack, not a count of GPUs."""
    decls = [NodeDecl(f"small-n{i:02d}", "small", "region-0", 4, "GB200", 144_000, 1 << 20) for i in range(2)]
    decls += [NodeDecl(f"large-n{i:02d}", "large", "region-0", 4, "GB200", 144_000, 1 << 20) for i in range(4)]
    state = ClusterState(GPUCluster.from_nodes(decls, name="uneven"))
    held = {"small-n00": small[0], "small-n01": small[1], "large-n00": 4, "large-n01": 4, "large-n02": 3}
    index = {node.name: node.index for node in state.cluster.nodes}
    allocs = tuple(NodeAlloc(index[n], state.whole_free_gpus(index[n], k), 1000, 0, 0) for n, k in held.items())
    state.allocate(training("x", sum(held.values())), Placement("x", allocs, sum(held.values())), now=0.0)
    assert render(state) == diagram(drawn)
    return state


@pytest.mark.parametrize(
    ("small", "drawn", "want"),
    [((2, 2), UNEVEN, "large"), ((3, 2), UNEVEN_SMALL_FULLER, "small")],
    ids=["the fewest free is not the fullest share", "the most used is not the fullest share"],
)
def test_hard_mode_scores_the_share_of_the_rack(small: tuple[int, int], drawn: str, want: str) -> None:
    """Kueue's and Slurm's best fit (fewest free GPUs or units) would take the small rack in the first
    layout; counting used GPUs would take the large one in the second; Volcano takes the fuller share."""
    state = uneven_racks(small, drawn)
    rack = next(r.index for r in state.cluster.racks if r.name == want)
    assert {str(got) for got in over_seeds(state, request(2, one_rack=True))} == {str({rack: 2})}


def test_equal_racks_are_drawn_at_random() -> None:
    """Two empty racks score the same: ``SelectBestHyperNodeAndScore`` picks one at random."""
    state = ClusterBuilder().racks(2).build()
    got = {str(g) for g in over_seeds(state, request(4, one_rack=True))}
    assert got == {str({0: 4}), str({1: 4})}


ONE_RACK = """
    region-0
    └── r000: n00 [xxx.] n01 [....]
"""


def test_inside_the_rack_each_task_goes_to_a_random_node() -> None:
    """LeastAllocated and binpack cancel out: neither the fullest node (best fit) nor the emptiest (spread)
    is chosen every time."""
    state = ClusterBuilder().racks(1).with_running("x", on={(0, 0): 3}).build()
    assert render(state) == diagram(ONE_RACK)
    got = {str(by_node(state, Volcano(seed).place(state, request(1, one_rack=True)))) for seed in SEEDS}
    assert got == {str({(0, 0): 1}), str({(0, 1): 1})}


# ---------------------------------------------------------------------------------------------- hard, tier 2
REGIONS_24_32 = """
    region-0
    ├── g0-r000: n00 [xxxx] n01 [....] n02 [....] n03 [....]
    └── g0-r001: n00 [xxxx] n01 [....] n02 [....] n03 [....]
    region-1
    ├── g1-r000: n00 [....] n01 [....] n02 [....] n03 [....]
    └── g1-r001: n00 [....] n01 [....] n02 [....] n03 [....]
"""  # free GPUs: racks 12, 12, 16, 16; regions 24, 32


def test_required_region_takes_the_fullest_region_and_fills_it_rack_by_rack() -> None:
    """20 GPUs: no rack holds them; both regions do, region 0 is fuller ((8 + 20) / 32 against 20 / 32; the
    roomiest would be region 1). In it the first task's rack is filled (same-rack nodes score highest), then
    the other rack."""
    held = {(0, 0): 4, (1, 0): 4}
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(REGIONS_24_32)
    outcomes = {str(g) for g in over_seeds(state, request(20, one_region=True))}
    assert outcomes == {str({0: 12, 1: 8}), str({0: 8, 1: 12})}


THREE_RACKS = """
    region-0
    ├── r000: n00 [xx..] n01 [xx..] n02 [xx..] n03 [xx..]
    ├── r001: n00 [xx..] n01 [xx..] n02 [xx..] n03 [xx..]
    └── r002: n00 [xx..] n01 [xx..] n02 [xx..] n03 [xx..]
"""  # 8 free GPUs a rack


def test_after_the_first_rack_the_rack_holding_more_tasks_is_filled_first() -> None:
    """Once the gang spans two racks its AllocatedHyperNode is the region: every node scores the same LCA, and
    the tie goes to the rack with more of the job's tasks (``scoreWithTaskNum``): racks are filled one at a
    time, 8 + 8 + 4, never three racks part-filled."""
    held = {(r, n): 2 for r in range(3) for n in range(4)}
    state = ClusterBuilder().racks(3).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(THREE_RACKS)
    for got in over_seeds(state, request(20, one_region=True)):
        assert got is not None and sorted(got.values()) == [4, 8, 8], got


# ---------------------------------------------------------------------------------------------- soft
def test_soft_mode_takes_the_fullest_rack_that_holds_the_gang() -> None:
    state = two_regions()
    assert {str(g) for g in over_seeds(state, request(3, prefer_one_rack=True))} == {str({2: 3})}


def test_soft_mode_goes_up_a_tier_where_hard_mode_waits() -> None:
    """17 GPUs, one rack preferred: no rack holds them, region 1 (21 free) does; region 0 (10) does not."""
    state = two_regions()
    assert Volcano().place(state, request(17, one_rack=True, one_region=True)) is None
    assert {str(g) for g in over_seeds(state, request(17, prefer_one_rack=True))} == IN_REGION_1


def test_soft_mode_spans_the_cluster_nearest_first() -> None:
    """40 GPUs: no region (32 free) holds them; the virtual root does. After the first rack the nearest
    racks come first (the same region: a lower LCA tier), so one region gives all it has."""
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(4).gpus_per_node(4).build()
    for seed in SEEDS:
        got = Volcano(seed).place(state, request(40, prefer_one_rack=True))
        assert by_region(state, got) == [8, 32]
        assert sorted(by_rack(state, got).values()) == [8, 16, 16]  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- no topology
FULLER_RACK = """
    region-0
    ├── r000: n00 [xxx.] n01 [....] n02 [....] n03 [....]
    └── r001: n00 [xx..] n01 [xx..] n02 [xx..] n03 [....]
"""  # rack 0: 3 used, its n00 the fullest node; rack 1: 6 used


def test_normal_pods_go_to_the_fullest_rack_not_the_fullest_node() -> None:
    """HyperNode-level binpacking for pods without networkTopology: rack 1 (6 used) beats rack 0 (3 used),
    though rack 0 holds the fullest node (Kueue's LeastFreeCapacity would take it)."""
    held = {(0, 0): 3, (1, 0): 2, (1, 1): 2, (1, 2): 2}
    state = ClusterBuilder().racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(FULLER_RACK)
    racks = {str(g) for g in over_seeds(state, request(1, prefer_one_region=False))}
    assert racks == {str({1: 1})}
    nodes = {str(by_node(state, Volcano(s).place(state, request(1, prefer_one_region=False)))) for s in SEEDS}
    assert len(nodes) > 1  # any node of rack 1: the node scores add nothing


REGION_WEIGHT = """
    region-0
    ├── g0-r000: n00 [xxxx] n01 [xxxx] n02 [....] n03 [....]
    └── g0-r001: n00 [xxxx] n01 [xx..] n02 [....] n03 [....]
    region-1
    ├── g1-r000: n00 [xxxx] n01 [xxxx] n02 [....] n03 [....]
    └── g1-r001: n00 [....] n01 [....] n02 [....] n03 [....]
"""  # racks 0 and 2 equal (8 used); region 0 has 14 used, region 1 8


def test_normal_pods_weigh_the_region_of_the_rack() -> None:
    """Racks 0 and 2 are equally full; the tier-2 HyperNode (weight 0.8) of rack 0 is fuller: always rack 0."""
    held = {(0, 0): 4, (0, 1): 4, (1, 0): 4, (1, 1): 2, (2, 0): 4, (2, 1): 4}
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(REGION_WEIGHT)
    assert {str(g) for g in over_seeds(state, request(8, prefer_one_region=False))} == {str({0: 8})}


def test_normal_pods_fill_the_best_rack_then_the_next_best() -> None:
    """On ``REGION_WEIGHT``, 14 GPUs: rack 0 (8 free) first, then rack 1 (10 used, same fuller region)."""
    held = {(0, 0): 4, (0, 1): 4, (1, 0): 4, (1, 1): 2, (2, 0): 4, (2, 1): 4}
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert {str(g) for g in over_seeds(state, request(14))} == {str({0: 8, 1: 6})}


def test_normal_pods_with_no_room_wait() -> None:
    state = ClusterBuilder().racks(1).nodes_per_rack(1).gpus_per_node(4).with_running("x", on={(0, 0): 3}).build()
    assert Volcano().place(state, request(2, prefer_one_region=False)) is None
    assert Volcano().place(state, request(1, gpus=2, prefer_one_region=False)) is None


def test_a_spreading_replica_prefers_a_node_without_the_jobs_pods() -> None:
    """On ``FULLER_RACK`` the job already runs on rack 1's n00..n02 and they are its only room there... bar n03:
    the replica takes a node without the job's pods, wherever the rack score would send it."""
    held = {(0, 0): 3, (1, 0): 2, (1, 1): 2, (1, 2): 2}
    state = ClusterBuilder().racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    rack1 = state.cluster.racks[1].nodes
    req = request(1, spread=True, avoid_nodes=frozenset(rack1), avoid_racks=frozenset({1}))
    assert {str(g) for g in over_seeds(state, req)} == {str({0: 1})}
    req = request(1, spread=True, avoid_nodes=frozenset(rack1[:3]), avoid_racks=frozenset({1}))
    assert {str(by_node(state, Volcano(s).place(state, req))) for s in SEEDS} == {str({(1, 3): 1})}


def test_shared_gpu_units_count_a_partly_used_gpu_as_used() -> None:
    """Quarter-GPU units (no topology): rack 1 has a partly used GPU, so it is the fuller rack."""
    state = (
        ClusterBuilder()
        .racks(2)
        .nodes_per_rack(1)
        .gpus_per_node(4)
        .with_running("s", on={(1, 0): 1}, milli=250)
        .build()
    )
    got = over_seeds(state, GroupRequest(job="j", units=3, unit=Resources(gpu_milli=250), models=("GB200",)))
    assert {str(g) for g in got} == {str({1: 3})}


# ---------------------------------------------------------------------------------------------- end to end
def test_the_profile_places_through_the_scheduler() -> None:
    """A training gang of 3 GPUs preferring one rack, on ``TWO_REGIONS``: the fullest rack that holds it."""
    state = two_regions()
    d = run_cycle(state, [training("t", 3)], profile="volcano")  # preferred: rack (the default)
    assert by_rack(state, placed(d, "t").placement.allocs) == {2: 3}
