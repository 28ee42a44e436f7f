"""A gang that prefers one rack is split only when waiting for a rack would cost more than the split.

region-0
├── r000: n00 [aaaa] n01 [aa..]   a: 6 GPUs
└── r001: n00 [bbbb] n01 [bb..]   b: 6 GPUs
"t" asks for 4 GPUs: 4 are free, but 2 per rack; it fits in one rack only once a or b ends.
"""

from __future__ import annotations

import math

import pytest
from builders import ClusterBuilder

from rackscale.model import CommProfile, JobSpec, training
from rackscale.scheduler import ResourceScheduler
from rackscale.scheduler.split import SplitAdvisor, _most_free

COMM = CommProfile(bytes_per_step=4e9, compute_s_per_step=0.5)


def state_with_ends(end_a: float | None, end_b: float | None):  # type: ignore[no-untyped-def]
    return (
        ClusterBuilder()
        .racks(2)
        .with_running("a", gpus=6, rack=0, expected_end=end_a)
        .with_running("b", gpus=6, rack=1, expected_end=end_b)
        .build()
    )


CASES = [
    pytest.param(training("t", 4, comm=COMM, duration_estimate_s=36_000.0), 60.0, False, id="long-job-waits-a-minute"),
    pytest.param(training("t", 4, comm=COMM, duration_estimate_s=10.0), 3_600.0, True, id="short-job-splits"),
    pytest.param(training("t", 4, comm=COMM), 60.0, True, id="no-estimate-splits"),
    pytest.param(
        training("t", 4, comm=CommProfile(0.0, 0.5), duration_estimate_s=36_000.0), 60.0, True, id="no-traffic"
    ),
    pytest.param(training("t", 4, comm=COMM, duration_estimate_s=36_000.0), None, True, id="no-rack-ever-frees"),
]


@pytest.mark.parametrize(("job", "frees_in", "splits"), CASES)
def test_split_only_when_waiting_costs_more(job: JobSpec, frees_in: float | None, splits: bool) -> None:
    state = state_with_ends(frees_in, None)
    assert SplitAdvisor().split_pays_off(job, state, 0.0) is splits
    d = ResourceScheduler().schedule(state, [job], 0.0)
    if splits:
        assert d.placed and len({state.cluster.nodes[a.node].rack for a in d.placed[0].placement.allocs}) == 2
    else:
        assert not d.placed, "it waits for a rack"


def test_the_wait_is_read_from_expected_ends() -> None:
    adv = SplitAdvisor()
    state = state_with_ends(100.0, 50.0)
    assert adv._wait_for_rack(state, 2, 0.0) == 0.0  # two GPUs are free in a rack already
    assert adv._wait_for_rack(state, 4, 0.0) == 50.0  # b ends first and frees its rack
    adv.new_cycle()
    assert adv._wait_for_rack(state_with_ends(None, None), 4, 0.0) == math.inf


# The walk's starting point, the most free GPUs of any rack, is read from the racks' buckets. Two GPU
# models, a failed node and racks of every fill:
#
#   r000 (A): n00 [xxxx] n01 [x...]     r001 (B): n00 [####] n01 [xx..]     r002 (A): n00 [....] n01 [....]
@pytest.mark.parametrize(
    "running",
    [
        pytest.param([], id="empty"),
        pytest.param([("a", 5, 0)], id="one-rack-partly-used"),
        pytest.param([("a", 5, 0), ("b", 2, 1)], id="a-model-b-rack-with-a-failed-node"),
        pytest.param([("a", 8, 0), ("b", 2, 1), ("c", 8, 2)], id="every-model-a-rack-full"),
    ],
)
def test_the_most_free_of_any_rack_is_read_from_the_buckets(running: list[tuple[str, int, int]]) -> None:
    builder = ClusterBuilder().racks(3).gpu_models("A", "B").with_failed_node(1, 0)
    for name, gpus, rack in running:
        builder = builder.with_running(name, gpus=gpus, rack=rack)
    state = builder.build()
    assert _most_free(state) == max(state.rack_whole)
