"""The live autoscaler's load signal: each autoscaled service's load, read from Prometheus.

A service whose spec names a query (``autoscale: {query: ..., target: ...}``) has its load read through
Prometheus's HTTP API (``POST /api/v1/query``, https://prometheus.io/docs/prometheus/latest/querying/api/);
the answer must be one number (a scalar, or a vector of one series: wrap a per-pod query in ``sum(...)``).
A service without a query follows its own model (the host does it, no I/O). Every failure — Prometheus
unreachable, an HTTP error, an error answer, no series, several, NaN — is a :class:`NoLoad` saying why,
never an exception: the host then holds the service (or follows its model, ``fallback: model``).

:class:`LiveAutoscaler` is what the runner holds: it says when a pass is due (every 15 s, the HPA's sync
period), reads the loads outside the runner's lock (the only I/O here), then runs the host's pass under it
and logs a service that starts or stops being held, once each way (a NOTICE change in its event log too).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from rackscale.host.autoscale import HPA_DEFAULT, Load, NoLoad, Reading, ScaleBehaviour
from rackscale.host.changes import Change, ChangeKind
from rackscale.host.host import ClusterHost
from rackscale.model.workload import LoadMetric

log = logging.getLogger("rackscale.service")

MAX_ANSWER_BYTES = 1 << 20  # one number's answer is small; a bigger one is a query that returns a table


class LoadSource(Protocol):
    def read(self, query: str, *, metric: LoadMetric, now: float) -> Reading:
        """The query's value now, or why there is none (never raises)."""
        ...


@dataclass(slots=True)
class PrometheusSource:
    """Reads a query's value from the Prometheus at ``url``. ``pin_time``: evaluate at the service clock's
    ``now`` (``time=``; a test replaying a recorded series), else at Prometheus's own now (a service run
    with ``--speed`` has a clock ahead of the wall)."""

    url: str
    timeout_s: float = 2.0
    pin_time: bool = False
    client_factory: Callable[[], httpx.Client] | None = None
    _client: httpx.Client | None = field(default=None, init=False, repr=False)

    def read(self, query: str, *, metric: LoadMetric, now: float) -> Reading:
        form = {"query": query, **({"time": f"{now:.3f}"} if self.pin_time else {})}
        where = f"Prometheus at {self.url}"
        try:
            r = self._http().post(f"{self.url.rstrip('/')}/api/v1/query", data=form)
        except httpx.HTTPError as e:
            return NoLoad(why=f"{where} unreachable: {type(e).__name__}: {e}"[:300])
        if len(r.content) > MAX_ANSWER_BYTES:
            return NoLoad(why=f"{where} answered {len(r.content):,} bytes: the query must return one number")
        try:
            body: Any = r.json()
        except ValueError:
            return NoLoad(why=f"{where} answered HTTP {r.status_code} that is not JSON")
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error", "") if isinstance(body, dict) else ""
            kind = body.get("errorType", "") if isinstance(body, dict) else ""
            return NoLoad(why=f"{where} refused the query (HTTP {r.status_code}, {kind}: {err})"[:300])
        return _one_number(body.get("data"), metric)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _http(self) -> httpx.Client:
        if self._client is None:
            make = self.client_factory or (lambda: httpx.Client(timeout=self.timeout_s))
            self._client = make()
        return self._client


def _one_number(data: Any, metric: LoadMetric) -> Reading:
    """The value of an instant query's answer (``data``): a scalar, or a vector of exactly one sample."""
    if not isinstance(data, dict):
        return NoLoad(why="the answer has no data")
    kind, result = data.get("resultType"), data.get("result")
    sample: Any
    if kind == "scalar":
        sample = result
    elif kind == "vector" and isinstance(result, list):
        if len(result) != 1:
            what = "no series (nothing scraped yet, or a wrong name)" if not result else f"{len(result)} series"
            return NoLoad(why=f"the query returned {what}; it must return one number (wrap it in sum(...))")
        sample = result[0].get("value") if isinstance(result[0], dict) else None
    else:
        return NoLoad(why=f"the query returned a {kind}; it must return one number (an instant vector or scalar)")
    try:
        value = float(sample[1])  # [unix time, "value"]
    except (TypeError, ValueError, IndexError, KeyError):
        return NoLoad(why="the answer's sample is not a number")
    if not math.isfinite(value) or value < 0:
        return NoLoad(why=f"the query returned {value} (no traffic to divide by, or a counter reset)")
    return Load(value=value, metric=metric, source="prometheus")


class NoSource:
    """No Prometheus configured: a service with a query has no load (and says so)."""

    def read(self, query: str, *, metric: LoadMetric, now: float) -> Reading:
        return NoLoad(why="no Prometheus is configured for this rackscale service")


@dataclass(slots=True)
class LiveAutoscaler:
    """The runner's autoscaler: when a pass is due, the loads to feed it, and its log."""

    source: LoadSource = field(default_factory=NoSource)
    behaviour: ScaleBehaviour = HPA_DEFAULT
    next_at: float | None = None
    held: dict[str, str] = field(default_factory=dict)  # services held now, and why (for the log and the API)

    def read(self, host: ClusterHost, now: float) -> dict[str, Reading] | None:
        """The loads of the autoscaled services with a query, if a pass is due (else None). I/O: call it
        outside the runner's lock, from the runner's thread (the only one that changes the host)."""
        if self.next_at is not None and now < self.next_at:
            return None
        self.next_at = now + self.behaviour.every_s
        out: dict[str, Reading] = {}
        for name in sorted(host.serving_jobs):
            run = host.runs.get(name)
            a = run.spec.autoscale if run is not None else None
            if a is not None and a.query is not None:
                out[name] = self.source.read(a.query, metric=a.metric, now=now)
        return out

    def apply(self, host: ClusterHost, now: float, readings: dict[str, Reading]) -> list[Change]:
        """The host's pass with those loads (under the runner's lock): its scale-downs as changes."""
        step = host.autoscale(now, readings=readings, behaviour=self.behaviour)
        notices: list[Change] = []  # a hold's start and end, once each, in the service's event log too
        for name, why in step.held.items():
            if name not in self.held:
                log.warning("autoscaler: service %s %s", name, why)
                notices.append(Change(name, ChangeKind.NOTICE, now, "AutoscaleHeld", why))
        for name in sorted(set(self.held) - set(step.held)):
            if name in host.serving_jobs:
                log.warning("autoscaler: service %s reads its load again", name)
                msg = "reads its load again: the autoscaler follows it (the hold is over)"
                notices.append(Change(name, ChangeKind.NOTICE, now, "AutoscaleResumed", msg))
        self.held = dict(step.held)
        return notices + step.changes


__all__ = ["LiveAutoscaler", "LoadSource", "NoSource", "PrometheusSource"]
