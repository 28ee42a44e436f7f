"""The ``kai`` baseline (NVIDIA KAI-Scheduler's placement): table-driven placements, one rule per case.

Each case asks the placer for one placement group on a cluster drawn in its docstring (checked against
``render``) and compares the GPUs it takes per node, ``{(rack, node in rack): GPUs}``; ``None``: the group
must wait. The expected placements were worked out by hand from KAI's source (docs/baselines.md, ``kai``),
not read back from the code: the domain choice (the lowest level first; the tightest region first, then
its tightest rack that holds the job), the node order (the roomiest preferred-level domain first, in
ten score steps; then binpack: the fullest node that fits) and the binpack of a job with no topology.
The shared properties (random worlds, filling clusters) run in ``test_peer_baselines.py``.
"""

from __future__ import annotations

import pytest
from builders import ClusterBuilder, diagram, placed, render, run_cycle
from test_peer_baselines import Want, by_node, request, two_regions, whole

from rackscale.model import Resources, training
from rackscale.scheduler.placement.kai import Constraint, Kai, Level, constraint, topology_score
from rackscale.scheduler.placement.request import GroupRequest

RACK, REGION, ROOT = Level.RACK, Level.REGION, Level.ROOT

# ------------------------------------------------------------------------------- the request's annotations
ANNOTATIONS: list[tuple[str, GroupRequest, Constraint | None, list[Level]]] = [
    ("required rack", request(1, one_rack=True, one_region=True), Constraint(required=RACK), [RACK]),
    ("required rack, preferred rack", request(1, one_rack=True, one_region=True, prefer_one_rack=True),
     Constraint(required=RACK, preferred=RACK), [RACK]),
    ("preferred rack: up to the root", request(1, prefer_one_rack=True), Constraint(preferred=RACK),
     [RACK, REGION, ROOT]),
    ("required region, preferred rack: the region bounds it", request(1, one_region=True, prefer_one_rack=True),
     Constraint(required=REGION, preferred=RACK), [RACK, REGION]),
    ("required region", request(1, one_region=True), Constraint(required=REGION), [REGION]),
    ("preferred region (a gang without a rack wish)", request(1), Constraint(preferred=REGION), [REGION, ROOT]),
    ("no wish (batch tasks): no topology", request(1, prefer_one_region=False), None, []),
]  # fmt: skip


@pytest.mark.parametrize(("req", "want", "levels"), [c[1:] for c in ANNOTATIONS], ids=[c[0] for c in ANNOTATIONS])
def test_annotations(req: GroupRequest, want: Constraint | None, levels: list[Level]) -> None:
    """``kai.scheduler/topology-required-placement`` / ``-preferred-placement`` and the levels searched
    (``calculateRelevantDomainLevels``: from the preferred level up to the required one, or the root)."""
    got = constraint(req)
    assert got == want
    assert (got.levels() if got else []) == levels


@pytest.mark.parametrize(
    ("position", "count", "want"),
    [(0, 1, 10), (0, 3, 3), (1, 3, 6), (2, 3, 10), (0, 4, 2), (1, 4, 5), (2, 4, 7), (3, 4, 10), (0, 2, 5),
     (7, 20, 4), (8, 20, 4), (9, 20, 5), (17, 20, 9), (18, 20, 9), (19, 20, 10)],
)  # fmt: skip
def test_topology_scores(position: int, count: int, want: int) -> None:
    """``calculateNodeScores``: KAI's own expectations (node_scoring_test.go: one rack 10; three racks
    3, 6, 10; four 2, 5, 7, 10; two zones 5, 10), and ten steps only: of 20 racks, two share most steps."""
    assert topology_score(position, count) == want


