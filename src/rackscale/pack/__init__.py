"""Static packing of GPU-sharing pods: the FGD paper's experiment (Weng et al., ATC'23) run on the product's
scheduler profiles (``rackscale`` and the paper's policies as profiles)."""

from rackscale.pack.experiment import (
    ALL_POLICIES,
    DEFAULT_POLICIES,
    DEFAULT_SEEDS,
    PROFILE_OF,
    PUBLISHED,
    RunResult,
    give_workload,
    make_placer,
    run,
    run_experiment,
    summarize,
)
from rackscale.pack.trace import MAX_ARRIVALS, InflationTooLarge, Trace, check_arrivals, expected_arrivals, inflate

__all__ = [
    "ALL_POLICIES",
    "DEFAULT_POLICIES",
    "DEFAULT_SEEDS",
    "MAX_ARRIVALS",
    "PROFILE_OF",
    "PUBLISHED",
    "InflationTooLarge",
    "RunResult",
    "Trace",
    "check_arrivals",
    "expected_arrivals",
    "give_workload",
    "inflate",
    "make_placer",
    "run",
    "run_experiment",
    "summarize",
]
