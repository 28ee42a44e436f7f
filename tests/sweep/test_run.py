"""Running a sweep on the process pool: each cell is what ``simulate --json`` reports for its policy; a rerun
runs nothing; a new seed runs only its cells; a failing cell is recorded and the rest run; a killed worker's
cell is retried and done; CSV and JSONL agree; the report holds the tables."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.sweep.cellfns import killable
from tests.sweep.helpers import doc, kill_when_written
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.sweep import parse_sweep
from rackscale.sweep.results import ResultsWriter, read_results, write_csv
from rackscale.sweep.runner import make_cells, run_pool

runner = CliRunner()
KPIS = ["mean_jct_s", "idle_rate", "completed"]


def sweep_cli(tmp_path: Path, document: dict[str, Any], *extra: str) -> dict[str, Any]:
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(document))
    r = runner.invoke(app, ["sweep", "-f", str(f), "--out", str(tmp_path / "out"), "-o", "json", *extra])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def test_cells_are_simulate_runs_and_a_rerun_resumes(tmp_path: Path) -> None:
    grid = {"policy": ["rackscale", "first-fit"], "seed": [0, 1]}
    first = sweep_cli(tmp_path, doc(grid=grid, compare={"baseline": "first-fit", "kpis": KPIS}), "--workers", "2")
    assert (first["cells"], first["run"], first["done"], first["skipped"]) == (4, 4, 4, 0)
    # the same cell through `rackscale simulate --json`
    r = runner.invoke(app, ["simulate", "--racks", "1", "--n-jobs", "30", "--duration", "2", "--seed", "1",
                            "--policy", "first-fit", "--baseline", "first-fit", "--json"])  # fmt: skip
    want = json.loads(r.stdout)["runs"][0]["kpis"]
    got = [rec for rec in read_results(tmp_path / "out" / "results.jsonl").values()
           if rec["options"].get("policy") == "first-fit" and rec["options"].get("seed") == 1]  # fmt: skip
    assert len(got) == 1 and got[0]["kpis"] == want
    again = sweep_cli(tmp_path, doc(grid=grid, compare={"baseline": "first-fit", "kpis": KPIS}))
    assert (again["run"], again["skipped"], again["done"]) == (0, 4, 4)
    more = sweep_cli(tmp_path, doc(grid={**grid, "seed": [0, 1, 2]}, compare={"baseline": "first-fit", "kpis": KPIS}))
    assert (more["run"], more["skipped"], more["done"]) == (2, 4, 6)
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6  # append-only: each cell written once
    [cmp] = [c for c in more["comparisons"] if c["kpi"] == "completed"]
    assert cmp["n"] == 3 and cmp["text"].startswith("rackscale vs first-fit: completed ")
    out = tmp_path / "out"
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    by_key = read_results(out / "results.jsonl")
    assert {r["key"] for r in rows} == set(by_key)
    for row in rows:
        assert float(row["mean_jct_s"]) == pytest.approx(by_key[row["key"]]["kpis"]["mean_jct_s"])
        assert int(row["seed"] or 0) == by_key[row["key"]]["options"].get("seed", 0)
    page = (out / "report.html").read_text()
    assert "<h2>Comparison" in page and "rackscale vs first-fit: mean_jct_s" in page
    assert page.count("<tr>") >= 1 + 2 + 1 + 6  # heads and rows of the groups and cells tables
    # Self-contained: nothing fetched (an inline SVG's xmlns URIs are names, not fetches).
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?//""", page)


