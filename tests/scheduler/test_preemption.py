"""Preemption, table-driven: who is preempted for a job that cannot be placed, and who never is.

Letters in the diagrams name the job holding a GPU (the renderer draws them all as ``x``); priorities are
given beside each rack. Every cluster is 2 nodes x 4 GPUs per rack.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from builders import ClusterBuilder, node_index, placed, placed_names, racks_of, run_cycle, snapshot

from rackscale.model import JobSpec, Level, PreemptionPolicy, TopologyConstraint, inference, training
from rackscale.scheduler import Code, PreemptionCause, ResourceScheduler

RACK = TopologyConstraint(required=Level.RACK)


@dataclass
class Case:
    cluster: ClusterBuilder
    jobs: list[JobSpec]
    now: float = 0.0
    want_victims: set[str] = field(default_factory=set)
    want_placed: dict[str, list[int]] = field(default_factory=dict)  # job -> racks
    want_pending: set[str] = field(default_factory=set)


def check(case: Case) -> None:
    state = case.cluster.build()
    before = {name: rj.spec for name, rj in state.running.items()}
    d = run_cycle(state, case.jobs, now=case.now)
    victims = {p.victim for p in d.preemptions}
    assert victims == case.want_victims
    for p in d.preemptions:
        victim, preemptor = before[p.victim], next(j for j in case.jobs if j.name == p.preemptor)
        assert victim.priority < preemptor.priority and victim.preemptible
        assert preemptor.preemption_policy is not PreemptionPolicy.NEVER
        # The reason is shown to the victim's owner, maybe another tenant: priorities and racks, no job name.
        assert str(victim.priority) in p.reason and f"{p.preemptor!r}" not in p.reason, p.reason
        assert p.cause is PreemptionCause.PRIORITY  # (the service's metric counts it under this label)
    for name, racks in case.want_placed.items():
        assert racks_of(state, placed(d, name).placement) == racks, name
    assert {p.spec.name for p in d.pending} == case.want_pending
    for name in case.want_pending:
        st = d.pending_status(name)
        assert st is not None and st.code is not Code.SUCCESS and st.message


def cluster(racks: int = 2) -> ClusterBuilder:
    return ClusterBuilder().racks(racks).nodes_per_rack(2).gpus_per_node(4)


def h(gpus: int, **kw: object) -> JobSpec:
    """The preemptor: priority 10 unless told."""
    kw.setdefault("priority", 10)
    return training("h", gpus, **kw)


SVC = inference("svc", 1, gpus_per_replica=4, min_replicas=1, max_replicas=3, spread_racks=1, priority=10)

WHO_IS_PREEMPTED = {
    # region-0
    # ├── r000: n00 [aaaa] n01 [bbbb]   a: 1, b: 2
    # └── r001: n00 [HHHH] n01 [HHHH]   H: 100
    "the-lowest-priority-job-goes-first": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=2)
        .with_running("H", gpus=8, rack=1, priority=100),
        [h(4)],
        want_victims={"a"},
        want_placed={"h": [0]},
    ),
    # region-0
    # ├── r000: n00 [aabb] n01 [xxxx]   a, b, x: 1
    # └── r001: n00 [cccc] n01 [cccc]   c: 1
    # 8 GPUs: three victims in r000 or one in r001.
    "the-fewest-victims": Case(
        cluster()
        .with_running("a", on={(0, 0): 2}, priority=1)
        .with_running("b", on={(0, 0): 2}, priority=1)
        .with_running("x", on={(0, 1): 4}, priority=1)
        .with_running("c", gpus=8, rack=1, priority=1),
        [h(8)],
        want_victims={"c"},
        want_placed={"h": [1]},
    ),
    # region-0
    # ├── r000: n00 [aacc] n01 [HHHH]   a, c: 1   H: 100
    # └── r001: n00 [bbGG] n01 [GGGG]   b: 1      G: 100
    # 4 GPUs: a + b would free 2 + 2 in two racks; a + c free 4 inside r000.
    "victims-in-one-rack": Case(
        cluster()
        .with_running("a", on={(0, 0): 2}, priority=1)
        .with_running("c", on={(0, 0): 2}, priority=1)
        .with_running("H", on={(0, 1): 4}, priority=100)
        .with_running("b", on={(1, 0): 2}, priority=1)
        .with_running("G", on={(1, 0): 2, (1, 1): 4}, priority=100),
        [h(4)],
        want_victims={"a", "c"},
        want_placed={"h": [0]},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [aaaa]   a: 1
    # ├── r001: n00 [bbbb] n01 [....]   b: 1 (lost the least work: it holds the fewest GPUs)
    # └── r002: n00 [cccc] n01 [cccc]   c: 1
    # 16 GPUs are more than a rack: clear the cheapest two racks.
    "a-gang-larger-than-a-rack-clears-the-cheapest-racks": Case(
        cluster(3)
        .with_running("a", gpus=8, rack=0, priority=1)
        .with_running("b", gpus=4, rack=1, priority=1)
        .with_running("c", gpus=8, rack=2, priority=1),
        [h(16)],
        now=100,
        want_victims={"a", "b"},
        want_placed={"h": [0, 1]},
    ),
    # region-0                                   region-1
    # ├── g0-r000: n00 [aaaa] n01 [bbbb]         ├── g1-r000: n00 [cccc] n01 [cccc]
    # └── g0-r001: n00 [dddd] n01 [eeee]         └── g1-r001: n00 [ffff] n01 [ffff]
    # all priority 1: region 1 frees two racks with two victims, region 0 would take four.
    "a-multi-rack-gang-clears-racks-of-one-region": Case(
        cluster()
        .regions(2)
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=1)
        .with_running("d", on={(1, 0): 4}, priority=1)
        .with_running("e", on={(1, 1): 4}, priority=1)
        .with_running("c", gpus=8, rack=2, priority=1)
        .with_running("f", gpus=8, rack=3, priority=1),
        [h(16)],
        want_victims={"c", "f"},
        want_placed={"h": [2, 3]},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [aaaa]   a: 1
    # └── r001: n00 [bbbb] n01 [bbbb]   b: 1
    "an-inference-replica-preempts-inside-one-rack": Case(
        cluster().with_running("a", gpus=8, rack=0, priority=1).with_running("b", gpus=8, rack=1, priority=1),
        [inference("svc", 1, gpus_per_replica=6, priority=10)],
        want_victims={"a"},
        want_placed={"svc": [0]},
    ),
    # region-0
    # └── r000: n00 [aaaa] n01 [bbbb]   a: 1, b: 2
    # A service that starts with no fewer than 2 replicas of 4 GPUs: room for one (a alone) would be rolled
    # back, and the service would wait behind jobs of lower priority.
    "a-service-preempts-for-the-replicas-it-needs-to-start": Case(
        cluster(1).with_running("a", on={(0, 0): 4}, priority=1).with_running("b", on={(0, 1): 4}, priority=2),
        [inference("svc", 2, gpus_per_replica=4, min_replicas=2, spread_racks=1, priority=10)],
        want_victims={"a", "b"},
        want_placed={"svc": [0]},
    ),
    # The same service, allowed to start with one replica: it still frees room for the two it asks for (a
    # start asks for what its load needs; room for its minimum alone left it short until the autoscaler's
    # ticks added one replica each).
    "a-service-that-may-start-smaller-preempts-for-all-it-asks": Case(
        cluster(1).with_running("a", on={(0, 0): 4}, priority=1).with_running("b", on={(0, 1): 4}, priority=2),
        [inference("svc", 2, gpus_per_replica=4, min_replicas=1, spread_racks=1, priority=10)],
        want_victims={"a", "b"},
        want_placed={"svc": [0]},
    ),
    # region-0
    # ├── r000: n00 [ssss] n01 [aaaa]   svc: 10 (one replica running), a: 1
    # └── r001: n00 [bbbb] n01 [cccc]   b: 2, c: 2
    # A running service's scale-up to three replicas (``units`` 3, ``min_units`` 2: one more than it runs)
    # frees room for one replica: a alone, not b and c for two.
    "a-scale-up-preempts-for-one-replica": Case(
        cluster()
        .with_running("svc", on={(0, 0): 4}, spec=SVC, priority=10)
        .with_running("a", on={(0, 1): 4}, priority=1)
        .with_running("b", on={(1, 0): 4}, priority=2)
        .with_running("c", on={(1, 1): 4}, priority=2),
        [replace(SVC, units=3, min_units=2)],
        want_victims={"a"},
        want_placed={"svc": [0]},
    ),
    # region-0
    # └── r000: n00 [llmm] n01 [mmmm]   l: 1 (2 GPUs), m: 2 (6 GPUs)
    # 6 GPUs: m alone frees them; l is cheaper but preempting it as well gains nothing.
    "no-victim-whose-gpus-are-not-needed": Case(
        cluster(1)
        .with_running("l", on={(0, 0): 2}, priority=1)
        .with_running("m", on={(0, 0): 2, (0, 1): 4}, priority=2),
        [h(6)],
        want_victims={"m"},
        want_placed={"h": [0]},
    ),
}


@pytest.mark.parametrize("case", list(WHO_IS_PREEMPTED.values()), ids=list(WHO_IS_PREEMPTED))
def test_who_is_preempted(case: Case) -> None:
    check(case)


# ---------------------------------------------------------------------- lost work

# region-0
# ├── r000: n00 [aaaa] n01 [aaaa]   a: 1
# └── r001: n00 [bbbb] n01 [bbbb]   b: 1
# Both are equally cheap by priority; the one that loses less work since its last checkpoint goes.
LOST_WORK = {
    "a-checkpoints-more-often": (
        dict(checkpoint_interval_s=100),  # last checkpoint at 900: 50 s lost
        dict(checkpoint_interval_s=1000),  # never checkpointed yet: 950 s lost
        "a",
    ),
    "b-checkpoints-more-often": (dict(checkpoint_interval_s=1000), dict(checkpoint_interval_s=100), "b"),
    "a-started-later": (dict(started_at=900), dict(started_at=0), "a"),
    "b-started-later": (dict(started_at=0), dict(started_at=800), "b"),
    "a-checkpointed-recently": (dict(checkpointed_at=940), dict(checkpointed_at=100), "a"),
    "b-checkpointed-recently": (dict(checkpointed_at=10), dict(checkpointed_at=900), "b"),
    # extreme intervals a spec accepts (> 0, finite): a subnormal one overflowed elapsed / interval to inf
    "a-checkpoints-every-instant": (dict(checkpoint_interval_s=1e-320), dict(checkpoint_interval_s=100), "a"),
    "b-checkpoints-every-instant": (dict(checkpoint_interval_s=1000), dict(checkpoint_interval_s=5e-324), "b"),
    "a-never-checkpoints-by-1e308": (dict(checkpoint_interval_s=1e308), dict(checkpoint_interval_s=100), "b"),
}


@pytest.mark.parametrize(("a_kw", "b_kw", "victim"), list(LOST_WORK.values()), ids=list(LOST_WORK))
def test_the_victim_that_loses_less_work_is_preferred(a_kw: dict, b_kw: dict, victim: str) -> None:
    state_builder = (
        cluster()
        .with_running("a", gpus=8, rack=0, priority=1, **a_kw)
        .with_running("b", gpus=8, rack=1, priority=1, **b_kw)
    )
    check(Case(state_builder, [h(8)], now=950, want_victims={victim}, want_placed={"h": [0 if victim == "a" else 1]}))


def test_priority_outweighs_lost_work() -> None:
    # a: priority 1, 950 s of work to lose; b: priority 2, nothing to lose. The lower priority goes.
    check(
        Case(
            cluster()
            .with_running("a", gpus=8, rack=0, priority=1, started_at=0)
            .with_running("b", gpus=8, rack=1, priority=2, started_at=950),
            [h(8)],
            now=950,
            want_victims={"a"},
        )
    )


# ---------------------------------------------------------------------- who is never preempted

NEVER_PREEMPTED = {
    # r000: n00 [aaaa] n01 [aaaa]   a: 10 (equal)
    "equal-priority": Case(
        cluster(1).with_running("a", gpus=8, rack=0, priority=10),
        [h(4)],
        want_pending={"h"},
    ),
    "higher-priority": Case(
        cluster(1).with_running("a", gpus=8, rack=0, priority=11),
        [h(4)],
        want_pending={"h"},
    ),
    "not-preemptible": Case(
        cluster(1).with_running("a", gpus=8, rack=0, priority=1, preemptible=False),
        [h(4)],
        want_pending={"h"},
    ),
    "the-preemptor-has-policy-never": Case(
        cluster(1).with_running("a", gpus=8, rack=0, priority=1),
        [h(4, preemption_policy=PreemptionPolicy.NEVER)],
        want_pending={"h"},
    ),
    # r000: n00 [aaaa] n01 [HHHH]   a: 1, H: 100
    # 8 inside one rack: preempting a frees only 4.
    "it-would-not-let-the-preemptor-run": Case(
        cluster(1).with_running("a", on={(0, 0): 4}, priority=1).with_running("H", on={(0, 1): 4}, priority=100),
        [h(8, topology=RACK)],
        want_pending={"h"},
    ),
    # r000: n00 [aaHH] n01 [aaHH]   a: 1, H: 100
    # one 4-GPU worker needs a whole node; a frees 4 GPUs of the rack but 2 per node.
    "the-freed-gpus-do-not-fit-the-workers": Case(
        cluster(1)
        .with_running("a", on={(0, 0): 2, (0, 1): 2}, priority=1)
        .with_running("H", on={(0, 0): 2, (0, 1): 2}, priority=100),
        [h(4, gpus_per_worker=4)],
        want_pending={"h"},
    ),
    # r000: [aaaa][aaaa] (1)   r001: [bbbb][HHHH] (b: 1, H: 100)
    # 16 GPUs: the only two racks include one that holds a higher-priority job.
    "a-multi-rack-gang-does-not-clear-a-rack-with-a-protected-job": Case(
        cluster()
        .with_running("a", gpus=8, rack=0, priority=1)
        .with_running("b", on={(1, 0): 4}, priority=1)
        .with_running("H", on={(1, 1): 4}, priority=100),
        [h(16)],
        want_pending={"h"},
    ),
}


@pytest.mark.parametrize("case", list(NEVER_PREEMPTED.values()), ids=list(NEVER_PREEMPTED))
def test_never_preempted(case: Case) -> None:
    check(case)


def test_a_preemptor_that_placed_nothing_leaves_the_running_jobs_alone() -> None:
    state = (
        cluster(1).with_running("a", on={(0, 0): 4}, priority=1).with_running("H", on={(0, 1): 4}, priority=100).build()
    )
    d = run_cycle(state, [h(8, topology=RACK)])
    assert d.preemptions == () and placed_names(d) == []
    assert set(state.running) == {"a", "H"}


# ---------------------------------------------------------------------- preemption that is missed


def test_preemption_tries_the_next_rack_when_the_cheapest_frees_gpus_the_workers_cannot_use() -> None:
    # region-0
    # ├── r000: n00 [aaHH] n01 [aaHH]   a: 1 (one victim, but it frees 2 + 2: no whole node)
    # └── r001: n00 [ccdd] n01 [GGGG]   c, d: 1 (two victims, they free a whole node)   H, G: 100
    # "h" has one 4-GPU worker; preempting c and d lets it run.
    check(
        Case(
            cluster()
            .with_running("a", on={(0, 0): 2, (0, 1): 2}, priority=1)
            .with_running("H", on={(0, 0): 2, (0, 1): 2}, priority=100)
            .with_running("c", on={(1, 0): 2}, priority=1)
            .with_running("d", on={(1, 0): 2}, priority=1)
            .with_running("G", on={(1, 1): 4}, priority=100),
            [h(4, gpus_per_worker=4)],
            want_victims={"c", "d"},
            want_placed={"h": [1]},
        )
    )


def test_a_never_policy_job_does_not_stop_an_equal_job_from_preempting() -> None:
    # region-0
    # ├── r000: n00 [llll] n01 [llll]   l: 1
    # └── r001: n00 [KKKK] n01 [KKKK]   K: 100, ends at t=100
    # "a0" (8 in one rack, Never) holds r001 from t=100; "a1" (4, Never) cannot preempt and fails; "b"
    # (4, same shape and priority as a1, may preempt) must still preempt l and run in r000.
    check(
        Case(
            cluster()
            .with_running("l", gpus=8, rack=0, priority=1)
            .with_running("K", gpus=8, rack=1, priority=100, expected_end=100),
            [
                training("a0", 8, priority=10, topology=RACK, preemption_policy=PreemptionPolicy.NEVER),
                training("a1", 4, priority=10, preemption_policy=PreemptionPolicy.NEVER),
                training("b", 4, priority=10),
            ],
            want_victims={"l"},
            want_placed={"b": [0]},
            want_pending={"a0", "a1"},
        )
    )


def test_a_victim_still_running_on_a_failed_node_does_not_break_the_cycle() -> None:
    # region-0
    # └── r000: n00 [####] n01 [....]   "low" (priority 1) still holds n00, which just went down
    # "h" (8 GPUs) could only run by preempting "low", but n00 is down, so even that does not help:
    # the cycle must say so, not raise, and leave the state exactly as it was.
    state = cluster(1).with_running("low", on={(0, 0): 4}, priority=1).build()
    assert state.fail_node(node_index(state, 0, 0)) == {"low"}
    before = snapshot(state)
    d = ResourceScheduler().schedule(state, [h(8)], 0)
    assert snapshot(state) == before
    assert d.preemptions == () and d.pending_status("h") is not None
