"""Static packing of GPU-sharing pods: the FGD paper's experiment (Weng et al., ATC'23) and rackscale's policy.

Pure apart from :mod:`rackscale.pack.io`, which reads the trace CSVs.
"""

from rackscale.pack.experiment import (
    ALL_POLICIES,
    DEFAULT_POLICIES,
    DEFAULT_SEEDS,
    PUBLISHED,
    RunResult,
    make_policy,
    run,
    run_experiment,
    summarize,
)
from rackscale.pack.trace import Nodes, Pods, inflate

__all__ = [
    "ALL_POLICIES",
    "DEFAULT_POLICIES",
    "DEFAULT_SEEDS",
    "PUBLISHED",
    "Nodes",
    "Pods",
    "RunResult",
    "inflate",
    "make_policy",
    "run",
    "run_experiment",
    "summarize",
]
