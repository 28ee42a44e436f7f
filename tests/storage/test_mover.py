"""The mover on real files: the happy path, a crash at every step and the rerun, conflicts, symlinks,
names that try to escape the tier, mtime and mode kept.

    hot/checkpoints/job-a/step-100.pt  --copy--> warm/checkpoints/job-a/.step-100.pt.rackscale-part
                                        fsync, verify, replace -> warm/checkpoints/job-a/step-100.pt
                                        unlink the source
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rackscale.storage.config import Tier
from rackscale.storage.mover import Outcome, Step, delete_file, move_file

from .helpers import DAY, NOW, make_tiers, parts, put, tree

REL = "checkpoints/job-a/step-100.pt"
DATA = os.urandom(3 * 1024 * 1024 + 17)  # more than one chunk, not a multiple of it


class Crash(Exception):
    pass


def test_a_move_keeps_the_relative_path_the_bytes_the_mtime_and_the_mode(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], REL, DATA, age_days=8, mode=0o604)
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=REL)
    assert (r.outcome, r.bytes) == (Outcome.MOVED, len(DATA))
    dst = roots[Tier.WARM] / REL
    assert dst.read_bytes() == DATA
    assert dst.stat().st_mtime == NOW - 8 * DAY
    assert dst.stat().st_mode & 0o777 == 0o604
    assert not (roots[Tier.HOT] / REL).exists()
    assert parts(roots) == []


@pytest.mark.parametrize("step", list(Step), ids=[str(s) for s in Step])
def test_a_crash_at_any_step_loses_nothing_and_the_rerun_finishes(tmp_path: Path, step: Step) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], REL, DATA, age_days=8)
    digest = hashlib.sha256(DATA).hexdigest()

    def crash(at: Step, rel: str) -> None:
        if at is step:
            raise Crash(at)

    with pytest.raises(Crash):
        move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=REL, hook=crash)
    finals = [h for t in tree(roots).values() for name, h in t.items() if not name.endswith(".rackscale-part")]
    assert finals and set(finals) == {digest}  # the content is under a final name (once or twice), whole
    assert not any(p.name == "step-100.pt" and p.stat().st_size != len(DATA) for p in tmp_path.rglob("*"))
    again = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=REL)
    if step is Step.SOURCE_REMOVED:  # the move had finished: there is nothing left to do
        assert again.outcome is Outcome.REFUSED and "gone" in again.reason
    elif step is Step.REPLACED:  # both tiers hold it: the source goes
        assert again.outcome is Outcome.DEDUPLICATED
    else:
        assert again.outcome is Outcome.MOVED
    assert tree(roots) == {"hot": {}, "warm": {REL: digest}, "cold": {}}
    assert (roots[Tier.WARM] / REL).stat().st_mtime == NOW - 8 * DAY


def test_a_different_file_of_the_same_name_is_never_overwritten(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], REL, b"new", age_days=8)
    put(roots[Tier.WARM], REL, b"old", age_days=20)
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=REL)
    assert r.outcome is Outcome.REFUSED
    assert "different file of the same name" in r.reason
    assert (roots[Tier.HOT] / REL).read_bytes() == b"new"
    assert (roots[Tier.WARM] / REL).read_bytes() == b"old"


def test_a_leftover_partial_copy_is_removed_and_redone(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], REL, DATA, age_days=8)
    leftover = roots[Tier.WARM] / "checkpoints/job-a/.step-100.pt.rackscale-part"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(DATA[:1000])
    assert move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=REL).outcome is Outcome.MOVED
    assert (roots[Tier.WARM] / REL).read_bytes() == DATA
    assert parts(roots) == []


@pytest.mark.parametrize(
    "rel",
    ["../escape.pt", "checkpoints/../../escape.pt", "/etc/passwd", "checkpoints//x.pt", "./x.pt", "", "a\x00b"],
    ids=["dotdot", "inner-dotdot", "absolute", "empty-part", "dot", "empty", "nul"],
)
def test_names_cannot_escape_the_tier(tmp_path: Path, rel: str) -> None:
    roots = make_tiers(tmp_path)
    (tmp_path / "escape.pt").write_bytes(b"outside")
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel=rel)
    assert r.outcome is Outcome.REFUSED and "unsafe path" in r.reason
    assert delete_file(root=roots[Tier.HOT], rel=rel).outcome is Outcome.REFUSED
    assert (tmp_path / "escape.pt").read_bytes() == b"outside"


def test_a_reserved_part_name_is_refused(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.HOT], "checkpoints/.x.rackscale-part", b"x", age_days=8)
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel="checkpoints/.x.rackscale-part")
    assert r.outcome is Outcome.REFUSED and "reserves" in r.reason


def test_a_symlinked_file_is_not_followed(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    (roots[Tier.HOT] / "checkpoints").mkdir()
    (roots[Tier.HOT] / "checkpoints/link.pt").symlink_to(secret)
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel="checkpoints/link.pt")
    assert r.outcome is Outcome.REFUSED and "symlink" in r.reason
    d = delete_file(root=roots[Tier.HOT], rel="checkpoints/link.pt")
    assert d.outcome is Outcome.REFUSED and "symlink" in d.reason
    assert secret.read_bytes() == b"secret"
    assert not (roots[Tier.WARM] / "checkpoints/link.pt").exists()


def test_a_symlinked_folder_on_the_way_is_not_followed(tmp_path: Path) -> None:
    """hot/checkpoints -> /elsewhere: neither reading nor deleting reaches /elsewhere."""
    roots = make_tiers(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    put(elsewhere, "job/x.pt", b"keep", age_days=400)
    (roots[Tier.HOT] / "checkpoints").symlink_to(elsewhere)
    r = move_file(src_root=roots[Tier.HOT], dst_root=roots[Tier.WARM], rel="checkpoints/job/x.pt")
    assert r.outcome is Outcome.REFUSED and "symlink" in r.reason
    assert delete_file(root=roots[Tier.HOT], rel="checkpoints/job/x.pt").outcome is Outcome.REFUSED
    assert (elsewhere / "job/x.pt").read_bytes() == b"keep"
    # and in the destination: warm/checkpoints -> elsewhere is not written through
    (roots[Tier.WARM] / "checkpoints").symlink_to(elsewhere)
    put(roots[Tier.COLD], "checkpoints/job/y.pt", b"y", age_days=8)
    r = move_file(src_root=roots[Tier.COLD], dst_root=roots[Tier.WARM], rel="checkpoints/job/y.pt")
    assert r.outcome is Outcome.REFUSED
    assert not (elsewhere / "job/y.pt").exists()


def test_delete_removes_the_file(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[Tier.COLD], REL, DATA, age_days=200)
    r = delete_file(root=roots[Tier.COLD], rel=REL)
    assert (r.outcome, r.bytes) == (Outcome.DELETED, len(DATA))
    assert not (roots[Tier.COLD] / REL).exists()
