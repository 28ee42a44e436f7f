"""The core is pure: rackscale.model, rackscale.scheduler and rackscale.network do no I/O, read no clock
and import no adapter library. Checked twice: by import-linter's contract (pyproject.toml), which sees
indirect imports too, and here on the source, which also catches calls such as ``open()`` or ``print()``.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "rackscale"
CORE = ("model", "scheduler", "llm", "network")
FORBIDDEN_MODULES = {
    "time", "datetime", "os", "io", "pathlib", "shutil", "subprocess", "socket", "asyncio", "threading",
    "logging", "sqlite3", "urllib", "http", "requests", "yaml", "typer", "rich", "fastapi", "sqlalchemy",
    "prometheus_client", "kubernetes", "psutil",
}  # fmt: skip
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def core_files() -> list[Path]:
    return sorted(p for pkg in CORE for p in (SRC / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_module_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            names = []
        for name in names:
            top = name.split(".")[0]
            if top in FORBIDDEN_MODULES:
                problems.append(f"line {node.lineno}: imports {name}")
            if name.startswith(("rackscale.cli", "rackscale.loaders", "rackscale.bench", "rackscale.sim")):
                problems.append(f"line {node.lineno}: imports the edge module {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            problems.append(f"line {node.lineno}: calls {node.func.id}()")
    assert not problems, f"{path.name} is not pure:\n" + "\n".join(problems)


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]'")
    root = SRC.parents[1]
    done = subprocess.run([exe], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checker_catches_an_impure_module(tmp_path: Path) -> None:
    """The AST check is not vacuous: a module that reads the clock fails it."""
    bad = tmp_path / "bad.py"
    bad.write_text("import time\n\ndef now():\n    print('x')\n    return time.time()\n")
    tree = ast.parse(bad.read_text())
    imports = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "time" in FORBIDDEN_MODULES.intersection(imports)
    assert "print" in FORBIDDEN_CALLS.intersection(calls)


CORE, ADAPTERS, LAYERS = "The core is pure", "Adapters (backends", "Layers of the whole package"
BACKENDS, CYCLES = "Backends know each other not", "No import cycles"


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        pytest.param("scheduler/status.py", "import rackscale.service.store\n", CORE, id="core-imports-the-service"),
        pytest.param("model/state.py", "import rackscale.backends.local\n", CORE, id="core-imports-a-backend"),
        # Indirect: the core imports a module no contract names, which reads the clock.
        pytest.param("network/paths.py", "import rackscale.planted_clock\n", CORE, id="core-reaches-time-indirectly"),
        pytest.param(
            "backends/sim.py", "import rackscale.planted_service\n", ADAPTERS, id="backend-reaches-the-service"
        ),
        # The layers of the whole package, the backends' independence, no cycles.
        pytest.param("host/progress.py", "import rackscale.sim.engine\n", LAYERS, id="host-imports-the-simulator"),
        pytest.param("scheduler/status.py", "import rackscale.host.kpis\n", LAYERS, id="scheduler-imports-the-host"),
        pytest.param(
            "workloads/traces.py", "import rackscale.service.live\n", LAYERS, id="workloads-import-the-service"
        ),
        pytest.param("backends/sim.py", "import rackscale.backends.slurm\n", BACKENDS, id="a-backend-imports-another"),
        pytest.param("backends/local_procs.py", "import rackscale.backends.sim\n", BACKENDS, id="local-imports-sim"),
        pytest.param("service/auth.py", "import rackscale.service.api\n", CYCLES, id="a-cycle-of-siblings"),
    ],
)
def test_the_contracts_catch_a_planted_violation(tmp_path: Path, module: str, planted: str, contract: str) -> None:
    """The import-linter contracts really fail, indirect imports included (no escape hatch): the planted
    import breaks the contract that names its rule (and the tree without it keeps every contract, above)."""
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    copy = tmp_path / "src" / "rackscale"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SRC.parents[1] / "pyproject.toml", tmp_path / "pyproject.toml")
    (copy / "planted_clock.py").write_text("import time\n")
    (copy / "planted_service.py").write_text("import rackscale.service.api\n")
    target = copy / module
    target.write_text(target.read_text() + planted)
    env = {"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([exe], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0, done.stdout
    verdicts = " ".join(done.stdout.split())  # contract names wrap over lines in the report
    broken = [line for line in re.findall(r"(.+?) (?:KEPT|BROKEN)", verdicts) if f"{line} BROKEN" in verdicts]
    assert any(contract in name for name in broken), (contract, broken)
