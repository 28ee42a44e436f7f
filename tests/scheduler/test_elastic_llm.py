"""Elastic LLM gangs resize in whole data-parallel ranks (``JobSpec.resize_step``): the same three paths as
``test_elastic.py`` (start smaller, shrink, grow), where a gang of 1-GPU workers would stop at a GPU count a
rank of its model does not divide. Here a rank is ``tp 2 x pp 1`` = 2 GPUs; a plain elastic gang beside it
shows the count it would have taken.

    region-0
    ├── r000: n00 [....] n01 [....]
    └── r001: n00 [....] n01 [....]
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.scheduler.builders import ClusterBuilder, gpus_by_rack, placed, render, run_cycle

from rackscale.model import training
from rackscale.model.workload import JobSpec, LlmWork
from rackscale.scheduler.decisions import ResizeKind
from rackscale.scheduler.elastic import MIN_RESIZE_INTERVAL_S

LATER = MIN_RESIZE_INTERVAL_S + 1.0
RANK_OF_2 = LlmWork(model="llama-3.1-8b", tp=2, pp=1)


def gang(gpus: int, lo: int, hi: int, *, llm: LlmWork | None) -> JobSpec:
    return training("e", gpus, min_gpus=lo, max_gpus=hi, llm=llm)


def test_the_step_is_one_rank_of_the_model_in_workers() -> None:
    assert gang(8, 2, 12, llm=RANK_OF_2).resize_step == 2
    assert gang(8, 2, 12, llm=None).resize_step == 1
    assert gang(8, 2, 12, llm=LlmWork(model="llama-3.1-70b", tp=4, pp=2, ep=None)).resize_step == 8
    # workers of 4 GPUs and ranks of 2: a step is one worker (two ranks)
    four = training("e", 8, gpus_per_worker=4, min_gpus=4, max_gpus=16, llm=RANK_OF_2)
    assert four.resize_step == 1
    # an LLM gang whose shard is not fixed yet (the host fixes it) is not elastic at all
    assert not gang(8, 2, 12, llm=LlmWork(model="llama-3.1-8b")).is_elastic


@dataclass(frozen=True)
class Case:
    llm: LlmWork | None
    want: int  # GPUs


STARTS = {
    "plain-takes-all-5-free": Case(None, 5),
    "llm-takes-4-two-ranks": Case(RANK_OF_2, 4),
}


@pytest.mark.parametrize("case", list(STARTS.values()), ids=list(STARTS))
def test_starting_smaller_stops_at_a_whole_rank(case: Case) -> None:
    # r000 has 5 free GPUs, r001 one: the 8 asked fit nowhere
    b = ClusterBuilder().racks(2).with_running("busy0", gpus=3, rack=0, preemptible=False)
    state = b.with_running("busy1", gpus=7, rack=1, preemptible=False).build()
    d = run_cycle(state, [gang(8, 2, 8, llm=case.llm)], now=10.0)
    p = placed(d, "e")
    assert p.placement.whole_gpus == case.want, render(state)
    assert set(gpus_by_rack(state, p.placement)) == {0}


SHRINKS = {
    "plain-gives-3": Case(None, 5),
    "llm-gives-4-two-ranks": Case(RANK_OF_2, 4),
}


@pytest.mark.parametrize("case", list(SHRINKS.values()), ids=list(SHRINKS))
def test_shrinking_gives_back_whole_ranks(case: Case) -> None:
    # e (asked 4, min 2, max 8) has grown over all of r000; r001 is full; w (3 GPUs, equal priority) waits
    e = gang(4, 2, 8, llm=case.llm)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4, (0, 1): 4}, spec=e)
        .with_running("full", gpus=8, rack=1, preemptible=False)
        .build()
    )
    d = run_cycle(state, [training("w", 3)], now=100.0)
    (z,) = d.resized
    assert z.kind is ResizeKind.SHRUNK and z.placement.whole_gpus == case.want, render(state)
    assert placed(d, "w").placement.whole_gpus == 3 and not d.preemptions


GROWS = {
    "plain-grows-by-3": Case(None, 7),
    "llm-grows-by-2-one-rank": Case(RANK_OF_2, 6),
}


@pytest.mark.parametrize("case", list(GROWS.values()), ids=list(GROWS))
def test_growing_takes_whole_ranks(case: Case) -> None:
    # e runs on r000/n00; one GPU of r000/n01 is busy: 3 free in its rack
    e = gang(4, 2, 12, llm=case.llm)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4}, spec=e, expected_end=LATER + 36_000)
        .with_running("one", on={(0, 1): 1}, preemptible=False)
        .with_running("full", gpus=8, rack=1, preemptible=False)
        .build()
    )
    d = run_cycle(state, [], now=LATER)
    (z,) = d.resized
    assert z.kind is ResizeKind.GROWN and z.placement.whole_gpus == case.want, render(state)
    assert state.running["e"].placement.units == case.want


@pytest.mark.parametrize(
    ("asked", "want"),
    [
        (12, 12),  # asked for more than a rack holds: grows into r001, up to its request (not its maximum)
        (8, None),  # asked for one rack's worth: growth never leaves its rack, which is full
    ],
    ids=["asked-two-racks-grows-into-the-second", "asked-one-rack-stays-in-it"],
)
def test_a_gang_started_below_a_request_wider_than_its_racks_grows_into_other_racks(
    asked: int, want: int | None
) -> None:
    # e runs 4 GPUs on r000/n00; r000/n01 is busy; r001 is free
    e = gang(asked, 4, 16, llm=None)
    state = (
        ClusterBuilder()
        .racks(2)
        .with_running("e", on={(0, 0): 4}, spec=e, expected_end=LATER + 36_000)
        .with_running("busy", on={(0, 1): 4}, preemptible=False)
        .build()
    )
    d = run_cycle(state, [], now=LATER)
    if want is None:
        assert not d.resized, render(state)
        return
    (z,) = d.resized
    assert z.kind is ResizeKind.GROWN and z.placement.whole_gpus == want, render(state)
    assert gpus_by_rack(state, z.placement) == {0: 4, 1: 8}
