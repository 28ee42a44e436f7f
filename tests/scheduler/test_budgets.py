"""Disruption budgets (``rackscale.scheduler.budgets``), table-driven: which victims a preemption takes when
some running jobs' units count against budgets, and that without budgets nothing changes.

Every cluster is 2 nodes x 4 GPUs per rack, as in test_preemption.py. A budget is written ``p: allows N``
and a job in it ``a (p: 1 unit)``. Each case also says whom the cycle takes without budgets: the budgets must
be what changes the answer.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import pytest
from builders import ClusterBuilder, racks_of, snapshot
from hypothesis import HealthCheck, Phase, given, settings
from test_properties import World, check_decisions, worlds

from rackscale.model import JobSpec, Level, TopologyConstraint, training
from rackscale.model.state import ClusterState
from rackscale.scheduler import Decisions, DisruptionBudgets, PreemptionCause, ResourceScheduler, apply_decisions

# cheapest-victims, and las-victims (which extends it: the default profile's chooser)
CHOOSERS = ["rackscale-fairshare", "rackscale"]


def cluster(racks: int = 2) -> ClusterBuilder:
    return ClusterBuilder().racks(racks).nodes_per_rack(2).gpus_per_node(4)


def h(gpus: int, name: str = "h", **kw: object) -> JobSpec:
    kw.setdefault("priority", 10)
    return training(name, gpus, **kw)


def budgets(allowed: Mapping[str, int], units: Mapping[str, Mapping[str, int]]) -> DisruptionBudgets:
    return DisruptionBudgets(allowed=allowed, units=units)


@dataclass
class Case:
    cluster: ClusterBuilder
    jobs: list[JobSpec]
    budgets: DisruptionBudgets
    want_victims: set[str]  # with the budgets
    without: set[str]  # with none: the budgets must change the answer
    want_racks: dict[str, list[int]] = field(default_factory=dict)  # preemptor -> racks it is placed on
    want_over: dict[str, int] = field(default_factory=dict)  # victim -> disruptions past a budget (else 0)
    now: float = 0.0


def schedule(
    state: ClusterState, jobs: list[JobSpec], profile: str, b: DisruptionBudgets | None, now: float
) -> Decisions:
    before = snapshot(state)
    d = ResourceScheduler(profile=profile).schedule(state, jobs, now, budgets=b)
    assert snapshot(state) == before, "schedule() changed the state"
    return d


CASES = {
    # region-0
    # ├── r000: n00 [aaaa] n01 [bbbb]   a: 1 (p: 1 unit), b: 2      p: allows 0
    # └── r001: n00 [HHHH] n01 [HHHH]   H: 100
    # a is cheaper, but stopping it goes past its budget; b's does not.
    "a-victim-within-budgets-before-a-cheaper-one-past-them": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=2)
        .with_running("H", gpus=8, rack=1, priority=100),
        [h(4)],
        budgets({"p": 0}, {"a": {"p": 1}}),
        want_victims={"b"},
        without={"a"},
        want_racks={"h": [0]},
    ),
    # The same, and b in an exhausted budget too: a preemption still happens (kube-scheduler's, too, when only
    # victims past their budgets would do), the cheapest, and it is counted as past its budget.
    "only-victims-past-their-budgets-still-preempted-and-counted": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=2)
        .with_running("H", gpus=8, rack=1, priority=100),
        [h(4)],
        budgets({"p": 0, "q": 0}, {"a": {"p": 1}, "b": {"q": 1}}),
        want_victims={"a"},
        without={"a"},
        want_racks={"h": [0]},
        want_over={"a": 1},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [aaaa]   a: 1 (p: 2 units)             p: allows 0
    # └── r001: n00 [bbbb] n01 [cccc]   b, c: 1
    # 8 GPUs: one victim in r000, two in r001; the fewest disruptions past a budget rank first.
    "the-rack-with-the-fewest-disruptions-past-budgets-first": Case(
        cluster()
        .with_running("a", gpus=8, rack=0, priority=1)
        .with_running("b", on={(1, 0): 4}, priority=1)
        .with_running("c", on={(1, 1): 4}, priority=1),
        [h(8)],
        budgets({"p": 0}, {"a": {"p": 2}}),
        want_victims={"b", "c"},
        without={"a"},
        want_racks={"h": [1]},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [bbbb]   a, b: 1 (p: 1 unit each)      p: allows 1
    # └── r001: n00 [cccc] n01 [dddd]   c, d: 2
    # Both of r000's jobs would go one past p; r001's go past nothing, though of higher priority.
    "a-budget-that-allows-one-of-two": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=1)
        .with_running("c", on={(1, 0): 4}, priority=2)
        .with_running("d", on={(1, 1): 4}, priority=2),
        [h(8)],
        budgets({"p": 1}, {"a": {"p": 1}, "b": {"p": 1}}),
        want_victims={"c", "d"},
        without={"a", "b"},
        want_racks={"h": [1]},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [aaaa]   a: 1, a gang of 2 units (p: 2 units)    p: allows 1
    # └── r001: n00 [HHHH] n01 [HHHH]   H: 100
    # Only a frees the room: stopped, one unit past p.
    "each-unit-past-a-budget-counts": Case(
        cluster().with_running("a", gpus=8, rack=0, priority=1).with_running("H", gpus=8, rack=1, priority=100),
        [h(8)],
        budgets({"p": 1}, {"a": {"p": 2}}),
        want_victims={"a"},
        without={"a"},
        want_over={"a": 1},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [bbbb]   a, b: 1 (p: 1 unit each)      p: allows 1
    # └── r001: n00 [cccc] n01 [HHHH]   c: 3, H: 100
    # h1 takes a (within p); p is then spent, so h2 takes c rather than b, which is cheaper.
    "a-cycle-spends-the-budget-its-stops-use": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("b", on={(0, 1): 4}, priority=1)
        .with_running("c", on={(1, 0): 4}, priority=3)
        .with_running("H", on={(1, 1): 4}, priority=100),
        [h(4, "h1"), h(4, "h2", submit_time=1.0)],
        budgets({"p": 1}, {"a": {"p": 1}, "b": {"p": 1}}),
        want_victims={"a", "c"},
        without={"a", "b"},
        want_racks={"h1": [0], "h2": [1]},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [HHHH]   a: 1 (p: 1 unit)   p: allows -3 (hostile input: read as none)
    # └── r001: n00 [bbbb] n01 [GGGG]   b: 2 (q: 1 unit)   q: allows 0
    # Either stop goes one past its budget: the cheaper, a, counted once (not 4 times).
    "a-negative-allowance-allows-none": Case(
        cluster()
        .with_running("a", on={(0, 0): 4}, priority=1)
        .with_running("H", on={(0, 1): 4}, priority=100)
        .with_running("b", on={(1, 0): 4}, priority=2)
        .with_running("G", on={(1, 1): 4}, priority=100),
        [h(4)],
        budgets({"p": -3, "q": 0}, {"a": {"p": 1}, "b": {"q": 1}}),
        want_victims={"a"},
        without={"a"},
        want_over={"a": 1},
    ),
    # region-0
    # ├── r000: n00 [aaaa] n01 [aaaa]   a: 1                      p: allows 0
    # ├── r001: n00 [bbbb] n01 [....]   b: 1 (p: 1 unit)
    # └── r002: n00 [cccc] n01 [cccc]   c: 1
    # 16 GPUs, more than a rack: the racks whose jobs go the least past a budget are cleared.
    "a-gang-larger-than-a-rack-clears-the-racks-least-past-budgets": Case(
        cluster(3)
        .with_running("a", gpus=8, rack=0, priority=1)
        .with_running("b", gpus=4, rack=1, priority=1)
        .with_running("c", gpus=8, rack=2, priority=1),
        [h(16)],
        budgets({"p": 0}, {"b": {"p": 1}}),
        want_victims={"a", "c"},
        without={"a", "b"},
        want_racks={"h": [0, 2]},
        now=100,
    ),
}


@pytest.mark.parametrize("profile", CHOOSERS)
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_who_is_preempted_with_budgets(case: Case, profile: str) -> None:
    state = case.cluster.build()
    plain = schedule(state, case.jobs, profile, None, case.now)
    assert {p.victim for p in plain.preemptions} == case.without, "the case must differ from no budgets only there"
    d = schedule(state, case.jobs, profile, case.budgets, case.now)
    assert {p.victim for p in d.preemptions} == case.want_victims
    assert {p.victim: p.over_budget for p in d.preemptions} == {v: case.want_over.get(v, 0) for v in case.want_victims}
    assert all(p.cause is PreemptionCause.PRIORITY for p in d.preemptions)
    apply_decisions(state, d, now=case.now)
    for name, racks in case.want_racks.items():
        assert racks_of(state, state.running[name].placement) == racks, name


def test_a_budget_the_caller_gave_no_allowance_binds_nothing() -> None:
    """A job counted against a budget missing from ``allowed``: as if it were in none."""
    state = CASES["a-victim-within-budgets-before-a-cheaper-one-past-them"].cluster.build()
    d = schedule(state, [h(4)], "rackscale", budgets({}, {"a": {"p": 1}}), 0.0)
    assert [(p.victim, p.over_budget) for p in d.preemptions] == [("a", 0)]


# ---------------------------------------------------------------------- consolidation

CONSOLIDATE = "rackscale-consolidate"


def fragmented() -> ClusterState:
    """test_consolidate.py's cluster: s0 (8 GPUs, r000), s1 (4, r001), s2 (16, r002), r003 full; the gang
    "llm" (72 GPUs in workers of 4, one rack required) gets r001 by moving s1 without budgets."""
    b = ClusterBuilder().racks(4).nodes_per_rack(18).gpus_per_node(4)
    for name, gpus, rack in (("s0", 8, 0), ("s1", 4, 1), ("s2", 16, 2)):
        b = b.with_running(name, gpus=gpus, rack=rack, expected_end=10_000.0)
    return b.with_running("full", gpus=72, rack=3, expected_end=20_000.0).build()


def llm() -> JobSpec:
    return training("llm", 72, gpus_per_worker=4, submit_time=0.0, topology=TopologyConstraint(required=Level.RACK))


@pytest.mark.parametrize(
    ("b", "movers"),
    [
        pytest.param(None, {"s1"}, id="no-budgets-the-cheapest-rack"),
        pytest.param(budgets({"p": 1}, {"s1": {"p": 1}}), {"s1"}, id="within-its-budget-moved"),
        pytest.param(budgets({"p": 0}, {"s1": {"p": 1}}), {"s0"}, id="past-its-budget-the-next-rack"),
        pytest.param(
            budgets({"p": 0}, {"s0": {"p": 1}, "s1": {"p": 1}, "s2": {"p": 1}}), set(), id="every-move-past-no-move"
        ),
    ],
)
def test_consolidation_moves_only_within_budgets(b: DisruptionBudgets | None, movers: set[str]) -> None:
    state = fragmented()
    d = schedule(state, [llm()], CONSOLIDATE, b, 300.0)
    assert {p.victim for p in d.preemptions} == movers
    assert all(p.cause is PreemptionCause.CONSOLIDATION and p.over_budget == 0 for p in d.preemptions)
    assert ("llm" in {p.spec.name for p in d.placed}) == bool(movers)


# ---------------------------------------------------------------------- without budgets: nothing changes

PROFILES = ["rackscale", "rackscale-fairshare", "rackscale-consolidate", "tiresias", "first-fit"]


def _never_binding(state: ClusterState) -> DisruptionBudgets:
    """Every running job in one budget that allows more than any cycle stops; every other one also in a budget
    of its own that allows exactly its units (a stop of it reaches the budget's edge, and goes no further)."""
    units: dict[str, dict[str, int]] = {}
    allowed = {"all": 10**9}
    for i, (name, rj) in enumerate(sorted(state.running.items())):
        units[name] = {"all": rj.placement.units}
        if i % 2 == 0:
            units[name][f"own:{name}"] = rj.placement.units
            allowed[f"own:{name}"] = rj.placement.units
    return budgets(allowed, units)


# Random worlds as test_properties.py draws them, 60 per test, derandomised (the same examples every run).
WORLDS = given(world=worlds())
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
)


