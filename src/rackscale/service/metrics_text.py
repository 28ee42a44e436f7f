"""The ``/metrics`` text, the bytes ``prometheus_client.generate_latest`` gives, with each gauge series' line
prefix kept between scrapes.

At 1,389 racks a scrape holds ~5,500 samples, three per rack and two per inference service, and
``generate_latest`` formats each from scratch: ~5 us a sample (its labels sorted, escaped and joined, its
value written), ~26 ms of CPU a scrape. A scrape every few seconds then takes the CPU from the API's
requests (docs/benchmarks.md, "Service at cluster scale": the list pages' slowest all overlapped one).
A series' name and labels rarely change (a rack's name, a service's), so this keeps, per series, the line's
text up to its value, made once by ``generate_latest`` itself (a one-sample family, its header and value
cut off), and the whole line while the value is the same. Only gauges go this way; every other family (its
suffixed samples, its ``_total`` header) is ``generate_latest``'s own output. The result is the same bytes,
in the same order: tests/service/test_metrics_text.py compares them, label escaping and special values
included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# How the text format writes a value ("1.0", "+Inf", "1.5e+06"): prometheus_client's own (untyped) writer.
_go = cast("Callable[[float], str]", floatToGoString)


class _One(Collector):
    """A collector of the given families (``generate_latest`` formats any collector)."""

    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> tuple[Metric, ...]:
        return self.families


class CachedExposition:
    """``render(registry)`` == ``generate_latest(registry)``; keeps what it formatted for the next call."""

    def __init__(self) -> None:
        # (family name, documentation) -> its HELP and TYPE lines.
        self._headers: dict[tuple[str, str], str] = {}
        # (sample name, label values in the family's order) -> (label names, prefix, last value, last line).
        self._series: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, ...], str, float, str]] = {}

    def render(self, registry: Collector) -> bytes:
        out: list[str] = []
        seen: set[tuple[str, tuple[str, ...]]] = set()
        for family in registry.collect():
            if family.type != "gauge":
                out.append(generate_latest(_One(family)).decode("utf-8"))
                continue
            header = self._headers.get((family.name, family.documentation))
            if header is None:
                empty = Metric(family.name, family.documentation, family.type)
                header = self._headers[(family.name, family.documentation)] = generate_latest(_One(empty)).decode()
            out.append(header)
            for s in family.samples:
                out.append(self._line(family, s.name, s.labels, s.value, s.timestamp, seen))
        # Series not seen this time (a service that ended): forgotten, so the cache holds what a scrape shows.
        if len(self._series) > len(seen):
            self._series = {k: v for k, v in self._series.items() if k in seen}
        return "".join(out).encode("utf-8")

    def _line(
        self,
        family: Metric,
        name: str,
        labels: dict[str, str],
        value: float,
        timestamp: object,
        seen: set[tuple[str, tuple[str, ...]]],
    ) -> str:
        if timestamp is not None or value != value or (value == 0.0 and math.copysign(1.0, value) < 0):
            # A timestamp, NaN (never equal to itself) or -0.0 (equal to 0.0, written differently): the
            # whole line from generate_latest, nothing kept.
            return _formatted(family, name, labels, value, timestamp)
        key = (name, tuple(labels.values()))
        seen.add(key)
        got = self._series.get(key)
        if got is not None and got[0] == tuple(labels):
            if got[2] == value:  # (a kept value is never -0.0: see above)
                return got[3]
            line = f"{got[1]}{_go(value)}\n"
        else:
            # The prefix: the line of this series at value 1, less the "1.0\n" generate_latest writes for it.
            one = _formatted(family, name, labels, 1.0, None)
            prefix = one[: -len("1.0\n")]
            got = (tuple(labels), prefix, 1.0, one)
            line = f"{prefix}{_go(value)}\n"
        self._series[key] = (got[0], got[1], value, line)
        return line


def _formatted(family: Metric, name: str, labels: dict[str, str], value: float, timestamp: object) -> str:
    """One sample's line exactly as ``generate_latest`` writes it (its family's header cut off)."""
    one = Metric(family.name, family.documentation, family.type)
    one.add_sample(name, labels, value, timestamp)  # type: ignore[arg-type]
    text = generate_latest(_One(one)).decode("utf-8")
    return text.split("\n", 2)[2]  # after the HELP and TYPE lines
