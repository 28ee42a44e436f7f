"""A real process killed with SIGKILL in the middle of a large move (at each named step, and in the middle
of the copy itself): every file's content is then under exactly one final name, or two identical copies,
never a partial file under a final name; the rerun completes; a third run changes nothing.

    child: run_lifecycle(...) --hook at STEP--> writes `ready`, sleeps     parent: waits for `ready`, SIGKILL
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rackscale.storage.config import Tier
from rackscale.storage.lifecycle import run_lifecycle
from rackscale.storage.mover import PART_SUFFIX, Step

from .helpers import NOW, POLICY, make_tiers, parts, put, tree

BIG = 32 * 1024 * 1024
REL = "checkpoints/job-a/step-100.pt"

CHILD = """
import sys, time
from pathlib import Path
from rackscale.storage.config import Tier
from rackscale.storage.lifecycle import run_lifecycle
from rackscale.storage.mover import move_file
from tests.storage.helpers import NOW, POLICY
base, step = Path(sys.argv[1]), sys.argv[2]
roots = {t: base / str(t) for t in Tier}
def hook(at, rel):
    if at == step:
        (base / "ready").write_text(rel)
        time.sleep(600)
if step == "mid-copy":  # small chunks: the parent kills it while the partial copy grows
    move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=sys.argv[3], chunk_bytes=4096)
else:
    run_lifecycle(roots=roots, policy=POLICY, now=NOW, hook=hook)
"""


def _final_copies(roots: dict[Tier, Path]) -> dict[str, list[str]]:
    """sha256 -> the final (not partial) names holding it."""
    out: dict[str, list[str]] = {}
    for t, files in tree(roots).items():
        for rel, digest in files.items():
            if not rel.endswith(PART_SUFFIX):
                out.setdefault(digest, []).append(f"{t}:{rel}")
    return out


def _wait(cond: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.fail(f"the child ended early ({proc.returncode}): {err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the child never reached the point to kill it at")
        time.sleep(0.002)


@pytest.mark.parametrize("step", [*[str(s) for s in Step], "mid-copy"])
def test_sigkill_mid_move_loses_nothing(tmp_path: Path, step: str) -> None:
    roots = make_tiers(tmp_path)
    big = os.urandom(BIG)
    put(roots[Tier.HOT], REL, big, age_days=10)
    put(roots[Tier.HOT], "checkpoints/job-b/small.pt", b"s" * 1000, age_days=40)
    contents = {hashlib.sha256(big).hexdigest(), hashlib.sha256(b"s" * 1000).hexdigest()}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), step, REL], cwd=root, env=env, stderr=subprocess.PIPE
    )
    try:
        if step == "mid-copy":
            part = roots[Tier.WARM] / "checkpoints/job-a" / f".step-100.pt{PART_SUFFIX}"
            _wait(lambda: part.exists() and 0 < part.stat().st_size < BIG, proc)
        else:
            _wait((tmp_path / "ready").exists, proc)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    copies = _final_copies(roots)
    assert set(copies) == contents  # nothing lost, nothing partial under a final name
    assert all(1 <= len(names) <= 2 for names in copies.values())
    if step == "mid-copy":
        assert len(parts(roots)) == 1  # the half copy exists, but only under its hidden name

    rerun = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert rerun.refused == ()
    assert parts(roots) == []
    assert tree(roots) == {
        "hot": {},
        "warm": {REL: hashlib.sha256(big).hexdigest()},
        "cold": {"checkpoints/job-b/small.pt": hashlib.sha256(b"s" * 1000).hexdigest()},
    }
    third = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert (third.moved, third.deleted, third.refused, third.cleaned) == ((), (), (), ())
