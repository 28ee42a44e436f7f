"""The ``Sweep`` document: base options, a cartesian ``grid`` and/or explicit ``cells``, and a comparison.

Every option is one of ``rackscale simulate``'s (:class:`CellOptions`, named as in the YAML, snake_case),
so a cell is exactly one ``simulate`` run of one policy. A bad document is one :class:`SweepError` whose
lines each name the field path (``spec.grid.policy[1]``) and the fix.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from rackscale.host.kpis import Kpis
from rackscale.host.runs import Estimates
from rackscale.model.errors import RackscaleError
from rackscale.model.spec_errors import format_loc
from rackscale.model.specs import MAX_NVL72_RACKS, MAX_SYNTHETIC_JOBS
from rackscale.sweep.perf_cells import PERF_OPTION_NAMES, PerfOptions

API_VERSION = "rackscale.io/v1"
MAX_CELLS = 100_000  # a grid larger than this is a typo (a list pasted into the wrong key), not a plan
MAX_FILE_BYTES = 1 << 20
KPI_NAMES = tuple(f.name for f in fields(Kpis) if f.name != "by_kind")
KIND_PREFIXES = ("mean_jct_s_", "mean_queueing_s_")  # per-kind means (Kpis.by_kind)
MAX_TEXT = 4096  # a path (PATH_MAX) or a window: a longer value is a paste gone wrong, copied into every record
MAX_ITEMS = 1000  # maintenance windows, schedule files, tenant_map entries
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
MAX_RACKS = MAX_NVL72_RACKS  # a cluster spec's bound in NVL72 racks: 14,563 racks, 1,048,536 GPUs
DEFAULT_RACKS = 4  # racks of the NVL72 cluster when neither cluster nor racks is given (simulate's default)
DEFAULT_KPIS = ("mean_jct_s", "idle_rate", "slo_attainment", "intra_rack_traffic_share")


class SweepError(RackscaleError, ValueError):
    """A sweep document (or a sweep's input) is invalid; one line per problem, each naming its field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


class CellOptions(BaseModel):
    """One cell: the options of one ``rackscale simulate`` run with one policy (its flag in brackets)."""

    # Integers and booleans strict (racks: true is no 1 rack, seed: "3" no seed); NaN and infinity no number.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    cluster: Text | None = None  # --cluster FILE
    racks: StrictInt | None = Field(None, ge=1, le=MAX_RACKS)  # --racks (default 4 when no cluster)
    trace: Text | None = None  # --trace FORMAT:PATH
    jobs_file: Text | None = None  # --jobs FILE
    jobs: StrictInt = Field(600, ge=1, le=10_000_000)  # --n-jobs: the synthetic mix's size
    duration_h: float | None = Field(None, ge=0.001, le=1e6)  # --duration
    arrival_scale: float = Field(1.0, ge=0.001, le=1e6)
    gpu_scale: float = Field(1.0, ge=0.001, le=1e6)
    elastic_share: float = Field(0.0, ge=0.0, le=1.0)
    strict: StrictBool = False
    tenant_map: dict[Text, Text] | None = Field(None, max_length=MAX_ITEMS)  # --tenant-map OLD=NEW,...
    policy: str = "rackscale"
    seed: StrictInt = Field(0, ge=0, le=2**63 - 1)
    estimates: Estimates = Estimates.GIVEN
    gpu_mtbf_h: float | None = Field(None, gt=0.0, le=1e9)
    node_mtbf_h: float | None = Field(None, gt=0.0, le=1e9)
    uplink_mtbf_h: float | None = Field(None, gt=0.0, le=1e9)
    maintenance: tuple[Text, ...] = Field((), max_length=MAX_ITEMS)  # RACK@START+DURATION[~GRACE]
    schedules: tuple[Text, ...] = Field((), max_length=MAX_ITEMS)  # --schedule FILE (repeatable)
    start_time: Text | None = None  # --start-time ISO 8601

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        from rackscale.scheduler import PROFILES

        if v not in PROFILES:
            raise ValueError(f"unknown policy {v!r}; choose one of: {', '.join(PROFILES)}")
        return v

    @field_validator("maintenance")
    @classmethod
    def _windows(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from rackscale.host.drains import DrainError
        from rackscale.sim.maintenance import parse_window

        for w in v:
            try:
                parse_window(w)
            except DrainError as e:
                raise ValueError(f"{w!r}: {e}") from None
        return v

    @field_validator("start_time")
    @classmethod
    def _start(cls, v: str | None) -> str | None:
        from rackscale.sim.schedules import parse_start_time

        if v is not None:
            parse_start_time(v)  # its ValueError names the expected form
        return v

    @field_validator("cluster", "jobs_file", "trace", "schedules")
    @classmethod
    def _no_nul(cls, v: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        """A path holds no NUL character (the OS refuses it; reading the file would fail past validation)."""
        for p in (v,) if isinstance(v, str) else v or ():
            if "\x00" in p:
                raise ValueError("a path holds no NUL character")
        return v

    @field_validator("trace")
    @classmethod
    def _trace(cls, v: str | None) -> str | None:
        from rackscale.workloads.traces import TRACE_FORMATS

        if v is not None and not v.partition(":")[2].strip():
            raise ValueError(f"expected FORMAT:PATH, e.g. philly:../shared/traces/philly/philly.csv (got {v!r})")
        fmt = v.partition(":")[0] if v is not None else None
        if fmt is not None and fmt.strip().lower() not in TRACE_FORMATS:  # load_trace's own reading of FORMAT
            near = difflib.get_close_matches(fmt.strip().lower(), list(TRACE_FORMATS), n=1)
            hint = f"did you mean {near[0]}:? " if near else ""
            raise ValueError(f"unknown trace format {fmt!r} (fix: {hint}the formats are: {', '.join(TRACE_FORMATS)})")
        return v

    @model_validator(mode="after")
    def _exclusive(self) -> CellOptions:
        if self.cluster is not None and self.racks is not None:
            raise ValueError("give either cluster or racks, not both")
        if self.trace is not None and self.jobs_file is not None:
            raise ValueError("give either trace or jobs_file, not both")
        if self.trace is None and self.jobs_file is None:  # the synthetic mix: jobs x arrival_scale of them
            n = round(self.jobs * self.arrival_scale)
            if n > MAX_SYNTHETIC_JOBS:
                raise ValueError(
                    f"jobs x arrival_scale is {n:,} synthetic jobs, more than {MAX_SYNTHETIC_JOBS:,}"
                    " (fix: lower jobs or arrival_scale)"
                )
        return self

    def canonical(self) -> dict[str, Any]:
        """Only the options that differ from their defaults, JSON-ready: what names and keys a cell. ``racks:
        4`` is the default cluster spelt out (None stands for it), so the same cell as ``racks`` left out."""
        out = self.model_dump(mode="json", exclude_defaults=True)
        if out.get("racks") == DEFAULT_RACKS:
            del out["racks"]
        return out


OPTION_NAMES = tuple(CellOptions.model_fields)
Option = TypeVar("Option", CellOptions, PerfOptions)


class Compare(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str | None = None  # a policy of the grid; None: no comparison
    kpis: tuple[str, ...] = DEFAULT_KPIS

    @field_validator("kpis")
    @classmethod
    def _known_kpis(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for k in v:
            if k not in KPI_NAMES and not k.startswith(KIND_PREFIXES):
                near = difflib.get_close_matches(k, KPI_NAMES, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ValueError(f"unknown KPI {k!r}; {hint}the KPIs are those of simulate --json")
        return v


class Metadata(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class PerfBody(BaseModel):
    """``spec.perf``: ``perf serve`` points, as ``base``/``grid``/``cells`` over ``PerfOptions``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)
    cells: list[dict[str, Any]] = Field(default_factory=list)
    # A system of the cells (their ``gpu``): every other cell is compared with the one that differs only
    # by ``gpu``, as ``perf serve --vs`` does (the ratio of tokens/s per GPU at each target).
    baseline: str | None = Field(None, max_length=64)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)  # lists, checked by _check_options
    cells: list[dict[str, Any]] = Field(default_factory=list)
    compare: Compare = Field(default_factory=Compare)
    perf: PerfBody | None = None

    @property
    def simulates(self) -> bool:
        """Simulate cells: any of base, grid or cells given, or no ``perf`` section (a bare spec is one
        default ``simulate`` cell, as before perf cells existed)."""
        return bool(self.base or self.grid or self.cells) or self.perf is None


class SweepSpec(BaseModel):
    """The document. :meth:`expand` gives its cells, each validated, in a stable order."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    api_version: Literal["rackscale.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Sweep"]
    metadata: Metadata
    spec: Body

    def expand(self) -> list[CellOptions | PerfOptions]:
        """The simulate cells, then the ``perf serve`` cells (``spec.perf``)."""
        body = self.spec
        out: list[CellOptions | PerfOptions] = []
        problems: list[str] = []
        if body.simulates:
            out += _expand(CellOptions, "spec", body.base, body.grid, body.cells, problems)
        if body.perf is not None:
            p = body.perf
            out += _expand(PerfOptions, "spec.perf", p.base, p.grid, p.cells, problems)
        if problems:
            raise SweepError(_capped(problems, "cells"))
        return out


def _expand(
    model: type[Option],
    where: str,
    base: Mapping[str, Any],
    grid: Mapping[str, Any],
    cells: list[dict[str, Any]],
    problems: list[str],
) -> list[Option]:
    """``base``, then each of ``cells`` (or none), then each point of ``grid``, the later winning; a grid
    that repeats a value gives that cell once."""
    keys = list(grid)
    out: list[Option] = []
    seen: set[str] = set()
    for i, scenario in enumerate(cells or [{}]):
        for point in itertools.product(*(grid[k] for k in keys)):
            merged = {**base, **scenario, **dict(zip(keys, point, strict=True))}
            try:
                cell = model.model_validate(merged)
            except ValidationError as e:
                at = f"{where}.cells[{i}]" if cells else where
                problems.append(f"{at} with {_short(merged)}: {_first_message(e)}")
                continue
            ident = repr(sorted(cell.canonical().items()))
            if ident not in seen:
                seen.add(ident)
                out.append(cell)
    return out


def _cell_count(grid: Mapping[str, Any], cells: list[dict[str, Any]]) -> int:
    """How many cells ``grid`` x ``cells`` expands to, at most (before repeats are dropped)."""
    axes = [v for v in grid.values() if isinstance(v, list)]
    return math.prod(len(v) for v in axes) * max(1, len(cells))


MAX_PROBLEMS = 10  # lines of one error: a 500,000-value axis of typos is not 500,000 lines


def _capped(problems: list[str], what: str = "problems") -> list[str]:
    more = len(problems) - MAX_PROBLEMS
    return problems[:MAX_PROBLEMS] + ([f"... and {more:,} more {what}"] if more > 0 else [])


def _short(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items())[:200]


def _first_message(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = format_loc(tuple(str(p) if not isinstance(p, int) else p for p in err["loc"]))
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def _check_options(
    where: str, options: Mapping[str, Any], problems: list[str], *, lists: bool = False, perf: bool = False
) -> None:
    """Each option's name and value alone, so that a bad value is reported at the field that holds it."""
    names = PERF_OPTION_NAMES if perf else OPTION_NAMES
    for name, value in options.items():
        path = f"{where}.{name}"
        if name not in names:
            near = difflib.get_close_matches(str(name), names, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            problems.append(f"{path}: unknown option (fix: {hint}the options are: {', '.join(names)})")
            continue
        values = value if lists else [value]
        if lists and (not isinstance(value, list) or not value):
            problems.append(f"{path}: a grid axis is a non-empty list of values (fix: {name}: [a, b])")
            continue
        for j, v in enumerate(values):
            at = f"{path}[{j}]" if lists else path
            try:
                if perf:  # model and gpu are required: a stand-in for whichever this check is not about
                    PerfOptions.model_validate({"model": "llama-3.1-8b", "gpu": "h100", name: v})
                else:
                    CellOptions.model_validate({name: v})
            except ValidationError as e:
                # the field's own errors; one about the whole cell (loc ()) needs the cell's other options
                if errs := [err for err in e.errors() if err["loc"]]:
                    problems.append(f"{at}: {str(errs[0]['msg']).removeprefix('Value error, ')}")


def parse_sweep(doc: object, *, source: str = "sweep") -> SweepSpec:
    """A parsed YAML document -> :class:`SweepSpec`; every problem names its field path."""
    if not isinstance(doc, dict):
        raise SweepError([f"{source}: a Sweep document is a mapping (apiVersion, kind, metadata, spec)"])
    try:
        sweep = SweepSpec.model_validate(doc)
    except ValidationError as e:
        lines = []
        for err in e.errors()[:10]:
            loc = format_loc(tuple(p if isinstance(p, int) else str(p) for p in err["loc"]))
            msg = str(err["msg"]).removeprefix("Value error, ")
            fix = {"apiVersion": f" (fix: apiVersion: {API_VERSION})", "kind": " (fix: kind: Sweep)"}.get(loc, "")
            if loc == "metadata.name":
                fix = " (fix: lower-case letters, digits and '-', at most 63)"
            lines.append(f"{source}: {loc}: {msg}{fix}")
        raise SweepError(lines) from None
    problems: list[str] = []
    _check_options("spec.base", sweep.spec.base, problems)
    _check_options("spec.grid", sweep.spec.grid, problems, lists=True)
    for i, cell in enumerate(sweep.spec.cells):
        _check_options(f"spec.cells[{i}]", cell, problems)
    size = _cell_count(sweep.spec.grid, sweep.spec.cells)
    if (perf := sweep.spec.perf) is not None:
        _check_options("spec.perf.base", perf.base, problems, perf=True)
        _check_options("spec.perf.grid", perf.grid, problems, lists=True, perf=True)
        for i, cell in enumerate(perf.cells):
            _check_options(f"spec.perf.cells[{i}]", cell, problems, perf=True)
        size += _cell_count(perf.grid, perf.cells)
    if size > MAX_CELLS:
        problems.append(f"spec.grid: {size:,} cells is more than {MAX_CELLS:,} (fix: split the sweep)")
    if problems:
        raise SweepError([f"{source}: {p}" for p in _capped(problems)])
    try:
        cells = sweep.expand()
    except SweepError as e:
        raise SweepError([f"{source}: {p}" for p in e.problems]) from None
    baseline = sweep.spec.compare.baseline
    if baseline is not None and baseline not in {c.policy for c in cells if isinstance(c, CellOptions)}:
        raise SweepError([f"{source}: spec.compare.baseline: {baseline!r} is no policy of the sweep's cells"])
    gpu = perf.baseline if perf is not None else None
    if gpu is not None and gpu not in {c.gpu for c in cells if isinstance(c, PerfOptions)}:
        raise SweepError([f"{source}: spec.perf.baseline: {gpu!r} is no gpu of the perf cells"])
    return sweep


def load_sweep(path: Path) -> SweepSpec:
    """Read and validate a sweep file; a missing, huge or non-YAML file is one line naming it. The read is
    bounded (a device such as /dev/zero has no size) and so is the YAML (nesting depth, alias expansion:
    :func:`rackscale.loaders.safe_load_bounded`)."""
    from rackscale.loaders import safe_load_document
    from rackscale.model.spec_errors import SpecError

    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise SweepError([f"{path}: larger than {MAX_FILE_BYTES:,} bytes; a sweep document is small"])
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise SweepError([f"{path}: cannot read it ({why})"]) from None
    try:
        doc, node = safe_load_document(text, source=str(path))
    except SpecError as e:
        raise SweepError(str(e).splitlines()) from None
    try:
        return parse_sweep(doc, source=str(path))
    except SweepError as e:
        raise SweepError([_with_line(p, str(path), node) for p in e.problems]) from None


_LOC = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*|\[\d+\])(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*")


def _with_line(problem: str, source: str, node: object) -> str:
    """``FILE: spec.grid.seed[1]: ...`` -> ``FILE:7: spec.grid.seed[1]: ...``: the line of the field the
    problem names, as a job spec's problems have it (the deepest part of the path the file has)."""
    from rackscale.loaders import line_of

    head = f"{source}: "
    if not problem.startswith(head) or not (m := _LOC.match(problem, len(head))) or node is None:
        return problem
    loc = tuple(int(x[1:-1]) if x.startswith("[") else x for x in re.findall(r"\[\d+\]|[^.\[\]]+", m.group()))
    line = line_of(node, loc)  # type: ignore[arg-type]
    return problem if line is None else f"{source}:{line}: {problem[len(head) :]}"
