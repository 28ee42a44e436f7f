"""One builder for a sweep cell and for ``rackscale simulate`` (sweep/cells.build_run): a bad input is the
same error through both, each naming the input its own way (a document's key, the command's flag)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.sweep.cells import build_run
from rackscale.sweep.spec import CellOptions, SweepError

runner = CliRunner()
QUOTA = str(Path(__file__).parents[2] / "examples" / "schedule-training-quota.yaml")  # names interns-nights


def sweep_problems(options: dict[str, Any]) -> list[str]:
    with pytest.raises(SweepError) as got:
        build_run(CellOptions.model_validate(options))
    return got.value.problems


def simulate_error(*args: str) -> list[str]:
    r = runner.invoke(app, ["simulate", *args])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.startswith("error: "), r.output
    return r.output.removeprefix("error: ").rstrip("\n").split("\n")


@pytest.mark.parametrize(
    ("options", "args", "key_says", "flag_says"),
    [
        pytest.param(
            {"racks": 1, "maintenance": ["r999@1h+1h"]},
            ["--racks", "1", "--maintenance", "r999@1h+1h"],
            "maintenance: no rack named 'r999' in this cluster",
            "--maintenance: no rack named 'r999' in this cluster",
            id="maintenance-of-an-unknown-rack",
        ),
        pytest.param(
            {"racks": 1, "trace": "csv:{late}", "duration_h": 1.0},
            ["--racks", "1", "--trace", "csv:{late}", "--duration", "1"],
            "the workload has no jobs (check duration_h and the trace's time window)",
            "the workload has no jobs (check --duration and the trace's time window)",
            id="a-window-before-the-first-job",
        ),
        pytest.param(
            {"racks": 1, "schedules": [QUOTA, QUOTA]},
            ["--racks", "1", "--schedule", QUOTA, "--schedule", QUOTA],
            f"schedules {QUOTA}: a second schedule named 'interns-nights'; give each its own metadata.name",
            f"--schedule {QUOTA}: a second schedule named 'interns-nights'; give each its own metadata.name",
            id="two-schedules-of-one-name",
        ),
    ],
)
def test_a_bad_input_names_the_key_in_a_sweep_and_the_flag_in_simulate(
    tmp_path: Path, options: dict[str, Any], args: list[str], key_says: str, flag_says: str
) -> None:
    late = tmp_path / "late.csv"  # its only job arrives after 27 h: a 1 h window holds none
    late.write_text("name,kind,submit_time,duration,gpus\na,training,99999,600,8\n")
    options = {k: v.format(late=late) if isinstance(v, str) else v for k, v in options.items()}
    args = [a.format(late=late) for a in args]
    assert sweep_problems(options) == [key_says]
    assert simulate_error(*args) == [flag_says]


def test_a_file_with_several_problems_is_one_line_each_through_both(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("apiVersion: rackscale.io/v1\nkind: ScalingSchedule\nmetadata: {name: x}\nspec: {bogus: 1}\n")
    got = sweep_problems({"racks": 1, "schedules": [str(f)]})
    assert len(got) == 3 and all(line.startswith(f"{f}: spec.") for line in got)
    assert [p.split(": ")[1] for p in got] == ["spec.target", "spec.steps", "spec.bogus"]
    assert simulate_error("--racks", "1", "--schedule", str(f)) == got
