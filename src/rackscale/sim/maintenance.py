"""Planned maintenance windows in the simulation: a rack is drained at a time, for a while, then uncordoned
— the host's own drain (:mod:`rackscale.host.drains`) on the simulator's clock, so a what-if shows what a
rack drain costs (the lost GPU-hours and restarts of the jobs it stops, the JCT of those that wait).

A window is ``RACK@START+DURATION`` with an optional ``~GRACE`` (e.g. ``r000@2h+4h~10m``): START after the
workload's first arrival, each a duration as ``rackscale drain --grace`` takes (``90s``, ``10m``, ``1h30m``).

A mixin of :class:`rackscale.sim.simulator.Simulator` (the event side).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rackscale.host.changes import Change
from rackscale.host.drains import DrainError, grace_seconds
from rackscale.model.topology import GPUCluster
from rackscale.sim.engine import Event, EventKind, EventQueue


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    rack: str
    start_s: float  # after the workload's start
    duration_s: float
    grace_s: float = 0.0
    reason: str = "planned maintenance"


def parse_window(text: str) -> Window:
    """``RACK@START+DURATION[~GRACE]``; raises :class:`DrainError` with what is wrong."""
    rack, at, rest = text.partition("@")
    start, plus, rest = rest.partition("+")
    duration, _, grace = rest.partition("~")
    if not (rack and at and plus and duration):
        raise DrainError(f"maintenance window {text[:60]!r}: expected RACK@START+DURATION[~GRACE], e.g. r000@2h+4h~10m")
    return Window(
        rack=rack,
        start_s=grace_seconds(start),
        duration_s=grace_seconds(duration),
        grace_s=grace_seconds(grace) if grace else 0.0,
        reason=f"planned maintenance of {rack}",
    )


_START, _DEADLINE, _END = "start", "deadline", "end"


class MaintenanceMixin:
    cluster: GPUCluster
    q: EventQueue
    windows: tuple[Window, ...]

    if TYPE_CHECKING:  # the host's (ClusterHost comes after this mixin in the simulator's bases)

        def drain(self, nodes: Iterable[int], *, now: float, reason: str, grace_s: float) -> list[Change]: ...
        def uncordon(self, nodes: Iterable[int], *, now: float) -> list[Change]: ...

    def _schedule_maintenance(self, windows: tuple[Window, ...], start: float) -> None:
        racks = {r.name: r.index for r in self.cluster.racks}
        for w in windows:
            if w.rack not in racks:
                raise DrainError(
                    f"maintenance window: no rack named {w.rack!r} (racks: {', '.join(list(racks)[:5])}...)"
                )
        self.windows = windows
        for i, w in enumerate(windows):
            self.q.push(start + w.start_s, EventKind.MAINTENANCE, target=(_START, i, racks[w.rack]))
            self.q.push(start + w.start_s + w.grace_s, EventKind.MAINTENANCE, target=(_DEADLINE, i, racks[w.rack]))
            self.q.push(start + w.start_s + w.duration_s, EventKind.MAINTENANCE, target=(_END, i, racks[w.rack]))

    def _maintenance(self, ev: Event, now: float) -> bool:
        """Returns whether capacity was freed (the deadline's stops are made by the cycle that follows)."""
        assert ev.target is not None
        phase, i, rack = ev.target
        nodes = list(self.cluster.racks[rack].nodes)
        w = self.windows[i]
        if phase == _START:
            self.drain(nodes, now=now, reason=w.reason, grace_s=w.grace_s)
            return True  # a grace of 0 stopped its jobs now: they look for room elsewhere
        if phase == _END:
            self.uncordon(nodes, now=now)
        return True  # the deadline: the cycle stops what is left (ClusterHost.cycle -> drains_due)


__all__ = ["MaintenanceMixin", "Window", "parse_window"]
