"""Queue order: priority first; then the queue with the lowest weighted dominant share, re-read after every
placement of the cycle; inside a queue, submit time. ``priority-fifo`` ignores queues.

The cluster has 16 GPUs (2 racks x 2 nodes x 4) with 144 CPUs and 1 TiB per node; the order a cycle
tried its jobs in is the order of ``Decisions.placed`` whenever everything fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from builders import ClusterBuilder, placed_names, run_cycle

from rackscale.model import JobSpec, training
from rackscale.scheduler import Code, PendingQueue, Profile, QueueConfig
from rackscale.scheduler.framework import QUEUE_SORTS, CycleContext


@dataclass
class Case:
    jobs: list[JobSpec]
    cluster: ClusterBuilder = field(default_factory=lambda: ClusterBuilder().racks(2))
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    want_order: list[str] | None = None  # the placed jobs, in order
    want_count: dict[str, int] = field(default_factory=dict)  # queue -> jobs placed


def job(name: str, gpus: int = 1, **kw: object) -> JobSpec:
    """``job("a1")`` is a 1-GPU job of queue ``a``."""
    kw.setdefault("queue", name.rstrip("0123456789-"))
    return training(name, gpus, **kw)


def weights(**w: float) -> dict[str, QueueConfig]:
    return {q: QueueConfig(name=q, weight=x) for q, x in w.items()}


ORDER = {
    # queue a already holds 8 GPUs; its high-priority job still goes first
    "priority-first": Case(
        [job("b1"), job("a1", priority=5), job("b2")],
        cluster=ClusterBuilder().racks(2).with_running("held", gpus=8, rack=0, queue="a"),
        want_order=["a1", "b1", "b2"],
    ),
    # a holds 4 GPUs (25%), b nothing: b goes first until its share catches up
    "lowest-dominant-share-first": Case(
        [job("a1"), job("a2"), job("b1"), job("b2"), job("b3"), job("b4"), job("b5")],
        cluster=ClusterBuilder().racks(2).with_running("held", gpus=4, rack=0, queue="a"),
        want_order=["b1", "b2", "b3", "b4", "a1", "b5", "a2"],
    ),
    # both empty: the shares move after every placement, so the queues alternate
    "progressive-within-one-cycle": Case(
        [job("a1"), job("a2"), job("a3"), job("b1"), job("b2"), job("b3")],
        want_order=["a1", "b1", "a2", "b2", "a3", "b3"],
    ),
    # b weighs twice as much: two of b's jobs for each of a's
    "weights-scale-the-share": Case(
        [job(f"a{i}") for i in range(1, 5)] + [job(f"b{i}") for i in range(1, 7)],
        queues=weights(b=2.0),
        want_order=["a1", "b1", "b2", "a2", "b3", "b4", "a3", "b5", "b6", "a4"],
    ),
    # the dominant share is the largest of GPU, CPU and memory: a holds 1 GPU (1/16) but a node's CPUs
    # (1/4); b holds 2 GPUs (1/8) and no CPU. By GPUs alone a would go first.
    "dominant-resource-is-cpu": Case(
        [job("a1"), job("b1")],
        cluster=(
            ClusterBuilder()
            .racks(2)
            .with_running("cpu-heavy", spec=training("cpu-heavy", 1, cpu_milli=144_000, queue="a"), on={(0, 0): 1})
            .with_running("gpu-heavy", gpus=2, rack=1, queue="b")
        ),
        want_order=["b1", "a1"],
    ),
    # inside a queue: submit time, then name; the queues still alternate
    "submit-time-inside-a-queue": Case(
        [
            job("a-z", submit_time=1, queue="a"),
            job("a-y", submit_time=2, queue="a"),
            job("a-x", submit_time=2, queue="a"),
            job("b-late", submit_time=9, queue="b"),
        ],
        want_order=["a-z", "b-late", "a-x", "a-y"],
    ),
}


@pytest.mark.parametrize("case", list(ORDER.values()), ids=list(ORDER))
def test_queue_order(case: Case) -> None:
    state = case.cluster.build()
    d = run_cycle(state, case.jobs, queues=case.queues)
    assert placed_names(d) == case.want_order


# region-0: two racks of 8 GPUs, all free; each queue asks for 16 one-GPU jobs
FAIR_SHARE = [
    pytest.param({}, {"a": 8, "b": 8}, id="equal-weights-split-evenly"),
    pytest.param({"b": 3.0}, {"a": 4, "b": 12}, id="weight-3-gets-three-quarters"),
    pytest.param({"a": 0.5, "b": 1.5}, {"a": 4, "b": 12}, id="only-the-ratio-of-weights-matters"),
]


@pytest.mark.parametrize(("w", "want"), FAIR_SHARE)
def test_a_full_cluster_is_shared_by_weight(w: dict[str, float], want: dict[str, int]) -> None:
    state = ClusterBuilder().racks(2).build()
    jobs = [job(f"a{i:02d}") for i in range(16)] + [job(f"b{i:02d}") for i in range(16)]
    d = run_cycle(state, jobs, queues=weights(**w))
    got = {q: sum(1 for p in d.placed if p.spec.queue == q) for q in ("a", "b")}
    assert got == want
    # the cluster is full now: the cycle stops looking, and the 16 jobs left wait for GPUs
    assert d.not_examined == 16 and not d.pending
    status = d.pending_status("a15") or d.pending_status("b15")
    assert status is not None and status.code is Code.UNSCHEDULABLE


def test_priority_fifo_ignores_queue_shares() -> None:
    # queue a holds 8 GPUs; with priority-fifo its earlier job still goes before b's
    state = ClusterBuilder().racks(2).with_running("held", gpus=8, rack=0, queue="a").build()
    fifo = Profile(name="fifo", queue_sort="priority-fifo")
    jobs = [
        job("b1", submit_time=3),
        job("a1", submit_time=1),
        job("a2", submit_time=4),
        job("b2", submit_time=2),
        job("c1", submit_time=9, priority=1),
    ]
    d = run_cycle(state, jobs, profile=fifo)
    assert placed_names(d) == ["c1", "a1", "b2", "b1", "a2"]


@pytest.mark.parametrize("plugin", ["priority-fifo", "priority-fairshare"])
def test_queue_sort_plugins_yield_every_job_once_priority_descending(plugin: str) -> None:
    state = ClusterBuilder().racks(1).build()
    jobs = [
        job(f"{q}{i}", priority=p, submit_time=t)
        for q, i, p, t in [("a", 1, 0, 5), ("b", 1, 7, 3), ("a", 2, 7, 1), ("c", 1, -1, 0)]
    ]
    ctx = CycleContext(now=0, queues={}, models=state.cluster.gpu_models)
    got = list(QUEUE_SORTS[plugin]().order(PendingQueue(jobs), state, ctx))
    assert sorted(j.name for j in got) == sorted(j.name for j in jobs)
    assert [j.priority for j in got] == sorted((j.priority for j in jobs), reverse=True)
    assert got[0].name == "a2", "equal priority: the earlier submit time first (queues are empty)"
