"""Hostile input to ``rackscale bench ...`` and ``rackscale slurm compare|topology``: a bad value is one
``error:`` line that names the option and the fix (exit 2), found before any work is sized, any benchmark
process or server is started and any Slurm runs; never a traceback, a hang or a run sized by a typo."""

from __future__ import annotations

import errno
import os
from pathlib import Path
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


# ------------------------------------------------------------------------------------------ slurm -o FILE
def _fake_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackscale.model.topology import GPUCluster
    from rackscale.slurm import importer

    def fake(_slurm: object, *, name: str, gpu_model: str | None) -> GPUCluster:
        return GPUCluster.uniform(name=name, racks_per_region=1, nodes_per_rack=2, gpu_model=gpu_model or "GB200")

    monkeypatch.setattr(importer, "import_cluster", fake)


BAD_OUTPUTS = [
    ("{tmp}", "--output {tmp} is a directory: give a file path"),
    ("", "--output . is a directory: give a file path"),
    (
        "{tmp}/no-such-folder/topology.conf",
        "(No such file or directory): give a path in a writable folder",
    ),
    ("/dev/full", "--output /dev/full: cannot write it (No space left on device)"),
]


VERBS = [["slurm", "topology", "--racks", "1"], ["slurm", "import"]]


@pytest.mark.parametrize("verb", VERBS, ids=["topology", "import"])
@pytest.mark.parametrize(("path", "says"), BAD_OUTPUTS, ids=["directory", "empty", "no-folder", "dev-full"])
def test_slurm_output_that_cannot_be_written_is_one_line(
    verb: list[str], path: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "/dev/full" and not os.path.exists(path):
        pytest.skip("no /dev/full here")
    _fake_import(monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(*verb, "-o", path.format(tmp=tmp_path))
    assert code == 2 and out == ""
    assert says.format(tmp=tmp_path) in one_error_line(err), err


def test_slurm_output_is_replaced_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=kept Nodes=n[0-1]\n")
    real = Path.write_text

    def disk_full(self: Path, data: str, *args: object, **kwargs: object) -> int:
        real(self, data[: len(data) // 2])  # half of it reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", disk_full)
    code, _, err = invoke("slurm", "topology", "--racks", "2", "-o", str(conf))
    monkeypatch.undo()
    assert code == 2 and "cannot write it (No space left on device)" in one_error_line(err)
    assert conf.read_text() == "SwitchName=kept Nodes=n[0-1]\n"  # the file Slurm reads is as it was
    assert [p.name for p in tmp_path.iterdir()] == ["topology.conf"]  # no temporary file left behind
    code, _, err = invoke("slurm", "topology", "--racks", "2", "-o", str(conf))
    assert code == 0 and err == f"wrote {conf}\n" and "SwitchName=r001 " in conf.read_text()
