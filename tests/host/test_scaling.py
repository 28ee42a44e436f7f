"""Cron times of a ScalingSchedule (croniter on aware datetimes) and the document that declares one.

Daylight saving time in Europe/Berlin, 2026: on 29 March the clocks jump 02:00 CET -> 03:00 CEST (02:xx does
not exist); on 25 October they go back 03:00 CEST -> 02:00 CET (02:xx happens twice). What croniter does,
asserted here and documented in docs/scheduled-scaling.md: a step in the gap fires at 03:00 CEST, the first
instant after it; a step in the repeated hour fires twice, once in each offset.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from rackscale.host.scaling import (
    ScalingSchedule,
    ScheduleStep,
    TargetKind,
    fires_between,
    last_fire,
    next_fire,
    schedule_to_doc,
)
from rackscale.host.scaling_docs import MAX_STEPS, parse_schedule
from rackscale.model.spec_errors import SpecError

BERLIN = ZoneInfo("Europe/Berlin")


def at(y: int, mo: int, d: int, h: int, mi: int = 0, *, fold: int = 0, tz: str = "Europe/Berlin") -> float:
    return datetime(y, mo, d, h, mi, fold=fold, tzinfo=ZoneInfo(tz)).timestamp()


def sched(*steps: tuple[str, float | None], tz: str = "Europe/Berlin") -> ScalingSchedule:
    return ScalingSchedule(
        name="s",
        time_zone=tz,
        target_kind=TargetKind.QUEUE,
        target="training",
        steps=tuple(ScheduleStep(cron=c, quota_gpus=q, set_quota=True) for c, q in steps),
    )


NIGHTS = sched(("0 2 * * *", 0.0), ("0 8 * * *", 288.0))


@pytest.mark.parametrize(
    ("schedule", "after", "want"),
    [
        (NIGHTS, at(2026, 1, 5, 1, 0), (at(2026, 1, 5, 2, 0), 0)),
        (NIGHTS, at(2026, 1, 5, 2, 0), (at(2026, 1, 5, 8, 0), 1)),  # strictly after: not the 02:00 itself
        (NIGHTS, at(2026, 1, 5, 2, 0) - 0.5, (at(2026, 1, 5, 2, 0), 0)),
        (NIGHTS, at(2026, 1, 5, 9, 0), (at(2026, 1, 6, 2, 0), 0)),
        # spring forward: 02:00 does not exist on 29 March; croniter fires at 03:00 CEST (01:00 UTC)
        (NIGHTS, at(2026, 3, 28, 12, 0), (at(2026, 3, 29, 1, 0, tz="UTC"), 0)),
        (sched(("30 2 * * *", 0.0)), at(2026, 3, 28, 12, 0), (at(2026, 3, 29, 3, 0), 0)),
        # fall back: 02:30 happens twice on 25 October, at 00:30 and 01:30 UTC; croniter fires at both
        (sched(("30 2 * * *", 0.0)), at(2026, 10, 24, 12, 0), (at(2026, 10, 25, 0, 30, tz="UTC"), 0)),
        (sched(("30 2 * * *", 0.0)), at(2026, 10, 25, 0, 30, tz="UTC"), (at(2026, 10, 25, 1, 30, tz="UTC"), 0)),
        (sched(("30 2 * * *", 0.0)), at(2026, 10, 25, 1, 30, tz="UTC"), (at(2026, 10, 26, 2, 30), 0)),
        # UTC is 1 h behind Berlin in winter: the same cron in UTC fires at 03:00 Berlin
        (sched(("0 2 * * *", 0.0), tz="UTC"), at(2026, 1, 5, 0, 0), (at(2026, 1, 5, 3, 0), 0)),
        # two steps at one instant: the first listed comes first
        (sched(("0 2 * * *", 0.0), ("0 2 * * *", 1.0)), at(2026, 1, 5, 1, 0), (at(2026, 1, 5, 2, 0), 0)),
    ],
    ids=[
        "before-02",
        "at-02-strict",
        "half-second-before",
        "after-08-next-day",
        "dst-gap-0200-at-0300",
        "dst-gap-0230-at-0300",
        "dst-repeat-first",
        "dst-repeat-second",
        "dst-repeat-then-next-day",
        "utc-zone",
        "tie-first-listed",
    ],
)
def test_next_fire(schedule: ScalingSchedule, after: float, want: tuple[float, int]) -> None:
    assert next_fire(schedule, after=after) == want


@pytest.mark.parametrize(
    ("schedule", "when", "want"),
    [
        (NIGHTS, at(2026, 1, 5, 3, 0), (at(2026, 1, 5, 2, 0), 0)),
        (NIGHTS, at(2026, 1, 5, 2, 0), (at(2026, 1, 5, 2, 0), 0)),  # at or before: the instant itself
        (NIGHTS, at(2026, 1, 5, 2, 0) - 1, (at(2026, 1, 4, 8, 0), 1)),
        (NIGHTS, at(2026, 1, 5, 23, 0), (at(2026, 1, 5, 8, 0), 1)),
        (NIGHTS, at(2026, 3, 29, 4, 0), (at(2026, 3, 29, 3, 0), 0)),  # the gap's step, at 03:00 CEST
        (sched(("0 2 * * *", 0.0), ("0 2 * * *", 1.0)), at(2026, 1, 5, 3, 0), (at(2026, 1, 5, 2, 0), 1)),
        (sched(("0 0 29 2 *", 0.0)), at(2026, 1, 5, 3, 0), (at(2024, 2, 29, 0, 0), 0)),  # leap day: 2 years back
    ],
    ids=["night", "at-the-instant", "second-before", "day", "dst-gap", "tie-last-listed-in-force", "leap-day"],
)
def test_last_fire(schedule: ScalingSchedule, when: float, want: tuple[float, int]) -> None:
    assert last_fire(schedule, at_or_before=when) == want


def test_fires_between_in_time_order_and_the_repeated_hour_twice() -> None:
    s = sched(("0 2 * * *", 0.0), ("30 2 * * *", 1.0))
    got = fires_between(s, after=at(2026, 10, 24, 12, 0), until=at(2026, 10, 25, 12, 0))
    utc = [at(2026, 10, 25, h, m, tz="UTC") for h, m in ((0, 0), (0, 30), (1, 0), (1, 30))]
    assert got == [(utc[0], 0), (utc[1], 1), (utc[2], 0), (utc[3], 1)]


def test_fires_between_a_long_gap_keeps_each_steps_last_fire() -> None:
    s = sched(("* * * * *", 0.0), ("0 8 * * *", 1.0))  # minutely: 10,080 fires in a week
    got = fires_between(s, after=at(2026, 1, 5, 0, 0), until=at(2026, 1, 12, 0, 0))
    assert got[-1] == (at(2026, 1, 12, 0, 0), 0)
    assert [t for t, i in got if i == 1] == [at(2026, 1, d, 8, 0) for d in range(5, 12)]
    assert len([1 for _, i in got if i == 0]) == 1


# ---------------------------------------------------------------------------------------------- documents
def doc(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "timeZone": "Europe/Berlin",
        "target": {"queue": "training"},
        "steps": [{"cron": "0 2 * * *", "quotaGpus": 0}, {"cron": "0 8 * * *", "quotaGpus": 288}],
    }
    return {
        "apiVersion": "rackscale.io/v1",
        "kind": "ScalingSchedule",
        "metadata": {"name": "training-nights"},
        "spec": {**base, **spec},
    }


@pytest.mark.parametrize(
    ("d", "kind", "target"),
    [
        (doc(), TargetKind.QUEUE, "training"),
        (doc(target={"service": "chat"}, steps=[{"cron": "@daily", "maxReplicas": 2}]), TargetKind.SERVICE, "chat"),
        (
            doc(target={"deployment": {"name": "trainer"}}, steps=[{"cron": "0 2 * * *", "replicas": 0}]),
            TargetKind.DEPLOYMENT,
            "default/trainer",
        ),
        (doc(steps=[{"cron": "0 2 * * *", "quotaGpus": None}]), TargetKind.QUEUE, "training"),
    ],
    ids=["queue", "service", "deployment-default-namespace", "quota-null-removes"],
)
def test_parse_and_round_trip(d: dict[str, object], kind: TargetKind, target: str) -> None:
    s = parse_schedule(d)
    assert (s.target_kind, s.target) == (kind, target)
    assert parse_schedule(schedule_to_doc(s)) == s


def test_quota_null_differs_from_unset() -> None:
    s = parse_schedule(doc(steps=[{"cron": "0 2 * * *", "quotaGpus": None}]))
    assert s.steps[0].set_quota and s.steps[0].quota_gpus is None
    assert s.time_zone == "Europe/Berlin"
    assert (
        parse_schedule(
            {**doc(), "spec": {"target": {"queue": "q"}, "steps": [{"cron": "0 2 * * *", "quotaGpus": 1}]}}
        ).time_zone
        == "UTC"
    )


HUGE = "x" * 1_000_000


@pytest.mark.parametrize(
    ("d", "where", "words"),
    [
        (doc(timeZone="Mars/Olympus"), "spec.timeZone", "IANA"),
        (doc(timeZone="../../etc/passwd"), "spec.timeZone", "IANA"),
        (doc(steps=[{"cron": "0 0 2 * * *", "quotaGpus": 1}]), "spec.steps[0].cron", "6 fields"),
        (doc(steps=[{"cron": "0 0 2 * * * 2026", "quotaGpus": 1}]), "spec.steps[0].cron", "7 fields"),
        (doc(steps=[{"cron": "61 2 * * *", "quotaGpus": 1}]), "spec.steps[0].cron", "croniter"),
        (doc(steps=[{"cron": "H 2 * * *", "quotaGpus": 1}]), "spec.steps[0].cron", "hashed"),
        (doc(steps=[{"cron": "0 0 30 2 *", "quotaGpus": 1}]), "spec.steps[0].cron", "never fires"),
        (doc(steps=[{"cron": HUGE, "quotaGpus": 1}]), "spec.steps[0].cron", "1000000 characters"),
        (doc(steps=[{"cron": "0 2 * * *", "replicas": 3}]), "spec.steps[0].replicas", "not a field of a queue"),
        (doc(steps=[{"cron": "0 2 * * *"}]), "spec.steps[0]", "sets nothing"),
        (doc(steps=[{"cron": "0 2 * * *", "quotaGpus": -1}]), "spec.steps[0].quotaGpus", ">= 0"),
        (doc(steps=[{"cron": "0 2 * * *", "quotaGpus": True}]), "spec.steps[0].quotaGpus", "a number"),
        (doc(steps=[{"cron": "0 2 * * *", "quotaGpus": float("nan")}]), "spec.steps[0].quotaGpus", "finite"),
        (doc(steps=[{"cron": "0 2 * * *", "quotaGpus": 1}] * 10_000), "spec.steps", f"at most {MAX_STEPS}"),
        (doc(steps=[]), "spec.steps", "at least 1"),
        (doc(target={"queue": "a", "service": "b"}), "spec.target", "one target"),
        (doc(target={}), "spec.target", "none"),
        (doc(target={"queue": "Bad Name"}), "spec.target.queue", "not a valid name"),
        (
            doc(target={"deployment": {"namespace": "A_b", "name": "t"}}),
            "spec.target.deployment.namespace",
            "Kubernetes",
        ),
        (
            doc(target={"service": "chat"}, steps=[{"cron": "0 2 * * *", "minReplicas": 3, "maxReplicas": 2}]),
            "spec.steps[0].maxReplicas",
            "below minReplicas",
        ),
        (doc(target={"service": "chat"}, steps=[{"cron": "0 2 * * *", "quotaGpus": 3}]), "quotaGpus", "service"),
        ({**doc(), "kind": "CronJob"}, "kind", "ScalingSchedule"),
        ({**doc(), "metadata": {"name": HUGE}}, "metadata.name", "characters"),
        (doc(**{HUGE: 1}), "spec.xxxxx", "unknown field"),
        (doc(steps=[{"cron": "0 2 * * *\0", "quotaGpus": 1}]), "spec.steps[0].cron", "NUL"),
        ([1, 2], "", "mapping"),
        ("a string", "", "mapping"),
        (None, "", "mapping"),
    ],
    ids=[
        "unknown-zone",
        "zone-path",
        "cron-6-fields",
        "cron-7-fields",
        "cron-out-of-range",
        "cron-hashed",
        "cron-never",
        "cron-huge",
        "field-of-another-target",
        "step-sets-nothing",
        "negative-quota",
        "bool-quota",
        "nan-quota",
        "10000-steps",
        "no-steps",
        "two-targets",
        "no-target",
        "bad-queue-name",
        "bad-namespace",
        "min-above-max",
        "quota-on-service",
        "wrong-kind",
        "huge-name",
        "huge-unknown-key",
        "nul-in-cron",
        "a-list",
        "a-string",
        "null",
    ],
)
def test_hostile_documents_name_the_field_and_the_fix(d: object, where: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_schedule(d, source="s.yaml")
    text = str(err.value)
    assert text.startswith("s.yaml: ") and where in text and words in text, text
    assert len(text) < 2000  # a huge value is shown by its first characters only
