"""The state's running jobs in order of expected end (``ClusterState.ends_in_order``).

The state holds added and removed ends in two sets until the next read, so that a cycle's tentative
placement and its rollback cancel without touching the sorted list. Whatever the interleaving of
allocations, releases, rollbacks and reads, a read must give exactly the running jobs that have an
expected end, soonest first (ties by name).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.model import MILLI_PER_GPU, ClusterState, GPUCluster, NodeAlloc, Placement, Transaction, training

# One node per job keeps every allocation possible: 8 nodes of 4 GPUs, jobs "j0".."j7" on node i.
JOBS = 8


def _state() -> ClusterState:
    return ClusterState(GPUCluster.uniform(regions=1, racks_per_region=2, nodes_per_rack=4, gpus_per_node=4))


def _expected(state: ClusterState) -> list[tuple[float, str]]:
    return sorted((rj.expected_end, n) for n, rj in state.running.items() if rj.expected_end is not None)


# (op, job index, end): "alloc" (end None: no estimate), "release", "read", "tx-alloc" (inside a
# transaction), "rollback" (of that transaction), "commit"
OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "release", "read", "tx-alloc", "tx-release", "rollback", "commit"]),
        st.integers(0, JOBS - 1),
        st.one_of(st.none(), st.sampled_from([1.0, 2.0, 2.0, 5.5, 9.0])),  # ties on purpose
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_ends_in_order_is_exact_after_any_interleaving(ops: list[tuple[str, int, float | None]]) -> None:
    state = _state()
    tx = Transaction(state)
    for op, i, end in ops:
        name = f"j{i}"
        runs = name in state.running
        if op in ("alloc", "tx-alloc") and not runs:
            placement = Placement(name, (NodeAlloc(i, (0, 1), MILLI_PER_GPU, 0, 0),), 2)
            if op == "alloc":
                tx.commit()  # a direct change under an open transaction would confuse its rollback
                state.allocate(training(name, 2), placement, now=0.0, expected_end=end)
            else:
                tx.allocate(training(name, 2), placement, now=0.0, expected_end=end)
        elif op in ("release", "tx-release") and runs:
            if op == "release":
                tx.commit()
                state.release(name)
            else:
                tx.release(name)
        elif op == "rollback":
            tx.rollback()
        elif op == "commit":
            tx.commit()
        elif op == "read":
            assert list(state.ends_in_order()) == _expected(state)
    assert list(state.ends_in_order()) == _expected(state)
    tx.rollback()
    assert list(state.ends_in_order()) == _expected(state)


def test_a_read_is_a_snapshot_that_later_changes_do_not_touch() -> None:
    state = _state()
    alloc = NodeAlloc(0, (0,), MILLI_PER_GPU, 0, 0)
    state.allocate(training("a", 1), Placement("a", (alloc,), 1), now=0.0, expected_end=5.0)
    got = state.ends_in_order()
    state.release("a")
    state.allocate(training("b", 1), Placement("b", (alloc,), 1), now=0.0, expected_end=1.0)
    assert list(got) == [(5.0, "a")]
    assert list(state.ends_in_order()) == [(1.0, "b")]
