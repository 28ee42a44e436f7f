"""Tearing the Slurm 24.11 root down: what a cluster's stop may leave (munged, a stray job step holding
/dev) must not keep the root's bind mounts, or its removal is refused at the end of the session.

Runs after the modules whose clusters use the root (their fixtures are module-scoped and stopped by then):
release_root ends every process rooted there."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from rackscale.slurm import block


def test_release_root_ends_what_runs_there_and_unmounts_it(block_root: Path) -> None:
    root = block_root.resolve()
    block.mount_all(root)
    # A process in the root with /dev/null open holds the /dev bind mount, as a left-over munged does.
    holder = subprocess.Popen(
        ["chroot", str(root), "sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    time.sleep(0.3)
    assert root / "dev" in block.mounts_under(root)

    assert block.release_root(root) == []

    assert holder.wait(timeout=10) != 0  # killed, not finished
    assert block.mounts_under(root) == []
    # The root stays usable: the next start mounts it again.
    assert set(block.mount_all(root)) == set(block.MOUNTS)
    assert block.release_root(root) == []
