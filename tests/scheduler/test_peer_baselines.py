"""The peer baselines ``kueue-tas`` and ``slurm-block``: table-driven placements, then properties.

Each case asks the placer for one placement group on a cluster drawn in its table's docstring (checked
against ``render``) and compares the GPUs it takes per node, ``{(rack, node in rack): GPUs}``; ``None``:
the group must wait. The expected placements were worked out by hand from Kueue's and Slurm's algorithms
(docs/baselines.md), not read back from the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from unittest.mock import patch

import pytest
from builders import ClusterBuilder, NodeRef, diagram, placed, render, run_cycle
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_properties import World, run_world, worlds

from rackscale.model import ClusterState, JobSpec, NodeAlloc, Placement, Resources, batch, training
from rackscale.scheduler import Code, ResourceScheduler
from rackscale.scheduler.placement.kai import Kai
from rackscale.scheduler.placement.kueue_tas import KueueTAS
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.placement.slurm_block import BlockLayout, SegmentPolicy, SlurmBlock
from rackscale.scheduler.placement.volcano import Volcano

Placer = KueueTAS | SlurmBlock | Kai | Volcano
Want = dict[NodeRef, int] | None


def request(units: int, *, gpus: int = 1, models: tuple[str, ...] = ("GB200",), **kw: object) -> GroupRequest:
    return GroupRequest(job="j", units=units, unit=Resources(gpus=gpus), models=models, **kw)  # type: ignore[arg-type]


def by_node(state: ClusterState, allocs: Sequence[NodeAlloc] | None) -> Want:
    if allocs is None:
        return None
    out: dict[NodeRef, int] = {}
    for a in allocs:
        rack = state.cluster.nodes[a.node].rack
        ref = (rack, state.cluster.racks[rack].nodes.index(a.node))
        out[ref] = out.get(ref, 0) + len(a.gpus)
    return out


def whole(rack: int, gpus: int = 4) -> dict[NodeRef, int]:
    return {(rack, n): gpus for n in range(4)}


# ---------------------------------------------------------------------------------------------- Kueue
TWO_REGIONS = """
    region-0
    ├── g0-r000: n00 [xx..] n01 [xxxx] n02 [xxxx] n03 [xxxx]
    └── g0-r001: n00 [xxx.] n01 [x...] n02 [....] n03 [xxxx]
    region-1
    ├── g1-r000: n00 [xx..] n01 [xx..] n02 [xxx.] n03 [xxxx]
    └── g1-r001: n00 [....] n01 [....] n02 [....] n03 [....]
"""  # free GPUs: racks 2, 8, 5, 16; regions 10, 21


def two_regions() -> ClusterState:
    held = {(0, 0): 2, (0, 1): 4, (0, 2): 4, (0, 3): 4, (1, 0): 3, (1, 1): 1, (1, 3): 4}
    held |= {(2, 0): 2, (2, 1): 2, (2, 2): 3, (2, 3): 4}
    state = ClusterBuilder().regions(2).racks(2).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(TWO_REGIONS)
    return state


KUEUE_CASES: list[tuple[str, GroupRequest, Want, bool]] = [
    # (id, request, want, TASProfileMixed)
    ("preferred-rack: best-fit rack, roomiest node first, tightest last", request(3, prefer_one_rack=True),
     {(2, 0): 2, (2, 2): 1}, True),
    ("preferred-rack, no rack holds it: best-fit region, its roomiest racks", request(20, prefer_one_rack=True),
     whole(3) | {(2, 0): 2, (2, 1): 2}, True),
    ("required-rack, no rack holds it: never a level up", request(17, one_rack=True, one_region=True), None, True),
    ("required-region: best-fit region, tightest node for the rest", request(17, one_region=True),
     whole(3) | {(2, 2): 1}, True),
    ("required-region, no region holds it: waits", request(22, one_region=True), None, True),
    # Over the top level: regions greedily, then racks and nodes of all chosen regions sorted together,
    # a child not capped by what its parent was given (region-0 gets 9 GPUs, not the 4 it was assigned).
    ("preferred-region, no region holds it: greedy at the top, children sorted together", request(25),
     whole(3) | {(1, 2): 4, (1, 1): 3, (0, 0): 2}, True),
    ("no wish (implied TAS): LeastFreeCapacity, the fullest node that holds it",
     request(1, prefer_one_region=False), {(1, 0): 1}, True),
    ("no wish, no node holds it: the fullest nodes first", request(6, prefer_one_region=False),
     {(1, 0): 1, (2, 2): 1, (0, 0): 2, (2, 0): 2}, True),
    ("no wish, TASProfileMixed off: BestFit, roomiest node then the tightest for the rest",
     request(6, prefer_one_region=False), {(1, 2): 4, (0, 0): 2}, False),
    ("a reserved rack is skipped: the next best fit", request(3, prefer_one_rack=True, exclude_racks=frozenset({2})),
     {(1, 1): 3}, True),
    ("two-GPU pods: capacity counts pods (rack 2 has 5 GPUs free but room for 2 pods)",
     request(2, gpus=2, prefer_one_rack=True), {(2, 0): 2, (2, 1): 2}, True),
]  # fmt: skip


@pytest.mark.parametrize(("req", "want", "mixed"), [c[1:] for c in KUEUE_CASES], ids=[c[0] for c in KUEUE_CASES])
def test_kueue_tas(req: GroupRequest, want: Want, mixed: bool) -> None:
    """On ``TWO_REGIONS``."""
    state = two_regions()
    assert by_node(state, KueueTAS(profile_mixed=mixed).place(state, req)) == want


# ---------------------------------------------------------------------------------------------- Slurm
FOUR_RACKS = """
    region-0
    ├── r000: n00 [....] n01 [....] n02 [....] n03 [....]
    ├── r001: n00 [....] n01 [....] n02 [xxxx] n03 [xxxx]
    ├── r002: n00 [xx..] n01 [....] n02 [xx..] n03 [....]
    └── r003: n00 [....] n01 [....] n02 [....] n03 [....]
