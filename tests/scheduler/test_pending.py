"""The pending queue keeps its order between cycles and knows the smallest demand it holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.model import batch, inference, training
from rackscale.scheduler import PendingQueue
from rackscale.scheduler.pending import fewest_units, static_shape, whole_demand


def test_order_is_priority_then_queue_then_submit_time() -> None:
    q = PendingQueue(
        [
            training("late", 1, submit_time=9, queue="a"),
            training("early", 1, submit_time=1, queue="a"),
            training("vip", 1, submit_time=5, priority=10, queue="z"),
            training("other", 1, submit_time=0, queue="b"),
        ]
    )
    assert [j.name for j in q] == ["vip", "early", "late", "other"]
    assert q.priorities() == [10, 0]
    assert [j.name for j in q.queues_at(0)["a"]] == ["early", "late"]


@pytest.mark.parametrize(
    ("job", "demand"),
    [
        pytest.param(training("t", 8, gpus_per_worker=4), 8, id="gang-needs-all"),
        pytest.param(inference("i", 4, gpus_per_replica=2, min_replicas=2), 2, id="inference-one-replica"),
        pytest.param(batch("b", gpu_milli=500), 0, id="shared-gpu-needs-no-whole-gpu"),
        pytest.param(batch("c", gpus=0, cpu_milli=1000), 0, id="cpu-only"),
    ],
)
def test_whole_demand(job: object, demand: int) -> None:
    assert whole_demand(job) == demand  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("elastic", "demand", "fewest"),
    [(True, 2, 2), (False, 8, 8)],
    ids=["profile-resizes-gangs-reads-the-minimum", "profile-runs-gangs-at-size-reads-the-request"],
)
def test_an_elastic_gangs_demand_follows_the_profile(elastic: bool, demand: int, fewest: int) -> None:
    gang = training("e", 8, min_gpus=2, max_gpus=16)
    service = inference("i", 4, min_replicas=2)
    q = PendingQueue([gang, training("f", 12)], elastic=elastic)
    assert q.min_whole_demand() == demand
    q.add(service)  # a service's minimum is read under either profile
    assert q.min_whole_demand() == 1 and q.elastic is elastic
    q.remove("i")
    assert q.min_whole_demand() == demand
    shape = static_shape(gang)
    assert q.min_units(shape) == fewest and fewest_units(gang, elastic=elastic) == fewest
    q.remove("e")
    assert q.min_units(shape) == 12 and q.min_whole_demand() == 12
    assert fewest_units(service, elastic=elastic) == 2


def test_add_replaces_and_remove_forgets() -> None:
    q = PendingQueue([training("a", 4), training("b", 2)])
    assert q.min_whole_demand() == 2
    q.add(training("b", 8))  # same name: replaced
    assert len(q) == 2 and q.min_whole_demand() == 4
    q.remove("a")
    assert "a" not in q and q.min_whole_demand() == 8
    q.discard("missing")
    with pytest.raises(KeyError):
        q.remove("missing")
    q.remove("b")
    assert len(q) == 0 and list(q) == [] and q.min_whole_demand() == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-2, 2), st.sampled_from("abc"), st.integers(0, 20), st.integers(1, 9), st.booleans()),
        max_size=30,
    )
)
def test_random_adds_and_removes_match_a_sorted_list(ops: list[tuple[int, str, int, int, bool]]) -> None:
    q = PendingQueue()
    model: dict[str, object] = {}
    for i, (prio, queue, t, gpus, remove) in enumerate(ops):
        name = f"j{i % 7}"
        if remove and name in model:
            q.remove(name)
            del model[name]
        else:
            job = training(name, gpus, priority=prio, queue=queue, submit_time=float(t))
            q.add(job)
            model[name] = job
    want = sorted(model.values(), key=lambda j: (-j.priority, j.queue, j.submit_time, j.name))  # type: ignore[attr-defined]
    assert list(q) == want
    assert q.min_whole_demand() == min((j.total_gpus for j in want), default=0)  # type: ignore[attr-defined]


def test_min_duration_per_shape_follows_adds_and_removes() -> None:
    from rackscale.scheduler.pending import static_shape

    a = training("a", 1, duration_estimate_s=50.0)
    b = training("b", 2, duration_estimate_s=10.0)
    c = training("c", 1)  # no estimate: never ends "before" anything
    q = PendingQueue([a, b, c])
    shape = static_shape(a)
    assert static_shape(b) == shape == static_shape(c)
    assert q.min_duration(shape) == 10.0
    q.remove("b")
    assert q.min_duration(shape) == 50.0
    q.remove("a")
    assert q.min_duration(shape) == float("inf")
    q.add(training("d", 4, duration_estimate_s=5.0))
    assert q.min_duration(shape) == 5.0
