"""The plan's ``storage-lifecycle`` ConfigMap, loaded as written (section 8.1 of the deployment plan)::

    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: storage-lifecycle
    data:
      hot-tier: "7d"
      warm-tier: "30d"
      cold-tier: "180d"

A bare mapping of the same three keys is accepted too. Meaning (docs/storage.md): a file older than
``hot-tier``'s age leaves hot for warm, older than ``warm-tier``'s leaves warm for cold, older than
``cold-tier``'s is deleted; age = now - mtime. Errors name the field (``data.warm-tier: ...``) and the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rackscale.model.spec_errors import SpecError, SpecInvalid, SpecProblem, problems_from_validation

CONFIGMAP_NAME = "storage-lifecycle"
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
MAX_DURATION_S = 100 * 365 * 86_400  # a century: far past any retention, stops a typo of extra digits
# [0-9], not \d: \d also matches other scripts' digits ("٧d"), which int() would quietly accept.
_DURATION = re.compile(r"^([0-9]+)([A-Za-z]+)$")
_HINT = 'write a whole number and a unit, e.g. "7d" (units: s, m, h, d, w)'


class Tier(StrEnum):
    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


TIERS = (Tier.HOT, Tier.WARM, Tier.COLD)  # hottest first: files only ever move right
KEYS = {Tier.HOT: "hot-tier", Tier.WARM: "warm-tier", Tier.COLD: "cold-tier"}


def parse_duration(value: object) -> int:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds (> 0). Raises :class:`SpecInvalid` with a fix."""
    if not isinstance(value, str):
        # YAML reads `hot-tier: 7` as a number: the unit is what says whether 7 means days or seconds.
        raise SpecInvalid("must be a duration string with a unit (a bare number has none)", _HINT)
    m = _DURATION.match(value.strip())
    if m is None:
        raise SpecInvalid("must be a whole number followed by a unit (no sign, no fraction, no space)", _HINT)
    if m[2] not in UNIT_SECONDS:
        raise SpecInvalid(f"has the unknown unit {m[2][:10]!r}", 'use one of s, m, h, d, w (lower case), e.g. "7d"')
    seconds = int(m[1]) * UNIT_SECONDS[m[2]]
    if seconds <= 0:
        raise SpecInvalid("must be longer than 0", _HINT)
    if seconds > MAX_DURATION_S:
        raise SpecInvalid("must be at most 100 years (36500d)", _HINT)
    return seconds


Duration = Annotated[int, BeforeValidator(parse_duration)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class LifecycleDataDoc(_Doc):
    hot_tier: Duration = Field(alias="hot-tier", examples=['"7d"'])
    warm_tier: Duration = Field(alias="warm-tier", examples=['"30d"'])
    cold_tier: Duration = Field(alias="cold-tier", examples=['"180d"'])


class MetadataDoc(_Doc):
    # Other keys are ignored: `kubectl get configmap storage-lifecycle -o yaml` adds uid, resourceVersion,
    # creationTimestamp, managedFields ..., and that output must load too. Only the name is used.
    model_config = ConfigDict(extra="ignore")
    name: Literal["storage-lifecycle"] = Field(examples=[CONFIGMAP_NAME])


class ConfigMapDoc(_Doc):
    api_version: Literal["v1"] = Field(alias="apiVersion", examples=["v1"])
    kind: Literal["ConfigMap"] = Field(examples=["ConfigMap"])
    metadata: MetadataDoc
    data: LifecycleDataDoc
    immutable: bool | None = None  # a ConfigMap field (core/v1); accepted, not used


@dataclass(frozen=True, slots=True, kw_only=True)
class Lifecycle:
    """The ages (seconds) past which a file leaves a tier: hot -> warm, warm -> cold, cold -> deleted."""

    hot_s: int
    warm_s: int
    cold_s: int

    def max_age(self, tier: Tier) -> int:
        return {Tier.HOT: self.hot_s, Tier.WARM: self.warm_s, Tier.COLD: self.cold_s}[tier]

    def as_dict(self) -> dict[str, int]:
        return {KEYS[t]: self.max_age(t) for t in TIERS}


def lifecycle_from_doc(doc: object, *, source: str | None = None) -> Lifecycle:
    """A ConfigMap (``kind: ConfigMap``) or a bare mapping of the three keys -> :class:`Lifecycle`.
    Raises :class:`SpecError` whose lines name the field (``data.warm-tier``) and the fix."""
    if not isinstance(doc, Mapping):
        fix = f"write a ConfigMap named {CONFIGMAP_NAME} with data: hot-tier, warm-tier, cold-tier (docs/storage.md)"
        raise SpecError([SpecProblem((), f"must be a mapping, got {type(doc).__name__}", fix)], source)
    wrapped = any(k in doc for k in ("apiVersion", "kind", "metadata", "data"))
    root: type[BaseModel] = ConfigMapDoc if wrapped else LifecycleDataDoc
    try:
        parsed: Any = root.model_validate(doc)
    except ValidationError as err:
        raise SpecError(problems_from_validation(err, root), source) from None
    data: LifecycleDataDoc = parsed.data if wrapped else parsed
    prefix: tuple[str, ...] = ("data",) if wrapped else ()
    ages = (data.hot_tier, data.warm_tier, data.cold_tier)
    problems = [
        SpecProblem(
            (*prefix, KEYS[TIERS[i]]),
            f"must be longer than {KEYS[TIERS[i - 1]]} ({ages[i]}s <= {ages[i - 1]}s)",
            "the tiers must grow: hot-tier < warm-tier < cold-tier, e.g. 7d, 30d, 180d",
        )
        for i in (1, 2)
        if ages[i] <= ages[i - 1]
    ]
    if problems:
        raise SpecError(problems, source)
    return Lifecycle(hot_s=ages[0], warm_s=ages[1], cold_s=ages[2])


def load_lifecycle(path: str | os.PathLike[str]) -> Lifecycle:
    """Read the lifecycle from a YAML or JSON file (bounded reads: :mod:`rackscale.loaders`)."""
    from rackscale.loaders import read_text, safe_load_bounded

    source = os.fspath(path)
    return lifecycle_from_doc(safe_load_bounded(read_text(path), source=source), source=source)


def parse_tier_options(values: Sequence[str]) -> dict[Tier, Path]:
    """``--tier hot=PATH`` options -> {tier: path}. Raises ValueError with the fix for a bad or repeated one."""
    out: dict[Tier, Path] = {}
    for v in values:
        name, eq, path = v.partition("=")
        if not eq or not path:
            raise ValueError(f"--tier takes TIER=PATH, e.g. --tier hot=/nvme/hot (got {v!r})")
        if name not in set(Tier):
            raise ValueError(f"--tier {name!r} is no tier: use hot, warm or cold (got {v!r})")
        if Tier(name) in out:
            raise ValueError(f"--tier {name} is given twice: give each of hot, warm, cold once")
        out[Tier(name)] = Path(path)
    return out