"""  # free GPUs: racks 16, 8, 12, 16; default blocks of 2 racks: [r0 r1] 24, [r2 r3] 28


def four_racks() -> ClusterState:
    held = {(1, 2): 4, (1, 3): 4, (2, 0): 2, (2, 2): 2}
    state = ClusterBuilder().racks(4).nodes_per_rack(4).gpus_per_node(4).with_running("x", on=held).build()
    assert render(state) == diagram(FOUR_RACKS)
    return state


SLURM_CASES: list[tuple[str, SlurmBlock, GroupRequest, Want]] = [
    ("fits a base block: the best-fit rack, nodes in index order", SlurmBlock(), request(6), {(1, 0): 4, (1, 1): 2}),
    ("nodes in index order, not the roomiest first", SlurmBlock(), request(10),
     {(2, 0): 2, (2, 1): 4, (2, 2): 2, (2, 3): 2}),
    ("best fit ties: the last block", SlurmBlock(), request(16), whole(3)),
    ("whole base blocks: one segment per rack, any two racks", SlurmBlock(), request(32), whole(3) | whole(0)),
    ("whole base blocks without --segment: no aligned pair of racks holds it", SlurmBlock(segment=SegmentPolicy.OFF),
     request(32), None),
    # 5 nodes: the smallest aggregated block (2 racks) that holds it, best fit [r0 r1]; there the roomiest
    # base block, then the tightest that holds the rest.
    ("larger than a block, not whole blocks: the smallest aggregated block", SlurmBlock(), request(20),
     whole(0) | {(1, 0): 4}),
    # BlockSizes=4,16: one block of all 4 racks, at most 2 lower-level blocks; ties go to the later rack.
    ("BlockSizes=4,16: one 4-rack block, the fewest lower-level blocks", SlurmBlock(block_sizes=(4, 16)),
     request(20), whole(3) | {(1, 0): 4}),
    ("required rack larger than a rack: waits", SlurmBlock(), request(17, one_rack=True, one_region=True), None),
    ("two-GPU units: 6 units are 3 nodes, the best-fit rack", SlurmBlock(), request(6, gpus=2),
     {(2, 0): 2, (2, 1): 4, (2, 2): 2, (2, 3): 4}),
]  # fmt: skip


@pytest.mark.parametrize(("placer", "req", "want"), [c[1:] for c in SLURM_CASES], ids=[c[0] for c in SLURM_CASES])
def test_slurm_block(placer: SlurmBlock, req: GroupRequest, want: Want) -> None:
    state = four_racks()
    assert by_node(state, placer.place(state, req)) == want


def test_slurm_block_required_region_uses_that_region_only() -> None:
    """On the two-region cluster (``TWO_REGIONS``) the tightest region that may hold it comes first."""
    state = two_regions()
    got = SlurmBlock().place(state, request(6, one_region=True))
    assert by_node(state, got) == {(1, 0): 1, (1, 1): 3, (1, 2): 2}


@pytest.mark.parametrize(
    ("sizes", "racks", "want"),
    [(None, 4, (0, 1, 2)), (None, 18, (0, 1, 2, 3, 4)), ((18, 72), 8, (0, 2)), ((4, 8, 32), 2, (0, 1))],
    ids=["default, cut at 4 racks", "default: 1-16 base blocks", "18,72: levels 0 and 2", "cut at 2 racks"],
)
def test_block_levels(sizes: tuple[int, ...] | None, racks: int, want: tuple[int, ...]) -> None:
    cluster = ClusterBuilder().racks(racks).nodes_per_rack(18).cluster()
    layout = BlockLayout.of(cluster, sizes)
    assert layout.levels == want
    assert layout.bblock_nodes == (sizes[0] if sizes else 18)


def test_block_sizes_must_be_power_of_two_multiples() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        BlockLayout.of(ClusterBuilder().cluster(), (18, 54))


# ---------------------------------------------------------------------------------------------- both
@pytest.mark.parametrize(
    ("placer", "want"), [(KueueTAS(), (0, 0)), (SlurmBlock(), (1, 0))], ids=["kueue: the first", "slurm: the last"]
)
def test_ties_between_equal_racks(placer: Placer, want: NodeRef) -> None:
    """Two empty racks: Kueue breaks ties by the domain's place in the tree, Slurm takes the last block."""
    state = ClusterBuilder().racks(2).build()
    assert by_node(state, placer.place(state, request(1, prefer_one_rack=True))) == {want: 1}


