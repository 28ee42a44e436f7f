"""The store's one writer thread: every write is queued to it and waits for its commit, and new jobs that
arrive together share one transaction (group commit). A fault of the store (:func:`unavailable`) fails the
write with :class:`StoreUnavailable` and is remembered (``failing``) until a write commits again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.engine import Connection, Engine

from rackscale.service.phase import ACTIVE
from rackscale.service.store.faults import DuplicateJob, RejectedJob, StoreUnavailable, unavailable
from rackscale.service.store.rows import job_row
from rackscale.service.store.schema import INSERT_RETURNING, insert_new_statement, jobs

log = logging.getLogger("rackscale.service")

MAX_GROUP = 512  # writes taken into one group commit at most
GATHER_S = 0.003  # how long a new job waits for others to commit with


@dataclass(slots=True)
class _Write:
    """One queued write: a new job's row (group-committed), or a function run in its own transaction."""

    insert: dict[str, Any] | None = None
    fn: Callable[[Connection], Any] | None = None
    future: Future[Any] = field(default_factory=Future)


class StoreWriter:
    """The write half of :class:`~rackscale.service.store.Store`: ``engine`` (its connections take the write
    lock up front), the queue and the thread that drains it. ``write_error``: the last write's fault, until
    one commits."""

    engine: Engine
    write_error: StoreUnavailable | None

    def _start_writer(self) -> None:
        self.write_error = None
        self._insert_new = insert_new_statement(self.engine.dialect.name)
        self._writes: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="rackscale-store-writer", daemon=True)
        self._writer.start()

    def _stop_writer(self) -> None:
        """Let the writer finish what is queued, then end it."""
        self._writes.put(None)
        self._writer.join(timeout=30)

    @property
    def failing(self) -> str | None:
        """Why the store's last write failed (disk full, read-only, ...), with the fix; None when it took
        its last write."""
        e = self.write_error
        return str(e) if e is not None else None

    def _queue_insert(self, row: dict[str, Any]) -> Future[Any]:
        """Queue a new job's row for the next group commit; the future holds its JobRow once committed."""
        w = _Write(insert=row)
        self._writes.put(w)
        return w.future

    def _call(self, fn: Callable[[Connection], Any]) -> Any:
        """Run ``fn`` in a transaction of its own on the writer thread; its result once committed."""
        w = _Write(fn=fn)
        self._writes.put(w)
        return w.future.result()

    def _write_loop(self) -> None:
        while True:
            first = self._writes.get()
            if first is None:
                return
            batch = [first]
            stop = False
            # A new job waits up to GATHER_S for others to share its commit: a transaction costs far more
            # than a row (about 400 us alone, 35 us a row in a batch of 64).
            deadline = time.monotonic() + (GATHER_S if first.insert is not None else 0.0)
            while len(batch) < MAX_GROUP:
                try:
                    left = deadline - time.monotonic()
                    w = self._writes.get(timeout=left) if left > 0 else self._writes.get_nowait()
                except queue.Empty:
                    break
                if w is None:
                    stop = True
                    break
                batch.append(w)
            # In arrival order; a run of inserts is one transaction.
            i = 0
            while i < len(batch):
                j = i
                while j < len(batch) and batch[j].insert is not None:
                    j += 1
                if j > i:
                    self._insert_many(batch[i:j])
                    i = j
                    continue
                self._run_one(batch[i])
                i += 1
            if stop:
                return

    def _run_one(self, w: _Write) -> None:
        assert w.fn is not None
        try:
            with self.engine.begin() as c:
                result = w.fn(c)
        except BaseException as e:  # handed to the waiting caller, who decides
            down = unavailable(e) if isinstance(e, Exception) else None
            if down is not None:
                self._failed(down)
            w.future.set_exception(down or e)
        else:
            self._took()
            w.future.set_result(result)

    def _failed(self, e: StoreUnavailable) -> None:
        if self.write_error is None:
            log.error("%s", e)
        self.write_error = e

    def _took(self) -> None:
        if self.write_error is not None:
            log.warning("the store takes writes again (it failed with: %s)", self.write_error.reason)
            self.write_error = None

    def _insert_many(self, writes: list[_Write]) -> None:
        """One transaction for a batch of new jobs. A name an active run holds (or twice in the batch) makes that
        job's future raise DuplicateJob; the others commit. If the batch fails for one bad row (a value the
        database refuses), each job is tried again alone: only the bad one fails, with RejectedJob. If it
        fails for a fault of the store, every job of it gets StoreUnavailable."""
        rows = [w.insert for w in writes if w.insert is not None]
        try:
            with self.engine.begin() as c:
                if self._insert_new is not None:  # INSERT .. ON CONFLICT DO NOTHING RETURNING: one statement
                    got = dict(c.execute(self._insert_new, rows).all())
                else:
                    names = [r["name"] for r in rows]
                    taken = set(
                        c.execute(
                            select(jobs.c.name).where(and_(jobs.c.name.in_(names), jobs.c.status.in_(ACTIVE)))
                        ).scalars()
                    )
                    fresh = [r for r in dict((r["name"], r) for r in reversed(rows)).values() if r["name"] not in taken]
                    got = dict(c.execute(INSERT_RETURNING, fresh).all()) if fresh else {}
        except Exception as e:
            down = unavailable(e)
            if down is not None:
                self._failed(down)
                for w in writes:
                    w.future.set_exception(down)
            elif len(writes) > 1:
                for w in writes:  # one transaction each: find the bad row, commit the others
                    self._insert_many([w])
            else:
                reason = (str(getattr(e, "orig", e)).strip().splitlines() or [type(e).__name__])[0][:300]
                log.warning("the store refused job %r: %s", rows[0]["name"][:80], reason)
                writes[0].future.set_exception(RejectedJob(rows[0]["name"], reason))
            return
        except BaseException as e:
            for w in writes:
                w.future.set_exception(e)
            return
        self._took()
        for w, r in zip(writes, rows, strict=True):
            seq = got.pop(r["name"], None)  # the first job of a name gets it; a second one is a duplicate
            if seq is not None:
                extra = {"seq": seq, "started": None, "ended": None, "placement": None, "exit_code": None}
                w.future.set_result(job_row({**r, **extra}))
            else:
                w.future.set_exception(DuplicateJob(r["name"]))
