"""The lifecycle: which files move to a colder tier or are deleted (``plan``, pure), and doing it
(``run_lifecycle``: scan, clean leftover partial copies, move with :mod:`rackscale.storage.mover`, report).

A file's tier follows its age (now - mtime): up to ``hot-tier`` it belongs in hot, up to ``warm-tier`` in
warm, up to ``cold-tier`` in cold, past that it is deleted. Files only move to colder tiers (a file found
colder than its age says stays where it is), and straight to the tier their age says (a 40-day-old file in
hot goes to cold in one copy, not two). By default only ``checkpoints/`` in each tier is managed.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.model.errors import RackscaleError
from rackscale.storage.config import TIERS, Lifecycle, Tier
from rackscale.storage.mover import Hook, Outcome, Refused, delete_file, is_part, move_file, remove_part, safe_rel

DEFAULT_INCLUDE = ("checkpoints",)
LOCK_NAME = ".rackscale-lifecycle.lock"
Progress = Callable[[int, int], None]  # (files done, files to do)


class LifecycleError(RackscaleError, ValueError):
    """The run cannot start (bad tier roots, another run holds the lock); one line with the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    rel: str  # relative to the tier root, e.g. checkpoints/job-a/step-100.pt
    size: int
    mtime: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    rel: str
    src: Tier
    dst: Tier
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    rel: str
    tier: Tier
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    moves: tuple[Move, ...] = ()
    deletes: tuple[Delete, ...] = ()


def target_tier(*, age_s: float, policy: Lifecycle) -> Tier | None:
    """The tier a file of this age belongs in; None: past the last tier (delete). "Older than" is strict."""
    for tier in TIERS:
        if age_s <= policy.max_age(tier):
            return tier
    return None


def plan(*, inventory: Mapping[Tier, Sequence[FileEntry]], now: float, policy: Lifecycle) -> Plan:
    """What to move and delete, hottest tier first and by path within a tier (a stable order)."""
    moves: list[Move] = []
    deletes: list[Delete] = []
    for tier in TIERS:
        for f in sorted(inventory.get(tier, ()), key=lambda e: e.rel):
            goal = target_tier(age_s=now - f.mtime, policy=policy)
            if goal is None:
                deletes.append(Delete(rel=f.rel, tier=tier, size=f.size))
            elif TIERS.index(goal) > TIERS.index(tier):
                moves.append(Move(rel=f.rel, src=tier, dst=goal, size=f.size))
    return Plan(moves=tuple(moves), deletes=tuple(deletes))


# ------------------------------------------------------------------------------------------ the report
@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    rel: str
    src: Tier
    dst: Tier
    bytes: int
    outcome: Outcome  # MOVED, or DEDUPLICATED (finishing a move a crash cut short)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deleted:
    rel: str
    tier: Tier
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusedFile:
    rel: str
    tier: Tier
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    now: float
    dry_run: bool
    before: dict[Tier, Usage]
    after: dict[Tier, Usage]
    moved: tuple[Moved, ...] = ()
    deleted: tuple[Deleted, ...] = ()
    refused: tuple[RefusedFile, ...] = ()
    cleaned: tuple[str, ...] = field(default=())  # leftover partial copies removed ("tier:rel")

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "dryRun": self.dry_run,
            "tiers": {
                str(t): {
                    "filesBefore": self.before[t].files,
                    "bytesBefore": self.before[t].bytes,
                    "filesAfter": self.after[t].files,
                    "bytesAfter": self.after[t].bytes,
                }
                for t in TIERS
            },
            "moved": [
                {"path": m.rel, "from": str(m.src), "to": str(m.dst), "bytes": m.bytes, "outcome": str(m.outcome)}
                for m in self.moved
            ],
            "deleted": [{"path": d.rel, "tier": str(d.tier), "bytes": d.bytes} for d in self.deleted],
            "refused": [{"path": r.rel, "tier": str(r.tier), "reason": r.reason} for r in self.refused],
            "cleaned": list(self.cleaned),
        }


