"""When to split a gang that prefers one NVLink domain: only when waiting for one would cost more.

A gang that fits in a rack but finds no rack with room now can run split over two racks at once, or wait
for a rack. Splitting makes every step slower (its ring crosses the RDMA fabric): it costs
``(slowdown - 1) x duration``. Waiting costs the time until the first rack has room, which the expected
ends of running jobs tell (the same estimate backfill uses). The gang is split only when waiting would
cost more — "relaxed only when needed". Jobs with no duration estimate or no communication split at once
(waiting cannot be shown to pay).
"""

from __future__ import annotations

import math

from rackscale.model.state import ClusterState
from rackscale.model.workload import JobSpec
from rackscale.network.collectives import Layout, training_step


class SplitAdvisor:
    """Per-scheduler memo of slowdowns (static) and per-cycle earliest rack-room times (dynamic)."""

    def __init__(self) -> None:
        self._slowdown: dict[tuple[int, float, float, str], float] = {}
        self._earliest: list[float] | None = None

    def new_cycle(self) -> None:
        self._earliest = None

    def split_pays_off(self, job: JobSpec, state: ClusterState, now: float) -> bool:
        duration = job.duration_estimate_s
        total = job.total_gpus
        if duration is None or job.comm.bytes_per_step <= 0 or total < 2 or total > state.cluster.max_rack_gpus:
            return True
        extra = (self._slowdown_of(job, state) - 1.0) * duration
        return extra < self._wait_for_rack(state, total, now)

    def _slowdown_of(self, job: JobSpec, state: ClusterState) -> float:
        key = (job.total_gpus, job.comm.bytes_per_step, job.comm.compute_s_per_step, job.comm.collective)
        got = self._slowdown.get(key)
        if got is None:
            n = job.total_gpus
            one = training_step(state.cluster, job, Layout(((0, 0, n),))).total_s
            half = -(-n // 2)
            two = training_step(state.cluster, job, Layout(((0, 0, half), (0, 1, n - half)))).total_s
            got = self._slowdown[key] = two / one if one > 0 else 1.0
        return got

    def _wait_for_rack(self, state: ClusterState, gpus: int, now: float) -> float:
        """Seconds until some rack is expected to have ``gpus`` whole GPUs free (inf if no estimate says)."""
        if self._earliest is None:
            self._earliest = _earliest_room(state, now)
        earliest = self._earliest
        return earliest[gpus] - now if gpus < len(earliest) else math.inf


def _earliest_room(state: ClusterState, now: float) -> list[float]:
    """``out[k]``: when some rack first has ``k`` whole GPUs free, releasing running jobs at their
    expected ends (one pass over them, soonest first)."""
    top = state.cluster.max_rack_gpus
    out = [math.inf] * (top + 1)
    free = list(state.rack_whole)
    best = max(free, default=0)
    for k in range(best + 1):
        out[k] = now
    nodes = state.cluster.nodes
    for end, name in state.ends_in_order():
        if best >= top:
            break
        for a in state.running[name].placement.allocs:
            r = nodes[a.node].rack
            free[r] += a.whole_gpus
            if free[r] > best:
                for k in range(best + 1, min(free[r], top) + 1):
                    out[k] = max(end, now)
                best = min(free[r], top)
    return out