def _advance(
    state: ClusterState, d: Decisions, pending: dict[str, JobSpec], ending: Collection[int], now: float
) -> None:
    """Apply a cycle's decisions, requeue its victims, and end the running jobs at the positions ``ending``
    (as test_properties.py's worlds do)."""
    victims = {p.victim: state.running[p.victim].spec for p in d.preemptions}
    apply_decisions(state, d, now=now)
    for p in d.placed:
        if state.running[p.spec.name].placement.units >= p.spec.units:
            pending.pop(p.spec.name, None)
    pending.update(victims)
    for i, name in enumerate(sorted(state.running)):
        if i in ending:
            state.release(name)
            pending.pop(name, None)


@pytest.mark.parametrize("profile", PROFILES)
@SETTINGS
@WORLDS
def test_budgets_that_never_bind_change_no_decision(profile: str, world: World) -> None:
    """Over random clusters and cycles (test_properties.py's worlds): no budgets, budgets for nobody, and
    budgets that allow every stop give the same decisions, field for field, and none is past a budget."""
    state = world.builder.build()
    pending: dict[str, JobSpec] = {}
    now = 0.0
    for cycle in world.cycles:
        for j in cycle.jobs:
            pending[j.name] = j
        jobs = list(pending.values())
        # Each on a copy of the state as it stands: a second schedule() over one state may break a placer's tie
        # otherwise than the first did (seen with first-fit: another node of equal score), budgets or not.
        runs = [
            ResourceScheduler(profile=profile, queues=world.queues, seed=7).schedule(
                copy.deepcopy(state), jobs, now, budgets=b
            )
            for b in (None, budgets({}, {}), _never_binding(state))
        ]
        assert runs[1] == runs[0] and runs[2] == runs[0]
        d = runs[0]
        check_decisions(state, d, jobs)
        assert all(p.over_budget == 0 for p in d.preemptions)
        _advance(state, d, pending, cycle.end, now)
        now += 10.0


