"""A drain's NOTICE changes (host/drains.py): each running job whose stop time an operator's verb moves is
told once — when a drain starts or comes sooner (``Draining``: when it will be stopped), when it is called
off (``DrainCalledOff``) — and nothing is said when the stop time stays, or when the stop is now (its
PREEMPTED change says it).

2 racks of 2 nodes of 4 GPUs; an 8-GPU gang ``g`` fills one rack, a 4-GPU job ``a`` one node of the other,
as the scheduler places them::

    region-0
    ├── r000: r000-n00 [aaaa] r000-n01 [....]
    └── r001: r001-n00 [gggg] r001-n01 [gggg]
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.drains import NodeHold
from rackscale.host.host import ClusterHost
from rackscale.model import GPUCluster, training

CLUSTER = GPUCluster.uniform(racks_per_region=2, nodes_per_rack=2, gpus_per_node=4)
NODE = {n.name: n.index for n in CLUSTER.nodes}
LONG = 1e6  # seconds: neither job ends within a test


def started() -> ClusterHost:
    host = ClusterHost(CLUSTER)
    host.submit(training("g", 8, gpus_per_worker=4, duration_estimate_s=LONG))
    host.submit(training("a", 4, duration_estimate_s=LONG))
    host.cycle(0.0)
    # The layout the docstring draws (the test below reads node names from it).
    assert {CLUSTER.nodes[n].name for n in host.state.running["g"].placement.nodes} == {"r001-n00", "r001-n01"}
    assert {CLUSTER.nodes[n].name for n in host.state.running["a"].placement.nodes} == {"r000-n00"}
    return host


def nodes(*names: str) -> list[int]:
    return [NODE[n] for n in names]


def said(changes: list[Change]) -> list[tuple[str, str, str]]:
    """(job, reason, message) of the NOTICE changes; any other kind as (job, kind, "")."""
    return [(c.job, c.reason, c.message) if c.type is ChangeKind.NOTICE else (c.job, str(c.type), "") for c in changes]


Step = Callable[[ClusterHost], list[Change]]


def drain(*names: str, at: float, grace: float, reason: str = "firmware") -> Step:
    return lambda h: h.drain(nodes(*names), now=at, reason=reason, grace_s=grace)


def cordon(*names: str, at: float) -> Step:
    return lambda h: h.cordon(nodes(*names), now=at, reason="watch")


def uncordon(*names: str, at: float) -> Step:
    return lambda h: h.uncordon(nodes(*names), now=at)


RACK1 = ("r001-n00", "r001-n01")
STOPS_IN = "stopped and requeued in {} unless it ends first"


@pytest.mark.parametrize(
    ("earlier", "last", "want"),
    [
        (
            [],
            drain(*RACK1, at=0.0, grace=600.0),
            [("g", "Draining", "draining nodes r001-n00, r001-n01 (firmware): " + STOPS_IN.format("10 min"))],
        ),
        (
            [],
            drain("r000-n00", at=0.0, grace=60.0, reason=""),
            [("a", "Draining", "draining node r000-n00: " + STOPS_IN.format("1 min"))],
        ),
        ([], drain(*RACK1, at=0.0, grace=0.0), [("g", "preempted", "")]),
        ([], cordon(*RACK1, at=0.0), []),
        ([drain(*RACK1, at=0.0, grace=600.0)], drain(*RACK1, at=10.0, grace=900.0), []),
        (
            [drain(*RACK1, at=0.0, grace=600.0)],
            drain("r001-n01", at=10.0, grace=60.0, reason="reboot"),
            [("g", "Draining", "draining node r001-n01 (reboot): " + STOPS_IN.format("1 min"))],
        ),
        (
            [drain(*RACK1, at=0.0, grace=600.0)],
            uncordon(*RACK1, at=10.0),
            [("g", "DrainCalledOff", "the drain of nodes r001-n00, r001-n01 was called off: it goes on")],
        ),
        ([drain(*RACK1, at=0.0, grace=600.0)], uncordon("r001-n00", at=10.0), []),
        (
            [drain("r001-n00", at=0.0, grace=60.0), drain("r001-n01", at=0.0, grace=600.0)],
            uncordon("r001-n00", at=10.0),
            [("g", "Draining", "draining node r001-n01 (firmware): " + STOPS_IN.format("10 min"))],
        ),
        ([drain(*RACK1, at=0.0, grace=0.0)], uncordon(*RACK1, at=10.0), []),
        (
            [cordon(*RACK1, at=0.0)],
            drain(*RACK1, at=5.0, grace=120.0),
            [("g", "Draining", "draining nodes r001-n00, r001-n01 (firmware): " + STOPS_IN.format("2 min"))],
        ),
    ],
    ids=[
        "drain-a-rack-one-notice-per-job",
        "drain-without-reason",
        "grace-zero-stops-without-notice",
        "cordon-says-nothing",
        "drain-again-later-keeps-the-time",
        "a-sooner-drain-tells-again",
        "uncordon-in-the-grace-calls-it-off",
        "uncordon-one-node-the-other-still-stops-it-then",
        "uncordon-the-sooner-node-the-later-time",
        "uncordon-after-the-stop-says-nothing",
        "drain-a-cordoned-rack",
    ],
)
def test_notices_follow_the_stop_time(earlier: list[Step], last: Step, want: list[tuple[str, str, str]]) -> None:
    host = started()
    for step in earlier:
        step(host)
    assert said(last(host)) == want
    host.state.check_invariants()


def test_the_notice_is_an_event_only_and_the_stop_follows_at_the_deadline() -> None:
    host = started()
    [told] = host.drain(nodes("r000-n00"), now=100.0, reason="firmware", grace_s=30.0)
    assert (told.job, told.type, told.time, told.placement) == ("a", ChangeKind.NOTICE, 100.0, None)
    assert host.state.running["a"].placement.nodes == (NODE["r000-n00"],)  # it goes on where it is
    assert host.drain_notices() == {"a": "firmware"}  # what a backend signals: unchanged by the notice
    assert [c.type for c in host.cycle(129.0)] == []
    stop = host.cycle(130.0)
    # Stopped and placed again elsewhere; no notice (the PREEMPTED change says it).
    assert [(c.job, c.type, c.reason) for c in stop] == [
        ("a", ChangeKind.PREEMPTED, "Drained"),
        ("a", ChangeKind.SCHEDULED, "Scheduled"),
    ]


@pytest.mark.parametrize(
    ("deadline", "want"),
    [
        (700.0, [("a", "Draining", "draining node r000-n00 (firmware): " + STOPS_IN.format("10 min"))]),
        (50.0, [("a", "preempted", "")]),
    ],
    ids=["grace-left-told-again", "grace-run-out-stopped"],
)
def test_holds_found_after_a_restart(deadline: float, want: list[tuple[str, str, str]]) -> None:
    """The service hands the stored holds to a new host (its jobs restored): a drain still in its grace is
    told again with the time left; one whose grace ran out while the service was down stops its jobs."""
    host = started()
    hold = NodeHold(reason="firmware", since=0.0, deadline=deadline)
    assert said(host.put_holds([(NODE["r000-n00"], hold)], now=100.0)) == want
