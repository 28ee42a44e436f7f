"""Tests of deploy/: Prometheus rules (promtool), the Grafana dashboard, and alerting end to end."""

from __future__ import annotations

import re
from functools import cache

from rackscale.cli.kube_metrics import METRIC_NAMES as KUBE_METRIC_NAMES
from rackscale.service.metrics import METRIC_NAMES, Metrics

SUFFIXES = re.compile(r"_(bucket|sum|count)$")


@cache
def histograms() -> frozenset[str]:
    """The names of the service's histograms (asked of its registry, not guessed from the names)."""
    return frozenset(m.name for m in Metrics().registry.collect() if m.type == "histogram")


def metric_of(series: str) -> str:
    """The exported metric a series name belongs to: a histogram's _bucket/_sum/_count name the histogram."""
    base = SUFFIXES.sub("", series)
    return base if base in histograms() else series


def exported(series: str) -> bool:
    """Exported by ``rackscale serve`` or by ``rackscale kube-scheduler`` (the same rules read both)."""
    return metric_of(series) in METRIC_NAMES or metric_of(series) in KUBE_METRIC_NAMES