def test_a_failing_cell_is_recorded_and_the_others_run(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.yaml"
    bad.write_text("kind: [unclosed\n")
    cells = [{"jobs_file": str(bad)}, {"seed": 1}, {"seed": 2}]
    got = sweep_cli(tmp_path, doc(cells=cells), "--workers", "2")
    assert (got["done"], got["failed"]) == (2, 1)
    [rec] = [r for r in read_results(tmp_path / "out" / "results.jsonl").values() if r["status"] == "failed"]
    assert rec["options"]["jobs_file"] == str(bad) and "SweepError" in rec["error"] and str(bad) in rec["error"]


def test_a_killed_pool_worker_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_TEST_DIR", str(tmp_path))
    options = parse_sweep(doc(grid={"seed": [0, 1, 2, 3]})).expand()
    cells, _ = make_cells(options)
    watcher = kill_when_written(tmp_path / "pid")
    with ResultsWriter(tmp_path / "r.jsonl") as w:
        stats = run_pool(cells, w, workers=2, retries=2, cell_fn=killable)
    watcher.join(timeout=1)
    recs = read_results(tmp_path / "r.jsonl")
    assert {r["status"] for r in recs.values()} == {"ok"} and len(recs) == 4
    killed = int((tmp_path / "pid").read_text())
    runs_of_1 = [int(p) for s, p in (ln.split() for ln in (tmp_path / "pids").read_text().splitlines()) if s == "1"]
    assert runs_of_1[0] == killed and len(runs_of_1) >= 2 and runs_of_1[-1] != killed  # run again elsewhere
    [one] = [r for r in recs.values() if r["options"].get("seed") == 1]
    assert one["attempts"] >= 2 and stats.retried >= 1


@pytest.mark.parametrize(("workers", "cells", "started"), [(64, 1, 1), (2, 3, 2), (3, 3, 3)],
                         ids=["many-workers-one-cell", "fewer-workers", "as-many"])  # fmt: skip
def test_the_pool_starts_no_more_processes_than_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, cells: int, started: int
) -> None:
    import concurrent.futures

    import rackscale.sweep.runner as runner_module

    sizes: list[int] = []

    class Pool(concurrent.futures.ThreadPoolExecutor):  # threads: what matters is the size asked for
        def __init__(self, max_workers: int) -> None:
            sizes.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(runner_module, "ProcessPoolExecutor", Pool)
    todo, _ = make_cells(parse_sweep(doc(grid={"seed": list(range(cells))})).expand())
    with ResultsWriter(tmp_path / "r.jsonl") as w:
        stats = run_pool(todo, w, workers=workers, cell_fn=lambda o, t: {"kpis": {}})
    assert sizes == [started] and stats.done == cells


def test_a_worker_lost_too_often_is_a_failed_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_TEST_DIR", str(tmp_path))
    cells, _ = make_cells(parse_sweep(doc(grid={"seed": [1]})).expand())
    kill_when_written(tmp_path / "pid")
    with ResultsWriter(tmp_path / "r.jsonl") as w:
        stats = run_pool(cells, w, workers=1, retries=0, cell_fn=killable)
    [rec] = read_results(tmp_path / "r.jsonl").values()
    assert rec["status"] == "failed" and "worker lost 1 times" in rec["error"] and stats.failed == 1


def test_a_torn_last_line_is_not_a_done_cell(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"key": "a", "status": "ok", "options": {}}) + '\n{"key": "b", "sta')
    assert list(read_results(path)) == ["a"]
    write_csv(read_results(path).values(), tmp_path / "r.csv", ["mean_jct_s"])
    assert (tmp_path / "r.csv").read_text().splitlines()[0].startswith("key,status,")


