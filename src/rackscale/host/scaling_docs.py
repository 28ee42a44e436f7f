"""The ``ScalingSchedule`` document: pydantic models (house style of :mod:`rackscale.model.spec_docs`) and
:func:`parse_schedule`, which turns a YAML/JSON mapping into a :class:`rackscale.host.scaling.ScalingSchedule`
or raises :class:`rackscale.model.spec_errors.SpecError` naming each field and its fix.

Cron expressions are croniter's reading of the standard five fields (minute hour day-of-month month
day-of-week, with ``L``, ``#`` and ``?`` as croniter has them) or one of the ``@hourly``-style macros. Six- or
seven-field forms (seconds, years) are refused: Kubernetes CronJobs and Vixie cron have five, and a
seconds field would make a schedule fire in a place (the live service's 1 s step) where minutes are meant.
croniter's ``R`` (random) and ``H`` (hashed) extensions are refused too: a schedule must fire at the same
times on every replay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rackscale.host.scaling import ScalingSchedule, ScheduleStep, TargetKind, step_next
from rackscale.model.spec_docs import MAX_UNITS, JobMetadataDoc
from rackscale.model.spec_errors import SpecError, SpecInvalid, SpecProblem, problems_from_validation
from rackscale.model.text import Name, document_problems

MAX_STEPS = 100  # two a day is the plan; a hundred covers every hour of a week's plan, 10,000 is a mistake
MAX_CRON = 256
MAX_QUOTA_GPUS = 1e9
_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_CRON_FIX = 'write five fields, minute hour day-of-month month day-of-week, e.g. cron: "0 2 * * *"'
# Kubernetes' rules: a namespace is a DNS label, a Deployment's name a DNS subdomain.
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")


def _length(text: str, limit: int) -> None:
    # Here, not as max_length: pydantic's own message for a long string names no fix.
    if len(text) > limit:
        raise SpecInvalid(f"is {len(text)} characters long, at most {limit}", f"shorten it to {limit} characters")


def _cron(text: str) -> str:
    _length(text, MAX_CRON)
    words = text.split()
    if len(words) == 1 and words[0].lower() in _MACROS:
        return words[0].lower()
    if len(words) != 5:
        raise SpecInvalid(f"has {len(words)} fields; rackscale takes cron's standard five", _CRON_FIX)
    if any(c in w for w in words for c in "RH"):
        raise SpecInvalid("uses croniter's random (R) or hashed (H) extension", "give the minute and hour as numbers")
    try:
        croniter(" ".join(words))
    except (ValueError, KeyError, TypeError) as err:  # croniter's CroniterError derives from ValueError
        raise SpecInvalid(f"is not a cron expression croniter reads ({str(err)[:80]})", _CRON_FIX) from None
    return " ".join(words)


def _zone(text: str) -> str:
    _length(text, 64)
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # ValueError: "../x", an absolute path
        raise SpecInvalid(
            "is not a time zone of the IANA database", "use a name such as UTC, Europe/Berlin or America/New_York"
        ) from None
    return text


def _pattern(rule: re.Pattern[str], fix: str) -> Any:
    def check(text: str) -> str:
        if rule.fullmatch(text) is None:
            raise SpecInvalid("is not a valid Kubernetes name", fix)
        return text

    return AfterValidator(check)


Cron = Annotated[str, Field(min_length=1), AfterValidator(_cron)]
Zone = Annotated[str, Field(min_length=1), AfterValidator(_zone)]
Namespace = Annotated[
    str, Field(min_length=1, max_length=63), _pattern(_DNS_LABEL, "use 1-63 lowercase letters, digits or '-'")
]
DeploymentName = Annotated[
    str,
    Field(min_length=1, max_length=253),
    _pattern(_DNS_SUBDOMAIN, "use 1-253 lowercase letters, digits, '-' or '.'"),
]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, strict=True, allow_inf_nan=False, frozen=True)


class DeploymentRefDoc(_Doc):
    namespace: Namespace = "default"
    name: DeploymentName = Field(examples=["trainer"])


class TargetDoc(_Doc):
    queue: Name | None = Field(None, examples=["training"])
    service: Name | None = Field(None, examples=["chat"])
    deployment: DeploymentRefDoc | None = None


class StepDoc(_Doc):
    cron: Cron = Field(examples=['"0 2 * * *"'])
    quota_gpus: float | None = Field(None, ge=0, le=MAX_QUOTA_GPUS, examples=[288])
    min_replicas: int | None = Field(None, ge=1, le=MAX_UNITS, examples=[1])
    max_replicas: int | None = Field(None, ge=1, le=MAX_UNITS, examples=[4])
    replicas: int | None = Field(None, ge=0, le=MAX_UNITS, examples=[4])


class ScheduleSpecDoc(_Doc):
    time_zone: Zone = "UTC"
    target: TargetDoc = Field(examples=["{queue: training}"])
    steps: list[StepDoc] = Field(
        min_length=1, max_length=MAX_STEPS, description=f"give 1-{MAX_STEPS} steps (one per cron time)"
    )


class ScheduleDoc(_Doc):
    api_version: Literal["rackscale.io/v1"] = Field(examples=["rackscale.io/v1"])
    kind: Literal["ScalingSchedule"] = Field(examples=["ScalingSchedule"])
    metadata: JobMetadataDoc
    spec: ScheduleSpecDoc


# What each target kind's steps may set (the document's names).
_FIELDS = {
    TargetKind.QUEUE: ("quotaGpus",),
    TargetKind.SERVICE: ("minReplicas", "maxReplicas"),
    TargetKind.DEPLOYMENT: ("replicas",),
}
_ALL_FIELDS = ("quotaGpus", "minReplicas", "maxReplicas", "replicas")


def parse_schedule(doc: object, *, source: str = "<schedule>") -> ScalingSchedule:
    """Validate a ``ScalingSchedule`` document. Raises :class:`SpecError` listing every problem found (the
    field path, e.g. ``spec.steps[1].cron``, and the fix); never anything else."""
    if not isinstance(doc, Mapping):
        raise SpecError(
            [SpecProblem((), f"expected a mapping (key: value pairs), got {type(doc).__name__}", _START)], source
        )
    if hostile := document_problems(doc):
        raise SpecError(_short(hostile), source)
    try:
        res = ScheduleDoc.model_validate(dict(doc))
    except ValidationError as err:
        raise SpecError(_short(problems_from_validation(err, ScheduleDoc)), source) from None
    problems: list[SpecProblem] = []
    kind, target = _target(res.spec.target, problems)
    steps = [_step(res.spec.steps[i], i, kind, problems) for i in range(len(res.spec.steps))] if kind else []
    if problems or kind is None:
        raise SpecError(problems, source)
    schedule = ScalingSchedule(
        name=res.metadata.name, time_zone=res.spec.time_zone, target_kind=kind, target=target, steps=tuple(steps)
    )
    _never(schedule, problems)
    if problems:
        raise SpecError(problems, source)
    return schedule


_START = "start with `apiVersion: rackscale.io/v1` and `kind: ScalingSchedule` (docs/scheduled-scaling.md)"


def _target(t: TargetDoc, problems: list[SpecProblem]) -> tuple[TargetKind | None, str]:
    given = [k for k, v in ((TargetKind.QUEUE, t.queue), (TargetKind.SERVICE, t.service)) if v is not None]
    if t.deployment is not None:
        given.append(TargetKind.DEPLOYMENT)
    if len(given) != 1:
        what = "none" if not given else ", ".join(k.value for k in given)
        fix = "give exactly one of queue, service or deployment, e.g. target: {queue: training}"
        problems.append(SpecProblem(("spec", "target"), f"names {what}; a schedule has one target", fix))
        return None, ""
    kind = given[0]
    if kind is TargetKind.DEPLOYMENT:
        assert t.deployment is not None
        return kind, f"{t.deployment.namespace}/{t.deployment.name}"
    return kind, str(t.queue if kind is TargetKind.QUEUE else t.service)


def _step(s: StepDoc, i: int, kind: TargetKind, problems: list[SpecProblem]) -> ScheduleStep:
    loc: tuple[str | int, ...] = ("spec", "steps", i)
    given = {to_camel(f) for f in s.model_fields_set} - {"cron"}
    allowed = _FIELDS[kind]
    for f in _ALL_FIELDS:
        if f in given and f not in allowed:
            problems.append(
                SpecProblem((*loc, f), f"is not a field of a {kind.value} target", f"use {' or '.join(allowed)}")
            )
    if not given & set(allowed):
        problems.append(SpecProblem(loc, "sets nothing", f"give {' or '.join(allowed)}"))
    if kind is TargetKind.DEPLOYMENT and "replicas" in given and s.replicas is None:
        problems.append(SpecProblem((*loc, "replicas"), "must be a whole number >= 0, got None", "e.g. replicas: 4"))
    for f, v in (("minReplicas", s.min_replicas), ("maxReplicas", s.max_replicas)):
        if kind is TargetKind.SERVICE and f in given and v is None:
            problems.append(SpecProblem((*loc, f), "must be a whole number >= 1, got None", "remove it to leave it"))
    lo, hi = s.min_replicas, s.max_replicas
    if lo is not None and hi is not None and lo > hi:
        problems.append(SpecProblem((*loc, "maxReplicas"), f"is below minReplicas ({hi} < {lo})", "raise it"))
    return ScheduleStep(
        cron=s.cron,
        quota_gpus=s.quota_gpus,
        set_quota=kind is TargetKind.QUEUE and "quotaGpus" in given,
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        replicas=s.replicas,
    )


def _never(schedule: ScalingSchedule, problems: list[SpecProblem]) -> None:
    """A step that never fires (``0 0 30 2 *``) is a mistake: croniter finds no next time for it."""
    for i, st in enumerate(schedule.steps):
        try:
            step_next(st.cron, schedule.time_zone, after=0.0)
        except (ValueError, ArithmeticError, OverflowError):
            problems.append(
                SpecProblem(("spec", "steps", i, "cron"), f"{st.cron!r} never fires", "check the day and month")
            )


def _short(problems: list[SpecProblem]) -> list[SpecProblem]:
    """Problems with every key of their path cut to 60 characters (an unknown key of 1 MB names the place
    by its first characters, not all of it)."""
    out = []
    for p in problems:
        loc = tuple(k if isinstance(k, int) or len(k) <= 60 else k[:57] + "..." for k in p.loc)
        out.append(SpecProblem(loc, p.message, p.fix[:300], p.line))
    return out


__all__ = ["MAX_STEPS", "ScheduleDoc", "parse_schedule"]
