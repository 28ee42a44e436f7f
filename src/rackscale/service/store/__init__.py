"""Persistent state: every accepted job and every change to it, committed before the service replies.

SQLAlchemy Core over SQLite (WAL, the default, in the data directory) or any URL SQLAlchemy takes
(PostgreSQL: ``postgresql+psycopg://...``). Status changes are conditional updates (``WHERE status IN
...``), so a cancellation and a placement racing for the same job cannot both win: the one committed first
does, and the other learns it from the rows it could not change.

Faults (disk full, a read-only file, an I/O error, a lost PostgreSQL connection) make a write raise
:class:`StoreUnavailable`, which says the cause and the fix; nothing of that write was committed, and the
store remembers it (``failing``) until a write commits again. A row the database refuses for itself (a
value too long for its column) fails alone: the others of its group commit.

Every submission is a *run*, one row, its ``seq`` its id. A name is unique among the active runs (pending,
running: a partial unique index), so a name whose job has ended can be submitted again: a new run, the ended
ones kept as history. Reads by name (``get``, ``events``, ``cancel``) take the latest run; the event log
belongs to a run (``events.run``). An older store (names unique over all rows, events keyed by name) is
migrated when it is opened (:mod:`~rackscale.service.store.migrate`).

The package: ``schema`` (tables, indexes, statements), ``rows`` (rows as values, lenient decoding),
``faults`` (its exceptions), ``writer`` (the writer thread, group commit), ``changes`` (a cycle's changes),
``reads``, ``core`` (:class:`Store`), ``migrate`` and ``files`` (the store file before it is opened). What
callers use is imported from here.
"""

from rackscale.service.phase import ACTIVE, STATUSES, JobPhase
from rackscale.service.store.core import Store
from rackscale.service.store.faults import BrokenStore, DuplicateJob, RejectedJob, StoreUnavailable, unavailable
from rackscale.service.store.files import check_store_file, sqlite_file_problem, sqlite_path, store_location
from rackscale.service.store.rows import (
    COLUMN_TYPES,
    SOUND_TYPES,
    EventRow,
    JobRow,
    decode_placement,
    encode_placement,
    job_row,
    stored_doc,
)
from rackscale.service.store.schema import JOB_COLUMNS, events, jobs, meta, metadata
from rackscale.service.store.writer import GATHER_S, MAX_GROUP

# The phases under the names they had as plain strings, for the callers that import them from here.
PENDING, RUNNING = JobPhase.PENDING, JobPhase.RUNNING
COMPLETED, FAILED, CANCELLED = JobPhase.COMPLETED, JobPhase.FAILED, JobPhase.CANCELLED

__all__ = [
    "ACTIVE",
    "CANCELLED",
    "COLUMN_TYPES",
    "COMPLETED",
    "FAILED",
    "GATHER_S",
    "JOB_COLUMNS",
    "MAX_GROUP",
    "PENDING",
    "RUNNING",
    "SOUND_TYPES",
    "STATUSES",
    "BrokenStore",
    "DuplicateJob",
    "EventRow",
    "JobPhase",
    "JobRow",
    "RejectedJob",
    "Store",
    "StoreUnavailable",
    "check_store_file",
    "decode_placement",
    "encode_placement",
    "events",
    "job_row",
    "jobs",
    "meta",
    "metadata",
    "sqlite_file_problem",
    "sqlite_path",
    "store_location",
    "stored_doc",
    "unavailable",
]
