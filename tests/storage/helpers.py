"""Builders for tier trees on real files (tmp_path)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rackscale.storage.config import TIERS, Lifecycle, Tier
from rackscale.storage.mover import PART_SUFFIX

DAY = 86_400
NOW = 1_750_000_000.0  # a fixed "now" (2025-06-15): every age below is relative to it
POLICY = Lifecycle(hot_s=7 * DAY, warm_s=30 * DAY, cold_s=180 * DAY)  # the plan's ConfigMap


def make_tiers(tmp_path: Path) -> dict[Tier, Path]:
    roots = {t: tmp_path / str(t) for t in TIERS}
    for p in roots.values():
        p.mkdir(parents=True)
    return roots


def put(root: Path, rel: str, data: bytes, *, age_days: float, mode: int = 0o640) -> Path:
    """A file at ``root/rel`` whose mtime is ``age_days`` before NOW."""
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    p.chmod(mode)
    t = NOW - age_days * DAY
    os.utime(p, (t, t))
    return p


def tree(roots: dict[Tier, Path]) -> dict[str, dict[str, str]]:
    """tier -> {relative path: sha256} of every file, partial copies included (under their hidden names)."""
    out: dict[str, dict[str, str]] = {}
    for t, root in roots.items():
        files = {}
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.name.startswith(".rackscale-lifecycle"):
                files[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
        out[str(t)] = files
    return out


def parts(roots: dict[Tier, Path]) -> list[Path]:
    return [p for root in roots.values() for p in root.rglob(f"*{PART_SUFFIX}")]
