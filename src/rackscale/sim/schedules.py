"""Scheduled scaling in the simulation: the host's own schedules (:mod:`rackscale.host.scaling_host`) on the
virtual clock, so a what-if shows what a night quota or a replica schedule saves and costs.

Virtual time ``t`` is the epoch instant ``start_epoch + t`` (``rackscale simulate --start-time``; by
default :data:`DEFAULT_START_EPOCH`, Monday 2026-01-05 00:00 UTC, so a replay fires at the same times
whatever the day it runs). A workload's times start near 0, so by default virtual hour h of day d is
h:00 UTC of the d-th day from that Monday, which is also the hour the services' daily load curve reads.

One SCHEDULE event sits in the heap at the next fire of any schedule; it fires what is due and pushes the
next one. The first is at the workload's start: the step in force then applies at once (the host's put
semantics). A service that arrives later takes the step in force when it arrives (``apply_in_force``).
When nothing has run for :data:`IDLE_STOP_S` of virtual time after the last arrival (jobs waiting on a
quota that no step raises), those jobs fail saying so and the run ends (else the periodic samples would
keep it going for ever).

A mixin of :class:`rackscale.sim.simulator.Simulator` (the event side).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from rackscale.host.runs import JobRun, RunStatus
from rackscale.host.scaling import ScalingSchedule, ScheduleFired, TargetKind
from rackscale.host.scaling_host import ScalingMixin
from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.workload import JobSpec
from rackscale.sim.engine import EventKind, EventQueue

DEFAULT_START_EPOCH = datetime(2026, 1, 5, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC
IDLE_STOP_S = 8 * 86400.0  # a week's plan and a day: a weekly step that raises a quota still comes


def parse_start_time(text: str) -> float:
    """``--start-time``: an ISO 8601 instant (``2026-03-29T00:00:00+01:00``; without an offset: UTC) as
    epoch seconds. Raises ValueError naming the expected form."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text[:60]!r} is not an ISO 8601 time, e.g. 2026-01-05T00:00:00+00:00") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


class SchedulesMixin(ScalingMixin):
    q: EventQueue
    total: int
    runs: dict[str, JobRun]

    if TYPE_CHECKING:  # the simulator's

        @property
        def active(self) -> int: ...
        def _fail(self, r: JobRun, reason: str, now: float) -> None: ...

    @property
    def fired(self) -> list[ScheduleFired]:
        """Every step fired so far, in order (the run's record of what the schedules changed)."""
        got: list[ScheduleFired] | None = self.__dict__.get("_fired")
        if got is None:
            got = self.__dict__["_fired"] = []
        return got

    def _schedule_schedules(self, schedules: tuple[ScalingSchedule, ...], *, start_epoch: float, start: float) -> None:
        self.__dict__["_epoch0"] = start_epoch
        self.__dict__["_service_targets"] = {s.target for s in schedules if s.target_kind is TargetKind.SERVICE}
        for s in schedules:
            self.put_schedule(s, now=start_epoch + start)
        if schedules:
            self.q.push(start, EventKind.SCHEDULE)

    def submit(self, spec: JobSpec) -> JobRun:
        r = super().submit(spec)  # type: ignore[misc]  # the host's (after this mixin in the bases)
        if spec.name in self.__dict__.get("_service_targets", ()):
            self.fired.extend(self.apply_in_force(spec.name, now=self.__dict__["_epoch0"] + spec.submit_time))
        return r  # type: ignore[no-any-return]

    def _fire_schedules(self, now: float) -> bool:
        """The SCHEDULE event: fire what is due, push the next. True: capacity may have changed."""
        epoch0: float = self.__dict__["_epoch0"]
        fired = self.fire_schedules(now=epoch0 + now)
        self.fired.extend(fired)
        if self.state.running or len(self.runs) < self.total:
            self.__dict__["_idle_since"] = now  # something runs or is yet to arrive: not stuck
        elif now - self.__dict__.setdefault("_idle_since", now) > IDLE_STOP_S:
            # Nothing runs, everything arrived, and no step let the waiting jobs start for over a week:
            # they wait on a quota no step raises. They fail, saying so, and the run ends.
            why = "waited over a week on a scheduled quota that no step raised (rackscale.sim.schedules)"
            for r in [r for r in self.runs.values() if r.status is RunStatus.PENDING]:
                self._fail(r, why, now)
            return False
        nxt = self.next_schedule_fire(after=epoch0 + now)
        if nxt is not None and self.active > 0:
            self.q.push(nxt - epoch0, EventKind.SCHEDULE)
        return bool(fired)


MAX_FILE_BYTES = 1 << 20  # a schedule file is a few hundred bytes; a megabyte is a mistake


def read_schedule_file(path: Path) -> list[ScalingSchedule]:
    """Every ``ScalingSchedule`` document of a YAML file (``---`` between several). Raises SpecError naming
    the file and the field (an unreadable, huge or non-YAML file too: one line, never a traceback)."""
    from rackscale.host.scaling_docs import parse_schedule

    source = str(path)

    def bad(message: str, fix: str) -> SpecError:
        return SpecError([SpecProblem((), message, fix)], source)

    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise bad(f"is larger than {MAX_FILE_BYTES} bytes", "give one schedule file")
        text = path.read_text(encoding="utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError) as err:
        raise bad(f"cannot be read ({err.__class__.__name__})", "check the path") from None
    except yaml.YAMLError as err:
        raise bad(f"is not YAML ({str(err)[:120]})", "check the indentation") from None
    if not docs:
        raise bad("holds no document", "write a ScalingSchedule (docs/scheduled-scaling.md)")
    return [parse_schedule(d, source=source if len(docs) == 1 else f"{source}#{i}") for i, d in enumerate(docs)]


__all__ = ["DEFAULT_START_EPOCH", "IDLE_STOP_S", "SchedulesMixin", "parse_start_time", "read_schedule_file"]
