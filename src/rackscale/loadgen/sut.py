"""The system under test that LoadGen drives: each sample is one HTTP request on a bounded thread pool.

LoadGen's C++ threads call ``issue_queries`` and ``flush_queries`` (loadgen/bindings/python_api.cc wraps
them); ``issue_queries`` only hands the samples to the pool and returns, because the Server scenario
issues the next query on its own schedule (Poisson arrivals) and a blocking callback would delay it. The
workers call ``QuerySamplesComplete`` themselves, once per sample, whatever happened: an exception that
escaped into LoadGen's thread would end the process, and a sample never completed would hang the run."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.loadgen.endpoints import Endpoint, RequestFailed
from rackscale.loadgen.settings import RunOptions, to_test_settings


class HttpSut:
    """``issue_queries`` -> the pool -> ``endpoint.send`` -> ``QuerySamplesComplete``."""

    def __init__(self, *, endpoint: Endpoint, workers: int, lg: Any) -> None:
        self._endpoint, self._lg = endpoint, lg
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loadgen-sut")
        self.callback_errors = 0  # exceptions other than a failed request (a bug): counted, never raised

    def issue_queries(self, samples: list[Any]) -> None:
        try:
            for s in samples:
                self._pool.submit(self._one, s.id, s.index)
        except Exception:  # the pool is shut down: complete the samples so LoadGen does not wait for them
            self.callback_errors += 1
            for s in samples:
                self._complete(s.id)

    def flush_queries(self) -> None:
        """Nothing is batched here, so there is nothing to flush."""

    def _one(self, sample_id: int, index: int) -> None:
        try:
            self._endpoint.send(index)
        except RequestFailed:
            pass  # counted by the endpoint's tally
        except Exception:
            self.callback_errors += 1
        finally:
            self._complete(sample_id)

    def _complete(self, sample_id: int) -> None:
        try:
            # PerformanceOnly logs no accuracy data, so the response carries no payload (pointer 0, size 0).
            self._lg.QuerySamplesComplete([self._lg.QuerySampleResponse(sample_id, 0, 0)])
        except Exception:
            self.callback_errors += 1

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFiles:
    """Where LoadGen wrote its logs, and how many callback errors (bugs, not failed requests) there were."""

    log_dir: Path
    summary: Path
    detail: Path
    callback_errors: int


def log_dir_for(given: Path | None) -> Path:
    """``--log-dir`` (created), else a new directory under the system's temp directory (kept: the logs are
    LoadGen's own record of the run)."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix="rackscale-loadgen-"))
    given.mkdir(parents=True, exist_ok=True)
    return given


def run_loadgen(*, opts: RunOptions, endpoint: Endpoint, log_dir: Path, lg: Any) -> RunFiles:
    """One LoadGen test of ``endpoint``: blocks until LoadGen has issued and seen complete every query."""
    sut = HttpSut(endpoint=endpoint, workers=opts.concurrency, lg=lg)
    out = lg.LogOutputSettings()
    out.outdir = os.fspath(log_dir)
    out.copy_summary_to_stdout = False  # the verb prints its own report (and -o json must stay JSON)
    log = lg.LogSettings()
    log.log_output = out
    log.enable_trace = False  # the trace (one event per sample) is for Chrome's viewer; not read here
    # LoadGen overrides the settings from an audit.config file if one exists (loadgen/loadgen.cc: "Look for
    # Audit Config file to override TestSettings during audit"), by default in the current directory: point
    # it at a file that does not exist, so a stray audit.config cannot change the run.
    audit = os.fspath(log_dir / "no-audit.config")
    handle = lg.ConstructSUT(sut.issue_queries, sut.flush_queries)
    qsl = lg.ConstructQSL(opts.sample_count, opts.sample_count, _nothing, _nothing)
    try:
        lg.StartTestWithLogSettings(handle, qsl, to_test_settings(opts, lg), log, audit)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(handle)
        sut.close()
    return RunFiles(
        log_dir=log_dir,
        summary=log_dir / "mlperf_log_summary.txt",
        detail=log_dir / "mlperf_log_detail.txt",
        callback_errors=sut.callback_errors,
    )


def _nothing(_indices: list[int]) -> None:
    """Load / unload samples: the samples live in the endpoint adapter already (a few KiB)."""
