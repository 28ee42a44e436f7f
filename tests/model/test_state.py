"""ClusterState: allocation, failures, indexes and transactions.

Unless a test says otherwise the cluster is ``GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2,
gpus_per_node=4)`` with 8 CPUs and 1 GiB per node. Node indexes run rack by rack::

    region-0
    ├── r000: n0 [....] n1 [....]
    └── r001: n2 [....] n3 [....]        (. free GPU, x held whole, ~ partly held, # failed)
"""

from __future__ import annotations

import pytest

from rackscale.model import (
    MILLI_PER_GPU,
    AllocationError,
    ClusterState,
    GPUCluster,
    JobSpec,
    NodeAlloc,
    Placement,
    Transaction,
    batch,
    inference,
    training,
)
from rackscale.model.state import CheckpointError

CPU = 8000
MEM = 1024


def make_state(*, racks: int = 2, nodes: int = 2, gpus: int = 4, regions: int = 1) -> ClusterState:
    cluster = GPUCluster.uniform(
        regions=regions,
        racks_per_region=racks,
        nodes_per_rack=nodes,
        gpus_per_node=gpus,
        cpu_milli=CPU,
        memory_mib=MEM,
    )
    return ClusterState(cluster)


def place(job: str, *allocs: NodeAlloc, units: int | None = None) -> Placement:
    return Placement(job, allocs, units if units is not None else len(allocs))


def whole(node: int, *gpus: int, cpu: int = 0, mem: int = 0) -> NodeAlloc:
    return NodeAlloc(node, gpus, MILLI_PER_GPU, cpu, mem)


def shared(node: int, gpu: int, milli: int, cpu: int = 0, mem: int = 0) -> NodeAlloc:
    return NodeAlloc(node, (gpu,), milli, cpu, mem)


def snapshot(state: ClusterState) -> dict[str, object]:
    """Everything a scheduling cycle or a rolled-back transaction must leave exactly as it was."""
    return state.snapshot()


# ---------------------------------------------------------------------- allocate / release

# (id, spec, placement, whole GPUs left per node, racks the job is indexed under)
ALLOCATE_CASES = [
    pytest.param(
        # r000: n0 [xx..] n1 [....]
        training("j", 2),
        place("j", whole(0, 0, 1), units=2),
        [2, 4, 4, 4],
        (0,),
        id="two-gpus-one-node",
    ),
    pytest.param(
        # r000: n0 [xxxx] n1 [xxxx]
        # r001: n2 [xx..] n3 [....]
        training("j", 10),
        place("j", whole(0, 0, 1, 2, 3), whole(1, 0, 1, 2, 3), whole(2, 0, 1), units=10),
        [0, 0, 2, 4],
        (0, 1),
        id="gang-over-two-racks",
    ),
    pytest.param(
        # r001: n3 [~...]
        batch("j", gpu_milli=250, tasks=2),
        place("j", shared(3, 0, 250), shared(3, 0, 250)),
        [4, 4, 4, 3],
        (1,),
        id="two-shared-slices-of-one-gpu",
    ),
    pytest.param(
        # r000: n1 [..x.] with CPU and memory
        training("j", 1, cpu_milli=3000, memory_mib=512),
        place("j", whole(1, 2, cpu=3000, mem=512)),
        [4, 3, 4, 4],
        (0,),
        id="gpu-with-cpu-and-memory",
    ),
    pytest.param(
        # r001: n2 [....] CPU only
        batch("j", gpus=0, cpu_milli=2000),
        place("j", NodeAlloc(2, (), MILLI_PER_GPU, 2000, 0)),
        [4, 4, 4, 4],
        (1,),
        id="cpu-only-slice",
    ),
]


@pytest.mark.parametrize(("spec", "placement", "node_whole", "racks"), ALLOCATE_CASES)
def test_allocate_then_release_keeps_every_index_in_sync(
    spec: JobSpec, placement: Placement, node_whole: list[int], racks: tuple[int, ...]
) -> None:
    state = make_state()
    empty = snapshot(state)

    rj = state.allocate(spec, placement, now=5.0, expected_end=50.0)
    state.check_invariants()
    assert state.node_whole == node_whole
    assert state.rack_whole == [node_whole[0] + node_whole[1], node_whole[2] + node_whole[3]]
    assert state.free_whole_gpus == sum(node_whole)
    assert rj.racks == racks and rj.started_at == 5.0 and rj.checkpointed_at == 5.0
    assert all(spec.name in state.rack_jobs[r] for r in racks)
    assert state.used_milli == placement.gpu_milli
    usage = state.queue_usage[spec.queue]
    assert (usage.gpu_milli, usage.jobs) == (placement.gpu_milli, 1)
    assert usage.cpu_milli == sum(a.cpu_milli for a in placement.allocs)

    assert state.release(spec.name) is rj
    state.check_invariants()
    assert snapshot(state) == empty