@pytest.mark.parametrize("profile", ["rackscale", "rackscale-consolidate"])
@SETTINGS
@WORLDS
def test_tight_budgets_keep_every_decision_legal_and_count_what_goes_past(profile: str, world: World) -> None:
    """Budgets that allow nothing, for every running job: the decisions stay legal, each victim counts all its
    units past its budget, and consolidation moves no one."""
    state = world.builder.build()
    pending: dict[str, JobSpec] = {}
    now = 0.0
    for cycle in world.cycles:
        for j in cycle.jobs:
            pending[j.name] = j
        jobs = list(pending.values())
        tight = budgets(
            {f"own:{n}": 0 for n in state.running},
            {n: {f"own:{n}": rj.placement.units} for n, rj in state.running.items()},
        )
        before = snapshot(state)
        d = ResourceScheduler(profile=profile, queues=world.queues, seed=7).schedule(state, jobs, now, budgets=tight)
        assert snapshot(state) == before, "schedule() changed the state"
        check_decisions(state, d, jobs)
        for p in d.preemptions:
            if p.cause is PreemptionCause.CONSOLIDATION:
                raise AssertionError(f"{p.victim} moved past its budget")
            assert p.over_budget == state.running[p.victim].placement.units
        _advance(state, d, pending, cycle.end, now)
        now += 10.0
