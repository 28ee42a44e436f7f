"""What every trace loader returns and takes: :class:`TraceLoad` (the jobs read, the rows skipped) and
:class:`TraceOptions` (skip or reject bad rows, scale GPUs and arrivals, a time window, a job cap, a tenant
map), with the ordering and windowing of the jobs read."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.workload import JobSpec

OnError = Literal["skip", "reject"]
ON_ERROR_VALUES: tuple[str, ...] = ("skip", "reject")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """The jobs read from a trace, sorted by submit time, and the rows skipped (each with its line and why)."""

    jobs: tuple[JobSpec, ...]
    skipped: tuple[SpecProblem, ...]
    source: str

    def skipped_lines(self) -> list[str]:
        """One text line per skipped row: ``file:line: column: why (fix: ...)``."""
        return [p.render(self.source) for p in self.skipped]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceOptions:
    """The knobs every job loader takes (see docs/workloads.md)."""

    on_error: str = "skip"
    gpu_scale: float = 1.0
    arrival_scale: float = 1.0
    time_window: tuple[float, float] | None = None
    max_jobs: int | None = None
    tenant_map: Mapping[str, str] | None = None

    def check(self) -> None:
        """Raise :class:`SpecError` naming every option with a bad value."""
        bad: list[SpecProblem] = []
        if self.on_error not in ON_ERROR_VALUES:
            bad.append(SpecProblem(("on_error",), f"unknown value {self.on_error!r}", 'use "skip" or "reject"'))
        for key, value in (("gpu_scale", self.gpu_scale), ("arrival_scale", self.arrival_scale)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
                bad.append(SpecProblem((key,), f"must be a finite number > 0, got {value!r}", "e.g. 2.0 or 0.5"))
        if self.time_window is not None:
            window = self.time_window
            ok = isinstance(window, tuple | list) and len(window) == 2
            ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in window)
            if not ok or not (0 <= window[0] < window[1]):
                fix = "give (start, end) in seconds of the trace's clock, 0 <= start < end (end may be math.inf)"
                bad.append(SpecProblem(("time_window",), f"invalid window {self.time_window!r}", fix))
        if self.max_jobs is not None and (
            isinstance(self.max_jobs, bool) or not isinstance(self.max_jobs, int) or self.max_jobs < 0
        ):
            bad.append(SpecProblem(("max_jobs",), f"must be a whole number >= 0, got {self.max_jobs!r}", "or None"))
        if bad:
            raise SpecError(bad, "trace options")

    def scale_gpus(self, gpus: int) -> int:
        """``gpus`` x ``gpu_scale``, rounded half up, at least 1."""
        if self.gpu_scale == 1.0:
            return gpus
        return max(1, int(gpus * self.gpu_scale + 0.5))

    def queue(self, name: str) -> str:
        return self.tenant_map.get(name, name) if self.tenant_map else name

    def arrange(self, records: list[tuple[float, _T]]) -> list[tuple[int, float, _T]]:
        """Sort ``(trace time, item)`` records by time (stable: file order breaks ties), keep the window and
        ``max_jobs``; give ``(rank in the whole trace from 1, submit time, item)``.

        The submit time counts from the window's start (0 without a window), divided by ``arrival_scale``.
        """
        records.sort(key=_first)
        lo, hi = self.time_window if self.time_window is not None else (0.0, math.inf)
        origin = lo if self.time_window is not None else 0.0
        scale, cap = self.arrival_scale, self.max_jobs
        out: list[tuple[int, float, _T]] = []
        if cap == 0:
            return out
        for rank, (t, item) in enumerate(records, 1):
            if t < lo:
                continue
            if t >= hi:
                break
            out.append((rank, (t - origin) / scale if scale != 1.0 else t - origin, item))
            if cap is not None and len(out) >= cap:
                break
        return out

    def finish(self, source: str, jobs: Sequence[JobSpec], problems: Sequence[SpecProblem]) -> TraceLoad:
        if problems and self.on_error == "reject":
            raise SpecError(problems, source)
        return TraceLoad(tuple(jobs), tuple(problems), source)


def _first(record: tuple[float, object]) -> float:
    return record[0]