def test_release_of_a_job_that_holds_nothing_raises_key_error() -> None:
    with pytest.raises(KeyError):
        make_state().release("ghost")


def test_a_job_cannot_be_allocated_twice() -> None:
    state = make_state()
    state.allocate(training("j", 1), place("j", whole(0, 0)), now=0)
    with pytest.raises(AllocationError, match="already holds"):
        state.allocate(training("j", 1), place("j", whole(1, 0)), now=0)
    state.check_invariants()


def test_extend_and_retract_keep_the_indexes_and_the_queue_usage() -> None:
    # inference "svc": one replica on n0, then a second on n2 (another rack), then scaled back down.
    #   r000: n0 [xx..] n1 [....]   ->   r000: n0 [xx..] n1 [....]
    #   r001: n2 [....] n3 [....]        r001: n2 [xx..] n3 [....]
    state = make_state()
    spec = inference("svc", 2, gpus_per_replica=2, min_replicas=1, queue="serve")
    state.allocate(spec, place("svc", whole(0, 0, 1)), now=0)
    one = snapshot(state)

    added = (whole(2, 0, 1),)
    rj = state.extend("svc", added, 1)
    state.check_invariants()
    assert rj.placement.units == 2 and rj.racks == (0, 1)
    assert "svc" in state.rack_jobs[1] and "svc" in state.node_jobs[2]
    assert state.queue_usage["serve"].gpu_milli == 4000 and state.queue_usage["serve"].jobs == 1
    assert state.rack_whole == [6, 6]

    rj = state.retract("svc", added, 1)
    state.check_invariants()
    assert rj.placement.units == 1 and rj.racks == (0,)
    assert snapshot(state) == one


def test_extend_that_does_not_fit_changes_nothing() -> None:
    state = make_state()
    state.allocate(training("a", 4), place("a", whole(2, 0, 1, 2, 3)), now=0)
    state.allocate(inference("svc", 2), place("svc", whole(0, 0)), now=0)
    before = snapshot(state)
    with pytest.raises(AllocationError, match="cannot extend"):
        state.extend("svc", (whole(1, 0), whole(2, 3)), 2)  # the first slice fits, the second does not
    assert snapshot(state) == before
    state.check_invariants()


def test_retract_of_a_slice_the_job_does_not_hold_raises() -> None:
    state = make_state()
    state.allocate(inference("svc", 2), place("svc", whole(0, 0)), now=0)
    with pytest.raises(ValueError):
        state.retract("svc", (whole(0, 1),), 1)


# fmt: off
SHED_CASES = [
    # r000: n0 [xxxx] (four 1-GPU replicas merged into one slice) -> n0 [x...]
    pytest.param(
        (whole(0, 0, 1, 2, 3, cpu=4000, mem=400),), 1, 4, 3, (whole(0, 0, cpu=1000, mem=100),), 15,
        id="merged-slice-split",
    ),
    # n0 [xx..] n2 [xx..] (a 2-GPU replica on each) -> n0 [xx..]: the last placed goes first
    pytest.param(
        (whole(0, 0, 1, cpu=1000, mem=100), whole(2, 0, 1, cpu=1000, mem=100)), 2, 2, 1,
        (whole(0, 0, 1, cpu=1000, mem=100),), 14,
        id="last-slice-whole",
    ),
    # n0 [xxxx] (two 2-GPU replicas) n2 [xx..] -> n0 [xx..]: one whole slice and half of the other
    pytest.param(
        (whole(0, 0, 1, 2, 3, cpu=2000, mem=200), whole(2, 0, 1, cpu=1000, mem=100)), 2, 3, 2,
        (whole(0, 0, 1, cpu=1000, mem=100),), 14,
        id="across-slices",
    ),
    # n0 [xx..] (two replicas in one slice), asked to shed five: one stays (a service keeps a replica)
    pytest.param(
        (whole(0, 0, 1, cpu=2000, mem=200),), 1, 2, 5, (whole(0, 0, cpu=1000, mem=100),), 15,
        id="never-the-last-unit",
    ),
    # 8-GPU replicas over two whole nodes each: n0 n1 | n2 n3 [xxxx] -> n0 n1 [xxxx]: the last replica's nodes
    pytest.param(
        (whole(0, 0, 1, 2, 3), whole(1, 0, 1, 2, 3), whole(2, 0, 1, 2, 3), whole(3, 0, 1, 2, 3)), 8, 2, 1,
        (whole(0, 0, 1, 2, 3), whole(1, 0, 1, 2, 3)), 8,
        id="replica-over-whole-nodes",
    ),
    # shared-GPU replicas have a slice each: n0 [~...] (two halves of GPU 0) n1 [..~.] -> n0 [~...]
    pytest.param(
        (shared(0, 0, 500), shared(0, 0, 500), shared(1, 2, 500)), 0, 3, 2, (shared(0, 0, 500),), 15,
        id="fractional",
    ),
]
# fmt: on