# ------------------------------------------------------------------------------------------ scanning
@dataclass(frozen=True, slots=True, kw_only=True)
class TierScan:
    files: tuple[FileEntry, ...]
    refused: tuple[RefusedFile, ...]
    parts: tuple[str, ...]  # leftover partial copies


def scan_tier(*, root: Path, tier: Tier, include: Sequence[str] = DEFAULT_INCLUDE) -> TierScan:
    """The regular files under ``root/<include>/``; symlinks and other kinds are refused, not followed."""
    files: list[FileEntry] = []
    refused: list[RefusedFile] = []
    parts: list[str] = []
    stack = []
    for top in include:
        # Every part of the included path, not just the last: `a/b` must not reach through a symlink `a`.
        prefixes = [Path(*Path(top).parts[: i + 1]) for i in range(len(Path(top).parts))]
        kinds = [_lstat(root / p) for p in prefixes]
        if any(st is None for st in kinds):
            continue
        if not all(st is not None and stat.S_ISDIR(st.st_mode) for st in kinds):
            refused.append(RefusedFile(rel=top, tier=tier, reason="an included folder that is a symlink or a file"))
            continue
        stack.append(top)
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(root / rel_dir)
        except OSError as e:
            refused.append(RefusedFile(rel=rel_dir, tier=tier, reason=f"cannot read the folder: {e.strerror}"))
            continue
        with it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}"
                if entry.is_symlink():
                    refused.append(RefusedFile(rel=rel, tier=tier, reason="a symlink: not followed"))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
                elif is_part(entry.name):
                    parts.append(rel)
                elif entry.is_file(follow_symlinks=False):
                    s = entry.stat(follow_symlinks=False)
                    files.append(FileEntry(rel=rel, size=s.st_size, mtime=s.st_mtime))
                else:
                    refused.append(RefusedFile(rel=rel, tier=tier, reason="not a regular file"))
    return TierScan(files=tuple(sorted(files, key=lambda f: f.rel)), refused=tuple(refused), parts=tuple(parts))


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None


def _usage(files: Sequence[FileEntry]) -> Usage:
    return Usage(files=len(files), bytes=sum(f.size for f in files))


def check_roots(roots: Mapping[Tier, Path]) -> dict[Tier, Path]:
    """All three tiers, existing folders, none inside another (a nested tier would be scanned twice)."""
    missing = [str(t) for t in TIERS if t not in roots]
    if missing:
        raise LifecycleError(f"no folder for tier(s) {', '.join(missing)}: give --tier hot=PATH --tier warm=PATH ...")
    out: dict[Tier, Path] = {}
    for t in TIERS:
        p = Path(roots[t])
        if not p.is_dir():
            raise LifecycleError(f"tier {t}: {p} is not a folder (fix: create it, or pass another --tier {t}=PATH)")
        out[t] = p.resolve()
    for a in TIERS:
        for b in TIERS:
            if a != b and (out[a] == out[b] or out[b].is_relative_to(out[a])):
                raise LifecycleError(f"tier {b} ({out[b]}) is inside tier {a} ({out[a]}): give separate folders")
    return out


def check_include(include: Sequence[str]) -> None:
    """Included folders are relative paths that stay inside each tier."""
    for top in include:
        try:
            safe_rel(top)
        except Refused as r:
            raise LifecycleError(f"--include {top!r}: {r.reason}") from None


