"""``perf serve`` points as sweep cells (``spec.perf``): each cell is what ``rackscale perf serve --json`` says
for its options, its KPIs named by target; a bad point is one line naming its field; a model file that
cannot be read is that cell's recorded error; a rerun skips the points done, and an edit to the model file
makes its cell new; simulate and perf cells share one sweep."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.sweep import SweepError, parse_sweep
from rackscale.sweep.cells import cell_key
from rackscale.sweep.perf_cells import PerfOptions, perf_kpi_order
from rackscale.sweep.spec import CellOptions

runner = CliRunner()
R1 = {"model": "deepseek-r1", "precision": "fp4", "mtp": True, "interactivity": [25, 125, 275]}


def perf_doc(perf: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "rackscale.io/v1", "kind": "Sweep", "metadata": {"name": "p"}, "spec": {"perf": perf, **spec}}


def sweep_cli(tmp_path: Path, document: dict[str, Any]) -> dict[str, Any]:
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(document))
    r = runner.invoke(app, ["sweep", "-f", str(f), "--out", str(tmp_path / "out"), "--workers", "2", "-o", "json"])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def perf_serve(*args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["perf", "serve", *args, "--json"])
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


BAD: list[tuple[dict[str, Any], str]] = [
    ({"base": {"model": "deepseek-r1", "gpus": "b200"}}, "spec.perf.base.gpus: unknown option (fix: did you mean"),
    ({"base": {"model": "nope", "gpu": "b200"}}, "spec.perf.base.model: unknown model 'nope': choose one of "),
    ({"base": {"model": "deepseek-r1"}, "grid": {"gpu": ["b200", "tpu"]}}, "spec.perf.grid.gpu[1]: "),
    ({"base": {"model": "deepseek-r1", "gpu": "b200", "precision": "fp3"}}, "spec.perf.base.precision: "),
    ({"base": {"model": "deepseek-r1", "gpu": "b200", "isl": 0}}, "spec.perf.base.isl: Input should be greater than"),
    ({"base": {"model": "deepseek-r1", "gpu": "b200", "interactivity": [25, -1]}}, "each target is more than 0"),
    ({"base": {"model": "deepseek-r1", "gpu": "b200", "kind": "x"}}, "spec.perf.base.kind: unknown option"),
    ({"base": {"model": "deepseek-r1"}}, "spec.perf with model='deepseek-r1': gpu: Field required"),
    ({"base": {"model": "deepseek-r1"}, "grid": {"gpu": "b200"}}, "spec.perf.grid.gpu: a grid axis is a non-empty"),
    ({"base": {"model": "x" * 5000, "gpu": "b200"}}, "spec.perf.base.model: String should have at most 4096"),
    ({"base": {"model": "a\x00.json", "gpu": "b200"}}, "spec.perf.base.model: a model is a built-in name or a"),
    ({"base": {"model": "\ud800", "gpu": "b200"}}, "spec.perf.base.model: Input should be a valid string"),
    ({"base": {"model": [[["x"]]], "gpu": "b200"}}, "spec.perf.base.model: Input should be a valid string"),
]  # fmt: skip
IDS = ["option-typo", "unknown-model", "unknown-system", "unknown-precision", "zero-isl", "negative-target",
       "kind-is-not-an-option", "gpu-missing", "axis-not-a-list", "huge-model-name",
       "nul-in-a-path", "lone-surrogate", "nested-lists"]  # fmt: skip


@pytest.mark.parametrize(("perf", "expected"), BAD, ids=IDS)
def test_a_bad_point_is_one_line_naming_its_field(perf: dict[str, Any], expected: str) -> None:
    with pytest.raises(SweepError) as e:
        parse_sweep(perf_doc(perf), source="s.yaml")
    assert any(expected in p for p in e.value.problems), e.value.problems


def test_perf_alone_has_no_simulate_cell_and_with_simulate_options_both_run() -> None:
    alone = parse_sweep(perf_doc({"base": R1, "grid": {"gpu": ["gb200", "b200", "b200"]}})).expand()
    assert [type(c) for c in alone] == [PerfOptions, PerfOptions]  # the repeated value is one cell
    assert [c.gpu for c in alone if isinstance(c, PerfOptions)] == ["gb200", "b200"]
    both = parse_sweep(perf_doc({"base": {**R1, "gpu": "b200"}}, base={"racks": 1}, grid={"seed": [0, 1]})).expand()
    assert [type(c) for c in both] == [CellOptions, CellOptions, PerfOptions]


def test_cells_are_perf_serve_runs_and_a_rerun_resumes(tmp_path: Path) -> None:
    document = perf_doc({"base": R1, "grid": {"gpu": ["gb200", "b200:16"]}}, base={"racks": 1, "jobs": 20,
                        "duration_h": 1.0})  # fmt: skip
    first = sweep_cli(tmp_path, document)
    assert (first["cells"], first["done"], first["failed"]) == (3, 3, 0)
    by_gpu = {p["options"]["gpu"]: p["kpis"] for p in first["perf"]}
    for gpu in ("gb200", "b200:16"):
        cli = perf_serve("--model", "deepseek-r1", "--gpu", gpu, "--precision", "fp4", "--mtp", "-i", "25,125,275")
        want = [None if p is None else p["tok_s_gpu"] for p in cli["points"]]
        got = [by_gpu[gpu][f"tok_s_gpu_at_{x}"] for x in (25, 125, 275)]
        assert got == want
        assert by_gpu[gpu]["peak_tok_s_gpu"] == cli["peak"]["tok_s_gpu"]
    with (tmp_path / "out" / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    perf_rows = [r for r in rows if r["kind"] == "perf-serve"]
    assert len(perf_rows) == 2 and len(rows) == 3
    assert float(perf_rows[0]["tok_s_gpu_at_125"]) > 0 and rows[0]["mean_jct_s"]  # one table for both kinds
    report = (tmp_path / "out" / "report.html").read_text()
    assert "perf serve points" in report and "125 tok/s/user" in report
    again = sweep_cli(tmp_path, document)
    assert (again["run"], again["skipped"], again["done"]) == (0, 3, 3)


def test_a_model_file_that_cannot_be_read_is_that_cells_error_and_an_edit_is_a_new_cell(tmp_path: Path) -> None:
    config = tmp_path / "tiny" / "config.json"
    config.parent.mkdir()
    config.write_text("{not json")
    document = perf_doc({"base": {"gpu": "h100", "interactivity": [10]}, "grid": {"model": ["llama-3.1-8b",
                         str(config)]}})  # fmt: skip
    out = sweep_cli(tmp_path, document)
    assert (out["done"], out["failed"]) == (1, 1)
    assert any("not valid JSON" in e for e in out["errors"]), out["errors"]
    key_before = cell_key(PerfOptions(model=str(config), gpu="h100", interactivity=(10,)))
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                                  "vocab_size": 128256}))  # fmt: skip
    assert cell_key(PerfOptions(model=str(config), gpu="h100", interactivity=(10,))) != key_before
    fixed = sweep_cli(tmp_path, document)
    assert (fixed["run"], fixed["skipped"], fixed["done"], fixed["failed"]) == (1, 1, 2, 0)


def test_perf_kpis_are_ordered_by_target_not_as_text() -> None:
    names = ["tok_s_gpu_at_125", "peak_tok_s_gpu", "ttft_s_at_25", "tok_s_gpu_at_25", "tok_s_gpu_at_1000"]
    assert perf_kpi_order(names) == [
        "tok_s_gpu_at_25", "tok_s_gpu_at_125", "tok_s_gpu_at_1000", "ttft_s_at_25", "peak_tok_s_gpu",
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["sweep-million-by-region.yaml", "sweep-perf-r1.yaml"])
def test_the_example_sweeps_are_valid(name: str) -> None:
    from rackscale.sweep import load_sweep

    cells = load_sweep(Path(__file__).parents[2] / "examples" / name).expand()
    assert len(cells) in (3, 6)


def test_each_system_is_compared_with_the_baseline_as_perf_serve_vs_does(tmp_path: Path) -> None:
    document = perf_doc({"base": R1, "grid": {"gpu": ["gb200", "b200"], "isl": [1024, 8192]}, "baseline": "b200"})
    out = sweep_cli(tmp_path, document)
    assert len(out["perf_comparisons"]) == 2  # gb200 vs b200 at each isl; b200 is not compared with itself
    short = next(c for c in out["perf_comparisons"] if "isl" not in c["options"])
    vs = perf_serve("--model", "deepseek-r1", "--gpu", "gb200", "--precision", "fp4", "--mtp", "-i", "25,125,275",
                    "--vs", "b200")  # fmt: skip
    want = {f"tok_s_gpu_at_{r['interactivity_tok_s_user']:g}": r["ratio"] for r in vs["ratios"]}
    assert {k: v for k, v in short["ratios"].items() if k != "peak_tok_s_gpu"} == want
    assert short["ratios"]["peak_tok_s_gpu"] == vs["peak_ratio"]
    assert short["text"].startswith("gb200 vs b200, tokens/s per GPU at tok/s/user 25: x")
    assert "against the baseline system" in (tmp_path / "out" / "report.html").read_text()


def test_a_baseline_that_is_no_cells_gpu_is_one_line() -> None:
    with pytest.raises(SweepError) as e:
        parse_sweep(perf_doc({"base": {**R1, "gpu": "gb200"}, "baseline": "h100"}), source="s.yaml")
    assert e.value.problems == ["s.yaml: spec.perf.baseline: 'h100' is no gpu of the perf cells"]


def test_a_model_file_the_os_cannot_open_is_one_error_not_a_traceback() -> None:
    from rackscale.workloads.llm_models import ModelFileError, load_model

    with pytest.raises(ModelFileError, match=r"cannot read the file \(embedded null byte\)"):
        load_model("a\x00.json")
