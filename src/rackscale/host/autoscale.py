"""The autoscaler's decisions, pure: replicas wanted from a load, and stabilisation against flapping.

No I/O and no clock: every call takes ``now``. The live service feeds a load read from Prometheus (or the
service's own model) every 15 s; the simulator feeds its model on its own tick with no stabilisation.

Stabilisation is the Kubernetes HPA's (``stabilizeRecommendationWithBehaviors`` in
kubernetes/kubernetes ``pkg/controller/podautoscaler/horizontal.go``; defaults from the
``HPAScalingRules`` API: scale-up window 0 s, scale-down window 300 s): every evaluation records its raw
recommendation; a scale-up goes only to the *lowest* recommendation of the scale-up window, a scale-down
only to the *highest* of the scale-down window (the current one included). So a dip shorter than the
window never removes replicas, while a rise acts at once. One difference, on purpose: a service seen for
the first time (it started, or the rackscale service restarted and lost its history) counts its current
size as a recommendation, so it is not scaled down within its first window.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from rackscale.model.workload import LoadMetric

_UNIT = {
    LoadMetric.TOKENS_PER_SECOND: "tokens/s",
    LoadMetric.REQUESTS_PER_SECOND: "requests/s",
    LoadMetric.LATENCY_SECONDS: "s",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleBehaviour:
    """How long past recommendations hold a scale-up back (``up_window_s``) or a scale-down
    (``down_window_s``), as the HPA's ``behavior.scaleUp/scaleDown.stabilizationWindowSeconds``."""

    up_window_s: float = 0.0
    down_window_s: float = 300.0
    every_s: float = 15.0  # the HPA controller's default sync period


HPA_DEFAULT = ScaleBehaviour()
NO_STABILISATION = ScaleBehaviour(up_window_s=0.0, down_window_s=0.0)  # the simulator's (its numbers)


@dataclass(slots=True)
class Stabiliser:
    """One service's recent raw recommendations, ``(time, replicas)``, oldest first."""

    history: deque[tuple[float, int]] = field(default_factory=deque)

    def stabilise(self, *, now: float, desired: int, current: int, behaviour: ScaleBehaviour) -> int:
        """The replicas to go to now: ``desired`` held back by the window of its direction."""
        if not self.history:
            self.history.append((now, current))  # first sight: no scale-down within the first window
        up = desired >= current
        window = behaviour.up_window_s if up else behaviour.down_window_s
        cutoff = now - window
        out = desired
        for t, rec in self.history:
            if t > cutoff:  # the HPA's rec.timestamp.After(cutoff): the window's edge is outside it
                out = min(out, rec) if up else max(out, rec)
        self.history.append((now, desired))
        horizon = now - max(behaviour.up_window_s, behaviour.down_window_s)
        while self.history and self.history[0][0] <= horizon:  # older than both windows: never read again
            self.history.popleft()
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """A service's load as read: ``value`` in ``metric``'s unit, from ``source`` (e.g. ``prometheus``)."""

    value: float
    metric: LoadMetric
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoLoad:
    """The load could not be read now, and why (Prometheus unreachable, an empty or odd answer)."""

    why: str


Reading = Load | NoLoad


def replicas_for(*, load: Load, target: float, current: int, lo: int, hi: int) -> int:
    """Replicas for a load read from a query, within ``[lo, hi]``.

    A rate (tokens or requests per second, the service's total) needs ``ceil(load / target)`` replicas of
    ``target`` each (the HPA's ``AverageValue`` target); a latency scales the current replicas by
    ``load / target`` (its ``Value`` target: ``ceil(current * load / target)``).
    """
    scale = 1 if load.metric.is_rate else max(current, 1)
    # Less a hair: 3 x 0.8 / 0.4 is 6.000000000000001 in floating point, and must stay 6 replicas.
    return max(lo, min(hi, math.ceil(scale * load.value / target - 1e-9)))


def _amount(value: float, metric: LoadMetric) -> str:
    unit = _UNIT[metric]
    return f"{value:,.3g} {unit}" if metric is LoadMetric.LATENCY_SECONDS else f"{value:,.0f} {unit}"


def describe(load: Load, target: float | None) -> str:
    """What an event says of the load: ``load 3,100 tokens/s (prometheus), target 2,000 tokens/s per
    replica``; a latency says whether it is over or under its target."""
    shown = f"load {_amount(load.value, load.metric)} ({load.source})"
    if target is None:
        return shown
    if load.metric.is_rate:
        return f"{shown}, target {_amount(target, load.metric)} per replica"
    side = "over" if load.value > target else "under"
    return f"{shown} {side} target {_amount(target, load.metric)}"


__all__ = [
    "HPA_DEFAULT",
    "NO_STABILISATION",
    "Load",
    "NoLoad",
    "Reading",
    "ScaleBehaviour",
    "Stabiliser",
    "describe",
    "replicas_for",
]
