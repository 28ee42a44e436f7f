"""The service's scheduled scaling: the schedules it holds, kept in the store, fired by the runner on the
service clock (docs/scheduled-scaling.md, "In the service").

A schedule is a ``meta`` row ``schedule:NAME`` (a long name is hashed, as a node's hold is: the key column
holds 64 characters) whose value is JSON: the document (``schedule_to_doc``), the last step fired, and the
latest :data:`HISTORY` fires. The API commits the row first, then hands the schedule to the runner
(:class:`ScheduleOrder` through its inbox: the runner's thread is the host's only writer), so an answered
request survives a restart; :meth:`ScheduleKeeper.restore` hands the stored schedules to the runner again
at start-up, after its recovery restored the jobs and before its first cycle.

Firing: every step the runner calls :meth:`ScheduleKeeper.fire`, which asks the host
(:meth:`rackscale.host.scaling_host.ScalingMixin.fire_schedules`) for the steps whose time came and
records each: the counter, the log, and the row's last fire. The clock is the service clock, epoch seconds
(with ``--speed`` it runs faster than the wall, and so do the schedules).

A restart: quotas and bounds live in memory, so the step in force must be applied again. The host's
``put_schedule`` makes it due, and it is applied in the first step; if the row says it had fired already
(same time, same step), it is a re-application, not a fire: no count, no new history entry (the host still
notes it on the touched jobs' events, truthfully: it was applied again). If the step in force is newer than
the row's last fire (its time came while the service was down), it is a fire: applied once, recorded. The
earlier steps that came while down are superseded by it and not fired (each sets an absolute value).
A crash between applying a step and writing its row applies it again after the restart: at least once,
and applying a step twice leaves what applying it once does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from rackscale.host.scaling import ScalingSchedule, ScheduleFired, schedule_to_doc
from rackscale.host.scaling_docs import parse_schedule
from rackscale.model.spec_errors import SpecError
from rackscale.service.live import LiveCluster
from rackscale.service.store import Store, StoreUnavailable, meta

log = logging.getLogger("rackscale.service")

PREFIX = "schedule:"
HISTORY = 20  # fires kept per schedule (GET /v1/schedules/NAME shows them)


def schedule_key(name: str) -> str:
    key = PREFIX + name
    return key if len(key) <= 64 else PREFIX + "#" + hashlib.sha256(name.encode()).hexdigest()[:40]


@dataclass(frozen=True, slots=True, kw_only=True)
class FireRecord:
    """One fire, as the row keeps it: the step's time ``at``, and ``applied`` (the service clock when the
    runner applied it: later than ``at`` for a step that came while the service was down)."""

    at: float
    step: int
    summary: str
    applied: float

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "step": self.step, "summary": self.summary, "applied": self.applied}

    @staticmethod
    def of(d: Any) -> FireRecord:
        return FireRecord(
            at=float(d["at"]), step=int(d["step"]), summary=str(d["summary"]), applied=float(d["applied"])
        )


@dataclass(slots=True)
class Record:
    """A schedule as the service keeps it (the row's content)."""

    schedule: ScalingSchedule
    history: list[FireRecord] = field(default_factory=list)  # latest last

    @property
    def last(self) -> FireRecord | None:
        return self.history[-1] if self.history else None

    def encode(self) -> str:
        return json.dumps(
            {"doc": schedule_to_doc(self.schedule), "history": [f.to_json() for f in self.history[-HISTORY:]]},
            separators=(",", ":"),
        )


def decode(value: str, *, source: str) -> Record:
    """A row's value. Raises ValueError (or SpecError, a ValueError) when it no longer reads."""
    d = json.loads(value)
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    return Record(parse_schedule(d.get("doc"), source=source), [FireRecord.of(f) for f in d.get("history") or []])


def stored_records(store: Store, *, logged: set[str] | None = None) -> dict[str, Record]:
    """The schedules the store has, by name; a row that no longer reads is logged and skipped (once per
    key when the caller keeps ``logged``: the pick-up reads the rows every 0.5 s)."""
    with store.reader.connect() as c:
        rows = c.execute(select(meta.c.key, meta.c.value).where(meta.c.key.like(PREFIX + "%"))).all()
    out: dict[str, Record] = {}
    for key, value in rows:
        try:
            rec = decode(value, source=f"meta row {key}")
        except (ValueError, KeyError, TypeError) as e:
            if logged is None or key not in logged:
                if logged is not None:
                    logged.add(key)
                why = str(e).splitlines()[0] if isinstance(e, SpecError) else f"{type(e).__name__}: {e}"
                log.error("schedule row %s does not load (%s): skipped; put the schedule again", key, why)
            continue
        out[rec.schedule.name] = rec
    return out


@dataclass(frozen=True, slots=True)
class ScheduleOrder:
    """For the runner's inbox: put ``put`` (add or replace), or delete the schedule named ``delete``."""

    put: ScalingSchedule | None = None
    delete: str | None = None


class ScheduleKeeper:
    """The schedules (for the API: under ``lock``) and their rows; the runner's side of firing them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.records: dict[str, Record] = {}
        self.fired: Counter[str] = Counter()  # fires since this process started, per schedule (the metric)
        self._unsaved: set[str] = set()  # rows whose last write failed: written again every step
        # Restored at start-up: their first fire may be the step in force applied again (not recorded).
        self._restored: dict[str, FireRecord | None] = {}

    # ------------------------------------------------------------------ the API's side (any thread)
    def put(self, s: ScalingSchedule) -> tuple[Record, bool]:
        """Commit the schedule (a put of an existing name replaces its document, keeps its history); the
        record and whether it is new. Raises StoreUnavailable (then nothing changed)."""
        with self.lock:
            old = self.records.get(s.name)
            rec = Record(s, list(old.history) if old is not None else [])
            self.store.set_meta(schedule_key(s.name), rec.encode())
            self.records[s.name] = rec
            self._restored.pop(s.name, None)  # a new document: its step in force is a fire
        return rec, old is None

    def delete(self, name: str) -> bool:
        """Remove the schedule's row (what it set stays set); False if there is none."""
        with self.lock:
            if name not in self.records:
                return False
            self.store.delete_meta(schedule_key(name))
            del self.records[name]
            self._unsaved.discard(name)
        return True

    def restore(self) -> list[ScalingSchedule]:
        """Read the rows (at start-up); a row that no longer reads is logged and skipped, never fatal."""
        stored = stored_records(self.store)
        with self.lock:
            for name, rec in stored.items():
                self.records[name] = rec
                self._restored[name] = rec.last
        return [rec.schedule for rec in stored.values()]

    def take_over(self) -> None:
        """A replica that starts leading (again): the rows as they are now, each one restored (its step in
        force is applied again to the new live cluster, not recorded as a fire). What this replica read at
        its start, or recorded when it last led, is stale: another leader may have fired steps since, and a
        write of the stale copy would lose them. A row it failed to write then is the old term's, dropped."""
        stored = stored_records(self.store)
        with self.lock:
            self.records = {name: Record(rec.schedule, list(rec.history)) for name, rec in stored.items()}
            self._restored = {name: rec.last for name, rec in stored.items()}
            self._unsaved.clear()

    def reconcile(self, live: LiveCluster, stored: dict[str, Record], now: float) -> None:
        """A leader of replicas (the runner's thread): make the records and the host's schedules what the
        rows say, as puts and deletes through any replica's API left them. A schedule new here with fires
        in its row is taken as a restored one (its step in force is not fired again); a changed document
        is a new one (its step in force fires). A row whose write from here failed is left as it is here."""
        with self.lock:
            for name, rec in stored.items():
                if name in self._unsaved:
                    continue
                old = self.records.get(name)
                if old is None:
                    self._restored[name] = rec.last
                elif old.schedule != rec.schedule:
                    self._restored.pop(name, None)
                if old is None or old.schedule != rec.schedule:
                    self.records[name] = Record(rec.schedule, list(rec.history))
            for name in [n for n in self.records if n not in stored and n not in self._unsaved]:
                del self.records[name]
            wanted = {name: r.schedule for name, r in self.records.items()}
        for name, schedule in wanted.items():
            held = live.schedules.get(name)
            if held is None or held.schedule != schedule:
                live.put_schedule(schedule, now=now)
        for name in [n for n in live.schedules if n not in wanted]:
            live.delete_schedule(name)

    def snapshot(self) -> list[Record]:
        with self.lock:
            return [Record(r.schedule, list(r.history)) for _, r in sorted(self.records.items())]

    def get(self, name: str) -> Record | None:
        with self.lock:
            r = self.records.get(name)
            return None if r is None else Record(r.schedule, list(r.history))

    # ------------------------------------------------------------------ the runner's side (its thread)
    def take(self, live: LiveCluster, order: ScheduleOrder, now: float) -> None:
        if order.put is not None:
            live.put_schedule(order.put, now=now)
        if order.delete is not None:
            live.delete_schedule(order.delete)

    def fire(self, live: LiveCluster, now: float) -> list[ScheduleFired]:
        """Fire what is due; record each fire (a re-application after a restart is not one). Returns the
        fires recorded."""
        out: list[ScheduleFired] = []
        for f in live.fire_schedules(now=now):
            with self.lock:
                rec = self.records.get(f.schedule)
                if rec is None:  # deleted meanwhile (its order is on its way): nothing to record
                    continue
                last = self._restored.pop(f.schedule, None)
                if last is not None and (f.at, f.step) <= (last.at, last.step):
                    log.info("schedule %s: step %d in force again after a restart: %s", f.schedule, f.step, f.summary)
                    continue
                rec.history = [*rec.history, FireRecord(at=f.at, step=f.step, summary=f.summary, applied=now)]
                rec.history = rec.history[-HISTORY:]
                self._unsaved.add(f.schedule)
            self.fired[f.schedule] += 1
            log.info("schedule %s fired step %d: %s", f.schedule, f.step, f.summary)
            out.append(f)
        self._save()
        return out

    def _save(self) -> None:
        """Write the rows of the fires recorded (a row that fails is written again next step)."""
        if not self._unsaved:
            return
        with self.lock:
            for name in sorted(self._unsaved):
                rec = self.records.get(name)
                try:
                    if rec is not None:
                        self.store.set_meta(schedule_key(name), rec.encode())
                except StoreUnavailable as e:
                    log.warning("schedule %s: its last fire is not stored yet (%s); written again next step", name, e)
                    return
                self._unsaved.discard(name)


__all__ = [
    "HISTORY",
    "FireRecord",
    "Record",
    "ScheduleKeeper",
    "ScheduleOrder",
    "decode",
    "schedule_key",
    "stored_records",
]
