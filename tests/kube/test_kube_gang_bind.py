"""A gang is bound whole or not at all, even when a bind fails halfway.

Against the fake API server (tests/kube/fake_apiserver.py: no real cluster is involved), with faults
injected at the HTTP boundary (tests/kube/faults.py). The cluster of every test here:

    region-a
    ├── rack clique-0:  r0-n0  r0-n1  r0-n2  r0-n3     8 GPUs each
    └── rack clique-1:  r1-n0  r1-n1  r1-n2  r1-n3     8 GPUs each

    gang "train": train-0 .. train-3, 8 GPUs each, min-member 4 -> one pod per node, all in one rack.
    The scheduler binds in name order; the faults hit the bind of train-2 (the 3rd) or the 4th.

No controller runs in the fake, so where a real cluster's Job would recreate the pods rackscale deleted,
the tests do it themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from tests.kube.conftest import add_racks, bound_to, events_for, pod, rack_of, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault, binding_path, pod_path

from rackscale.kube.scheduler import KubeScheduler

Start = Callable[..., KubeScheduler]
Obj = dict[str, Any]
KEYS = [f"default/train-{i}" for i in range(4)]


def add_gang(fake: FakeAPIServer, names: list[str] | None = None, *, min_member: int | None = 4) -> None:
    for key in names or KEYS:
        fake.put("pods", pod(key.split("/")[1], gpus=8, group="train", min_member=min_member))


def bound_by_us(fake: FakeAPIServer) -> list[str]:
    """Pods that still sit where one of our binds put them (the same pod, not one recreated since)."""
    out = []
    for key, node in fake.binds:
        p = fake.get("pods", key)
        if p is not None and p["spec"].get("nodeName") == node and key not in out:
            out.append(key)
    return out


def pod_scheduled(fake: FakeAPIServer, key: str) -> Obj | None:
    p = fake.get("pods", key)
    conds = [c for c in ((p or {}).get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"]
    return conds[0] if conds else None


def bind_elsewhere(name: str, node: str) -> Callable[[FakeAPIServer, Obj], None]:
    """Another scheduler binds the pod first (through the back door: it is not one of our binds)."""

    def run(fake: FakeAPIServer, body: Obj) -> None:
        p = fake.get("pods", f"default/{name}")
        assert p is not None
        p["spec"]["nodeName"] = node
        fake.put("pods", p)

    return run


def delete(name: str) -> Callable[[FakeAPIServer, Obj], None]:
    return lambda fake, body: fake.delete("pods", f"default/{name}")


def bind_then_lose_the_answer(name: str) -> Callable[[FakeAPIServer, Obj], None]:
    """The bind goes through; its answer never reaches us (the fault then answers 500 instead)."""

    def run(fake: FakeAPIServer, body: Obj) -> None:
        fake._bind("default", name, body)

    return run


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    fault: Callable[[], Fault]  # a fresh one per run: a fault counts its hits
    undone: tuple[str, ...]  # the pods our undo must delete
    says: str  # in the Warning every member gets
    gone: tuple[str, ...] = ()  # deleted by someone else: the "controller" recreates them with ours
    elsewhere: str | None = None  # train-2 ends bound there, by the other scheduler
    failing: str = "default/train-2"  # the pod whose bind fails


CASES = {
    "500-on-the-3rd-bind": Case(
        fault=lambda: Fault(
            method="POST", path=binding_path("train-2"), status=500, message="etcdserver: request timed out"
        ),
        undone=("default/train-0", "default/train-1"),
        says="500 InternalError: etcdserver: request timed out",
    ),
    "500-on-the-4th-bind-that-went-through": Case(
        fault=lambda: Fault(
            method="POST", path=binding_path("train-3"), status=500, before=bind_then_lose_the_answer("train-3")
        ),
        undone=("default/train-0", "default/train-1", "default/train-2", "default/train-3"),
        says="500 InternalError",
        failing="default/train-3",
    ),
    "409-bound-by-another-scheduler": Case(
        fault=lambda: Fault(method="POST", path=binding_path("train-2"), before=bind_elsewhere("train-2", "r1-n3")),
        undone=("default/train-0", "default/train-1"),
        says='409 Conflict: Operation cannot be fulfilled on pods/binding "train-2"',
        elsewhere="r1-n3",
    ),
    "404-deleted-mid-bind": Case(
        fault=lambda: Fault(method="POST", path=binding_path("train-2"), before=delete("train-2")),
        undone=("default/train-0", "default/train-1"),
        says='404 NotFound: pods "train-2" not found',
        gone=("default/train-2",),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_failed_bind_undoes_the_gang_then_binds_it_whole(
    fake: FakeAPIServer, start_scheduler: Start, case: Case
) -> None:
    add_racks(fake, racks=2, nodes=4)
    add_gang(fake)
    fault = case.fault()
    fake.inject(fault)
    s = start_scheduler()
    wait_for(lambda: s.stats.bind_errors >= 1 and bound_by_us(fake) == [], what="no pod left bound by us")

    # Nothing of the attempt stays: the pods it bound are deleted again (those, no other), none is assumed
    # or counted as bound, and there is no Scheduled event.
    assert fault.hits == 1
    assert sorted(fake.deletes) == sorted(case.undone)
    wait_for(lambda: s.stats.undone == len(case.undone), what="the books kept")
    assert s.stats.bind_errors == 1
    assert not set(s.assumed) & set(KEYS)
    assert s.stats.binds == 0 and s.stats.gang_rollbacks == 1 and s.stats.undo_errors == 0
    assert [e for e in fake.items("events") if e.get("reason") == "Scheduled"] == []
    assert bound_to(fake, "default/train-2") == case.elsewhere
    # Every member hears why: the ones we deleted, and the ones left pending.
    for key in KEYS:
        name = key.split("/")[1]
        reason = "GangBindUndone" if key in case.undone else "FailedScheduling"
        if key in case.gone or (case.elsewhere and name == "train-2"):
            continue
        wait_for(partial(events_for, fake, name, reason), what=f"a {reason} event on {name}")
        (ev,) = events_for(fake, name, reason)
        assert ev["type"] == "Warning" and case.says in ev["message"]
        assert ev["message"].startswith(f"gang group:default/train: binding {case.failing} to r")
    if "default/train-3" not in case.undone:  # left pending: its condition says the same (written next)
        cond = wait_for(partial(pod_scheduled, fake, "default/train-3"), what="train-3's PodScheduled")
        assert isinstance(cond, dict) and cond["status"] == "False" and case.says in cond["message"]

    # The pods left are not placed on their own: the gang waits for its members (min-member 4).
    cycles = s.stats.cycles
    wait_for(lambda: s.stats.cycles >= cycles + 2, what="two more cycles")
    assert len(fake.binds) == len(case.undone)

    # The owner recreates the deleted pods (new UIDs, same names); the gang is then bound whole, in one rack.
    add_gang(fake, [*case.undone, *case.gone])
    ours = [k for k in KEYS if not (case.elsewhere and k == "default/train-2")]
    wait_for(lambda: all(bound_to(fake, k) for k in ours), what="the gang bound")
    assert len({rack_of(fake, str(bound_to(fake, k))) for k in ours}) == 1
    assert len({bound_to(fake, k) for k in ours}) == len(ours)
    wait_for(lambda: s.stats.binds == len(ours), what="the binds counted")
    assert bound_to(fake, "default/train-2") == (case.elsewhere or bound_to(fake, "default/train-2"))
    assert s.stats.bind_errors == 1 and s.stats.gang_rollbacks == 1


def test_a_pod_replaced_before_the_first_bind_aborts_the_gang_untouched(
    fake: FakeAPIServer, start_scheduler: Start
) -> None:
    """Validation reads every pod back before the first bind: a changed gang costs no bind and no undo."""
    add_racks(fake, racks=2, nodes=4)
    add_gang(fake)

    def replace_train_3(f: FakeAPIServer, body: Obj) -> None:
        f.delete("pods", "default/train-3")  # its controller replaced it: same name, new UID
        f.put("pods", pod("train-3", gpus=8, group="train", min_member=4))

    fault = Fault(method="GET", path=pod_path("train-3"), before=replace_train_3)
    fake.inject(fault)
    s = start_scheduler()
    wait_for(lambda: s.stats.bind_aborts == 1, what="the aborted attempt")
    assert fault.hits == 1
    wait_for(lambda: all(bound_to(fake, k) for k in KEYS), what="the gang bound on the next cycle")
    assert len(fake.binds) == 4 and fake.deletes == []  # the aborted attempt bound nothing: nothing to undo
    assert len({rack_of(fake, str(bound_to(fake, k))) for k in KEYS}) == 1
    wait_for(lambda: s.stats.binds == 4, what="the binds counted")
    assert s.stats.bind_errors == 0 and s.stats.gang_rollbacks == 0


def test_an_undo_that_fails_is_retried_and_holds_the_gang(fake: FakeAPIServer, start_scheduler: Start) -> None:
    """A group without min-member is placed as the pods that exist; while a deletion of the undo keeps
    failing, the rest of the gang must still wait, or it would land apart from the pod left bound."""
    add_racks(fake, racks=2, nodes=4)
    add_gang(fake, min_member=None)
    delete_fails = Fault(method="DELETE", path=pod_path("train-0"), status=503, reason="ServiceUnavailable", times=3)
    fake.inject(Fault(method="POST", path=binding_path("train-2"), status=500), delete_fails)
    s = start_scheduler()
    wait_for(lambda: s.stats.undo_errors == 3, what="three failed deletions of train-0")
    wait_for(lambda: sorted(fake.deletes) == ["default/train-0", "default/train-1"], what="the undo done")
    # Now the two pods left are placed (this group asked for no minimum), together...
    wait_for(lambda: bound_to(fake, "default/train-2") and bound_to(fake, "default/train-3"), what="the rest")
    # ...and only after train-0 was gone: held until then, they were not placed while it sat bound.
    requests = list(fake.requests)
    deleted_at = max(i for i, (m, path) in enumerate(requests) if m == "DELETE" and path == pod_path("train-0"))
    rebinds = [i for i, (m, path) in enumerate(requests) if m == "POST" and path == binding_path("train-2")]
    assert len(rebinds) == 2 and rebinds[1] > deleted_at
    assert delete_fails.hits == 3
    assert rack_of(fake, str(bound_to(fake, "default/train-2"))) == rack_of(
        fake, str(bound_to(fake, "default/train-3"))
    )
    assert s.stats.gang_rollbacks == 1 and s.stats.undone == 2
    wait_for(lambda: s.stats.binds == 2, what="only the committed gang counted")
