"""What ``rackscale simulate`` and ``compare-arch`` print for a person: goals judged, human units, the
baselines named, a computed verdict, the makespan explained, n/a for no data, and tables that neither fold
nor cut a value, in a wide or a narrow terminal or a pipe. Behaviour, not whole screens: the numbers are
free to change."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.cli.simulate import KPI_ROWS
from rackscale.sim.summary import Timeline, fmt_kpi, label

runner = CliRunner()
SMALL = ("simulate", "--racks", "2", "--n-jobs", "100")  # about a second a policy; the policies differ
EXPONENT = re.compile(r"\d[eE][+-]?\d")


def run(*args: str, columns: int | None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns) if columns else None})
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    code, out = run(*SMALL, "--json", columns=None)
    assert code == 0, out
    parsed: dict[str, Any] = json.loads(out)
    return parsed


@pytest.fixture(scope="module")
def wide() -> str:
    code, out = run(*SMALL, columns=400)
    assert code == 0, out
    return out


def values(doc: dict[str, Any], policy: str) -> dict[str, str]:
    kpis = next(r["kpis"] for r in doc["runs"] if r["policy"] == policy)
    return {k: fmt_kpi(k, kpis.get(k)) for k in KPI_ROWS}


def line_of(out: str, text: str) -> str:
    return next(line for line in out.splitlines() if text in line)


def test_goals_are_judged_in_the_table(wide: str, doc: dict[str, Any]) -> None:
    goals = doc["goals"]
    idle = line_of(wide, label("idle_rate"))
    assert "<= 5 %" in idle
    for policy in ("rackscale", "first-fit"):
        judged = goals["idle_rate"][policy]
        assert judged in ("met", "missed", "n/a")
        if judged != "n/a":
            assert judged in idle
    assert re.search(r"\b(met|missed)\b", line_of(wide, label("intra_rack_traffic_share")))
    jct = line_of(wide, label("mean_jct_s"))
    assert "lower" in jct and re.search(r"\b(best|worse)\b", jct)


def test_goals_are_judged_in_json(doc: dict[str, Any]) -> None:
    goals = doc["goals"]
    assert goals["idle_rate"]["goal"] == "<= 0.05" and goals["intra_rack_traffic_share"]["goal"] == ">= 0.90"
    assert goals["mean_jct_s"]["goal"] == "lower" and goals["single_rack_share"]["goal"] == "higher"
    ranked = goals["single_rack_share"]
    assert sorted((ranked["rackscale"], ranked["first-fit"])) == ["best", "worse than rackscale"]
    for key in ("cluster", "jobs", "runs"):  # the keys scripts read are still there
        assert key in doc
    assert doc["policies"]["first-fit"].startswith("the default Kubernetes scheduler")


def test_human_units_and_no_exponent(wide: str, doc: dict[str, Any]) -> None:
    assert not EXPONENT.search(wide), "a value in e-notation"
    assert re.search(r"\b\d+ (d|h|min|s)\b", line_of(wide, label("makespan_s")))
    assert re.search(r"\d+(\.\d)? %", line_of(wide, label("allocation_ratio")))
    assert "CNY " in line_of(wide, label("cost_per_million_tokens"))
    assert re.search(r"\d (B|kB|MB|GB|TB|PB)\b", line_of(wide, label("rdma_bytes")))
    assert "samples/s" in line_of(wide, label("training_samples_per_s"))
    kpis = doc["runs"][0]["kpis"]
    assert isinstance(kpis["makespan_s"], float) and isinstance(kpis["allocation_ratio"], float)  # JSON: raw


def test_baselines_are_named(wide: str) -> None:
    assert "rackscale = this project" in wide
    assert "first-fit = the default Kubernetes scheduler: LeastAllocated spread" in wide
    assert "and differ in placement; rackscale adds least-attained-service order" in wide


def test_the_verdict_ends_the_output(wide: str, doc: dict[str, Any]) -> None:
    lines = wide.rstrip().splitlines()
    assert lines[-2].startswith("rackscale vs first-fit: better on ")
    assert lines[-1].lstrip().startswith("worse on ")
    assert re.search(r"[+-]\d+(\.\d)? (pt|%)", lines[-2] + lines[-1])
    (v,) = doc["verdict"]
    assert v["baseline"] == "first-fit" and v["lines"] == [lines[-2], lines[-1]]
    assert v["better"] and all(c["unit"] in ("pt", "%") for c in {**v["better"], **v["worse"]}.values())


def test_the_makespan_is_explained(wide: str, doc: dict[str, Any]) -> None:
    tl = doc["timeline"]
    note = tl["note"]
    assert note.startswith("arrivals span") and "the last job ended" in note
    assert "the tail" in note and "one at a time" in note and "jobs ran on average" in note
    assert note in " ".join(wide.split())  # under the table (a terminal may wrap the sentence)
    assert tl["arrivals_span_s"] < 24 * 3600 < tl["makespan_s"]["rackscale"]


@pytest.mark.parametrize("columns", [200, 80, None], ids=["wide", "narrow", "piped"])
def test_tables_never_fold_or_cut_a_value(columns: int | None, doc: dict[str, Any]) -> None:
    code, out = run(*SMALL, columns=columns)
    assert code == 0, out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and "…" not in out
    if columns:
        assert max(len(line) for line in table) <= columns
    for policy in ("rackscale", "first-fit"):
        for key, shown in values(doc, policy).items():
            assert shown in out, f"{key}: {shown!r} folded or cut"
    if columns is None:  # a pipe: not wrapped at 80 columns, every row on one line
        for key, shown in values(doc, "rackscale").items():
            assert shown in line_of(out, label(key))
        assert len(table) == len(KPI_ROWS) + 4


def test_a_terminal_too_narrow_for_the_table_gets_a_list(doc: dict[str, Any]) -> None:
    code, out = run(*SMALL, columns=44)
    assert code == 0, out
    assert "┃" not in out and "…" not in out
    assert "idle rate (while jobs wait) (goal: <= 5 %)" in out
    for policy in ("rackscale", "first-fit"):
        for shown in values(doc, policy).values():
            assert shown in out


def test_no_data_is_na_never_a_perfect_score(tmp_path: Path) -> None:
    jobs = tmp_path / "huge.yaml"
    jobs.write_text("name: huge\nkind: training\ngpus: 1000\n")
    code, out = run("simulate", "--jobs", str(jobs), "--json", columns=None)
    assert code == 0, out
    doc = json.loads(out)
    for run_ in doc["runs"]:
        kpis = run_["kpis"]
        assert (kpis["completed"], kpis["failed"]) == (0, 1)
        for key in ("intra_rack_traffic_share", "single_rack_share", "slo_attainment", "makespan_s", "mean_jct_s"):
            assert kpis[key] is None, key
    assert doc["goals"]["intra_rack_traffic_share"]["rackscale"] == "n/a"
    code, out = run("simulate", "--jobs", str(jobs), columns=200)
    assert code == 0, out
    for key in ("intra_rack_traffic_share", "single_rack_share", "slo_attainment", "makespan_s"):
        assert re.search(r"n/a\s+│\s+n/a", line_of(out, label(key))), key
    assert "100.0 %" not in out and not EXPONENT.search(out)
    assert "1 job failed: 1 x LargerThanConstraintAllows" in out
    assert "nothing ran" in out


def test_compare_arch_names_each_architecture_once() -> None:
    code, out = run("compare-arch", "--racks", "1", "--n-jobs", "60", columns=200)
    assert code == 0, out
    assert "A: 1 x NVL72; B: 9 x 8-GPU nodes;" in out
    assert "A: A:" not in out and "B: B:" not in out
    assert not EXPONENT.search(out)


def test_compare_arch_racks_0_is_the_same_one_line_error_as_simulate() -> None:
    errors = []
    for verb in ("compare-arch", "simulate"):
        result = runner.invoke(app, [verb, "--racks", "0"])
        assert result.exit_code == 2
        errors.append(result.output.strip())
    assert errors[0] == errors[1] == "error: --racks must be at least 1 (got 0)"


@pytest.mark.parametrize(("left", "says"), [(1, "1 job ended"), (42, "42 jobs ended")], ids=["one", "many"])
def test_the_tail_counts_its_jobs_in_words(left: int, says: str) -> None:
    # A day of tail after an hour of arrivals, no gang of half the cluster, no samples.
    day: dict[str, Any] = {"arrivals_span_s": 3600.0, "makespans": {"rackscale": 86_400.0}, "tail_s": 82_800.0}
    t = Timeline(policy="rackscale", left=left, big=0, biggest_gpus=0, tail_running=None, tail_allocated=None, **day)
    assert f"the tail (rackscale): {says} after the last arrival" in t.text()
