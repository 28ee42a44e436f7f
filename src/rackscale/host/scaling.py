"""Scheduled scaling: a :class:`ScalingSchedule` changes one target's capacity at cron times in a time zone.

A target is a queue's GPU quota (the scheduler's ``QueueConfig.quota_gpus``), an inference service's
replica bounds (its ``JobSpec.min_units``/``max_units``) or a Kubernetes Deployment's replicas (set by the
caller: the host has no Deployments). Each step sets an absolute value, so firing a step twice (the
repeated hour when daylight saving time ends) leaves the same result as firing it once.

The times come from croniter (https://github.com/kiorky/croniter) on aware datetimes in the schedule's
zone (zoneinfo): a step whose wall time does not exist (02:30 on the day clocks spring forward) fires at
the first instant after the gap (03:00 local), and a step in the hour that repeats when they fall back
fires in both of its occurrences (docs/scheduled-scaling.md, "Daylight saving time"; the tests assert both).

Pure of clocks: every function takes the instant it asks about (epoch seconds), so the service's wall
clock and the simulator's virtual one (``start_epoch + t``) share it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from croniter import croniter


class TargetKind(StrEnum):
    QUEUE = "queue"
    SERVICE = "service"
    DEPLOYMENT = "deployment"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleStep:
    """One cron time and what it sets. For a queue, ``set_quota`` says the step sets the quota, and
    ``quota_gpus`` None then *removes* it (``quotaGpus: null``): a plain None could not tell that from a
    step that leaves the quota alone. For a service, None leaves that bound as it is."""

    cron: str
    quota_gpus: float | None = None
    set_quota: bool = False
    min_replicas: int | None = None
    max_replicas: int | None = None
    replicas: int | None = None

    def describe(self) -> str:
        """What the step sets, e.g. ``GPU quota 288`` or ``replicas 1-4`` (for events and views)."""
        if self.set_quota:
            return "no GPU quota" if self.quota_gpus is None else f"GPU quota {self.quota_gpus:g}"
        if self.replicas is not None:
            return f"replicas {self.replicas}"
        parts = []
        if self.min_replicas is not None:
            parts.append(f"minReplicas {self.min_replicas}")
        if self.max_replicas is not None:
            parts.append(f"maxReplicas {self.max_replicas}")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingSchedule:
    """``target``: the queue's name, the service's (job) name, or ``namespace/name`` of a Deployment."""

    name: str
    time_zone: str
    target_kind: TargetKind
    target: str
    steps: tuple[ScheduleStep, ...]

    @property
    def label(self) -> str:
        """``queue training``, ``deployment default/trainer``: how events name the target."""
        return f"{self.target_kind.value} {self.target}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleFired:
    """A step whose time came. ``summary`` says what it changed, e.g. ``queue training: GPU quota 288 -> 0``;
    ``replicas``: for a Deployment target, what to set (the caller sets it)."""

    schedule: str
    step: int
    at: float
    target_kind: TargetKind
    target: str
    summary: str
    replicas: int | None = None


@functools.lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The zone (cached: ZoneInfo reads the tz database; a schedule's zone is validated before)."""
    return ZoneInfo(name)


def _start(epoch: float, tz: str) -> datetime:
    # Cron times fall on whole minutes: from the whole second at or before ``epoch``, croniter's strict
    # next (> start) and prev (< start) give the same answers as from ``epoch`` itself (see the callers).
    return datetime.fromtimestamp(math.floor(epoch), zone(tz))


def step_next(cron: str, tz: str, *, after: float) -> float:
    """The first time of ``cron`` in ``tz`` strictly after ``after`` (epoch seconds)."""
    return float(croniter(cron, _start(after, tz)).get_next(float))


def step_prev(cron: str, tz: str, *, at_or_before: float) -> float:
    """The last time of ``cron`` in ``tz`` at or before ``at_or_before`` (epoch seconds)."""
    # prev is strictly before its start: start one second after the whole second at or before the instant.
    return float(croniter(cron, _start(math.floor(at_or_before) + 1, tz)).get_prev(float))


def next_fire(schedule: ScalingSchedule, *, after: float) -> tuple[float, int]:
    """``(epoch seconds, step index)`` of the schedule's next fire strictly after ``after``; of steps that
    fire at the same instant, the first (they fire in index order, so the last listed is the one in force)."""
    times = [(step_next(s.cron, schedule.time_zone, after=after), i) for i, s in enumerate(schedule.steps)]
    return min(times)


def last_fire(schedule: ScalingSchedule, *, at_or_before: float) -> tuple[float, int] | None:
    """``(epoch seconds, step index)`` of the step in force at ``at_or_before``: the latest fire at or before
    it (of steps that fired at the same instant, the last listed). None: no step has ever fired (croniter
    looks back a bounded number of years; a step that never fired there counts as never)."""
    best: tuple[float, int] | None = None
    for i, s in enumerate(schedule.steps):
        try:
            at = step_prev(s.cron, schedule.time_zone, at_or_before=at_or_before)
        except (ValueError, ArithmeticError):  # croniter's "no such date" errors derive from ValueError
            continue
        if best is None or (at, i) > best:
            best = (at, i)
    return best


def fires_between(schedule: ScalingSchedule, *, after: float, until: float) -> list[tuple[float, int]]:
    """Every ``(time, step)`` with ``after < time <= until``, in time order (then step order). A step with
    more than :data:`MAX_FIRES` fires in the span (a minutely step, and the caller's clock jumped) gives
    only its last: each step sets an absolute value, so the earlier ones would be overwritten anyway."""
    out: list[tuple[float, int]] = []
    for i, s in enumerate(schedule.steps):
        it = croniter(s.cron, _start(after, schedule.time_zone))
        mine: list[tuple[float, int]] = []
        while (at := float(it.get_next(float))) <= until:
            if len(mine) == MAX_FIRES:
                mine = [(step_prev(s.cron, schedule.time_zone, at_or_before=until), i)]
                break
            mine.append((at, i))
        out.extend(mine)
    out.sort()
    return out


MAX_FIRES = 1000


def schedule_to_doc(s: ScalingSchedule) -> dict[str, object]:
    """The document :func:`rackscale.host.scaling_docs.parse_schedule` reads back into ``s`` (the API and
    the store keep this)."""
    target: dict[str, object]
    if s.target_kind is TargetKind.DEPLOYMENT:
        namespace, _, name = s.target.partition("/")
        target = {"deployment": {"namespace": namespace, "name": name}}
    else:
        target = {s.target_kind.value: s.target}
    steps: list[dict[str, object]] = []
    for st in s.steps:
        step: dict[str, object] = {"cron": st.cron}
        if st.set_quota:
            step["quotaGpus"] = st.quota_gpus
        for key, value in (("minReplicas", st.min_replicas), ("maxReplicas", st.max_replicas)):
            if value is not None:
                step[key] = value
        if st.replicas is not None:
            step["replicas"] = st.replicas
        steps.append(step)
    return {
        "apiVersion": "rackscale.io/v1",
        "kind": "ScalingSchedule",
        "metadata": {"name": s.name},
        "spec": {"timeZone": s.time_zone, "target": target, "steps": steps},
    }


__all__ = [
    "MAX_FIRES",
    "ScalingSchedule",
    "ScheduleFired",
    "ScheduleStep",
    "TargetKind",
    "fires_between",
    "last_fire",
    "next_fire",
    "schedule_to_doc",
    "step_next",
    "step_prev",
    "zone",
]
