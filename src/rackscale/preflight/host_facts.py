"""The adapter between the checks and the host: files under a root, commands through a runner.

The real probe reads ``/`` and runs commands with a timeout; tests build a tree in ``tmp_path`` and a
runner that answers from recorded outputs, so every parser is tested on real text without the hardware.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_READ = 1 << 20  # no file or command output the checks read is near 1 MiB; more is not the file we want
COMMAND_TIMEOUT_S = 10.0
RC_NOT_FOUND = 127  # the shell's code for "command not found"
RC_TIMEOUT = 124  # timeout(1)'s code

Runner = Callable[[Sequence[str]], tuple[int, str]]


def run_command(argv: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """Run ``argv`` (no shell) and return (exit code, stdout); 127 when it is not installed, 124 on timeout.

    stdin is closed and the locale is C, so tools print the English words the parsers look for."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        return RC_NOT_FOUND, ""
    except PermissionError:
        return 126, ""
    except subprocess.TimeoutExpired:
        return RC_TIMEOUT, ""
    return done.returncode, done.stdout[:MAX_READ]


def recorded_runner(table: Mapping[str, tuple[int, str]]) -> Runner:
    """A runner that answers from recorded outputs keyed by the command line (``"nvidia-smi topo --matrix"``);
    any other command is "not installed" (127)."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        return table.get(" ".join(argv), (RC_NOT_FOUND, ""))

    return run


def load_recorded(path: Path) -> Runner:
    """The runner of a fixture tree: ``ROOT/commands.json`` maps a command line to ``{"rc": 0, "out": "..."}``
    or ``{"rc": 0, "file": "relative/path"}`` (the output kept in a file of the tree). Raises ``ValueError``
    naming the entry that is malformed."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: must be a JSON object of command line -> {{rc, out|file}}")
    table: dict[str, tuple[int, str]] = {}
    for cmd, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("rc", 0), int):
            raise ValueError(f'{path}: {cmd!r}: must be {{"rc": int, "out": str}} or {{"rc": int, "file": str}}')
        if "file" in entry:
            out = (path.parent / str(entry["file"])).read_text(encoding="utf-8", errors="replace")
        else:
            out = str(entry.get("out", ""))
        table[str(cmd)] = (int(entry.get("rc", 0)), out)
    return recorded_runner(table)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProbe:
    """Where the checks look: ``root`` stands for ``/``; ``run`` runs a command; ``which`` finds a binary."""

    root: Path
    run: Runner
    which: Callable[[str], str | None] = lambda _name: None
    nvml_driver: Callable[[], str | None] = lambda: None
    cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def exists(self, p: str) -> bool:
        return self.path(p).exists()

    def read(self, p: str) -> str | None:
        """The text of a file (at most 1 MiB), or None when it is missing or unreadable."""
        try:
            with self.path(p).open("rb") as f:
                return f.read(MAX_READ).decode("utf-8", errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        return sorted(self.root.glob(pattern.lstrip("/")))

    def command(self, *argv: str) -> tuple[int, str]:
        return self.run(argv)


def _nvml_driver() -> str | None:
    """The driver version from NVML (pynvml), when that package and the library are there; else None."""
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: the nvidia-ml-py package
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def real_probe(*, timeout_s: float = COMMAND_TIMEOUT_S) -> HostProbe:
    """The probe of this host: ``/``, real commands (each bounded by ``timeout_s``), NVML when installed."""
    return HostProbe(
        root=Path("/"),
        run=lambda argv: run_command(argv, timeout_s=timeout_s),
        which=shutil.which,
        nvml_driver=_nvml_driver,
    )


def fixture_probe(root: Path) -> HostProbe:
    """The probe of a fixture tree (``--root``): its files, and the commands recorded in ROOT/commands.json
    (none recorded: every command is "not installed"). A binary "exists" when ROOT/usr/bin/NAME does."""
    cmds = root / "commands.json"
    run = load_recorded(cmds) if cmds.is_file() else recorded_runner({})

    def which(name: str) -> str | None:
        for d in ("usr/bin", "usr/local/bin", "usr/sbin", "bin"):
            if (root / d / name).exists():
                return f"/{d}/{name}"
        return None

    return HostProbe(root=root, run=run, which=which)
