"""The plan's kernel parameters (section 3.2), read from /proc/sys, and ``--fix``: one sysctl.d file.

``vm.*`` must equal the plan's value; the socket buffer maxima must be at least it (more is no harm).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

FIX_FILE = "/etc/sysctl.d/90-rackscale.conf"


@dataclass(frozen=True, slots=True)
class Param:
    key: str
    value: int
    at_least: bool  # True: >= value passes; False: exactly value


PLAN = (
    Param("vm.swappiness", 0, False),
    Param("vm.dirty_background_ratio", 3, False),
    Param("vm.dirty_ratio", 15, False),
    Param("net.core.rmem_max", 16777216, True),
    Param("net.core.wmem_max", 16777216, True),
)


def proc_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def sysctl(probe: HostProbe, _opts: Options) -> list[Check]:
    out: list[Check] = []
    for p in PLAN:
        raw = probe.read(proc_path(p.key))
        need = f">= {p.value}" if p.at_least else f"= {p.value}"
        if raw is None:
            out.append(
                Check(
                    check=CheckName.sysctl,
                    name=p.key,
                    status=Status.SKIP,
                    found=f"{proc_path(p.key)} not readable",
                    required=need,
                )
            )
            continue
        try:
            v = int(raw.split()[0])
        except (ValueError, IndexError):
            out.append(
                Check(
                    check=CheckName.sysctl,
                    name=p.key,
                    status=Status.FAIL,
                    found=f"unreadable {raw.strip()[:40]!r}",
                    required=need,
                    fix=f"rackscale preflight --fix (writes {FIX_FILE})",
                )
            )
            continue
        ok = v >= p.value if p.at_least else v == p.value
        out.append(
            Check(
                check=CheckName.sysctl,
                name=p.key,
                status=Status.PASS if ok else Status.FAIL,
                found=str(v),
                required=need,
                fix="" if ok else f"rackscale preflight --fix (writes {FIX_FILE})",
            )
        )
    return out


def fix_text() -> str:
    lines = [
        "# Written by `rackscale preflight --fix`: the deployment plan's kernel parameters (section 3.2).",
        "# Apply now with `sysctl --system`; they also apply at every boot.",
    ]
    lines += [f"{p.key} = {p.value}" for p in PLAN]
    return "\n".join(lines) + "\n"


def write_fix(root: Path) -> tuple[Path, str]:
    """Write :data:`FIX_FILE` under ``root`` (``/`` for real; a tmp tree in tests), atomically: a temp file
    in the same directory, fsync, rename. Returns (path, text). Raises ``OSError`` (not root, read-only)."""
    path = root / FIX_FILE.lstrip("/")
    text = fix_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.chmod(0o644)
    tmp.replace(path)
    return path, text
