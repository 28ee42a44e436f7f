"""The runner: the live cluster driven by the service clock, in one thread.

Each step: take the submissions and cancellations the API queued, the exits the backend saw, run a
scheduling cycle, commit every change in one transaction, and only then start or stop work on the backend.
So a crash at any point leaves the store saying no more than what is true or about to be redone: a job the
store says is running was either started or is started again by ``adopt`` on restart.

When the commit fails (disk full, a read-only store, a lost database connection) the step's changes, already
made in memory, are kept and committed first thing in every following step; until they are, no cycle runs,
the backend is neither polled (no exit is lost) nor told to act on them, and ``unhealthy`` says why. The
first commit that goes through makes the runner healthy again: no restart is needed. A backend that raises
fails one job (``start``) or is logged and counted (``stop``, ``poll``), never the step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Protocol

from rackscale.backends.base import Backend, Exit, RunningJobRecord, admitted, resize, warn
from rackscale.backends.health import NodeHealth, health_of
from rackscale.host.autoscale import Reading
from rackscale.host.drains import HoldOrder
from rackscale.model.spec_errors import SpecError
from rackscale.model.specs import job_from_dict
from rackscale.model.workload import JobSpec
from rackscale.service.clock import ServiceClock
from rackscale.service.live import CANCELLED, FAILED, PREEMPTED, RESIZED, SCHEDULED, Change, LiveCluster
from rackscale.service.load_signal import LiveAutoscaler
from rackscale.service.pickup import Picked, StorePickup
from rackscale.service.schedules_store import ScheduleKeeper, ScheduleOrder
from rackscale.service.store import PENDING, RUNNING, JobRow, Store, StoreUnavailable, unavailable
from rackscale.service.store.lease import Fenced

log = logging.getLogger("rackscale.service")


class LeaderGuard(Protocol):
    """The lease of a highly available service (rackscale.service.leader): the generation a leader's writes
    carry, and whether it may act now (its lease renewed within the renew deadline, on its own monotonic
    clock: no I/O, asked before every backend action)."""

    @property
    def generation(self) -> int | None: ...

    def acting(self) -> bool: ...


class CycleObserver(Protocol):
    def cycle(self, *, seconds: float | None, changes: list[Change]) -> None:
        """After each step: how long its scheduling cycle took (None: no cycle was needed), what changed."""
        ...


@dataclass(slots=True)
class _Unsaved:
    """A step's changes, made in memory, that the store has not committed yet."""

    changes: list[Change]
    seconds: float | None  # its cycle's time, for the observer
    since: float  # wall clock (monotonic) of the first failed commit


@dataclass(frozen=True, slots=True)
class Submitted:
    """The store committed a job, as its run ``run`` (its seq; 0: unknown)."""

    spec: JobSpec
    run: int = 0


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The store cancelled ``name``'s run ``run`` (0: whichever is here)."""

    name: str
    run: int = 0


Message = Submitted | Cancelled | HoldOrder | ScheduleOrder
"""What the API hands the runner (from any thread), taken in order at the start of a step."""


PROBE_S = 0.5  # after a failed write with nothing to commit: how often the runner tries a small one