@pytest.mark.parametrize(("held", "unit_gpus", "units", "shed", "left", "free_after"), SHED_CASES)
def test_shed_gives_back_units_the_last_placed_first_splitting_a_merged_slice(
    held: tuple[NodeAlloc, ...], unit_gpus: int, units: int, shed: int, left: tuple[NodeAlloc, ...], free_after: int
) -> None:
    if unit_gpus > 4:
        spec = inference("svc", units, gpus_per_replica=unit_gpus, min_replicas=1)
    elif unit_gpus:
        spec = inference("svc", units, gpus_per_replica=unit_gpus, min_replicas=1, cpu_milli=1000, memory_mib=100)
    else:
        spec = inference("svc", units, gpu_milli=500, min_replicas=1)
    state = make_state()
    state.allocate(spec, place("svc", *held, units=units), now=0)
    rj = state.shed("svc", shed)
    state.check_invariants()
    assert rj.placement.allocs == left
    assert rj.placement.units == units - min(shed, units - 1)
    assert state.free_whole_gpus == free_after
    # What stays is exactly what allocating the remaining slices afresh would hold (GPUs, CPU, memory,
    # indexes, queue usage).
    fresh = make_state()
    fresh.allocate(spec, place("svc", *left, units=rj.placement.units), now=0)
    assert snapshot(state) == snapshot(fresh)


def test_shed_of_replicas_over_nodes_in_no_regular_shape_gives_back_the_last_gpus() -> None:
    # Two 8-GPU replicas on 4 + 2 + 2 + 4 + 4 GPUs (slices on one node merged: which GPU made which
    # replica is not kept): the last 8 GPUs go, n3 and n4, and 8 stay.
    #   r000: n0 [xxxx] n1 [xx..] n2 [xx..]          r000: n0 [xxxx] n1 [xx..] n2 [xx..]
    #   r001: n3 [xxxx] n4 [xxxx] n5 [....]   ->     r001: n3 [....] n4 [....] n5 [....]
    state = make_state(nodes=3)
    spec = inference("svc", 2, gpus_per_replica=8, min_replicas=1, cpu_milli=800, memory_mib=80)
    held = (
        whole(0, 0, 1, 2, 3, cpu=400, mem=40),
        whole(1, 0, 1, cpu=200, mem=20),
        whole(2, 0, 1, cpu=200, mem=20),
        whole(3, 0, 1, 2, 3, cpu=400, mem=40),
        whole(4, 0, 1, 2, 3, cpu=400, mem=40),
    )
    state.allocate(spec, place("svc", *held, units=2), now=0)
    rj = state.shed("svc", 1)
    state.check_invariants()
    assert rj.placement.allocs == held[:3] and rj.placement.units == 1
    fresh = make_state(nodes=3)
    fresh.allocate(spec, place("svc", *held[:3], units=1), now=0)
    assert snapshot(state) == snapshot(fresh)


