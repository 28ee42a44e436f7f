"""rackscale.network is pure: no I/O, no clock, and it sits below the scheduler.

This repeats the import-linter contract of pyproject.toml as a plain test, so that it holds even where
``lint-imports`` is not run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rackscale.network

FORBIDDEN = {
    "subprocess", "socket", "time", "datetime", "asyncio", "threading", "os", "io", "pathlib", "shutil",
    "urllib", "http", "sqlite3", "logging", "random",
    "typer", "rich", "yaml", "requests", "fastapi", "sqlalchemy", "prometheus_client", "kubernetes",
}  # fmt: skip
FORBIDDEN_PACKAGES = ("rackscale.scheduler", "rackscale.cli", "rackscale.bench", "rackscale.loaders")
SOURCES = sorted(Path(rackscale.network.__file__).parent.glob("*.py"))


def _imports(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_network_imports_no_io_clock_or_scheduler(source: Path) -> None:
    for name in _imports(source):
        assert name.split(".")[0] not in FORBIDDEN, f"{source.name} imports {name}"
        assert not name.startswith(FORBIDDEN_PACKAGES), f"{source.name} imports {name}"
        if name.startswith("rackscale."):
            assert name.startswith(("rackscale.model", "rackscale.network")), f"{source.name} imports {name}"
