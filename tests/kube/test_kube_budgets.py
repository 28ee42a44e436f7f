"""PodDisruptionBudgets when rackscale preempts (docs/kubernetes.md, "Preemption"): read as kube-scheduler's
DefaultPreemption reads them, a victim within its budget is preferred, a victim past it is taken only when no
other frees the room (and counted), a budget the API server will not serve leaves preemption as it was."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from tests.kube.conftest import FAST, add_racks, bound_to, events_for, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault

from rackscale.cli.kube_metrics import kube_registry
from rackscale.kube.budgets import BudgetBook, matches, parse_budget, parse_selector
from rackscale.kube.config import PDBS
from rackscale.kube.scheduler import KubeScheduler
from rackscale.kube.snapshot import Victim

Start = Callable[..., KubeScheduler]
Obj = dict[str, Any]

PDB_PATH = "/apis/policy/v1/poddisruptionbudgets"


def pdb(
    name: str, selector: Any = None, allowed: Any = 0, *, namespace: str = "default", no_status: bool = False, **st: Any
) -> Obj:
    """A PodDisruptionBudget as the API server serves it (``st``: more status fields). ``selector=...``
    (Ellipsis) leaves ``spec.selector`` out, ``allowed=...`` leaves ``status.disruptionsAllowed`` out."""
    spec: Obj = {"maxUnavailable": 1}
    if selector is not ...:
        spec["selector"] = selector
    if allowed is not ...:
        st["disruptionsAllowed"] = allowed
    out: Obj = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    if not no_status:
        out["status"] = st
    return out


APP_A = {"matchLabels": {"app": "a"}}

# ---------------------------------------------------------------------- the selector, as kube reads it


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        pytest.param(None, {"app": "a"}, False, id="null-selects-no-pod"),
        pytest.param({}, {}, True, id="empty-selects-every-pod-of-its-namespace-even-unlabelled"),
        pytest.param({}, {"app": "a"}, True, id="empty-selects-a-labelled-pod"),
        pytest.param(APP_A, {"app": "a", "x": "y"}, True, id="match-labels"),
        pytest.param(APP_A, {"app": "b"}, False, id="match-labels-another-value"),
        pytest.param(APP_A, {}, False, id="match-labels-no-labels"),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, {"app": "b"}, True, id="in"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
            {},
            True,
            id="not-in-matches-a-pod-without-the-label",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
            {"app": "a"},
            False,
            id="not-in",
        ),
        pytest.param({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True, id="exists"),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "a"}, False, id="does-not-exist"
        ),
        pytest.param(
            {"matchLabels": {"app": "a"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
            {"app": "a"},
            False,
            id="labels-and-expressions-must-all-hold",
        ),
    ],
)
def test_a_budgets_selector_as_kube_reads_it(selector: Any, labels: dict[str, str], want: bool) -> None:
    assert matches(parse_selector(selector), labels) is want


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["a"]}]}, id="unknown-operator"
        ),
        pytest.param({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}, id="in-without-values"),
        pytest.param({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]}, id="exists-values"),
        # (NotIn with a key no pod could have would select every pod, were it read)
        pytest.param({"matchExpressions": [{"key": "a b", "operator": "NotIn", "values": ["x"]}]}, id="a-bad-key"),
        pytest.param({"matchLabels": {"app": "a b"}}, id="a-value-no-label-could-have"),
        pytest.param({"matchLabels": {"app": 7}}, id="a-number-for-a-value"),
        pytest.param({"matchLabels": ["app", "a"]}, id="match-labels-a-list"),
        pytest.param({"matchExpressions": {"key": "app"}}, id="match-expressions-a-mapping"),
        pytest.param({"matchExpressions": ["app"]}, id="an-expression-a-string"),
        pytest.param("app=a", id="a-string"),
        pytest.param({"matchExpressions": [{"key": "app", "operator": "In", "values": "a"}]}, id="values-a-string"),
        pytest.param(..., id="a-spec-no-mapping"),
    ],
)
def test_a_selector_that_does_not_parse_selects_no_pod_and_says_why(selector: Any) -> None:
    budget = pdb("p", selector) if selector is not ... else {**pdb("p"), "spec": ["x"]}
    b, problem = parse_budget(budget)
    assert b is not None and b.selector is None and problem is not None and "selects no pod" in problem
    assert not matches(b.selector, {"app": "a"}) and not matches(b.selector, {})


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [
        pytest.param(pdb("p", APP_A, 0), 0, id="none"),
        pytest.param(pdb("p", APP_A, 3), 3, id="three"),
        pytest.param(pdb("p", APP_A, 2**31 - 1), 2**31 - 1, id="int32-max"),
        pytest.param(pdb("p", APP_A, -1), -1, id="negative-allows-none"),
        pytest.param(pdb("p", APP_A, ...), 0, id="no-field-reads-0-as-kube"),
        pytest.param(pdb("p", APP_A, None), 0, id="null-reads-0-as-kube"),
        pytest.param(pdb("p", APP_A, no_status=True), 0, id="no-status-reads-0-as-kube"),
        pytest.param(pdb("p", APP_A, 2**31), None, id="past-int32-no-budget"),
        pytest.param(pdb("p", APP_A, 10**400), None, id="400-digits-no-budget"),
        pytest.param(pdb("p", APP_A, "1"), None, id="a-string-no-budget"),
        pytest.param(pdb("p", APP_A, 1.0), None, id="a-float-no-budget"),
        pytest.param(pdb("p", APP_A, True), None, id="a-bool-no-budget"),
        pytest.param({**pdb("p", APP_A), "status": ["x"]}, None, id="a-status-no-mapping-no-budget"),
        pytest.param({"metadata": {"namespace": "default"}, "spec": {}}, None, id="no-name-no-budget"),
    ],
)
def test_disruptions_allowed_read_from_hostile_values(budget: Obj, allowed: int | None) -> None:
    b, problem = parse_budget(budget)
    if allowed is None:
        assert b is None and problem is not None
    else:
        assert b is not None and b.allowed == allowed and problem is None


def _victim(name: str, *, labels: dict[str, str], namespace: str = "default") -> Victim:
    p = pod(name, node_name="n", namespace=namespace)
    p["metadata"]["labels"] = labels
    return Victim(key=f"{namespace}/{name}", uid=name, node="n", pod=p)


def test_a_gangs_pods_are_counted_against_each_budget_that_selects_them(caplog: pytest.LogCaptureFixture) -> None:
    """Per gang, its pods each budget of their namespace selects, less those the budget lists as disrupted
    already; a budget of another namespace counts nothing; a bad budget is logged once, not at every cycle."""
    holders = {
        "g": (
            _victim("g-0", labels={"app": "a"}),
            _victim("g-1", labels={"app": "a"}),
            _victim("g-2", labels={"app": "a"}),
        ),
        "other": (_victim("o-0", labels={"app": "a"}, namespace="t"),),
    }
    pdbs = {
        "default/p": pdb("p", APP_A, 1, disruptedPods={"g-2": "2026-01-01T00:00:00Z"}),
        "default/q": pdb("q", {}, 5),
        "t/r": pdb("r", {"matchLabels": {"app": "b"}}, 0, namespace="t"),
        "default/bad": pdb("bad", APP_A, "x"),
    }
    book = BudgetBook()
    with caplog.at_level(logging.WARNING, logger="rackscale.kube"):
        got = book.budgets(pdbs, holders)
        assert got is not None
        assert dict(got.allowed) == {"default/p": 1, "default/q": 5, "t/r": 0}
        assert dict(got.units["g"]) == {"default/p": 2, "default/q": 3}
        assert dict(got.units["other"]) == {}
        book.changed()  # a watch event: parsed again, the same problem not logged again
        assert book.budgets(pdbs, holders) is not None
    assert [r.getMessage() for r in caplog.records].count(
        "PodDisruptionBudget default/bad: status.disruptionsAllowed='x' is no int32: not read as a budget "
        "(docs/kubernetes.md, Preemption)"
    ) == 1
    assert BudgetBook().budgets({}, holders) is None  # no budgets: the core gets none


@pytest.mark.parametrize(
    "name", [["g-0"], {"a": 1}, None, 7, "g\x00\ud800"], ids=["a-list", "a-map", "none", "a-number", "nul-surrogate"]
)
def test_a_pod_whose_name_is_no_string_is_counted_and_raises_nothing(name: object) -> None:
    """Hostile JSON (a real API server refuses it): a victim pod whose name is no string is counted against the
    budgets that select it, as a pod no budget lists as disrupted, never a TypeError in the middle of a cycle."""
    v = _victim("g-0", labels={"app": "a"})
    v.pod["metadata"]["name"] = name
    got = BudgetBook().budgets({"default/p": pdb("p", APP_A, 1, disruptedPods={"g-0": "x"})}, {"g": (v,)})
    assert got is not None and dict(got.units["g"]) == {"default/p": 1}


# ---------------------------------------------------------------------- through the fake API server


def _samples(s: KubeScheduler) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(x.name, frozenset(x.labels.items())): x.value for f in kube_registry(s).collect() for x in f.samples}


def _two_gangs(fake: FakeAPIServer, start: Start, **kw: Any) -> tuple[KubeScheduler, str, str]:
    """Two racks of two 8-GPU nodes; gangs "a" (namespace team-a) and "b" (team-b), 2 pods x 8 GPUs each,
    priority 10, started at the same time, each on a rack of its own, labelled app=a / app=b. Returns the
    scheduler, and the gangs by their racks: the first is the one on clique-0, which a preemption takes when
    nothing else tells them apart (the lower rack)."""
    add_racks(fake, racks=2, nodes=2)
    for g in ("a", "b"):
        for i in range(2):
            p = pod(f"{g}-{i}", group=g, min_member=2, priority=10, namespace=f"team-{g}")
            p["metadata"]["labels"] = {"app": g}
            p["status"]["startTime"] = "2026-01-01T00:00:00Z"
            fake.put("pods", p)
    s = start(**kw)
    wait_for(lambda: len(fake.binds) == 4, what="both gangs bound")
    first, second = ("a", "b") if (bound_to(fake, "team-a/a-0") or "").startswith("r0-") else ("b", "a")
    return s, first, second


def _budget_on(gang: str, allowed: Any = 0, **kw: Any) -> Obj:
    return pdb(f"pdb-{gang}", {"matchLabels": {"app": gang}}, allowed, namespace=f"team-{gang}", **kw)


# Each: the budgets, given the gang the lower rack holds ("first") and the other ("second"); the victim, and the
# disruptions past a budget that the preemption counts.
Budgets = Callable[[str, str], list[Obj]]
CASES = [
    pytest.param(lambda first, second: [], "first", 0, id="no-budget-the-lower-rack"),
    pytest.param(lambda first, second: [_budget_on(first, 0)], "second", 0, id="the-cheaper-gang-allows-none"),
    pytest.param(lambda first, second: [_budget_on(first, 1)], "second", 0, id="it-allows-one-of-its-two-pods"),
    pytest.param(lambda first, second: [_budget_on(first, 2)], "first", 0, id="it-allows-both-its-pods"),
    pytest.param(lambda first, second: [_budget_on(first, 0), _budget_on(second, 0)], "first", 2, id="both-allow-none"),
    pytest.param(
        lambda first, second: [pdb("all", {}, 0, namespace=f"team-{first}")],
        "second",
        0,
        id="an-empty-selector-takes-its-namespace",
    ),
    pytest.param(
        lambda first, second: [pdb("other-ns", {"matchLabels": {"app": first}}, 0, namespace="elsewhere")],
        "first",
        0,
        id="a-budget-of-another-namespace",
    ),
    pytest.param(
        lambda first, second: [
            pdb(
                "op",
                {"matchExpressions": [{"key": "app", "operator": "Near", "values": [first]}]},
                0,
                namespace=f"team-{first}",
            ),
            _budget_on(first, "0"),
            _budget_on(first, 10**400) | {"metadata": {"name": "huge", "namespace": f"team-{first}"}},
            {"metadata": {"name": "st", "namespace": f"team-{first}"}, "spec": "x", "status": 7},
        ],
        "first",
        0,
        id="hostile-budgets-are-no-budget",
    ),
    pytest.param(lambda first, second: [_budget_on(first, no_status=True)], "second", 0, id="no-status-allows-none"),
]


@pytest.mark.parametrize(("budgets", "victim", "past"), CASES)
def test_a_preemption_takes_the_gang_its_budgets_let_go(
    fake: FakeAPIServer, start_scheduler: Start, budgets: Budgets, victim: str, past: int
) -> None:
    """
    rack clique-0: r0-n0 [first-0 ........] r0-n1 [first-1 ........]   priority 10
    rack clique-1: r1-n0 [second-0 .......] r1-n1 [second-1 .......]   priority 10

    gang "high" (2 x 8 GPUs, priority 1000) needs a rack whole: which gang's pods are deleted.
    """
    s, first, second = _two_gangs(fake, start_scheduler)
    for b in budgets(first, second):
        fake.put("poddisruptionbudgets", b)
    wait_for(lambda: len(s.pdbs) == len(budgets(first, second)), what="the budgets in the cache")
    for i in range(2):
        fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000))
    wait_for(lambda: all(bound_to(fake, f"default/high-{i}") for i in range(2)), what="the high gang bound")
    gone = {"first": first, "second": second}[victim]
    assert sorted(fake.deletes) == [f"team-{gone}/{gone}-0", f"team-{gone}/{gone}-1"]
    assert s.stats.preemptions == 1 and s.stats.pdb_violations == past and s.stats.cycle_errors == 0
    assert _samples(s)[("rackscale_kube_pdb_violations_total", frozenset())] == past
    told = events_for(fake, f"{gone}-0", "Preempted")
    assert told and ("PodDisruptionBudget allowed no more" in told[0]["message"]) is bool(past)


def _refused_gauge(s: KubeScheduler) -> float:
    (got,) = [
        x.value
        for f in kube_registry(s).collect()
        for x in f.samples
        if x.name == "rackscale_kube_cache_refused" and x.labels == {"kind": PDBS}
    ]
    return got


def test_without_rbac_for_budgets_it_preempts_as_before_says_so_once_and_reads_them_once_granted(
    fake: FakeAPIServer, start_scheduler: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """A 403 on the PodDisruptionBudgets list (no RBAC for them): one warning however often the list is asked
    again, the scheduler is ready, and a preemption is made as without budgets, even where a budget would have
    spared the cheaper gang. Once the RBAC is granted, the next list reads them, without a restart."""
    refused = Fault(method="GET", path=PDB_PATH, status=403, reason="Forbidden", message="no RBAC", times=10**6)
    fake.inject(refused)
    fake.put("poddisruptionbudgets", _budget_on("a", 0))
    fake.put("poddisruptionbudgets", _budget_on("b", 0))
    with caplog.at_level(logging.INFO, logger="rackscale.kube"):
        s, first, _ = _two_gangs(fake, start_scheduler, config=dataclasses.replace(FAST, unreadable_retry_s=0.1))
        assert s.synced[PDBS] and s.pdbs == {}
        assert _refused_gauge(s) == 1.0  # synced, yet no budget is honoured: the gauge says so
        for i in range(2):
            fake.put("pods", pod(f"high-{i}", group="high", min_member=2, priority=1000))
        wait_for(lambda: all(bound_to(fake, f"default/high-{i}") for i in range(2)), what="the high gang bound")
        assert sorted(fake.deletes) == [f"team-{first}/{first}-0", f"team-{first}/{first}-1"]
        assert s.stats.pdb_violations == 0  # (not known: none counted)
        wait_for(lambda: refused.hits >= 3, what="the list asked again")
        refused.times = refused.hits  # the RBAC granted
        wait_for(lambda: len(s.pdbs) == 2, what="the budgets read")
        assert _refused_gauge(s) == 0.0
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if m.startswith(f"{PDBS}: 403 Forbidden: no RBAC; read as none")]) == 1, said
    assert f"{PDBS}: readable now" in said


def test_with_no_preemption_budgets_are_not_read(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """--no-preemption: no PodDisruptionBudgets watch (no RBAC needed), nor a cache to wait for."""
    add_racks(fake, racks=1, nodes=1)
    fake.put("pods", pod("x-0"))
    s = start_scheduler(dataclasses.replace(FAST, preemption=False))
    wait_for(lambda: bound_to(fake, "default/x-0"), what="bound")
    assert PDBS not in s.synced and PDBS not in s.watchers
    assert not any(PDB_PATH in path for _, path in fake.requests)


@pytest.mark.parametrize(("allowed", "moved"), [(1, 1), (0, 0)], ids=["within-its-budget-moved", "past-it-not-moved"])
def test_consolidation_moves_no_pod_past_its_budget(
    fake: FakeAPIServer, start_scheduler: Start, allowed: int, moved: int
) -> None:
    """--policy rackscale-consolidate (test_kube_preemption.py's case): two Job-owned 8-GPU pods, one per rack,
    and "llm" (2 x 8 GPUs, one rack required). A budget over the small pods that allows one disruption lets one
    move; one that allows none keeps both, and llm waits (a move is never needed: it may wait)."""
    fake.graceful_deletes = True
    add_racks(fake, racks=2, nodes=2)
    fake.put("poddisruptionbudgets", pdb("small", {"matchLabels": {"app": "small"}}, allowed))
    s = start_scheduler(dataclasses.replace(FAST, policy="rackscale-consolidate"))
    for name, node in (("a-0", "r0-n0"), ("b-0", "r1-n0")):
        p = pod(name, node_name=node)
        p["metadata"]["labels"] = {"app": "small"}
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True}]
        fake.put("pods", p)
    wait_for(lambda: all(s.synced.values()) and len(s.pdbs) == 1, what="synced")
    for i in range(2):
        p = pod(f"llm-{i}", group="llm", min_member=2)
        p["metadata"]["annotations"]["rackscale.io/topology"] = "rack"
        fake.put("pods", p)
    if moved:
        wait_for(lambda: fake.deletes, what="a small pod moved")
    else:
        wait_for(lambda: events_for(fake, "llm-0", "FailedScheduling"), what="llm told why it waits")
        at = s.stats.cycles
        wait_for(lambda: s.stats.cycles >= at + 3, what="3 more cycles")
    assert len(fake.deletes) == moved and s.stats.pdb_violations == 0
