"""Crash-safe, idempotent move of one file between tier roots, and deletion past the last tier.

A move is: copy to ``<dest>/.<name>.rackscale-part`` (hidden, never the final name), fsync it, verify it
(size and sha256 read back against the source's), ``os.replace`` it to the final name, fsync the destination
folder, then unlink the source and fsync its folder. mtime and mode are kept (a file's age must survive the
move). At every instant each file's content is under at least one final name, and no final name ever holds
a partial file; a rerun after a crash finishes the job (docs/storage.md has the argument step by step):

- a leftover ``.rackscale-part`` is removed and the copy starts again;
- the same name with the same content in both tiers (a crash after the replace) -> the source is removed;
- the same name with different content in the destination -> that file is refused (never overwritten).

Every path is walked one folder at a time with ``O_NOFOLLOW`` from the tier root (``openat``), so neither a
symlink nor a ``..`` in a name can lead outside the roots; symlinks are refused, not followed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath

from rackscale.model.errors import RackscaleError

PART_SUFFIX = ".rackscale-part"
CHUNK_BYTES = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Step(StrEnum):
    """The steps of a move, in order; the hook is called after each one (crash injection in tests)."""

    COPIED = "copied"
    SYNCED = "synced"
    VERIFIED = "verified"
    REPLACED = "replaced"
    SOURCE_REMOVED = "source-removed"


Hook = Callable[[Step, str], None]  # (step, relative path)


class Outcome(StrEnum):
    MOVED = "moved"
    DEDUPLICATED = "deduplicated"  # the destination already held the same content: the source was removed
    DELETED = "deleted"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    rel: str
    outcome: Outcome
    bytes: int = 0
    reason: str = ""


class Refused(RackscaleError):
    """This one file is left where it is, for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def part_name(name: str) -> str:
    return f".{name}{PART_SUFFIX}"


def is_part(name: str) -> bool:
    return name.startswith(".") and name.endswith(PART_SUFFIX)


def safe_rel(rel: str) -> PurePosixPath:
    """A relative path inside a tier: no absolute path, no ``..``/``.``/empty part, no NUL, no part name."""
    parts = rel.split("/")
    if not rel or "\x00" in rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise Refused(f"unsafe path {rel!r}: it must stay inside the tier (no '..', no absolute path)")
    if is_part(parts[-1]):
        raise Refused(f"{parts[-1]!r} is a name the mover reserves for its partial copies")
    return PurePosixPath(rel)


@contextmanager
def _folder(root: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """A descriptor of ``root/parts...``, each part opened with O_NOFOLLOW under the one before."""
    fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root itself is the operator's: it may be a link
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, dir_fd=fd)
                    os.fsync(fd)  # the new folder's entry is durable before anything lands in it
                except FileExistsError:
                    pass
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{part!r} on the way is a symlink or not a folder: not followed") from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _digest(name: str, dir_fd: int) -> tuple[int, str]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
        return size, h.hexdigest()
    finally:
        os.close(fd)


def _regular(st: os.stat_result | None, what: str) -> os.stat_result:
    if st is None:
        raise Refused(f"the {what} is gone")
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"the {what} is a symlink: not followed")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"the {what} is not a regular file")
    return st


def _copy(name: str, sdir: int, part: str, ddir: int, st: os.stat_result, chunk_bytes: int) -> str:
    """Copy ``name`` to ``part`` (created exclusively), keep mode and times, fsync; the sha256 copied."""
    sfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sdir)
    try:
        if (os.fstat(sfd).st_ino, os.fstat(sfd).st_dev) != (st.st_ino, st.st_dev):
            raise Refused("the source was replaced while the move began: left for the next run")
        pfd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=ddir)
        try:
            h = hashlib.sha256()
            while chunk := os.read(sfd, chunk_bytes):
                h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(pfd, view) :]
            after = os.fstat(sfd)
            if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
                raise Refused("the source changed while it was copied (still being written?): left for the next run")
            os.fchmod(pfd, stat.S_IMODE(st.st_mode))
            os.utime(pfd, ns=(st.st_atime_ns, st.st_mtime_ns))  # the age survives the move
            return h.hexdigest()
        finally:
            os.close(pfd)
    finally:
        os.close(sfd)