def test_shed_splits_the_boundary_slice_of_replicas_over_nodes() -> None:
    # Two 6-GPU replicas on n0 [xxxx] n1 [xxxx] n2 [xxxx]: the last 6 GPUs are n2's four and two of n1's.
    state = make_state(nodes=3)
    spec = inference("svc", 2, gpus_per_replica=6, min_replicas=1, cpu_milli=600, memory_mib=60)
    held = tuple(whole(n, 0, 1, 2, 3, cpu=400, mem=40) for n in range(3))
    state.allocate(spec, place("svc", *held, units=2), now=0)
    rj = state.shed("svc", 1)
    state.check_invariants()
    assert rj.placement.allocs == (held[0], whole(1, 0, 1, cpu=200, mem=20)) and rj.placement.units == 1
    assert state.free_whole_gpus == 24 - 6


def test_shed_keeps_replicas_over_nodes_whose_gpus_do_not_add_up() -> None:
    # 2 replicas of 8 GPUs on 12 GPUs (a placement from elsewhere): what to give back is not known.
    state = make_state(nodes=3)
    spec = inference("svc", 2, gpus_per_replica=8, min_replicas=1)
    held = (whole(0, 0, 1, 2, 3), whole(1, 0, 1, 2, 3), whole(2, 0, 1, 2, 3))
    state.allocate(spec, place("svc", *held, units=2), now=0)
    before, running = snapshot(state), state.running["svc"]
    rj = state.shed("svc", 1)
    assert rj is running  # untouched: not even re-indexed (the sets' order decides later placements)
    assert snapshot(state) == before


# ---------------------------------------------------------------------- fits() and oversubscription


def _occupied() -> ClusterState:
    """r000: n0 [xx~.] n1 [....]  (GPUs 0-1 whole, GPU 2 with 700 milli used; n0 has 2000 mCPU, 256 MiB free)
    r001: n2 [....] n3 [....]   n2 is down"""
    state = make_state()
    state.allocate(
        training("a", 2, cpu_milli=3000, memory_mib=384), place("a", whole(0, 0, 1, cpu=6000, mem=768)), now=0
    )
    state.allocate(batch("f", gpu_milli=700), place("f", shared(0, 2, 700)), now=0)
    state.fail_node(2)
    return state


FITS_CASES = [
    pytest.param(whole(0, 1), "GPU 1 of node r000-n00 has 0 milli free", id="whole-gpu-already-held"),
    pytest.param(whole(0, 2), "GPU 2 of node r000-n00 has 300 milli free", id="whole-gpu-partly-held"),
    pytest.param(shared(0, 2, 301), "GPU 2 of node r000-n00 has 300 milli free", id="share-beyond-1000-milli"),
    pytest.param(shared(0, 0, 1), "GPU 0 of node r000-n00 has 0 milli free", id="share-of-a-whole-held-gpu"),
    pytest.param(whole(0, 3, cpu=2001), "node r000-n00 has 2000 milli-CPU free", id="cpu-oversubscribed"),
    pytest.param(whole(0, 3, mem=257), "node r000-n00 has 256 MiB free", id="memory-oversubscribed"),
    pytest.param(whole(2, 0), "node r001-n00 is down", id="node-down"),
    pytest.param(whole(1, 0, 0), "a GPU is listed twice in one slice", id="gpu-listed-twice"),
    pytest.param(whole(1, 4), "node r000-n01 has no GPU 4", id="no-such-gpu"),
    # From a placer's bug: a negative index would wrap to another GPU or node, a negative amount add room.
    pytest.param(whole(1, -1), "node r000-n01 has no GPU -1", id="negative-gpu"),
    pytest.param(whole(4, 0), "the cluster has no node 4", id="no-such-node"),
    pytest.param(whole(-1, 0), "the cluster has no node -1", id="negative-node"),
    pytest.param(
        shared(1, 0, -300), "a slice of node r000-n01 asks for a negative or impossible amount", id="negative-milli"
    ),
    pytest.param(
        whole(1, 0, cpu=-1000), "a slice of node r000-n01 asks for a negative or impossible amount", id="negative-cpu"
    ),
]


@pytest.mark.parametrize(("alloc", "why"), FITS_CASES)
def test_fits_rejects_oversubscription_with_a_message(alloc: NodeAlloc, why: str) -> None:
    state = _occupied()
    assert state.fits(alloc) == why
    before = snapshot(state)
    with pytest.raises(AllocationError, match="cannot place job 'x'") as err:
        state.allocate(training("x", 1), place("x", whole(3, 0), alloc), now=1)  # the first slice would fit
    assert why in str(err.value)
    assert snapshot(state) == before, "a rejected allocation must leave the state unchanged"
    state.check_invariants()


