"""The cycle's structure: named actions in KAI-Scheduler's order, and the shape cache's key."""

from __future__ import annotations

import pytest

from rackscale.model import training
from rackscale.scheduler import Profile, ResourceScheduler
from rackscale.scheduler.cycle import Attempt, JobShape


def test_the_actions_run_least_disruptive_first() -> None:
    assert [a.name for a in ResourceScheduler().actions] == [
        "allocate",
        "backfill",
        "lend",
        "reclaim",
        "shrink",
        "preempt",
    ]
    assert [a.name for a in ResourceScheduler(profile="rackscale-consolidate").actions][-1] == "consolidate"
    assert [a.name for a in ResourceScheduler(profile="first-fit").actions] == ["allocate", "backfill", "preempt"]


def test_a_profile_without_victims_has_no_preempt_action() -> None:
    sched = ResourceScheduler(profile=Profile(name="no-preemption", victims=""))
    assert [a.name for a in sched.actions] == ["allocate", "backfill"]


def test_jobs_that_differ_only_in_size_and_name_share_a_shape() -> None:
    a = Attempt(training("a", 8), frozenset(), False, True)
    b = Attempt(training("b", 16, submit_time=5.0), frozenset(), False, True)
    assert a.shape == b.shape and hash(a.shape) == hash(b.shape)
    fenced = Attempt(training("c", 8), frozenset({1}), True, True)
    no_split = Attempt(training("d", 8), frozenset(), False, False)
    higher = Attempt(training("e", 8, priority=5), frozenset(), False, True)
    assert len({a.shape, fenced.shape, no_split.shape, higher.shape}) == 4


def test_a_shape_is_immutable_and_named() -> None:
    shape = Attempt(training("a", 8), frozenset(), True, True).shape
    with pytest.raises(AttributeError):
        shape.fenced = False  # type: ignore[misc]
    assert isinstance(shape, JobShape) and shape.fenced and shape.may_split and shape.may_preempt