@pytest.mark.parametrize(
    ("tail", "done"),
    [
        ('{"key": "b", "sta', ["a", "c"]),  # a record cut mid-line by a kill
        ("\x00" * 16, ["a", "c"]),  # zero-filled blocks after a machine crash
        ('{"key": "b", "status": "ok", "options": {}}', ["a", "b", "c"]),  # whole, but its newline never written
        ("", ["a", "c"]),  # nothing torn
    ],
    ids=["torn-record", "nul-bytes", "no-final-newline", "clean"],
)
def test_an_append_after_a_torn_line_is_kept(tmp_path: Path, tail: str, done: list[str]) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"key": "a", "status": "ok", "options": {}}) + "\n" + tail)
    with ResultsWriter(path) as w:  # the resumed run
        w.append({"key": "c", "status": "ok", "options": {}})
    assert sorted(read_results(path)) == done


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc(grid={"policy": ["nope"]})))
    r = runner.invoke(app, ["sweep", "-f", str(f), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().startswith("error: ") and "spec.grid.policy[0]: unknown policy 'nope'" in r.stderr
    r = runner.invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "Examples:" in r.stdout and "rackscale sweep -f sweep.yaml --ray auto" in r.stdout
    assert "pip install 'rackscale[sweep]'" in r.stdout  # the extra's name, not eaten as rich markup


def _report(tmp_path: Path) -> str:
    from rackscale.sweep.report import write_report
    from rackscale.sweep.results import aggregate, compare

    recs = [
        {"key": f"{p}{s}{r}", "status": "ok", "options": {"policy": p, "seed": s, "racks": r},
         "kpis": {"mean_jct_s": 10.0 + s + (p == "a") + r}}
        for p in "ab" for s in range(3) for r in (1, 2)
    ]  # fmt: skip
    recs.append({"key": "x", "status": "failed", "options": {"policy": "a", "seed": 9}, "error": "Boom: <b>"})
    write_report(tmp_path / "r.html", name="n<1>", records=recs, groups=aggregate(recs, ["mean_jct_s"]),
                 comparisons=compare(recs, baseline="b", kpis=["mean_jct_s"]), kpis=["mean_jct_s"])  # fmt: skip
    return (tmp_path / "r.html").read_text()


def test_report_without_matplotlib_has_the_tables_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    page = _report(tmp_path)
    assert "No plots: matplotlib is not installed" in page and "<svg" not in page
    assert "a vs b: mean_jct_s " in page and "Boom: &lt;b&gt;" in page and "n&lt;1&gt;" in page  # escaped
    assert page.count('class="groups"') == page.count('class="cells"') == 1


def test_report_with_matplotlib_has_inline_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: pip install 'rackscale[sweep]'")
    page = _report(tmp_path)
    assert page.count("<svg") == 1 and "95 % confidence intervals" in page


@pytest.mark.parametrize(
    "values",
    [
        [None, 8],  # an option left at its default beside a set value (cells: [{}, {racks: 8}])
        [None, 5000.0],
        [{"a": "x"}, {"a": "y"}],  # mappings do not order
        [["r000@1h+1h"], None],
        [2, 1],
    ],
    ids=["default-beside-int", "default-beside-float", "mappings", "list-beside-default", "numbers"],
)
@pytest.mark.filterwarnings("error::UserWarning")  # a KPI n/a everywhere: no legend without lines (a warning)
def test_report_plots_an_axis_of_any_values(tmp_path: Path, values: list[Any]) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: pip install 'rackscale[sweep]'")
    from rackscale.sweep.report import write_report
    from rackscale.sweep.results import aggregate

    recs = [
        {"key": f"{i}-{s}", "status": "ok", "kpis": {"mean_jct_s": float(i + s)},
         "options": {"seed": s, **({} if v is None else {"opt": v})}}
        for i, v in enumerate(values) for s in range(2)
    ]  # fmt: skip
    write_report(tmp_path / "r.html", name="n", records=recs, groups=aggregate(recs, ["mean_jct_s", "idle_rate"]),
                 comparisons=[], kpis=["mean_jct_s", "idle_rate"])  # fmt: skip
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 2 and page.count("<tr>") == 1 + len(values) + 1 + 2 * len(values)


def test_parquet_holds_the_csv_table(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed: Parquet is optional")
    from rackscale.sweep.results import write_parquet

    recs = [
        {"key": "a", "status": "ok", "options": {"seed": 1, "maintenance": ["r000@1h+1h"]}, "kpis": {"k": 1}},
        {"key": "b", "status": "failed", "options": {"seed": "x"}, "error": "E"},  # a column of mixed types
    ]
    assert write_parquet(recs, tmp_path / "r.parquet", ["k"])
    got = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert [(r["key"], r["status"], r["seed"], r["k"], r["error"]) for r in got] == [
        ("a", "ok", "1", 1, None),
        ("b", "failed", "x", None, "E"),
    ]
    assert got[0]["maintenance"] == '["r000@1h+1h"]'


def test_ray_missing_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc()))
    r = runner.invoke(app, ["sweep", "-f", str(f), "--out", str(tmp_path / "o"), "--ray", "auto"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == "error: Ray is not installed: pip install 'rackscale[sweep]' (ray[default] and pyarrow)"


def test_the_table_shows_each_groups_means_over_the_seeds(tmp_path: Path) -> None:
    """-o table: per group of cells (policy and the options set, seeds pooled) the KPIs' means and 95 %
    intervals, as -o json's ``groups`` has them; before, the table gave only the counts."""
    grid = {"policy": ["rackscale", "first-fit"], "seed": [0, 1]}
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(doc(grid=grid, compare={"kpis": ["mean_jct_s", "idle_rate"]})))
    out = tmp_path / "out"
    r = runner.invoke(app, ["sweep", "-f", str(f), "--out", str(out), "--workers", "1"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    groups = json.loads((out / "summary.json").read_text())["groups"]
    rows = [line for line in r.stdout.splitlines() if "policy=" in line]
    assert len(rows) == 2 and any("policy=rackscale" in x for x in rows) and any("policy=first-fit" in x for x in rows)
    for g in groups:
        row = next(x for x in rows if f"policy={g['options'].get('policy', 'rackscale')}," in x)
        jct, idle = g["mean_jct_s"], g["idle_rate"]
        assert f"{jct['mean']:,.0f} ± {jct['ci95']:,.0f}" in row, row
        assert f"{100 * idle['mean']:.1f} % ± {100 * idle['ci95']:.1f} %" in row, row
        assert re.search(r"│\s+2\s+│", row), row  # two seeds