@pytest.mark.parametrize("placer", [KueueTAS(), SlurmBlock()], ids=["kueue-tas", "slurm-block"])
def test_gpu_model_is_honoured(placer: Placer) -> None:
    state = ClusterBuilder().racks(2).gpu_models("GB200", "H100").build()  # rack 0 GB200, rack 1 H100
    got = by_node(state, placer.place(state, request(2, models=("H100",), prefer_one_rack=True)))
    assert got is not None and {rack for rack, _ in got} == {1}


@pytest.mark.parametrize(
    ("profile", "want"),
    [("kueue-tas", {(2, 0): 2, (2, 2): 1}), ("slurm-block", {(2, 0): 2, (2, 1): 1})],
    ids=["kueue-tas", "slurm-block"],
)
def test_profiles_place_through_the_scheduler(profile: str, want: dict[NodeRef, int]) -> None:
    """A training gang of 3 GPUs (one rack preferred) on ``TWO_REGIONS``: both take the best-fit rack."""
    state = two_regions()
    d = run_cycle(state, [training("t", 3)], profile=profile)
    assert by_node(state, placed(d, "t").placement.allocs) == want


# ---------------------------------------------------------------------------------------------- properties
PEERS = ["kueue-tas", "slurm-block", "kai", "volcano"]
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
)


@pytest.mark.parametrize("profile", PEERS)
@SETTINGS
@given(world=worlds())
def test_peer_profiles_keep_the_invariants_over_random_cycles(profile: str, world: World) -> None:
    """test_properties' worlds (no oversubscription, gangs all or nothing, required levels, models, ...),
    and no placement the state refused (which the scheduler would only report as ``Code.ERROR``)."""
    schedule = ResourceScheduler.schedule

    def checked(self: ResourceScheduler, *args: object, **kw: object) -> object:
        d = schedule(self, *args, **kw)  # type: ignore[arg-type]
        assert not [p.status for p in d.pending if p.status.code is Code.ERROR]
        return d

    with patch.object(ResourceScheduler, "schedule", checked):
        run_world(profile, world)


@st.composite
def asks(draw: st.DrawFn) -> tuple[GroupRequest, JobSpec]:
    w = draw(st.integers(0, 4))
    milli = 0 if w else draw(st.sampled_from([250, 500]))
    units = draw(st.integers(1, 12))
    wish = draw(st.sampled_from(["none", "region", "rack", "required-region", "required-rack"]))
    req = GroupRequest(
        job="j",
        units=units,
        unit=Resources(gpus=w, gpu_milli=milli),
        models=draw(st.sampled_from([("GB200",), ("H100",), ("GB200", "H100")])),
        one_rack=wish == "required-rack",
        one_region=wish.startswith("required"),
        prefer_one_rack=wish == "rack",
        prefer_one_region=wish != "none",
        exclude_racks=frozenset(draw(st.sets(st.integers(0, 5), max_size=2))),
    )
    spec = training("j", units * w, gpus_per_worker=w) if w else batch("j", gpu_milli=milli, tasks=units)
    return req, spec


VARIANTS = [
    KueueTAS(),
    KueueTAS(profile_mixed=False),
    SlurmBlock(),
    SlurmBlock(segment=SegmentPolicy.OFF),
    Kai(),
    Volcano(),
]


@pytest.mark.parametrize(
    "placer", VARIANTS, ids=["kueue", "kueue-bestfit", "slurm", "slurm-nosegment", "kai", "volcano"]
)
@SETTINGS
@given(world=worlds(), steps=st.lists(asks(), min_size=1, max_size=8))
def test_placements_never_double_allocate(
    placer: Placer, world: World, steps: list[tuple[GroupRequest, JobSpec]]
) -> None:
    """Groups placed one after another on a filling cluster: each is whole or nothing, fits what is free
    (the state refuses an oversubscribed slice), and keeps its hard constraints."""
    state = world.builder.build()
    c = state.cluster
    for i, (req, spec) in enumerate(steps):
        got = placer.place(state, req)
        if got is None:
            continue
        taken = sum(len(a.gpus) for a in got) if req.unit.gpus else len(got)
        assert taken == req.units * (req.unit.gpus or 1), "a group placed partly"
        racks = {c.nodes[a.node].rack for a in got}
        assert not racks & req.exclude_racks, "a reserved rack was used"
        assert all(c.racks[r].gpu_model in req.models for r in racks), "a GPU model not asked for"
        if req.one_rack:
            assert len(racks) == 1, f"required rack, got racks {sorted(racks)}"
        if req.one_region:
            assert len({c.racks[r].region for r in racks}) == 1, "required region, got several"
        state.allocate(replace(spec, name=f"j{i}"), Placement(f"j{i}", tuple(got), req.units), now=0.0)
    state.check_invariants()