def move_file(
    *, src_root: Path, dst_root: Path, rel: str, hook: Hook | None = None, chunk_bytes: int = CHUNK_BYTES
) -> Result:
    """Move ``src_root/rel`` to ``dst_root/rel`` (folders created as needed). Never raises for one file's
    trouble: a refused or failed file comes back as ``Outcome.REFUSED`` with the reason."""
    step: Hook = hook or (lambda _s, _r: None)
    try:
        path = safe_rel(rel)
        parts, name, part = path.parent.parts, path.name, part_name(path.name)
        with _folder(src_root, parts) as sdir, _folder(dst_root, parts, create=True) as ddir:
            st = _regular(_lstat(name, sdir), "source")
            if _lstat(part, ddir) is not None:  # a crash before the replace: that copy is worth nothing
                os.unlink(part, dir_fd=ddir)
                os.fsync(ddir)
            there = _lstat(name, ddir)
            if there is not None:
                _regular(there, "file of the same name in the destination")
                if _digest(name, ddir) != _digest(name, sdir):
                    raise Refused("a different file of the same name is already in the destination: both kept")
                os.unlink(name, dir_fd=sdir)  # a crash after the replace: finish it
                os.fsync(sdir)
                step(Step.SOURCE_REMOVED, rel)
                return Result(rel=rel, outcome=Outcome.DEDUPLICATED, bytes=st.st_size)
            try:
                digest = _copy(name, sdir, part, ddir, st, chunk_bytes)
                step(Step.COPIED, rel)
                fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ddir)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                step(Step.SYNCED, rel)
                if _digest(part, ddir) != (st.st_size, digest):
                    raise Refused("the copy read back differs from the source (storage fault?): source kept")
                step(Step.VERIFIED, rel)
            except Refused:
                if _lstat(part, ddir) is not None:
                    os.unlink(part, dir_fd=ddir)
                raise
            os.replace(part, name, src_dir_fd=ddir, dst_dir_fd=ddir)
            os.fsync(ddir)
            step(Step.REPLACED, rel)
            os.unlink(name, dir_fd=sdir)
            os.fsync(sdir)
            step(Step.SOURCE_REMOVED, rel)
            return Result(rel=rel, outcome=Outcome.MOVED, bytes=st.st_size)
    except Refused as r:
        return Result(rel=rel, outcome=Outcome.REFUSED, reason=r.reason)
    except OSError as e:  # one file's I/O error (permissions, a full disk) must not stop the others
        return Result(rel=rel, outcome=Outcome.REFUSED, reason=f"{e.strerror or e}: left for the next run")


def delete_file(*, root: Path, rel: str) -> Result:
    """Delete ``root/rel`` past the last tier: unlink is atomic; the folder is fsynced so it stays gone."""
    try:
        path = safe_rel(rel)
        with _folder(root, path.parent.parts) as d:
            st = _regular(_lstat(path.name, d), "file")
            os.unlink(path.name, dir_fd=d)
            os.fsync(d)
            return Result(rel=rel, outcome=Outcome.DELETED, bytes=st.st_size)
    except Refused as r:
        return Result(rel=rel, outcome=Outcome.REFUSED, reason=r.reason)
    except OSError as e:
        return Result(rel=rel, outcome=Outcome.REFUSED, reason=f"{e.strerror or e}: left for the next run")


def remove_part(*, root: Path, rel: str) -> bool:
    """Remove a leftover partial copy (``rel`` ends in a part name); False if it was not one or is gone."""
    p = PurePosixPath(rel)
    if not is_part(p.name):
        return False
    try:
        if any(part in ("", ".", "..") for part in p.parent.parts) or p.is_absolute():
            return False
        with _folder(root, p.parent.parts) as d:
            os.unlink(p.name, dir_fd=d)
            os.fsync(d)
            return True
    except (Refused, OSError):
        return False