@pytest.mark.parametrize(
    "alloc",
    [
        pytest.param(whole(0, 3, cpu=2000, mem=256), id="exactly-the-rest-of-cpu-and-memory"),
        pytest.param(shared(0, 2, 300), id="exactly-the-rest-of-a-shared-gpu"),
        pytest.param(whole(3, 0, 1, 2, 3), id="a-whole-free-node"),
    ],
)
def test_fits_accepts_what_is_free(alloc: NodeAlloc) -> None:
    state = _occupied()
    assert state.fits(alloc) is None
    state.allocate(training("x", 1), place("x", alloc), now=1)
    state.check_invariants()


@pytest.mark.parametrize(
    "shares",
    [
        pytest.param([500, 500], id="two-halves"),
        pytest.param([333, 333, 333, 1], id="four-slices-to-exactly-1000"),
        pytest.param([100] * 10, id="ten-tenths"),
        pytest.param([999, 1], id="999-plus-1"),
    ],
)
def test_shared_slices_fill_a_gpu_up_to_1000_milli_but_never_beyond(shares: list[int]) -> None:
    # r000: n0 [~...]: every slice on GPU 0
    state = make_state()
    for i, milli in enumerate(shares):
        assert state.fits(shared(0, 0, milli)) is None
        state.allocate(batch(f"s{i}", gpu_milli=milli), place(f"s{i}", shared(0, 0, milli)), now=0)
        state.check_invariants()
        # a partly used GPU is neither whole free nor counted as such anywhere
        assert state.node_whole[0] == 3 and state.rack_whole[0] == 7
    assert state.gpu_free[0][0] == 0
    assert not state.node_shared[0], "a GPU with nothing left is not a sharing candidate"
    assert state.fits(shared(0, 0, 1)) == "GPU 0 of node r000-n00 has 0 milli free"
    with pytest.raises(AllocationError):
        state.allocate(batch("over", gpu_milli=1), place("over", shared(0, 0, 1)), now=0)
    state.check_invariants()


def test_a_partly_used_gpu_is_indexed_as_shared_and_whole_again_when_released() -> None:
    state = make_state()
    state.allocate(batch("s", gpu_milli=400), place("s", shared(1, 3, 400)), now=0)
    assert state.node_shared[1] and 1 in state.shared_nodes["GB200"]
    assert 1 in state.node_index["GB200"].buckets[3]
    state.release("s")
    assert not state.node_shared[1] and 1 not in state.shared_nodes["GB200"]
    assert 1 in state.node_index["GB200"].buckets[4]
    state.check_invariants()


# ---------------------------------------------------------------------- failures


def test_a_failed_gpu_leaves_free_counts_and_indexes_and_recover_restores_it() -> None:
    # r000: n0 [x#..] n1 [....]   GPU 1 of n0 fails while GPU 0 is held by "a"
    state = make_state()
    state.allocate(training("a", 1), place("a", whole(0, 0)), now=0)
    held = snapshot(state)

    assert state.fail_gpu(0, 1) == set(), "nobody held GPU 1"
    state.check_invariants()
    assert state.node_whole[0] == 2 and state.rack_whole[0] == 6
    assert state.free_whole_gpus == 14 and state.failed_gpus == 1
    assert state.model_free_whole["GB200"] == 14
    assert 0 in state.node_index["GB200"].buckets[2] and 0 in state.rack_node_index[0].buckets[2]
    assert 0 in state.rack_index[("GB200", 0)].buckets[6]
    assert state.usable_free(0, 1) == 0
    assert state.fits(whole(0, 1)) == "GPU 1 of node r000-n00 has 0 milli free"
    assert state.fits(shared(0, 1, 1)) is not None
    assert state.rack_capacity(0) == 7
    assert list(state.racks_ascending("GB200", 7)) == [1]

    state.recover_gpu(0, 1)
    state.check_invariants()
    assert snapshot(state) == held


