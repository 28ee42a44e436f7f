"""``bench simulate``'s plan of runs: ``--seeds`` for the multi-seed scenarios, ``--workers`` runs at once.

The runs themselves are faked at ``run_isolated`` (each real one is a simulation in a child process, seconds to
minutes): what is checked is which runs are asked for, and that the report gathers them in order whatever
order they end in.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tests.bench.test_goals import run as goal_run
from typer.testing import CliRunner

from rackscale.bench import simulate as bench_simulate
from rackscale.cli.app import app

Config = dict[str, Any]


def kpis_of(config: Config) -> Config:
    """A run's KPIs (``test_goals``' run), readable back as (policy, seed): the mean JCT encodes both."""
    seed = int(config.get("seed", 0))
    return goal_run(seed, mean_jct_s=1000.0 + seed + (0 if config["policy"] == "rackscale" else 100))


class FakeRuns:
    """Stands in for ``run_isolated``: records each config, answers with :func:`kpis_of`."""

    def __init__(self, *, delay: Any = None, fail_at: int | None = None) -> None:
        self.configs: list[Config] = []
        self.delay = delay  # config -> seconds to wait before answering
        self.fail_at = fail_at  # the n-th run (0-based) raises, as a child that exits non-zero does
        self.lock = threading.Lock()

    def __call__(self, target: str, config: Config, *, progress: Any = None) -> Config:
        with self.lock:
            n = len(self.configs)
            self.configs.append(config)
        if self.fail_at is not None and n == self.fail_at:
            raise RuntimeError(f"benchmark process {target} failed (exit code 1); see its stderr")
        if self.delay is not None:
            time.sleep(self.delay(config))
        return kpis_of(config)


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRuns:
    runs = FakeRuns()
    monkeypatch.setattr(bench_simulate, "run_isolated", runs)
    return runs


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [
        pytest.param(None, list(range(10)), id="default-10"),
        pytest.param(3, [0, 1, 2], id="three"),
        pytest.param(1, [0], id="one"),
    ],
)
def test_seeds_replace_the_multi_seed_scenarios_lists_only(
    fake: FakeRuns, seeds: int | None, expected: list[int]
) -> None:
    before = [dict(s) for s in bench_simulate.SCENARIOS.values()]
    out = bench_simulate.run_simulation_benchmark(scenarios=["goals-synthetic", "synthetic"], seeds=seeds)
    goals = out["results"]["goals-synthetic"]
    assert list(goals) == bench_simulate.goal_policies()
    for policy, entry in goals.items():
        assert [r["seed"] for r in entry["runs"]] == expected, policy
    # The single-run scenario is as it was: one run per policy, no seed.
    assert set(out["results"]["synthetic"]) == {"rackscale", "first-fit"}
    assert all("seed" not in c for c in fake.configs if c["scenario"] == "synthetic")
    assert out["scenarios"]["goals-synthetic"]["seeds"] == expected
    assert "seeds" not in out["scenarios"]["synthetic"]
    # The registry itself is untouched (another call without --seeds runs the 10 again).
    assert [dict(s) for s in bench_simulate.SCENARIOS.values()] == before
    assert len(out["goals"]["goals-synthetic"]) > 0


def test_workers_gather_the_runs_in_their_order_whatever_order_they_end_in(monkeypatch: pytest.MonkeyPatch) -> None:
    # Later seeds answer first: with 4 at once, seed 3 ends before seed 0.
    runs = FakeRuns(delay=lambda c: 0.05 * (3 - int(c["seed"])))
    monkeypatch.setattr(bench_simulate, "run_isolated", runs)
    out = bench_simulate.run_simulation_benchmark(scenarios=["elastic-ab"], seeds=4, workers=4)
    for policy, entry in out["results"]["elastic-ab"].items():
        got = [(r["seed"], r["mean_jct_s"]) for r in entry["runs"]]
        offset = 0 if policy == "rackscale" else 100
        assert got == [(s, 1000.0 + s + offset) for s in range(4)], policy
    assert len(runs.configs) == 8


def test_workers_and_one_at_a_time_report_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    reports = []
    for workers in (1, 3):
        monkeypatch.setattr(bench_simulate, "run_isolated", FakeRuns(delay=lambda c: 0.001 * (int(c["seed"]) % 3)))
        out = bench_simulate.run_simulation_benchmark(scenarios=["goals-elastic"], seeds=5, workers=workers)
        reports.append((out["results"], out["goals"], out["scenarios"]))
    assert reports[0] == reports[1]


def test_a_failed_run_stops_the_benchmark_and_the_queued_runs_never_start(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = FakeRuns(delay=lambda c: 0.02, fail_at=1)
    monkeypatch.setattr(bench_simulate, "run_isolated", runs)
    with pytest.raises(RuntimeError, match="exit code 1"):
        bench_simulate.run_simulation_benchmark(scenarios=["goals-synthetic"], workers=2)
    total = len(bench_simulate.goal_policies()) * 10
    assert len(runs.configs) < total / 2  # cancelled, not run to the end


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"seeds": 0}, "--seeds must be at least 1", id="seeds-0"),
        pytest.param({"workers": 0}, "--workers must be at least 1", id="workers-0"),
    ],
)
def test_bad_counts_are_refused_before_any_run(fake: FakeRuns, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bench_simulate.run_simulation_benchmark(scenarios=["goals-synthetic"], **kwargs)
    assert fake.configs == []


@pytest.mark.parametrize(
    ("args", "option"),
    [
        pytest.param(["--seeds", "0"], "--seeds", id="seeds-0"),
        pytest.param(["--seeds", "x"], "--seeds", id="seeds-text"),
        pytest.param(["--workers", "0"], "--workers", id="workers-0"),
        pytest.param(["--workers", "65"], "--workers", id="workers-too-many"),
    ],
)
def test_the_command_refuses_bad_counts_with_one_line_naming_the_option(
    fake: FakeRuns, args: list[str], option: str
) -> None:
    result = CliRunner().invoke(app, ["bench", "simulate", "--scenario", "goals-synthetic", *args])
    assert result.exit_code == 2
    assert option in result.output
    assert "Traceback" not in result.output
    assert fake.configs == []


def test_the_command_passes_seeds_and_workers_through(fake: FakeRuns) -> None:
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--scenario", "goals-synthetic", "--seeds", "2", "--workers", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert sorted({c["seed"] for c in fake.configs}) == [0, 1]
    assert len(fake.configs) == 2 * len(bench_simulate.goal_policies())


def test_the_progress_display_takes_each_runs_reports_from_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each run reports as a child does ([done, total]), the last report twice: a finished run leaves the display
    # and a late report of it is ignored, with two runs reporting at once.
    reported: list[list[int]] = []

    def reporting(target: str, config: Config, *, progress: Any = None) -> Config:
        for values in ([1, 3], [3, 3], [3, 3]):
            if progress is not None:
                progress(values)
            reported.append(values)
            time.sleep(0.001)
        return kpis_of(config)

    monkeypatch.setattr(bench_simulate, "run_isolated", reporting)
    result = CliRunner().invoke(
        app, ["bench", "simulate", "--scenario", "elastic-ab", "--seeds", "3", "--workers", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert len(reported) == 3 * 2 * 3  # 2 policies x 3 seeds, three reports each
