"""Fixtures of the LoadGen tests: the real library (skipped where the ``loadgen`` extra is missing), the
small real model server, and short run settings (about a second a run: CI stays fast).

Durations are short and bounds generous on purpose: the machine that runs the tests is shared, and a
VALID run must not turn INVALID because another process took the CPU for 100 ms."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.loadgen.model_server import Served, serving

mlperf_loadgen = pytest.importorskip("mlperf_loadgen", reason="the loadgen extra: pip install 'rackscale[loadgen]'")

# Server, low rate, generous bound; the 90th percentile lets LoadGen's early stopping pass on ~50 queries
# (at the 99th it needs about 460 under the bound: results.cc EarlyStopping / MinPassingQueriesFinder).
SERVER_OK = ["--scenario", "Server", "--target-qps", "60", "--latency-bound-ms", "2000",
             "--latency-percentile", "90", "--duration-s", "1", "--min-queries", "100"]  # fmt: skip
OFFLINE = ["--scenario", "Offline", "--target-qps", "100", "--duration-s", "0.5", "--min-queries", "1"]
# At least 100 queries, not a duration alone: LoadGen's early stopping wants 64 or more at the 90th percentile,
# and a slow machine completes fewer in a short duration (52 in a CI run: INVALID).
# SingleStream's expected latency sizes the queries LoadGen generates (duration / latency): at 5 ms a quiet
# machine answered the 100 in under 0.5 s ("Min duration not satisfied"); at 1 ms there are 500 to draw on.
SINGLE = ["--scenario", "SingleStream", "--latency-bound-ms", "1", "--duration-s", "0.5", "--min-queries", "100"]


@pytest.fixture(scope="module")
def lg() -> Any:
    return mlperf_loadgen


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    with serving() as s:
        yield s


@pytest.fixture
def failing_server() -> Iterator[Served]:
    with serving(fail_every=4) as s:  # every 4th request: HTTP 500
        yield s