def test_fail_gpu_returns_only_the_jobs_holding_that_gpu() -> None:
    # r000: n0 [ab~.]   a: GPU 0, b: GPU 1, c and d share GPU 2
    state = make_state()
    state.allocate(training("a", 1), place("a", whole(0, 0)), now=0)
    state.allocate(training("b", 1), place("b", whole(0, 1)), now=0)
    state.allocate(batch("c", gpu_milli=300), place("c", shared(0, 2, 300)), now=0)
    state.allocate(batch("d", gpu_milli=300), place("d", shared(0, 2, 300)), now=0)
    assert state.fail_gpu(0, 1) == {"b"}
    assert state.fail_gpu(0, 2) == {"c", "d"}
    assert state.fail_gpu(0, 3) == set()
    state.check_invariants()
    # the holders still run until the caller restarts them; releasing them keeps the failed GPUs out
    for j in ("b", "c", "d"):
        state.release(j)
    state.check_invariants()
    assert state.node_whole[0] == 0 and state.failed_gpus == 3


def test_a_node_going_down_returns_its_jobs_and_recover_restores_everything() -> None:
    # r000: n0 [aab.] n1 [a...]    "a" spans n0 and n1, "b" is on n0 only, "c" on n3
    # r001: n2 [....] n3 [c...]
    state = make_state()
    state.allocate(training("a", 3), place("a", whole(0, 0, 1), whole(1, 0), units=3), now=0)
    state.allocate(training("b", 1), place("b", whole(0, 2)), now=0)
    state.allocate(training("c", 1), place("c", whole(3, 0)), now=0)
    before = snapshot(state)

    assert state.fail_node(0) == {"a", "b"}
    state.check_invariants()
    assert state.node_whole[0] == 0 and state.rack_whole[0] == 3
    assert state.failed_gpus == 4 and state.free_whole_gpus == 3 + 7
    assert 0 in state.node_index["GB200"].buckets[0] and 0 in state.rack_node_index[0].buckets[0]
    assert state.rack_capacity(0) == 4
    assert all(state.fits(whole(0, g)) == "node r000-n00 is down" for g in range(4))
    assert list(state.racks_ascending("GB200", 4)) == [1], "rack 0 has 3 whole free GPUs left"

    state.recover_node(0)
    state.check_invariants()
    assert snapshot(state) == before


def test_releasing_a_job_on_a_down_node_keeps_the_node_out_until_it_recovers() -> None:
    state = make_state()
    state.allocate(training("a", 4), place("a", whole(2, 0, 1, 2, 3)), now=0)
    assert state.fail_node(2) == {"a"}
    state.release("a")
    state.check_invariants()
    assert state.node_whole[2] == 0 and state.rack_whole[1] == 4
    state.recover_node(2)
    state.check_invariants()
    assert state.node_whole[2] == 4 and state.rack_whole[1] == 8 and state.free_whole_gpus == 16


# ---------------------------------------------------------------------- transactions


def _busy() -> ClusterState:
    """r000: n0 [aa..] n1 [....]       a: 2 GPUs (queue "research")
    r001: n2 [bbbb] n3 [s...]       b: 4 GPUs; s: inference, one shared replica of 500 on n3"""
    state = make_state()
    state.allocate(training("a", 2, queue="research"), place("a", whole(0, 0, 1), units=2), now=1, expected_end=9)
    state.allocate(training("b", 4), place("b", whole(2, 0, 1, 2, 3), units=4), now=2, checkpointed_at=3)
    state.allocate(inference("s", 3, gpu_milli=500, min_replicas=1), place("s", shared(3, 0, 500)), now=3)
    state.note_checkpoint("a", 5)
    return state


ROLLBACK_CASES = [
    pytest.param([("allocate", "new", [whole(1, 0, 1)])], id="allocate"),
    pytest.param([("release", "b", None)], id="release"),
    pytest.param([("extend", "s", [shared(0, 2, 500)])], id="extend"),
    pytest.param(
        [("release", "b", None), ("allocate", "new", [whole(2, 0, 1, 2, 3), whole(1, 0)])],
        id="release-then-reuse-the-freed-gpus",
    ),
    pytest.param(
        [
            ("release", "a", None),
            ("extend", "s", [shared(3, 0, 500)]),
            ("allocate", "new", [whole(0, 0, 1, 2, 3)]),
            ("release", "s", None),
            ("allocate", "other", [whole(1, 3)]),
        ],
        id="a-mix-including-releasing-an-extended-job",
    ),
    pytest.param(
        [("release", "a", None), ("allocate", "a", [whole(1, 0, 1)])],
        id="release-and-restart-the-same-job-elsewhere",
    ),
]


