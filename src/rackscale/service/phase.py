"""The phases of a job's run, as the store keeps them (``jobs.status``) and the API shows them.

A module of its own, with no dependency, so that light callers (the service benchmark's clients, which
read the API's JSON) can name a phase without importing the store and SQLAlchemy with it.
"""

from __future__ import annotations

from enum import StrEnum


class JobPhase(StrEnum):
    """Where a run is. The values are stored in the database and returned by the API: never change them.
    A member is a ``str``, so it compares equal to (and hashes like) the text read back from a row."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A run holds its name (and, running, its GPUs) while it is in one of these phases.
ACTIVE: tuple[JobPhase, ...] = (JobPhase.PENDING, JobPhase.RUNNING)
STATUSES: tuple[JobPhase, ...] = tuple(JobPhase)  # every phase, in the order the API lists them
