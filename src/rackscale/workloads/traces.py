"""Trace loaders: turn public GPU-cluster traces (and rackscale's generic format) into jobs.

The entry point. ``load_trace("philly:../shared/traces/philly/philly.csv")`` picks the loader from the
``FORMAT:PATH`` spec; the loaders themselves live in :mod:`.philly`, :mod:`.alibaba` and :mod:`.generic`
(which also holds what they share). Every loader returns a :class:`TraceLoad` and raises only
:class:`SpecError`; docs/workloads.md describes the formats, the mapping to :class:`JobSpec` and the knobs.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from functools import partial

from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.workloads.alibaba import ALIBABA_NODE_COLUMNS, ALIBABA_POD_COLUMNS, load_alibaba_nodes, load_alibaba_pods
from rackscale.workloads.generic import GENERIC_COLUMNS, OnError, TraceLoad, TraceOptions, load_generic
from rackscale.workloads.philly import PHILLY_COLUMNS, load_philly

__all__ = [
    "ALIBABA_NODE_COLUMNS",
    "ALIBABA_POD_COLUMNS",
    "GENERIC_COLUMNS",
    "PHILLY_COLUMNS",
    "TRACE_FORMATS",
    "OnError",
    "SpecError",
    "TraceLoad",
    "TraceOptions",
    "load_alibaba_nodes",
    "load_alibaba_pods",
    "load_generic",
    "load_philly",
    "load_trace",
]


# FORMAT of a ``FORMAT:PATH`` spec -> (loader, what it reads).
TRACE_FORMATS: dict[str, tuple[Callable[..., TraceLoad], str]] = {
    "philly": (load_philly, "Microsoft Philly 2017 job CSV"),
    "alibaba": (load_alibaba_pods, "Alibaba openb 2023 pod CSV"),
    "csv": (partial(load_generic, format="csv"), "generic CSV"),
    "jsonl": (partial(load_generic, format="jsonl"), "generic JSONL"),
}


def load_trace(
    spec: str,
    *,
    on_error: OnError = "skip",
    gpu_scale: float = 1.0,
    arrival_scale: float = 1.0,
    time_window: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    tenant_map: Mapping[str, str] | None = None,
) -> TraceLoad:
    """Load the trace named by ``FORMAT:PATH`` (``philly:``, ``alibaba:`` (pods), ``csv:``, ``jsonl:``) with the
    loader's knobs. An unknown format is a :class:`SpecError` naming the accepted ones."""
    fmt, sep, path = spec.partition(":")
    listing = ", ".join(f"{k} ({what})" for k, (_, what) in TRACE_FORMATS.items())
    if not sep or not path.strip():
        fix = f"write FORMAT:PATH, e.g. philly:../shared/traces/philly/philly.csv; formats: {listing}"
        raise SpecError([SpecProblem(("trace",), f"expected FORMAT:PATH, got {spec!r}", fix)])
    key = fmt.strip().lower()
    if key not in TRACE_FORMATS:
        near = difflib.get_close_matches(key, list(TRACE_FORMATS), n=1)
        hint = f"did you mean {near[0]}:? " if near else ""
        raise SpecError(
            [SpecProblem(("trace",), f"unknown trace format {fmt!r}", f"{hint}accepted formats: {listing}")]
        )
    loader = TRACE_FORMATS[key][0]
    return loader(
        os.path.expanduser(path.strip()),
        on_error=on_error,
        gpu_scale=gpu_scale,
        arrival_scale=arrival_scale,
        time_window=time_window,
        max_jobs=max_jobs,
        tenant_map=tenant_map,
    )
