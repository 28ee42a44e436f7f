"""The online evaluation of the runtime predictor (``rackscale bench predict``) on tiny Philly-format CSVs.

Philly's columns: ``timestamp,duration,num_gpus,gpu_time,cluster`` (``cluster``: the queue). Times here are
seconds after 2017-10-01 00:00:00; a job ends at ``submit + duration`` (the trace has no start times).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.bench.predict import PREDICTORS, evaluate, rows, run_predict_benchmark
from rackscale.cli.bench import app
from rackscale.scheduler.predictor import RELATIVE_ACCURACY
from rackscale.workloads import load_trace

_T0 = datetime(2017, 10, 1)
REL_LOG = math.log((1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY))  # a bucket's width in log space


def _csv(tmp_path: Path, jobs: list[tuple[float, float, int, str]]) -> Path:
    """Write (submit s, duration s, GPUs, queue) rows as a Philly CSV."""
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for submit, duration, gpus, queue in jobs:
        ts = (_T0 + timedelta(seconds=submit)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"{ts},{duration},{gpus},{duration * gpus},{queue}")
    path = tmp_path / "philly.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _two_habits() -> list[tuple[float, float, int, str]]:
    """Queue a always runs 100 s, queue b always 10,000 s; each job submitted after the previous ones
    ended (every 20,000 s), alternating a, b."""
    return [(i * 20_000.0, 100.0 if i % 2 == 0 else 10_000.0, 1, "a" if i % 2 == 0 else "b") for i in range(40)]


def test_steady_queues_are_predicted_to_within_a_bucket(tmp_path: Path) -> None:
    report = evaluate(load_trace(f"philly:{_csv(tmp_path, _two_habits())}").jobs, min_history=1)
    hist, queue_last, median = (report["results"][k] for k in ("history", "queue-last", "global-median"))
    # Each queue's first job has no history of its own: job 0 has none at all, job 1 (queue b) backs off
    # to every training job (queue a's), 100x off.
    assert (hist["no_prediction"], hist["predicted"]) == (1, 39)
    assert hist["by_level"]["queue/kind/size"] == 38
    assert hist["by_level"]["kind/size"] == 1
    assert hist["median_abs_log_error"] <= REL_LOG
    assert hist["within_2x_share"] == pytest.approx(38 / 39)
    assert hist["p80_coverage"] == pytest.approx(38 / 39)  # within the sketch's 2 %: covered
    assert (hist["under_share"], hist["over_share"]) == (pytest.approx(1 / 39), 0.0)  # b's first: 100 s for 10,000
    assert (queue_last["no_prediction"], queue_last["median_abs_log_error"]) == (2, 0.0)
    # The global median mixes both habits: about half its predictions are 10x or more off.
    assert median["p90_abs_log_error"] >= math.log(10) - 1e-9
    assert "p80_coverage" not in median


def test_a_job_is_never_predicted_from_jobs_still_running_at_its_submit(tmp_path: Path) -> None:
    """a0 runs 0..1000 s; a1 comes at 10 s, while a0 runs: no history yet; a2 comes at 2000 s, when a1
    (ended at 60 s) and a0 (at 1000 s) have ended."""
    jobs = [(0.0, 1000.0, 1, "a"), (10.0, 50.0, 1, "a"), (2000.0, 1000.0, 1, "a")]
    report = evaluate(load_trace(f"philly:{_csv(tmp_path, jobs)}").jobs, min_history=1)
    for name in PREDICTORS:
        r = report["results"][name]
        assert (r["predicted"], r["no_prediction"]) == (1, 2), name
    res = report["results"]
    # a2 (1000 s) from {50, 1000}: the lower median (rank 1 of 2) is 50; the last to end in a is a0; the
    # running median is their mean.
    assert res["history"]["median_abs_log_error"] == pytest.approx(math.log(1000 / 50), abs=REL_LOG)
    assert res["queue-last"]["median_abs_log_error"] == 0.0
    assert res["global-median"]["median_abs_log_error"] == pytest.approx(math.log(1000 / 525))


def test_under_and_over_estimates_are_told_apart(tmp_path: Path) -> None:
    """Queue a: 100 s jobs, then a 400 s job (predicted 100: 300 s under), then back to 100 s after four
    400 s jobs taught it otherwise (an over-estimate)."""
    durations = [100.0] * 5 + [400.0] * 5 + [100.0]
    jobs = [(i * 1000.0, d, 1, "a") for i, d in enumerate(durations)]
    report = evaluate(load_trace(f"philly:{_csv(tmp_path, jobs)}").jobs, min_history=1, recent=None)
    last = report["results"]["queue-last"]
    # queue-last predicts the previous job exactly: one under (100 -> 400) by 300 s, one over (400 -> 100).
    assert (last["under_share"], last["over_share"]) == (pytest.approx(1 / 10), pytest.approx(1 / 10))
    assert (last["mean_under_s"], last["mean_over_s"]) == (pytest.approx(300.0), pytest.approx(300.0))
    # history: the median of the queue stays 100 s until the 400 s jobs are half of it: jobs 5..9 come
    # out under by about 300 s, job 10 exact; never over.
    hist = report["results"]["history"]
    assert (hist["under_share"], hist["over_share"]) == (pytest.approx(5 / 10), 0.0)
    assert hist["mean_under_s"] == pytest.approx(300.0, rel=0.02)
    assert hist["mean_over_s"] is None
    assert hist["mean_log_bias"] < 0


def test_cli_json_report(tmp_path: Path) -> None:
    path = _csv(tmp_path, _two_habits())
    done = CliRunner().invoke(app, ["predict", "--philly", str(path), "--json", "--min-history", "1"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["jobs"] == 40
    assert set(report["results"]) == set(PREDICTORS)
    assert report["params"] == {"quantile": 0.5, "min_history": 1, "recent": 32}
    assert {"cpu_count", "python"} <= set(report["machine"])


def test_cli_table_and_missing_trace(tmp_path: Path) -> None:
    path = _csv(tmp_path, _two_habits())
    done = CliRunner().invoke(app, ["predict", "--philly", str(path)])
    assert done.exit_code == 0, done.output
    assert "median_abs_log_error" in done.stdout and "queue-last" in done.stdout
    missing = CliRunner().invoke(app, ["predict", "--philly", str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2
    assert "no Philly trace" in missing.output


def test_rows_follow_the_predictors(tmp_path: Path) -> None:
    report = run_predict_benchmark(philly=_csv(tmp_path, _two_habits()), min_history=1)
    table = dict(rows(report))
    assert table["predicted"] == [report["results"][n]["predicted"] for n in PREDICTORS]
    assert table["p80_coverage"][2:] == [None, None]  # the baselines have no quantiles
