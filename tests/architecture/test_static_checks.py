"""ruff and mypy --strict are part of the test suite, so the README's one test command checks them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    if not exe.exists():
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return str(exe)


@pytest.mark.parametrize(
    "argv",
    [["ruff", "check", "src", "tests"], ["ruff", "format", "--check", "src", "tests"], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_static_check_passes(argv: list[str]) -> None:
    done = subprocess.run([_tool(argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