# ------------------------------------------------------------------------------- on TWO_REGIONS
# Free GPUs: racks 2 and 8 in region-0 (10), 5 and 16 in region-1 (21).
CASES: list[tuple[str, GroupRequest, Want]] = [
    # Regions by their free GPUs (region-0 first), then the tightest rack of region-0 that holds it:
    # rack 1 (8 free), not rack 2 (5 free, the tightest of all but in the roomier region). In it, binpack:
    # the fullest node that fits (n00, 1 free), then the next (n01, 3 free), never the empty n02.
    ("preferred rack: the tightest region first, its tightest rack, the fullest nodes",
     request(3, prefer_one_rack=True), {(1, 0): 1, (1, 1): 2}),
    ("preferred rack: only rack 3 holds 9 GPUs", request(9, prefer_one_rack=True), {(3, 0): 4, (3, 1): 4, (3, 2): 1}),
    # No rack holds 20: the next level up, region-1 (21 free). Its racks by topology score (of the four racks
    # in sorted order 2, 8 | 5, 16: scores 2, 5, 7, 10): rack 3 (the roomiest) filled first, then rack 2
    # binpacked (n02 with 1 free, n00 with 2, n01).
    ("preferred rack, no rack holds it: the region, its roomiest rack first", request(20, prefer_one_rack=True),
     whole(3) | {(2, 2): 1, (2, 0): 2, (2, 1): 1}),
    ("required region + preferred rack: the same inside the required region",
     request(20, one_region=True, prefer_one_rack=True), whole(3) | {(2, 2): 1, (2, 0): 2, (2, 1): 1}),
    ("required region + preferred rack, no region holds it: waits (never the root)",
     request(25, one_region=True, prefer_one_rack=True), None),
    ("required rack, no rack holds it: waits", request(17, one_rack=True, one_region=True), None),
    # A required region and no preferred level: no topology score, binpack over the region's nodes.
    ("required region: binpack inside region-1, the fullest nodes first", request(17, one_region=True),
     {(2, 2): 1, (2, 0): 2, (2, 1): 2, (3, 0): 4, (3, 1): 4, (3, 2): 4}),
    # 25 fits no region: the root. By region score (region-0 5, region-1 10): region-1 whole, then region-0
    # binpacked: r001 n00 (1 free), r000 n00 (2), r001 n01 (3) for the last one.
    ("preferred region, no region holds it: the root, the roomiest region first", request(25),
     whole(3) | {(2, 2): 1, (2, 0): 2, (2, 1): 2, (1, 0): 1, (0, 0): 2, (1, 1): 1}),
    # No topology: every pod to the fullest node that fits, wherever it is (racks 1 and 2, regions 0 and 1).
    ("no topology: binpack over the cluster, blind to racks", request(8, prefer_one_region=False),
     {(1, 0): 1, (2, 2): 1, (0, 0): 2, (2, 0): 2, (2, 1): 2}),
    # Rack 1 reserved: region-0 has 2 free GPUs left, still the tightest, but no rack of it holds 3.
    ("a reserved rack is out of the pool", request(3, prefer_one_rack=True, exclude_racks=frozenset({1})),
     {(2, 2): 1, (2, 0): 2}),
    ("only the racks preemption freed", request(3, prefer_one_rack=True, only_racks=frozenset({0, 3})),
     {(3, 0): 3}),
    # Two-GPU pods: rack 0 holds one (n00), rack 1 three (n01 one, n02 two): rack 1; n01 (3 free) is fuller
    # than n02 and takes one pod, then n02.
    ("two-GPU pods: a domain's capacity counts pods", request(2, gpus=2, prefer_one_rack=True),
     {(1, 1): 2, (1, 2): 2}),
    # Four-GPU pods: rack 1 has the 8 GPUs two need, but only n02 takes one; so does no rack of region-0.
    ("four-GPU pods: free GPUs enough, room for one pod only: the next rack", request(2, gpus=4, prefer_one_rack=True),
     {(3, 0): 4, (3, 1): 4}),
]  # fmt: skip


