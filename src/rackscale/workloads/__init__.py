"""Workload sources: the embedded synthetic generator (and, later, trace loaders)."""

from rackscale.workloads.synthetic import PHILLY_SIZE_COUNTS, SyntheticConfig, synthetic_jobs

__all__ = ["PHILLY_SIZE_COUNTS", "SyntheticConfig", "synthetic_jobs"]
