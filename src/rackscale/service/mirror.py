"""A standby's picture of the cluster (docs/high-availability.md): a live cluster rebuilt from the store, so
its ``/v1/cluster``, racks, nodes, queues, KPIs and state gauges show the leader's committed state, not an
empty model. The leader's host lives in its memory; the store has every active run with its placement and
every node hold, which is all a picture needs.

Built as a restart's recovery builds the live cluster (``Runner.recover``), without any of its actions: no
backend is asked to adopt anything and nothing is written (a row that does not load is the leader's to
fail). The KPIs are those of a host that started now (the leader's accumulate in its memory only).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rackscale.backends.base import admitted
from rackscale.model.spec_errors import SpecError
from rackscale.service.holds_store import stored_holds
from rackscale.service.live import LiveCluster
from rackscale.service.runner import spec_of
from rackscale.service.store import PENDING, RUNNING, Store

log = logging.getLogger("rackscale.service")


@dataclass(frozen=True, slots=True, kw_only=True)
class Mirrored:
    running: int
    pending: int
    skipped: int  # rows that do not load or no longer fit (the leader fails them)
    seconds: float  # how long the build took (the next waits at least a few times this)


def build_mirror(store: Store, live: LiveCluster, *, backend: object, now: float) -> Mirrored:
    """Fill ``live`` (new, empty) with what the store says is running, pending and held."""
    t0 = time.monotonic()
    running = pending = skipped = 0
    for row in store.jobs(status=[RUNNING, PENDING], limit=10**9):
        if row.corrupt is not None:
            skipped += 1
            continue
        try:
            spec = spec_of(row)
        except SpecError:
            skipped += 1
            continue
        if row.status == RUNNING and row.placement is not None and row.started is not None:
            try:
                live.restore(spec, row.placement, started=row.started, now=now)
            except ValueError:  # does not fit (the leader fails it at its next start as LostPlacement)
                skipped += 1
                continue
            running += 1
        else:
            live.submit(admitted(backend, spec))
            pending += 1
    holds = stored_holds(store, [n.name for n in live.cluster.nodes])
    if holds:
        live.put_holds(sorted(holds.items()), now)
    return Mirrored(running=running, pending=pending, skipped=skipped, seconds=time.monotonic() - t0)


__all__ = ["Mirrored", "build_mirror"]
