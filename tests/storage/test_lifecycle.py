"""The lifecycle: the plan (pure, table-driven on ages) and runs on real tier trees (report, dry run,
idempotence, crash at every step then rerun, refusals).

    age:   0 ---- 7d ---- 30d ---- 180d ---->
    tier:    hot    warm     cold    deleted      (the plan's ConfigMap; "older than" is strict)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.storage.config import Tier
from rackscale.storage.lifecycle import (
    Delete,
    FileEntry,
    LifecycleError,
    Move,
    Usage,
    plan,
    run_lifecycle,
)
from rackscale.storage.mover import Outcome, Step

from .helpers import DAY, NOW, POLICY, make_tiers, parts, put, tree

H, W, C = Tier.HOT, Tier.WARM, Tier.COLD


@pytest.mark.parametrize(
    ("tier", "age_days", "expected"),
    [
        (H, 1, None),
        (H, 7, None),  # exactly 7d: not older than hot-tier yet
        (H, 7.0001, ("move", W)),
        (H, 40, ("move", C)),  # straight to cold: one copy, not two
        (H, 181, ("delete", H)),
        (W, 3, None),  # colder than its age says: files never move back
        (W, 31, ("move", C)),
        (W, 200, ("delete", W)),
        (C, 179, None),
        (C, 180.001, ("delete", C)),
        (H, -5, None),  # an mtime in the future (clock skew): stays
    ],
    ids=[
        "young-hot",
        "hot-at-boundary",
        "just-past-hot",
        "hot-to-cold",
        "hot-past-last",
        "young-in-warm",
        "warm-to-cold",
        "warm-past-last",
        "cold-keeps",
        "cold-deleted",
        "future-mtime",
    ],
)
def test_plan(tier: Tier, age_days: float, expected: tuple[str, Tier] | None) -> None:
    f = FileEntry(rel="checkpoints/j/x.pt", size=10, mtime=NOW - age_days * DAY)
    p = plan(inventory={tier: [f]}, now=NOW, policy=POLICY)
    if expected is None:
        assert (p.moves, p.deletes) == ((), ())
    elif expected[0] == "move":
        assert p.moves == (Move(rel=f.rel, src=tier, dst=expected[1], size=10),) and p.deletes == ()
    else:
        assert p.deletes == (Delete(rel=f.rel, tier=tier, size=10),) and p.moves == ()


def _fleet(roots: dict[Tier, Path]) -> None:
    put(roots[H], "checkpoints/job-a/step-100.pt", b"a" * 100, age_days=1)
    put(roots[H], "checkpoints/job-a/step-50.pt", b"b" * 200, age_days=10)
    put(roots[H], "checkpoints/job-b/step-10.pt", b"c" * 300, age_days=45)
    put(roots[W], "checkpoints/job-c/step-1.pt", b"d" * 400, age_days=31)
    put(roots[C], "checkpoints/job-d/old.pt", b"e" * 500, age_days=365)
    put(roots[H], "datasets/shard-0.bin", b"f" * 600, age_days=400)  # not included by default


def test_a_run_moves_by_age_deletes_past_the_last_tier_and_reports(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    _fleet(roots)
    r = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert r.before == {H: Usage(files=3, bytes=600), W: Usage(files=1, bytes=400), C: Usage(files=1, bytes=500)}
    assert r.after == {H: Usage(files=1, bytes=100), W: Usage(files=1, bytes=200), C: Usage(files=2, bytes=700)}
    assert {(m.rel, m.src, m.dst, m.bytes) for m in r.moved} == {
        ("checkpoints/job-a/step-50.pt", H, W, 200),
        ("checkpoints/job-b/step-10.pt", H, C, 300),
        ("checkpoints/job-c/step-1.pt", W, C, 400),
    }
    assert [(d.rel, d.tier, d.bytes) for d in r.deleted] == [("checkpoints/job-d/old.pt", C, 500)]
    assert r.refused == ()
    assert (roots[H] / "datasets/shard-0.bin").exists()  # outside checkpoints/: left alone
    assert (roots[C] / "checkpoints/job-b/step-10.pt").stat().st_mtime == NOW - 45 * DAY
    doc = r.to_dict()
    assert doc["tiers"]["cold"] == {"filesBefore": 1, "bytesBefore": 500, "filesAfter": 2, "bytesAfter": 700}


def test_include_adds_folders(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    _fleet(roots)
    r = run_lifecycle(roots=roots, policy=POLICY, now=NOW, include=("checkpoints", "datasets"))
    assert ("datasets/shard-0.bin", H, 600) in {(d.rel, d.tier, d.bytes) for d in r.deleted}


def test_a_dry_run_changes_nothing_and_predicts_the_run(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    _fleet(roots)
    before = tree(roots)
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    dry = run_lifecycle(roots=roots, policy=POLICY, now=NOW, dry_run=True)
    assert tree(roots) == before
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing  # not even a lock file
    real = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert dry.after == real.after
    assert {(m.rel, m.dst) for m in dry.moved} == {(m.rel, m.dst) for m in real.moved}
    assert dry.deleted == real.deleted


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    _fleet(roots)
    run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    after = tree(roots)
    again = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert (again.moved, again.deleted, again.refused, again.cleaned) == ((), (), (), ())
    assert tree(roots) == after


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", list(Step), ids=[str(s) for s in Step])
def test_a_run_cut_at_any_step_is_finished_by_the_next(tmp_path: Path, step: Step) -> None:
    roots = make_tiers(tmp_path)
    _fleet(roots)
    reference = make_tiers(tmp_path / "ref")
    _fleet(reference)
    run_lifecycle(roots=reference, policy=POLICY, now=NOW)
    seen: list[str] = []

    def crash(at: Step, rel: str) -> None:
        if at is step and len(seen) == 1:  # the second file's move dies at this step
            raise Crash(rel)
        if at is Step.SOURCE_REMOVED:
            seen.append(rel)

    with pytest.raises(Crash):
        run_lifecycle(roots=roots, policy=POLICY, now=NOW, hook=crash)
    second = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert tree(roots) == tree(reference)
    assert parts(roots) == []
    if step in (Step.COPIED, Step.SYNCED, Step.VERIFIED):
        assert len(second.cleaned) == 1  # its partial copy, found and removed
    third = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert (third.moved, third.deleted, third.refused, third.cleaned) == ((), (), (), ())


def test_refusals_are_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[H], "checkpoints/j/a.pt", b"new", age_days=10)
    put(roots[W], "checkpoints/j/a.pt", b"old", age_days=3)
    put(roots[H], "checkpoints/j/b.pt", b"b", age_days=10)
    (roots[H] / "checkpoints/j/link.pt").symlink_to(tmp_path)
    r = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    reasons = {x.rel: x.reason for x in r.refused}
    assert "different file of the same name" in reasons["checkpoints/j/a.pt"]
    assert "symlink" in reasons["checkpoints/j/link.pt"]
    assert [m.rel for m in r.moved] == ["checkpoints/j/b.pt"]
    assert [m.outcome for m in r.moved] == [Outcome.MOVED]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({H: "a", W: "a", C: "c"}, "inside tier"),
        ({H: "a", W: "a/b", C: "c"}, "inside tier"),
        ({H: "a", W: "b", C: "missing"}, "is not a folder"),
        ({H: "a", W: "b"}, "no folder for tier(s) cold"),
    ],
    ids=["same-folder", "nested", "missing-folder", "missing-tier"],
)
def test_bad_roots_are_one_line(tmp_path: Path, layout: dict[Tier, str], message: str) -> None:
    for name in ("a", "a/b", "b", "c"):
        (tmp_path / name).mkdir(exist_ok=True)
    with pytest.raises(LifecycleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_lifecycle(roots={t: tmp_path / p for t, p in layout.items()}, policy=POLICY, now=NOW)


@pytest.mark.parametrize("include", ["../x", "/etc", "a/../../b"], ids=["dotdot", "absolute", "inner-dotdot"])
def test_include_cannot_escape(tmp_path: Path, include: str) -> None:
    roots = make_tiers(tmp_path)
    with pytest.raises(LifecycleError, match="--include"):
        run_lifecycle(roots=roots, policy=POLICY, now=NOW, include=(include,))


def test_a_symlinked_include_folder_is_refused(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    outside = tmp_path / "outside"
    put(outside, "x.pt", b"x", age_days=999)
    (roots[H] / "checkpoints").symlink_to(outside)
    r = run_lifecycle(roots=roots, policy=POLICY, now=NOW)
    assert [x.rel for x in r.refused] == ["checkpoints"]
    assert (outside / "x.pt").exists()


def test_two_runs_at_once_are_refused(tmp_path: Path) -> None:
    roots = make_tiers(tmp_path)
    put(roots[H], "checkpoints/j/a.pt", b"a", age_days=10)

    def nested(at: Step, rel: str) -> None:
        if at is Step.COPIED:
            run_lifecycle(roots=roots, policy=POLICY, now=NOW)

    with pytest.raises(LifecycleError, match="another lifecycle run holds"):
        run_lifecycle(roots=roots, policy=POLICY, now=NOW, hook=nested)
