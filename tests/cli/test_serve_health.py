"""`rackscale serve --health-command` (the local backend's health check) is refused with one clear line when
it cannot work: another backend, or a command that is not an executable file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--health-command", "/bin/true"], "is for --backend local"),
        (["--backend", "local", "--gpus", "0", "--health-command", "/nonexistent/check -q"], "not an executable"),
        (["--backend", "local", "--gpus", "0", "--health-command", "''"], "is empty"),
    ],
    ids=["sim-backend", "missing-command", "empty-command"],
)
def test_a_health_command_that_cannot_work_is_refused(tmp_path: Path, args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *args])
    out = " ".join(result.output.split())
    assert result.exit_code == 2, out
    assert needle in out and "Traceback" not in out, out