@pytest.mark.parametrize(("req", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kai(req: GroupRequest, want: Want) -> None:
    """On ``TWO_REGIONS`` (test_peer_baselines.py)."""
    state = two_regions()
    assert by_node(state, Kai().place(state, req)) == want


# ------------------------------------------------------------------------------- the region's free GPUs
RATIO = """
    region-0
    ├── g0-r000: n00 [x...] n01 [xxxx]
    └── g0-r001: n00 [....] n01 [xxxx]
    region-1
    ├── g1-r000: n00 [....] n01 [xx..]
    └── g1-r001: n00 [xxxx] n01 [xxxx]
"""  # free GPUs: racks 3, 4 (region 7) and 6, 0 (region 6)


def test_a_region_counts_the_free_gpus_of_racks_too_full_for_a_pod() -> None:
    """A 4-GPU pod, one rack preferred. The job's ratio to a domain is over all its free GPUs: region-1
    (6 free) is tighter than region-0 (7, of which rack 0's 3 cannot take the pod), so g1-r000 takes it,
    not g0-r001, the tightest rack that holds it (Kueue's and Slurm's best fit)."""
    held = {(0, 0): 1, (0, 1): 4, (1, 1): 4, (2, 1): 2, (3, 0): 4, (3, 1): 4}
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(2).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(RATIO)
    assert by_node(state, Kai().place(state, request(1, gpus=4, prefer_one_rack=True))) == {(2, 0): 4}


# ------------------------------------------------------------------------------- KAI's README example
README = """
    region-0
    ├── g0-r000: n00 [.] n01 [.]
    ├── g0-r001: n00 [.] n01 [#]
    ├── g0-r002: n00 [.] n01 [#]
    └── g0-r003: n00 [.] n01 [#]
    region-1
    ├── g1-r000: n00 [.] n01 [.]
    ├── g1-r001: n00 [.] n01 [.]
    ├── g1-r002: n00 [.] n01 [.]
    └── g1-r003: n00 [x] n01 [x]
"""  # zone A: racks of 2, 1, 1, 1 free GPUs (5); zone B: 2, 2, 2 and a full rack (6)


def test_the_readme_example() -> None:
    """docs/topology/README.md: 3 one-GPU pods, zone required, rack preferred. No rack holds 3; zone A
    (5 free) is tighter than B (6): A. Its racks by score (sorted: 1, 1, 1 free then 2; of the 8 racks
    scores 1, 2, 3, 5 in A): A1 (2 free) filled first, then the one-GPU rack scored highest, the last of
    A2-A4 in ID order, A4. (The README says "Rack A2"; its code scores A4 above it.)"""
    builder = ClusterBuilder().regions(2).racks(4).nodes_per_rack(2).gpus_per_node(1)
    builder = builder.with_running("x", on={(7, 0): 1, (7, 1): 1})
    for rack in (1, 2, 3):
        builder = builder.with_failed_node(rack, 1)
    state = builder.build()
    assert render(state) == diagram(README)
    got = Kai().place(state, request(3, one_region=True, prefer_one_rack=True))
    assert by_node(state, got) == {(0, 0): 1, (0, 1): 1, (3, 0): 1}


# ------------------------------------------------------------------------------- ten score steps
TWENTY_RACKS = """
    region-0
    ├── g0-r000: n00 [xxxx] n01 [xxxx]
    ├── g0-r001: n00 [xxxx] n01 [xxxx]
    ├── g0-r002: n00 [xxxx] n01 [xxxx]
    ├── g0-r003: n00 [xxxx] n01 [xxxx]
    ├── g0-r004: n00 [xxxx] n01 [xxxx]
    ├── g0-r005: n00 [xxxx] n01 [xxxx]
    ├── g0-r006: n00 [xxxx] n01 [xxxx]
    ├── g0-r007: n00 [xx..] n01 [....]
    ├── g0-r008: n00 [x...] n01 [....]
    └── g0-r009: n00 [....] n01 [....]
    region-1
    ├── g1-r000: n00 [....] n01 [....]
    ├── g1-r001: n00 [....] n01 [....]
    ├── g1-r002: n00 [....] n01 [....]
    ├── g1-r003: n00 [xxxx] n01 [xxxx]
    ├── g1-r004: n00 [xxxx] n01 [xxxx]
    ├── g1-r005: n00 [xxxx] n01 [xxxx]
    ├── g1-r006: n00 [xxxx] n01 [xxxx]
    ├── g1-r007: n00 [xxxx] n01 [xxxx]
    ├── g1-r008: n00 [xxxx] n01 [xxxx]
    └── g1-r009: n00 [xxxx] n01 [xxxx]
"""  # region-0: 7 full racks, then 6, 7 and 8 free (21); region-1: 3 empty racks (24), 7 full


def test_scores_span_the_common_domain_in_ten_steps() -> None:
    """12 GPUs, one rack preferred: no rack holds them; region-0 (21 free) is tighter than region-1 (24)
    and holds them. Node scores rank the racks of the common domain, the root: all 20 racks, region-0's
    first, its full ones first. g0-r009 (position 9 of 20) scores 5, g0-r008 and g0-r007 (8 and 7) both 4.
    So g0-r009 is filled, then the fullest nodes of r007 and r008 together (r007 n00 with 2 free, r008 n00
    with 3). Scores over region-0's 10 racks alone (10, 9, 8), or one step per rack, would fill r008 first."""
    held = {(r, n): 4 for r in [*range(7), *range(13, 20)] for n in range(2)} | {(7, 0): 2, (8, 0): 1}
    state = ClusterBuilder().regions(2).racks(10).nodes_per_rack(2).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(TWENTY_RACKS)
    got = Kai().place(state, request(12, prefer_one_rack=True))
    assert by_node(state, got) == {(9, 0): 4, (9, 1): 4, (7, 0): 2, (8, 0): 2}


# ------------------------------------------------------------------------------- shared GPUs, models, ties
SHARED = """
    region-0
    └── r000: n00 [xxx.] n01 [~...]
"""  # n01's GPU 0 holds a 500-milli share


@pytest.mark.parametrize("prefer_region", [False, True], ids=["no topology", "preferred region"])
def test_a_fractional_pod_goes_to_a_shared_gpu_first(prefer_region: bool) -> None:
    """gpusharingorder (+1000) ranks above binpack (0-9): a half-GPU pod goes to n01's shared GPU, though
    n00 has fewer free GPUs (1 against 3.5)."""
    state = (
        ClusterBuilder().racks(1).with_running("x", on={(0, 0): 3}).with_running("s", on={(0, 1): 1}, milli=500).build()
    )
    assert render(state) == diagram(SHARED)
    req = GroupRequest(
        job="j", units=1, unit=Resources(gpus=0, gpu_milli=500), models=("GB200",), prefer_one_region=prefer_region
    )
    got = Kai().place(state, req)
    assert got is not None and [(a.node, a.gpus, a.milli) for a in got] == [
        (state.cluster.racks[0].nodes[1], (0,), 500)
    ]


def test_gpu_model_is_the_node_pool() -> None:
    state = ClusterBuilder().racks(2).gpu_models("GB200", "H100").build()  # rack 0 GB200, rack 1 H100
    got = by_node(state, Kai().place(state, request(2, models=("H100",), prefer_one_rack=True)))
    assert got == {(1, 0): 2}


def test_ties_between_equal_racks_go_by_domain_id() -> None:
    """Two empty racks: equal ratios, the first by ID; in it equal nodes in index order (Go: map order)."""
    state = ClusterBuilder().racks(2).build()
    assert by_node(state, Kai().place(state, request(5, prefer_one_rack=True))) == {(0, 0): 4, (0, 1): 1}


def test_profile_places_through_the_scheduler() -> None:
    """A training gang of 3 GPUs (one rack preferred) on ``TWO_REGIONS``: rack 1, as in the first case."""
    state = two_regions()
    d = run_cycle(state, [training("t", 3)], profile="kai")
    assert by_node(state, placed(d, "t").placement.allocs) == {(1, 0): 1, (1, 1): 2}
