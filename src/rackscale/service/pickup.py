"""How a leader learns what another replica's API committed: the submissions and cancellations that did not
reach it through its own inbox (docs/high-availability.md). Every ``every_s`` the runner reads the PENDING
runs and the cancellation events past a floor, and feeds the ones it does not know, as its inbox would.

The floor lags: a row's id (``jobs.seq``, ``events.id``) is drawn when it is inserted, not when it commits,
so on PostgreSQL a run with a smaller seq can commit after one with a larger seq (two replicas' writers, or
one slow transaction). A floor set to the largest id seen would skip it for ever. So each read covers
everything above the largest id seen at least ``grace_s`` ago (a transaction lasts milliseconds), and what
it reads again is skipped by the runner (it knows the run already).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rackscale.host.drains import NodeHold
from rackscale.service.holds_store import stored_holds
from rackscale.service.schedules_store import Record, stored_records
from rackscale.service.store import PENDING, JobRow, Store

EVERY_S = 0.5  # how often a leader looks (a standby's submission starts this much later at most)
GRACE_S = 10.0  # how long an id seen stays inside the window read again
START_WINDOW = 1000  # events read back from the last id at a takeover (cancels committing meanwhile)


@dataclass(frozen=True, slots=True, kw_only=True)
class Picked:
    pending: list[JobRow]  # PENDING runs above the floor (the runner skips the ones it has)
    cancels: list[tuple[str, int | None]]  # (job, run) of cancellations above the floor
    # Every node hold the store has (a few rows: read whole). The runner applies where they differ from its
    # own: a cordon or drain another replica's API committed.
    holds: dict[int, NodeHold] = field(default_factory=dict)
    # Every schedule row (the runner makes its records and its host's schedules what they say).
    schedules: dict[str, Record] | None = None


class _Floor:
    """The largest id seen at least ``grace_s`` ago (the floor of the next read)."""

    def __init__(self, start: int, grace_s: float, clock: Callable[[], float]) -> None:
        self.value = start
        self._grace_s, self._clock = grace_s, clock
        self._seen: deque[tuple[float, int]] = deque()

    def saw(self, top: int) -> None:
        now = self._clock()
        if top > (self._seen[-1][1] if self._seen else self.value):
            self._seen.append((now, top))
        while self._seen and now - self._seen[0][0] >= self._grace_s:
            self.value = max(self.value, self._seen.popleft()[1])


class StorePickup:
    def __init__(
        self,
        store: Store,
        *,
        node_names: list[str] | None = None,
        every_s: float = EVERY_S,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.every_s, self._clock = store, every_s, clock
        self.node_names = node_names or []  # the cluster's, in index order (holds are stored by node name)
        self.soon = False  # read at the next step, due or not (this replica's API committed a hold)
        self._bad_schedules: set[str] = set()  # schedule rows that do not load, logged once
        # Runs: from the start (the first read finds what recovery loaded, and skips it); events: from a
        # little before the last one (the cancels before it are in the rows recovery read).
        self._jobs = _Floor(0, grace_s, clock)
        self._events = _Floor(max(0, store.last_event_id() - START_WINDOW), grace_s, clock)
        self._last = -float("inf")

    def due(self) -> bool:
        return self.soon or self._clock() - self._last >= self.every_s

    def read(self) -> Picked:
        """Store I/O: called outside the runner's lock."""
        self._last, self.soon = self._clock(), False
        pending = self.store.jobs(status=[PENDING], after=self._jobs.value, limit=10**9)
        cancels = self.store.cancels_since(self._events.value)
        holds = stored_holds(self.store, self.node_names) if self.node_names else {}
        schedules = stored_records(self.store, logged=self._bad_schedules)
        self._jobs.saw(max((r.seq for r in pending), default=0))
        self._events.saw(max((i for i, _, _ in cancels), default=0))
        return Picked(
            pending=pending, cancels=[(job, run) for _, job, run in cancels], holds=holds, schedules=schedules
        )


__all__ = ["EVERY_S", "GRACE_S", "Picked", "StorePickup"]
