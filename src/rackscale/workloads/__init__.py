"""Workload sources: the embedded synthetic generator and the trace loaders (Philly, Alibaba openb, generic)."""

from rackscale.workloads.synthetic import PHILLY_SIZE_COUNTS, SyntheticConfig, synthetic_jobs
from rackscale.workloads.traces import (
    TRACE_FORMATS,
    TraceLoad,
    load_alibaba_nodes,
    load_alibaba_pods,
    load_generic,
    load_philly,
    load_trace,
)

__all__ = [
    "PHILLY_SIZE_COUNTS",
    "TRACE_FORMATS",
    "SyntheticConfig",
    "TraceLoad",
    "load_alibaba_nodes",
    "load_alibaba_pods",
    "load_generic",
    "load_philly",
    "load_trace",
    "synthetic_jobs",
]