@contextmanager
def _locked(roots: Mapping[Tier, Path]) -> Iterator[None]:
    """One run at a time per tier (the service's task and an operator's run): flock, released on exit."""
    with ExitStack() as stack:
        for t in TIERS:
            path = roots[t] / LOCK_NAME
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            stack.callback(os.close, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LifecycleError(f"another lifecycle run holds {path}: wait for it to finish") from None
        yield


def run_lifecycle(
    *,
    roots: Mapping[Tier, Path],
    policy: Lifecycle,
    now: float,
    include: Sequence[str] = DEFAULT_INCLUDE,
    dry_run: bool = False,
    hook: Hook | None = None,
    progress: Progress | None = None,
) -> Report:
    """Scan, plan and (unless ``dry_run``) apply; a dry run writes nothing, not even the lock file."""
    check_include(include)
    tiers = check_roots(roots)
    with ExitStack() as stack:
        if not dry_run:
            stack.enter_context(_locked(tiers))
        scans = {t: scan_tier(root=tiers[t], tier=t, include=include) for t in TIERS}
        before = {t: _usage(scans[t].files) for t in TIERS}
        refused = [r for t in TIERS for r in scans[t].refused]
        cleaned = [f"{t}:{p}" for t in TIERS for p in scans[t].parts]
        the_plan = plan(inventory={t: scans[t].files for t in TIERS}, now=now, policy=policy)
        if dry_run:
            moved = [
                Moved(rel=m.rel, src=m.src, dst=m.dst, bytes=m.size, outcome=Outcome.MOVED) for m in the_plan.moves
            ]
            deleted = [Deleted(rel=d.rel, tier=d.tier, bytes=d.size) for d in the_plan.deletes]
            after = _predicted(scans, the_plan)
        else:
            for t in TIERS:
                for p in scans[t].parts:
                    remove_part(root=tiers[t], rel=p)
            moved, deleted = _apply(tiers, the_plan, refused, hook=hook, progress=progress)
            after = {t: _usage(scan_tier(root=tiers[t], tier=t, include=include).files) for t in TIERS}
    return Report(
        now=now,
        dry_run=dry_run,
        before=before,
        after=after,
        moved=tuple(moved),
        deleted=tuple(deleted),
        refused=tuple(refused),
        cleaned=tuple(cleaned),
    )


def _apply(
    tiers: Mapping[Tier, Path],
    the_plan: Plan,
    refused: list[RefusedFile],
    *,
    hook: Hook | None,
    progress: Progress | None,
) -> tuple[list[Moved], list[Deleted]]:
    """Each move, then each delete; a refused file is added to ``refused`` and the others go on."""
    moved: list[Moved] = []
    deleted: list[Deleted] = []
    total = len(the_plan.moves) + len(the_plan.deletes)
    for done, m in enumerate(the_plan.moves, 1):
        r = move_file(src_root=tiers[m.src], dst_root=tiers[m.dst], rel=m.rel, hook=hook)
        if r.outcome is Outcome.REFUSED:
            refused.append(RefusedFile(rel=m.rel, tier=m.src, reason=r.reason))
        else:
            moved.append(Moved(rel=m.rel, src=m.src, dst=m.dst, bytes=r.bytes, outcome=r.outcome))
        if progress is not None:
            progress(done, total)
    for done, d in enumerate(the_plan.deletes, len(the_plan.moves) + 1):
        r = delete_file(root=tiers[d.tier], rel=d.rel)
        if r.outcome is Outcome.REFUSED:
            refused.append(RefusedFile(rel=d.rel, tier=d.tier, reason=r.reason))
        else:
            deleted.append(Deleted(rel=d.rel, tier=d.tier, bytes=r.bytes))
        if progress is not None:
            progress(done, total)
    return moved, deleted


def _predicted(scans: Mapping[Tier, TierScan], the_plan: Plan) -> dict[Tier, Usage]:
    """Usage after the plan, if every step succeeds (a dry run's "after")."""
    files = {t: {f.rel: f.size for f in scans[t].files} for t in TIERS}
    for m in the_plan.moves:
        files[m.dst][m.rel] = files[m.src].pop(m.rel)
    for d in the_plan.deletes:
        files[d.tier].pop(d.rel, None)
    return {t: Usage(files=len(files[t]), bytes=sum(files[t].values())) for t in TIERS}