@pytest.mark.parametrize("ops", ROLLBACK_CASES)
def test_transaction_rollback_restores_the_state_exactly(ops: list[tuple[str, str, list[NodeAlloc] | None]]) -> None:
    state = _busy()
    before = snapshot(state)
    tx = Transaction(state)
    for op, name, allocs in ops:
        if op == "allocate":
            assert allocs is not None
            spec = training(name, sum(len(a.gpus) for a in allocs), queue="new-queue")
            tx.allocate(spec, Placement(name, tuple(allocs), spec.units), now=100)
        elif op == "release":
            tx.release(name)
        else:
            assert allocs is not None
            tx.extend(name, tuple(allocs), len(allocs))
        state.check_invariants()
    assert len(tx) == len(ops)
    assert snapshot(state) != before
    tx.rollback()
    state.check_invariants()
    assert len(tx) == 0
    assert snapshot(state) == before
    # the restored jobs keep their history (start, end estimate, last checkpoint)
    assert state.running["a"].checkpointed_at == 5 and state.running["a"].expected_end == 9
    assert state.running["b"].checkpointed_at == 3 and state.running["b"].started_at == 2


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(lambda st: st.fail_node(0), id="its-node-is-down"),
        pytest.param(lambda st: st.fail_gpu(0, 1), id="one-of-its-gpus-failed"),
    ],
)
def test_rollback_restores_a_released_job_whose_hardware_has_failed(fault: object) -> None:
    # r000: n0 [aa..] -> n0 goes down (or GPU 1 fails) while "a" still holds it: the caller has not
    # restarted "a" yet. Releasing it inside a transaction and rolling back must put it back as it was.
    state = make_state()
    state.allocate(training("a", 2), place("a", whole(0, 0, 1), units=2), now=0)
    fault(state)  # type: ignore[operator]
    before = snapshot(state)
    tx = Transaction(state)
    tx.release("a")
    tx.rollback()
    assert snapshot(state) == before
    state.check_invariants()


def test_a_committed_transaction_is_kept_and_a_later_rollback_is_a_no_op() -> None:
    state = _busy()
    tx = Transaction(state)
    tx.release("b")
    tx.commit()
    after = snapshot(state)
    tx.rollback()
    assert snapshot(state) == after
    assert "b" not in state.running


# ---------------------------------------------------------------------- rack queries


def test_racks_ascending_yields_racks_fewest_free_first() -> None:
    #   region-0                         whole free
    #   ├── r000: n00 [xx..] n01 [....]     6
    #   ├── r001: n00 [xxxx] n01 [xxx.]     1
    #   ├── r002: n00 [....] n01 [....]     8
    #   └── r003: n00 [xxxx] n01 [x...]     3
    state = make_state(racks=4)
    state.allocate(training("a", 2), place("a", whole(0, 0, 1)), now=0)
    state.allocate(training("b", 7), place("b", whole(2, 0, 1, 2, 3), whole(3, 0, 1, 2)), now=0)
    state.allocate(training("c", 5), place("c", whole(6, 0, 1, 2, 3), whole(7, 0)), now=0)
    state.check_invariants()
    assert state.rack_whole == [6, 1, 8, 3]
    assert list(state.racks_ascending("GB200", 0)) == [1, 3, 0, 2]
    assert list(state.racks_ascending("GB200", 3)) == [3, 0, 2]
    assert list(state.racks_ascending("GB200", 7)) == [2]
    assert list(state.racks_ascending("GB200", 9)) == []
    assert list(state.racks_descending("GB200", 2)) == [2, 0, 3]
    assert list(state.racks_ascending("H100", 0)) == [], "no rack of an absent model"


def test_racks_ascending_merges_regions_and_can_be_limited_to_one() -> None:
    #   region-0: g0-r000 [xxx.][....] (5)  g0-r001 [....][....] (8)
    #   region-1: g1-r000 [x...][....] (7)  g1-r001 [xxxx][xxxx] (0)
    state = make_state(regions=2)
    state.allocate(training("a", 3), place("a", whole(0, 0, 1, 2)), now=0)
    state.allocate(training("b", 1), place("b", whole(4, 0)), now=0)
    state.allocate(training("c", 8), place("c", whole(6, 0, 1, 2, 3), whole(7, 0, 1, 2, 3)), now=0)
    assert list(state.racks_ascending("GB200", 1)) == [0, 2, 1]
    assert list(state.racks_ascending("GB200", 0, region=1)) == [3, 2]
    assert list(state.racks_descending("GB200", 0, region=0)) == [1, 0]


