"""Scheduled scaling on the host: the schedules it holds and what each fired step changes, under either clock.

A mixin of :class:`rackscale.host.host.ClusterHost` (it uses the host's scheduler, queue and services). The
caller (the service's runner on the wall clock, the simulator at each fire time) calls
:meth:`ScalingMixin.fire_schedules` with ``now``; every step whose time came since the last call fires, in
time order:

- a **queue** target sets the queue's ``QueueConfig.quota_gpus`` (a queue the scheduler has no config for
  is created with it). Lowering a quota below what the queue holds stops nothing: its running jobs go on
  and its new admissions wait until it is under the quota (the quota filter's usual reason). Kueue does the
  same when a ClusterQueue's quota goes down (kubernetes-sigs/kueue#5176: "the already admitted job/pod
  will stay admitted"; #2678: eviction of over-committed workloads is out of its scope), as does YuniKorn
  (YUNIKORN-3133). Raising it makes the next cycle a full one.
- a **service** target sets the inference service's replica bounds (``minReplicas``/``maxReplicas``, the
  spec's ``min_units``/``max_units``); a service above its new maximum loses replicas now (the
  autoscaler's own scale-down), one below its new minimum asks for more (its scale-up: queued work).
- a **deployment** target changes nothing here: the fired step carries ``replicas`` for the caller.

:meth:`put_schedule` makes the step in force at ``now`` (its latest fire at or before then) due, so the
next :meth:`fire_schedules` applies it: a schedule says what the capacity is at each time, as KEDA's cron
scaler keeps its replicas over a window (https://keda.sh/docs/2.17/scalers/cron/), not what to do at an
instant only, as a Kubernetes CronJob does (it skips the times before it existed). So a schedule put at
03:00 that says "0 GPUs from 02:00" holds the queue at 0 now, and a restart that puts it again lands in the
same state. Putting the same schedule again changes nothing; deleting one leaves what it set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rackscale.host.changes import Change, ChangeKind
from rackscale.host.runs import JobRun
from rackscale.host.scaling import (
    ScalingSchedule,
    ScheduleFired,
    ScheduleStep,
    TargetKind,
    fires_between,
    last_fire,
    next_fire,
)
from rackscale.host.services import QueuedScaleUp, replica_bounds
from rackscale.model.state import ClusterState
from rackscale.model.workload import JobKind, JobSpec
from rackscale.scheduler import PendingQueue, ResourceScheduler
from rackscale.scheduler.cycles import CycleDriver
from rackscale.scheduler.framework import QueueConfig

if TYPE_CHECKING:
    from rackscale.host.host import HostOptions
    from rackscale.host.services import _LiveScaling


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    """One schedule as ``get schedules`` shows it: its next fire (None: it never fires again) and the
    last step it fired on this host (None: none yet)."""

    name: str
    target_kind: TargetKind
    target: str
    time_zone: str
    steps: int
    next_at: float | None
    next_step: int | None
    next_sets: str  # what the next step sets, e.g. "GPU quota 0"
    last: ScheduleFired | None


@dataclass(slots=True)
class _Held:
    schedule: ScalingSchedule
    checked: float  # fires after this are due
    last: ScheduleFired | None = None


class ScalingMixin:
    state: ClusterState
    sched: ResourceScheduler
    pending: PendingQueue
    cycles: CycleDriver
    runs: dict[str, JobRun]
    specs: dict[str, JobSpec]
    options: HostOptions
    _held: list[Change]

    if TYPE_CHECKING:  # the host's and its services'

        def _enqueue(self, spec: JobSpec) -> None: ...
        def _start_request(self, r: JobRun, now: float) -> JobSpec: ...
        def _dequeue(self, name: str) -> None: ...
        def _scale_up(self, r: JobRun, have: int, want: int) -> None: ...
        def _scale_down(self, r: JobRun, n: int) -> None: ...
        def _scaling_memory(self) -> _LiveScaling: ...

    @property
    def schedules(self) -> dict[str, _Held]:
        """The schedules by name (created on first use: a mixin has no ``__init__`` of its own)."""
        got: dict[str, _Held] | None = self.__dict__.get("_schedules")
        if got is None:
            got = self.__dict__["_schedules"] = {}
        return got

    def put_schedule(self, s: ScalingSchedule, *, now: float) -> None:
        """Add ``s``, or replace the schedule of its name; the step in force at ``now`` fires at the next
        :meth:`fire_schedules` (see the module's docstring). The same schedule again changes nothing."""
        old = self.schedules.get(s.name)
        if old is not None and old.schedule == s:
            return
        in_force = last_fire(s, at_or_before=now)
        # Cron times are whole minutes: from a second before the step in force, it is the first fire due.
        checked = now if in_force is None else in_force[0] - 1.0
        self.schedules[s.name] = _Held(s, checked, old.last if old is not None else None)

    def delete_schedule(self, name: str) -> bool:
        """Forget the schedule (what it set stays as it is). False: there was none of that name."""
        return self.schedules.pop(name, None) is not None

    def next_schedule_fire(self, *, after: float) -> float | None:
        """The soonest fire of any schedule after ``after`` (the simulator's next event), or None."""
        times = [_next(h.schedule, after=max(after, h.checked)) for h in self.schedules.values()]
        return min((t[0] for t in times if t is not None), default=None)

    def schedule_views(self, *, now: float) -> list[ScheduleView]:
        out = []
        for name in sorted(self.schedules):
            h = self.schedules[name]
            s = h.schedule
            nxt = _next(s, after=min(now, h.checked))
            out.append(
                ScheduleView(
                    name=name,
                    target_kind=s.target_kind,
                    target=s.target,
                    time_zone=s.time_zone,
                    steps=len(s.steps),
                    next_at=nxt[0] if nxt else None,
                    next_step=nxt[1] if nxt else None,
                    next_sets=s.steps[nxt[1]].describe() if nxt else "",
                    last=h.last,
                )
            )
        return out

    def fire_schedules(self, *, now: float) -> list[ScheduleFired]:
        """Fire every step whose time came since the last call (or the put), in time order (then schedule
        name, then step), and apply it. NOTICE changes for the jobs a step touched, and the RESIZED change
        of a service it shrank, come out of the host's next cycle."""
        due: list[tuple[float, str, int]] = []
        for name, h in self.schedules.items():
            if now > h.checked:
                due.extend((at, name, i) for at, i in fires_between(h.schedule, after=h.checked, until=now))
                h.checked = now
        out = []
        for at, name, i in sorted(due):
            h = self.schedules[name]
            fired = self._apply_step(h.schedule, i, at=at, now=now)
            h.last = fired
            out.append(fired)
        return out

    def apply_in_force(self, job: str, *, now: float) -> list[ScheduleFired]:
        """A service that arrived after its schedule's step: apply the step in force to it now (the caller
        calls this when it queues ``job``; a schedule's later steps reach it as they fire)."""
        out = []
        for name in sorted(self.schedules):
            h = self.schedules[name]
            s = h.schedule
            if s.target_kind is not TargetKind.SERVICE or s.target != job or now < h.checked:
                continue
            in_force = last_fire(s, at_or_before=now)
            if in_force is not None:
                h.last = self._apply_step(s, in_force[1], at=in_force[0], now=now)
                out.append(h.last)
        return out

    # ------------------------------------------------------------------ applying one step
    def _apply_step(self, s: ScalingSchedule, i: int, *, at: float, now: float) -> ScheduleFired:
        step = s.steps[i]
        if s.target_kind is TargetKind.QUEUE:
            what, touched = self._set_quota(s.target, step), self._queue_jobs(s.target)
        elif s.target_kind is TargetKind.SERVICE:
            what, touched = self._set_bounds(s.target, step, now=now), [s.target]
        else:
            what, touched = f"replicas -> {step.replicas}", []
        fired = ScheduleFired(
            schedule=s.name,
            step=i,
            at=at,
            target_kind=s.target_kind,
            target=s.target,
            summary=f"{s.label}: {what}",
            replicas=step.replicas if s.target_kind is TargetKind.DEPLOYMENT else None,
        )
        if self.options.explain:  # the service's host keeps events; the simulator's would only pay for them
            msg = f"schedule {s.name!r} step {i} ({step.cron}): {fired.summary}"
            self._held.extend(Change(job, ChangeKind.NOTICE, now, "ScheduledScaling", msg) for job in touched)
        return fired

    def _set_quota(self, queue: str, step: ScheduleStep) -> str:
        queues = self.sched.queues  # shared with the gang placer: changed in place, never rebound
        cfg = queues.get(queue)
        before = cfg.quota_gpus if cfg is not None else None
        after = step.quota_gpus
        queues[queue] = replace(cfg, quota_gpus=after) if cfg is not None else QueueConfig(name=queue, quota_gpus=after)
        self.cycles.freed = True  # a higher quota lets waiting jobs start: the next cycle looks at all of them
        held = self.state.queue_usage.get(queue)
        note = ""
        if after is not None and held is not None and held.gpu_milli / 1000 > after:
            note = f" (it holds {held.gpu_milli / 1000:g}: its running jobs go on, new ones wait)"
        return f"GPU quota {_quota(before)} -> {_quota(after)}{note}"

    def _queue_jobs(self, queue: str) -> list[str]:
        """The queued and running jobs of ``queue``, for their event logs."""
        return sorted(n for n, spec in self.specs.items() if spec.queue == queue)

    def _set_bounds(self, name: str, step: ScheduleStep, *, now: float) -> str:
        r = self.runs.get(name)
        if r is None or r.status.ended:
            return "no such service queued or running; nothing changed"
        if r.spec.kind is not JobKind.INFERENCE:
            return f"job {name!r} is not an inference service; nothing changed"
        old = r.spec
        lo = step.min_replicas if step.min_replicas is not None else old.min_units
        hi = step.max_replicas if step.max_replicas is not None else old.max_units
        if step.max_replicas is None and hi and lo > hi:
            hi = lo  # a minimum above the old maximum raises it: the bounds stay ordered
        if step.min_replicas is None and lo > hi > 0:
            lo = hi
        spec = replace(old, min_units=lo, max_units=hi)
        r.spec = spec
        self.specs[name] = spec
        before = f"{old.min_units or 1}-{replica_bounds(old)[1]}"
        what = f"replicas {before} -> {lo or 1}-{replica_bounds(spec)[1]}"
        rj = self.state.running.get(name)
        if rj is None:  # not started: it waits with the new bounds (its start request, within them)
            self._enqueue(self._start_request(r, now))
            return what
        have = rj.placement.units
        want_lo, want_hi = replica_bounds(spec)
        queued = self.pending.get(name)  # a running service's only pending entry: its scale-up
        if queued is not None and queued.units > want_hi:
            self._dequeue(name)
            self._scaling_memory().queued.pop(name, None)
        if have > want_hi:
            self._scale_down(r, have - want_hi)
            after = self.state.running[name].placement
            if after.units < have:
                self.cycles.freed = True
                msg = f"scaled down {have} -> {after.units} replicas: scheduled scaling ({what})"
                self._held.append(Change(name, ChangeKind.RESIZED, now, "ScaledDown", msg, after))
        elif have < want_lo and name not in self.pending:
            self._scale_up(r, have, want_lo)
            # The live service reports the scale-up once a cycle placed it (ServicesMixin.scaled).
            self._scaling_memory().queued[name] = QueuedScaleUp(have, f"scheduled scaling ({what})", r.generation)
        return what


def _quota(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _next(s: ScalingSchedule, *, after: float) -> tuple[float, int] | None:
    try:
        return next_fire(s, after=after)
    except (ValueError, ArithmeticError):  # validated to fire, but croniter looks only so far ahead
        return None


__all__ = ["ScalingMixin", "ScheduleView"]
