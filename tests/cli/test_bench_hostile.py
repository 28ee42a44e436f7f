"""Hostile input to ``rackscale bench ...`` and ``rackscale slurm compare|topology``: a bad value is one
``error:`` line that names the option and the fix (exit 2), found before any work is sized, any benchmark
process or server is started and any Slurm runs; never a traceback, a hang or a run sized by a typo."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app

runner = CliRunner()
HUGE = "1" + "0" * 30  # past every bound, and past a C long


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------------------------------ slurm compare
@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Slurm started, or any emulated cluster built, fails the test (nothing runs for real)."""
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import block, emulated

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the emulated cluster was built (or a Slurm started) before the bounds were checked")

    monkeypatch.setattr(emulated, "running", refuse)
    monkeypatch.setattr(block, "running", refuse)
    monkeypatch.setattr(GPUCluster, "uniform", refuse)


SLURM_COMPARE = [
    (["--racks", "1000000000"], "--racks x --rack-nodes is 4,000,000,000 nodes"),
    (["--racks", "20000", "--rack-nodes", "18"], "more than the 262,144 a cluster spec may hold"),
    (["--node-gpus", "1000000000"], "--node-gpus must be at most 64"),
    (["--rack-nodes", HUGE], "--rack-nodes must be at most 1,024"),
    (["--jobs", "1000000000000"], "--jobs must be at most 10,000,000"),
    (["--spread", "inf"], "--spread must be at most 315,576,000 s"),
    (["--spread", "1e308"], "--spread must be at most 315,576,000 s"),
    (["--spread", "nan"], "--spread must be at least 0"),
    (["--engine", "block", "--node-gpus", "65"], "--node-gpus must be at most 64"),
    (["--engine", "TREE"], "--engine must be tree or block"),
    (["--engine", ""], "--engine must be tree or block"),
]


@pytest.mark.usefixtures("no_slurm")
@pytest.mark.parametrize(("args", "says"), SLURM_COMPARE, ids=[" ".join(a) for a, _ in SLURM_COMPARE])
def test_slurm_compare_refuses_a_typo_before_any_slurm_starts(args: list[str], says: str) -> None:
    code, out, err = invoke("slurm", "compare", *args)
    assert code == 2 and out == ""
    assert says in one_error_line(err), err