# ---------------------------------------------------------------------- checkpoints


def test_rollback_to_a_checkpoint_undoes_only_what_came_after_it() -> None:
    state = _busy()
    start = snapshot(state)
    tx = Transaction(state)
    tx.release("b")
    after_release = snapshot(state)
    outer = tx.checkpoint()
    tx.allocate(training("x", 2), place("x", whole(1, 0, 1)), now=100)
    inner = tx.checkpoint()
    tx.allocate(training("y", 1), place("y", whole(1, 2)), now=100)
    tx.rollback(inner)
    assert set(state.running) == {"a", "s", "x"} and len(tx) == 2
    tx.rollback(inner)  # a checkpoint stays valid: nothing after it, nothing to undo
    assert len(tx) == 2
    tx.rollback(outer)
    assert snapshot(state) == after_release
    tx.rollback()
    assert snapshot(state) == start
    state.check_invariants()


def test_a_checkpoint_another_transaction_holds_or_one_past_the_log_is_refused() -> None:
    state = _busy()
    tx, other = Transaction(state), Transaction(state)
    tx.release("b")
    late = tx.checkpoint()
    tx.rollback()  # undoes the release: ``late`` now points past the log
    with pytest.raises(CheckpointError):
        tx.rollback(late)
    with pytest.raises(CheckpointError):
        other.rollback(tx.checkpoint())
    assert "b" in state.running


def test_an_allocation_with_a_malformed_slice_changes_nothing() -> None:
    """Slices come from placer plugins: one that is not a slice at all must not leave the first ones taken."""
    state = _occupied()
    before = snapshot(state)
    with pytest.raises(AttributeError):
        state.allocate(training("x", 1), place("x", whole(3, 0), object()), now=1)  # type: ignore[arg-type]
    assert snapshot(state) == before
    state.check_invariants()


# ``inference_version`` moves whenever a running inference job's RunningJob is added, replaced or removed
# (a reader of the running services relies on it), and only then:
#   r000: n0 [ss..] n1 [tt..]      s: service "svc" (one replica of 2 GPUs), t: training "t"
#   r001: n2 [....] n3 [....]
CHANGES = [
    pytest.param(lambda s: s.extend("svc", (whole(2, 0, 1),), 1), True, id="service-scales-up"),
    pytest.param(lambda s: s.note_checkpoint("svc", 5.0), True, id="service-checkpoint-noted"),
    pytest.param(lambda s: s.release("svc"), True, id="service-stops"),
    pytest.param(
        lambda s: s.allocate(inference("svc2", 1, gpus_per_replica=2), place("svc2", whole(3, 0, 1)), now=1.0),
        True,
        id="another-service-starts",
    ),
    pytest.param(lambda s: s.release("t"), False, id="training-stops"),
    pytest.param(lambda s: s.note_checkpoint("t", 5.0), False, id="training-checkpoint-noted"),
    pytest.param(
        lambda s: s.allocate(training("t2", 2), place("t2", whole(3, 0, 1)), now=1.0), False, id="training-starts"
    ),
]


@pytest.mark.parametrize(("change", "moves"), CHANGES)
def test_the_inference_version_moves_with_the_services_only(change, moves: bool) -> None:  # type: ignore[no-untyped-def]
    state = make_state()
    state.allocate(inference("svc", 2, gpus_per_replica=2, min_replicas=1), place("svc", whole(0, 0, 1)), now=0.0)
    state.allocate(training("t", 2), place("t", whole(1, 0, 1)), now=0.0)
    before = state.inference_version
    change(state)
    assert (state.inference_version != before) is moves


def test_a_rolled_back_scale_up_moves_it_too() -> None:
    state = make_state()
    state.allocate(inference("svc", 2, gpus_per_replica=2, min_replicas=1), place("svc", whole(0, 0, 1)), now=0.0)
    before, tx = state.inference_version, Transaction(state)
    tx.extend("svc", (whole(2, 0, 1),), 1)
    tx.rollback()  # the same placement again, in a new RunningJob: a reader must look again
    assert state.inference_version > before
