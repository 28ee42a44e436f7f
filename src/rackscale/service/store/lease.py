"""The leader lease of a highly available service (docs/high-availability.md): one row of ``leader_lease``
per election, taken and renewed by one conditional statement on the database's clock, and the fence every
write of a leader passes in its own transaction.

- **Take or renew** (:func:`take_or_renew`): ``INSERT .. ON CONFLICT DO UPDATE .. WHERE`` the row is this
  replica's at the generation it holds (a renewal: same generation), or has expired, or was released (a
  takeover: generation + 1). Expiry is ``expires_at < now()`` on PostgreSQL's clock, never a replica's: two
  replicas whose clocks disagree still agree on who holds it. Two candidates racing for an expired lease
  are serialised by the row lock; the second re-reads the row the first wrote and its WHERE no longer holds.
- **The fence** (:func:`check_fence`): ``SELECT generation .. FOR SHARE`` in the transaction of the write.
  The share lock makes a takeover (an UPDATE of that row) wait for the write's commit, so the write either
  commits before the takeover (and the new leader's recovery reads it) or sees the new generation and is
  refused with :class:`Fenced`: nothing of it is committed.

PostgreSQL only: a SQLite store has one writer process, so one replica, whose election is trivially its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from rackscale.model.errors import RackscaleError
from rackscale.service.store.schema import leader_lease

LEASE_NAME = "rackscale"  # the one election of a store (the row's key)

_TAKE = text(
    """
    INSERT INTO leader_lease AS l (name, holder, generation, renewed_at, expires_at, service_time)
    VALUES (:name, :me, 1, now(), now() + make_interval(secs => :ttl), :service_time)
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder,
        generation = CASE WHEN l.holder = :me AND l.generation = :gen THEN l.generation ELSE l.generation + 1 END,
        renewed_at = EXCLUDED.renewed_at,
        expires_at = EXCLUDED.expires_at,
        service_time = EXCLUDED.service_time
    WHERE (l.holder = :me AND l.generation = :gen) OR l.expires_at < now() OR l.holder = ''
    RETURNING l.generation
    """
)
_READ = text(
    "SELECT holder, generation, EXTRACT(EPOCH FROM (expires_at - now())) AS left_s, service_time, "
    "EXTRACT(EPOCH FROM renewed_at) AS renewed_at FROM leader_lease WHERE name = :name"
)
_RELEASE = text(
    "UPDATE leader_lease SET holder = '', expires_at = now() WHERE name = :name AND holder = :me AND generation = :gen"
)
_FENCE = text("SELECT generation FROM leader_lease WHERE name = :name FOR SHARE")


class Fenced(RackscaleError):
    """A write of a leader whose generation is no longer the lease's: another replica leads now. Nothing of
    the write was committed."""

    def __init__(self, mine: int, current: int | None) -> None:
        self.mine, self.current = mine, current
        now = "no lease row" if current is None else f"generation {current}"
        super().__init__(f"fenced: this replica led at generation {mine}, the lease is at {now}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    """The lease as the database has it: ``left_s`` until it expires (negative: expired), on its clock."""

    holder: str
    generation: int
    left_s: float
    service_time: float | None  # the leader's service clock at its last renewal (standbys follow it)
    renewed_at: float  # the database's clock (epoch seconds) at the last take or renewal: moves while one renews


def supports_lease(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def take_or_renew(
    engine: Engine, *, me: str, generation: int | None, ttl_s: float, service_time: float, name: str = LEASE_NAME
) -> int | None:
    """Renew the lease held at ``generation`` or take it if it expired or was released: the generation now
    held, or None when another replica holds it. (``generation`` None: a candidate that holds nothing, which
    takes the lease only when it is free, even one its replica id held before a restart.)"""
    params = {"name": name, "me": me, "gen": -1 if generation is None else generation, "ttl": ttl_s}
    with engine.begin() as c:
        got = c.execute(_TAKE, {**params, "service_time": service_time}).scalar_one_or_none()
    return None if got is None else int(got)


def read_lease(engine: Engine, *, name: str = LEASE_NAME) -> LeaseRecord | None:
    with engine.connect() as c:
        row = c.execute(_READ, {"name": name}).first()
    if row is None:
        return None
    holder, generation, left, service_time, renewed_at = row
    return LeaseRecord(
        holder=str(holder),
        generation=int(generation),
        left_s=float(left),
        service_time=None if service_time is None else float(service_time),
        renewed_at=float(renewed_at),
    )


def release(engine: Engine, *, me: str, generation: int, name: str = LEASE_NAME) -> bool:
    """Give the lease up (a clean shutdown): a standby takes it at its next try instead of waiting for the
    expiry. Only the holder at that generation can."""
    with engine.begin() as c:
        return bool(c.execute(_RELEASE, {"name": name, "me": me, "gen": generation}).rowcount)


def check_fence(c: Connection, generation: int, *, name: str = LEASE_NAME) -> None:
    """Refuse the caller's transaction (raise :class:`Fenced`) unless the lease is at ``generation``; the
    share lock keeps it there until the transaction ends."""
    current = c.execute(_FENCE, {"name": name}).scalar_one_or_none()
    if current is None or int(current) != generation:
        raise Fenced(generation, None if current is None else int(current))


__all__ = [
    "LEASE_NAME",
    "Fenced",
    "LeaseRecord",
    "check_fence",
    "leader_lease",
    "read_lease",
    "release",
    "supports_lease",
    "take_or_renew",
]