class Runner:
    def __init__(
        self,
        live: LiveCluster,
        store: Store,
        backend: Backend,
        clock: ServiceClock,
        *,
        observer: CycleObserver | None = None,
        autoscaler: LiveAutoscaler | None = None,
        interval_s: float = 0.05,
        min_gap_s: float = 0.01,
        max_busy: float = 0.5,
    ) -> None:
        self.live = live
        self.store = store
        self.backend = backend
        self.clock = clock
        self.observer = observer
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        # The most of the wall clock steps may take (0-1]: after a step of d seconds of work the runner rests
        # d * (1 - max_busy) / max_busy, at least min_gap_s. Under a big backlog a cycle is ~0.2 s of Python
        # holding the GIL; run back to back they leave the API's event loop the gaps between GIL switches
        # (submissions at 1,000/s waited seconds). KAI-Scheduler and Volcano run a cycle a period (1 s).
        self.max_busy = max_busy
        # ``lock`` is held while the live cluster changes and its changes are committed (so a reader never
        # sees the memory ahead of the store); readers take it briefly. It is never held across a backend
        # call: API reads and /metrics do not wait on sbatch or a process start. ``_stepping`` makes steps
        # (and so the backend calls, which come from one thread at a time) one at a time.
        self.lock = threading.RLock()
        self._stepping = threading.Lock()
        self._inbox: deque[Message] = deque()
        # The store's run (seq) of each job in the live cluster: its changes carry it (Change.run), so one
        # decided for a run that has ended meanwhile never lands on a newer run of the same name.
        self._runs: dict[str, int] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Why the runner cannot go on now (its last commit failed; it retries every step), None when healthy.
        self.unhealthy: str | None = None
        self.errors = 0  # steps that raised, and backend calls that raised (counted, logged, gone past)
        self.last_step = 0.0
        self._unsaved: _Unsaved | None = None
        self._start_failures: list[Exit] = []  # backend.start raised: fed as exits by the next step
        self._stops: list[str] = []  # cancelled running jobs to stop once the step leaves the lock
        self._probed = 0.0
        self._cycle_seconds: float | None = None  # the last _work's cycle time (None: no cycle ran)
        self._reports: list[NodeHealth] | None = None  # the backend's health this step (None: no report)
        # Inference services' replicas follow their load (service/load_signal.py); None: no pass due.
        self.autoscaler = autoscaler or LiveAutoscaler()
        self._loads: dict[str, Reading] | None = None
        # A drain's stop signal (backend ``warn``), once per job and drain; a warned job's failed exit in the
        # grace (it stopped on the signal) waits for the drain's deadline, which requeues it (_drain_signals).
        self._warned: set[str] = set()
        self._held: dict[str, Exit] = {}
        # Scheduled scaling (rackscale.service.schedules_store): the API puts, the runner fires each step.
        self.schedules = ScheduleKeeper(store)
        # A highly available service (rackscale.service.leader) sets these: the lease every commit and
        # backend action is fenced by, the pick-up of what other replicas' APIs committed, whether this
        # replica leads (a standby's inbox takes nothing: the store has it, the leader picks it up).
        self.guard: LeaderGuard | None = None
        self.pickup: StorePickup | None = None
        self.leading = True
        self.fenced: str | None = None  # why a commit was refused by the lease (then this replica stops)
        self.refused = 0  # backend actions not taken: the lease was no longer this replica's
        self.last_action: float | None = None  # wall clock (time.time) of the last backend action taken

    @property
    def problem(self) -> str | None:
        """Why the service does not take work now (the runner cannot commit, or the store's last write
        failed), None when it does. Both clear by themselves once a write commits."""
        return self.unhealthy or self.store.failing

    # ------------------------------------------------------------------ from the API (any thread)
    def submitted(self, spec: JobSpec, run: int = 0) -> None:
        """A job the store has committed, as its run ``run`` (its seq; 0: unknown)."""
        if not self.leading:
            return
        self._inbox.append(Submitted(spec, run))
        self._wake.set()

    def cancelled(self, name: str, run: int = 0) -> None:
        """The store has cancelled ``name``'s run ``run`` (0: whichever is here)."""
        if not self.leading:
            return
        self._inbox.append(Cancelled(name, run))
        self._wake.set()

    def held(self, order: HoldOrder) -> None:
        """Node holds (cordon, drain, uncordon) the store has committed (rackscale.service.nodes_api).

        A leader of replicas (``pickup`` set) takes the holds from the store instead, every replica's alike
        (``_picked``): the order only asks for the read at the next step. Applying it too could go back in
        time: a read already newer than an order still in the inbox, a drain applied after its uncordon."""
        if self.pickup is not None:
            self.pickup.soon = True
        else:
            self._inbox.append(order)
        self._wake.set()

    def scheduled(self, order: ScheduleOrder) -> None:
        """A schedule put or deleted, committed by the store (rackscale.service.schedules_api). A leader of
        replicas reads the rows instead (as for ``held``)."""
        if self.pickup is not None:
            self.pickup.soon = True
        else:
            self._inbox.append(order)
        self._wake.set()

    @contextmanager
    def reading(self) -> Iterator[LiveCluster]:
        with self.lock:
            yield self.live

    # ------------------------------------------------------------------ lifecycle
    def recover(self) -> dict[str, int]:
        """Rebuild the live cluster from the store, then let the backend adopt what was running."""
        now = self.clock.now()
        running: dict[str, RunningJobRecord] = {}
        broken: list[Change] = []
        counts = {"running": 0, "pending": 0}
        for row in self.store.jobs(status=[RUNNING, PENDING], limit=10**9):
            if row.corrupt is not None:  # its JSON or text does not decode: fail it, say why
                broken.append(Change(row.name, FAILED, now, "CorruptRecord", row.message, run=row.seq))
                continue
            try:
                spec = spec_of(row)
            except SpecError as e:  # stored under older rules that no longer accept it: fail it, say why
                why = f"the stored spec no longer loads: {e}"
                broken.append(Change(row.name, FAILED, now, "InvalidSpec", why, run=row.seq))
                continue
            if row.status == RUNNING and row.placement is not None and row.started is not None:
                try:
                    self.live.restore(spec, row.placement, started=row.started, now=now)
                except ValueError as e:  # the placement no longer fits this cluster (e.g. a changed spec)
                    why = f"cannot restore: {e}"
                    broken.append(Change(row.name, FAILED, now, "LostPlacement", why, run=row.seq))
                    continue
                running[row.name] = RunningJobRecord(spec, row.placement, row.started)
                counts["running"] += 1
            else:
                self.live.submit(admitted(self.backend, spec))
                counts["pending"] += 1
            self._runs[row.name] = row.seq
        exits = self.backend.adopt(running, now)
        changes = broken + self._stamped([c for e in exits if (c := self._exit(e, now)) is not None])
        try:
            self.store.apply(changes, generation=self._generation)
        except StoreUnavailable as e:  # start unhealthy: the first step commits them once the store can
            self._unsaved = _Unsaved(changes, None, time.monotonic())
            self.unhealthy = str(e)
            log.error("%s; %d change(s) from the recovery kept in memory until it can", e, len(changes))
        return counts

    def take_over(self, live: LiveCluster, clock: ServiceClock) -> dict[str, int]:
        """A standby that won the lease: start from the store, as a restart does (``recover``), on a new live
        cluster (what this replica knew when it last led is stale) and the clock resumed from the leader's."""
        with self._stepping, self.lock:
            self.live, self.clock = live, clock
            # Neither the holds nor the schedules put through this replica's API while it stood by: the
            # pickup reads them all from the store at the first step (``held``, ``scheduled``).
            self._inbox.clear()
            self._runs.clear()
            self._unsaved, self.unhealthy, self.fenced = None, None, None
            self._start_failures, self._stops = [], []
            self._warned.clear()
            self._held.clear()
            self._reports = self._loads = None
            self.schedules.take_over()
            self.leading = True
            return self.recover()

    def halt(self) -> None:
        """Stop stepping (a leader that lost its lease), leaving the backend as it is: what runs there goes
        on, and the new leader adopts it."""
        self.leading = False
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    @property
    def _generation(self) -> int | None:
        return self.guard.generation if self.guard is not None else None

    def _may_act(self, what: str, job: str) -> bool:
        """Whether a backend action may go out now: never once the lease may have passed to another replica
        (a paused leader that wakes up), nor after a commit the lease refused."""
        if self.guard is None or (self.fenced is None and self.guard.acting()):
            self.last_action = time.time()
            return True
        self.refused += 1
        log.warning("not leading any more: %s of %s not sent to the %s backend", what, job, self.backend.name)
        return False

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rackscale-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._stepping:  # never while a step still runs (backends are called from one thread at a time)
            self.backend.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            # Paced by the step's work, not its waits on a backend (sbatch, a process start hold no GIL): its
            # thread's CPU, or the cycle's wall time when longer (a cycle waits for the GIL it then holds).
            began = time.thread_time()
            self._cycle_seconds = None
            try:
                self.step()
            except Exception as e:  # a bug must not stop the cluster: say it, count it, go on
                self.errors += 1
                if (down := unavailable(e)) is not None:  # a read of the store failed (its server went away)
                    log.error("runner step: %s", down)
                else:
                    log.exception("runner step failed: %s", e)
            busy = max(time.thread_time() - began, self._cycle_seconds or 0.0)
            self._stop.wait(self.rest_after(busy))  # submissions batch up into one cycle meanwhile

    def rest_after(self, step_s: float) -> float:
        """How long the runner rests after a step whose work took ``step_s`` (``max_busy``)."""
        return max(self.min_gap_s, step_s * (1.0 - self.max_busy) / self.max_busy)

    # ------------------------------------------------------------------ one step
    def step(self) -> list[Change]:
        """One step; returns the changes it committed (none while the store cannot commit)."""
        done: list[tuple[float | None, list[Change]]] = []
        with self._stepping:
            if self.guard is not None and (self.fenced is not None or not self.guard.acting()):
                return []  # the lease may be another replica's: nothing more from here
            now = self.clock.now()
            if self._unsaved is not None:  # a step whose commit failed: commit it first, or do nothing else
                kept = self._unsaved
                with self.lock:
                    rejected = self._commit()
                if rejected is None:
                    return []
                done.append((kept.seconds, kept.changes))
                self._act(kept.changes, rejected, now)
                self._drain_signals(kept.changes, now)
            exits = self._poll(now)  # backend I/O: outside the lock
            exits = self._held_back(exits)
            self._reports = self._health(now)  # after the poll: a node that failed a job is down in it
            self._loads = self.autoscaler.read(self.live, now)  # Prometheus I/O: outside the lock too
            picked = self.pickup.read() if self.pickup is not None and self.pickup.due() else None  # store I/O
            with self.lock:  # the memory and the store change together, as readers see them
                if picked is not None:
                    self._picked(picked, now)
                changes = self._work(now, exits)
                seconds = self._cycle_seconds
                self._unsaved = _Unsaved(changes, seconds, time.monotonic())
                rejected = self._commit()
            stops, self._stops = self._stops, []
            for name in stops:  # cancelled running jobs (the store says so already): stop them now
                self._stop_job(name, now)
            if rejected is not None:  # backend I/O, once committed: outside the lock
                done.append((seconds, changes))
                self._act(changes, rejected, now)
                self._drain_signals(changes, now)
            self.last_step = now
            if not changes and self.store.failing and time.monotonic() - self._probed >= PROBE_S:
                self._probed = time.monotonic()  # nothing to commit: does the store take writes again?
                self.store.probe()
        if self.observer is not None:
            for secs, chs in done:
                self.observer.cycle(seconds=secs, changes=chs)
        return [c for _, chs in done for c in chs]

    def _poll(self, now: float) -> list[Exit]:
        """The exits to feed this step: starts that failed last step, and what the backend saw end."""
        exits, self._start_failures = self._start_failures, []
        try:
            exits += self.backend.poll(now)
        except Exception as e:
            self.errors += 1
            name = type(e).__name__
            log.exception("backend %s: poll raised %s: %s (polled again next step)", self.backend.name, name, e)
        return exits

    def _held_back(self, exits: list[Exit]) -> list[Exit]:
        """The exits to feed: a warned job that failed while its drain's grace runs (it stopped on the signal)
        is held, and requeued at the deadline (drains_due) like one still running; its exit is fed only if
        the drain is called off first. An exit 0 is fed at once: the job is done."""
        notices = self.live.drain_notices()  # the runner's thread is the host's only writer: no lock needed
        out = [e for e in exits if e.ok or e.job not in self._warned or e.job not in notices]
        self._held.update((e.job, e) for e in exits if e not in out)
        for job in [j for j in self._held if j not in notices]:
            out.append(self._held.pop(job))
        return out

    def _drain_signals(self, changes: list[Change], now: float) -> None:
        """Send the drain's stop signal to each job a drain in its grace newly lists (kubectl drain: SIGTERM,
        the grace, then the kill), for a backend with ``warn``; forget the jobs the drain has requeued."""
        for ch in changes:
            if ch.type == PREEMPTED:
                self._held.pop(ch.job, None)
                self._warned.discard(ch.job)
        notices = self.live.drain_notices()
        self._warned &= set(notices)
        for job in sorted(set(notices) - self._warned):
            ends = [
                h.deadline
                for n, h in self.live.holds.items()
                if h.deadline is not None and job in self.live.state.node_jobs[n]
            ]
            self._warned.add(job)
            if not self._may_act("warn", job):
                return
            try:
                if not warn(self.backend, job, now=now, grace_s=max(0.0, min(ends, default=now) - now)):
                    return  # a backend that cannot send it (the simulated one): nothing to do for any job
            except Exception as e:
                self.errors += 1
                log.exception("backend %s: warn of %s raised %s: %s", self.backend.name, job, type(e).__name__, e)

    def _health(self, now: float) -> list[NodeHealth] | None:
        """The backend's health report (backends bound its cost: they re-read at their own interval); one
        that raises is the backend's error, counted and logged, and the host keeps what it knew."""
        try:
            return health_of(self.backend, now)
        except Exception as e:
            self.errors += 1
            name = type(e).__name__
            log.exception("backend %s: health raised %s: %s (asked again next step)", self.backend.name, name, e)
            return None

    def _commit(self) -> set[str] | None:
        """Commit the unsaved changes: the jobs the store rejected (cancelled meanwhile), or None when the
        commit failed and the changes are kept for the next step. The backend acts only on committed ones."""
        kept = self._unsaved
        assert kept is not None
        try:
            rejected = self.store.apply(kept.changes, generation=self._generation)
        except Fenced as e:  # another replica leads: these changes are its to decide, never to be made here
            self.fenced = str(e)
            self._unsaved = None
            log.error("%s: %d change(s) dropped, this replica stops leading", e, len(kept.changes))
            return None
        except Exception as e:
            why = str(e) if isinstance(e, StoreUnavailable) else f"the store refused a commit: {type(e).__name__}: {e}"
            if self.unhealthy is None:
                log.error(
                    "%s; %d change(s) kept in memory and committed again every step (no cycle, no backend "
                    "action until then)",
                    why,
                    len(kept.changes),
                )
            self.unhealthy = why
            return None
        self._unsaved = None
        if self.unhealthy is not None:
            log.warning(
                "the store committed the %d kept change(s) after %.1f s: healthy again",
                len(kept.changes),
                time.monotonic() - kept.since,
            )
            self.unhealthy = None
        return rejected

    def _work(self, now: float, exits: list[Exit]) -> list[Change]:
        """Take the inbox, the backend's exits and a scheduling cycle: the changes, made in memory (under the
        lock). The interval since the last step is accounted first, at the state it had."""
        self.live.account(now)
        changes: list[Change] = []
        while self._inbox:
            match self._inbox.popleft():
                case Submitted(spec, run):
                    held = self._runs.get(spec.name)
                    if run and held and held != run:
                        # A new run of a name whose run here the store has ended: cancelled, with the cancel
                        # still on its way (two clients). The store took the new one only once no run was active.
                        self._drop(spec.name, now)
                    if spec.name not in self.live.specs:
                        self.live.submit(admitted(self.backend, spec))
                        self._runs[spec.name] = run
                case Cancelled(name, run):
                    if not (run and (held := self._runs.get(name)) and held != run):  # else: an earlier run's, done
                        self._drop(name, now)
                case HoldOrder(holds):  # a drain whose grace is over stops its jobs here (PREEMPTED)
                    changes += self.live.put_holds(holds, now)
                case ScheduleOrder() as order:
                    self.schedules.take(self.live, order, now)
        self.schedules.fire(self.live, now)  # quotas and bounds: this step's cycle sees them (its changes too)
        if self._reports is not None:  # failed parts requeue their jobs before the exits they caused (NODE_FAIL)
            changes += self.live.apply_health(self._reports, now)
        for ex in exits:
            if (c := self._exit(ex, now)) is not None:
                changes.append(c)
        if self._loads is not None:  # the autoscaler's pass: scale-downs now, scale-ups queued for the cycle
            changes += self.autoscaler.apply(self.live, now, self._loads)
        t0 = time.perf_counter()
        before = self.live.kpi.cycles
        changes += self.live.cycle(now)
        changes += self.live.scaled(now)  # the scale-ups this cycle placed
        self._cycle_seconds = time.perf_counter() - t0 if self.live.kpi.cycles != before else None
        return self._stamped(changes)

    def _picked(self, picked: Picked, now: float) -> None:
        """What other replicas' APIs committed (service/pickup.py), before this step's inbox: a run not known
        here is submitted, a cancelled run known here dropped."""
        for row in picked.pending:
            if self._runs.get(row.name) == row.seq or row.corrupt is not None:
                continue  # known (or the inbox's), or unreadable: recovery fails such a row at the next start
            try:
                spec = spec_of(row)
            except SpecError as e:
                log.error("picked-up job %s does not load: %s", row.name, e)
                continue
            if row.name in self.live.specs:
                self._drop(row.name, now)  # an earlier run of the name, ended in the store meanwhile
            self.live.submit(admitted(self.backend, spec))
            self._runs[row.name] = row.seq
        for name, run in picked.cancels:
            if run is not None and self._runs.get(name) == run:
                self._drop(name, now)
        have = self.live.holds
        changed = [
            (n, picked.holds.get(n))
            for n in sorted(set(have) | set(picked.holds))
            if picked.holds.get(n) != have.get(n)
        ]
        if changed:  # first in the step's inbox: its changes (a drain due now stops its jobs) are the step's
            self._inbox.appendleft(HoldOrder(tuple(changed)))
        if picked.schedules is not None:  # before this step fires what is due
            self.schedules.reconcile(self.live, picked.schedules, now)

    def _drop(self, name: str, now: float) -> None:
        """Forget a job the store has cancelled (no change to commit: the store says so already); a running
        one is stopped on the backend once the step leaves the lock."""
        running = name in self.live.state.running
        if self.live.cancel(name, now) is not None:
            self._runs.pop(name, None)
            if running:
                self._stops.append(name)

    def _stamped(self, changes: list[Change]) -> list[Change]:
        """The changes with the run each was decided for; a run that ended is forgotten after its last."""
        out: list[Change] = []
        for ch in changes:
            run = self._runs.get(ch.job, 0)
            out.append(replace(ch, run=run) if run and not ch.run else ch)
            if ch.type.ends:
                self._runs.pop(ch.job, None)
        return out

    def _act(self, changes: list[Change], rejected: set[str], now: float) -> None:
        for ch in changes:
            if ch.job in rejected:
                # Cancelled between the decision and the commit: undo it here, never start it.
                with self.lock:
                    forgot = ch.type in (SCHEDULED, PREEMPTED, RESIZED) and self.live.cancel(ch.job, now) is not None
                if forgot and self._runs.get(ch.job) == ch.run:
                    self._runs.pop(ch.job, None)
                if ch.type in (PREEMPTED, RESIZED):  # it runs on the backend still: stop it
                    self._stop_job(ch.job, now)
                continue
            if ch.type == SCHEDULED and ch.placement is not None:
                spec = self.live.specs[ch.job]
                if not self._may_act("start", ch.job):
                    continue
                try:
                    self.backend.start(spec, ch.placement, now=now)
                except Exception as e:  # this job's failure (fed as its exit next step), not the cycle's
                    self.errors += 1
                    why = f"the backend could not start it: {type(e).__name__}: {e}"
                    log.exception("backend %s: start of %s raised: %s", self.backend.name, ch.job, why)
                    self._start_failures.append(Exit(ch.job, False, None, why))
            elif ch.type == PREEMPTED:
                self._stop_job(ch.job, now)
            elif ch.type == RESIZED and ch.placement is not None:
                if not self._may_act("resize", ch.job):
                    continue
                try:
                    resize(self.backend, self.live.specs[ch.job], ch.placement, now=now)
                except Exception as e:  # as a failed start: the job's failure, fed as its exit next step
                    self.errors += 1
                    why = f"the backend could not resize it: {type(e).__name__}: {e}"
                    log.exception("backend %s: resize of %s raised: %s", self.backend.name, ch.job, why)
                    self._start_failures.append(Exit(ch.job, False, None, why))

    def _stop_job(self, job: str, now: float) -> None:
        if not self._may_act("stop", job):
            return
        try:
            self.backend.stop(job, now=now)
        except Exception as e:
            self.errors += 1
            log.exception("backend %s: stop of %s raised %s: %s", self.backend.name, job, type(e).__name__, e)

    def _exit(self, e: Exit, now: float) -> Change | None:
        return self.live.exited(e.job, now, ok=e.ok, exit_code=e.exit_code, reason=e.reason)


def spec_of(row: JobRow) -> JobSpec:
    """The stored document, re-validated, with the name, queue and submit time the service gave it."""
    spec = job_from_dict(row.doc)
    return replace(spec, name=row.name, queue=row.queue, submit_time=row.submitted)


__all__ = ["CANCELLED", "CycleObserver", "LeaderGuard", "Runner", "spec_of"]
