"""An opt-in, bounded, fio-like probe: 4 KiB random reads then writes on a temp file (plan section 8.2).

``--iops-probe DIR`` writes a file of ``--iops-size`` MiB there (real data: a sparse or fallocated file
would be read as zeros without touching the disk), then runs ``jobs`` threads of ``os.preadv``/``os.pwritev``
at random 4 KiB-aligned offsets for half of ``--iops-seconds`` each, and deletes the file. O_DIRECT is
used where the file system takes it; where it does not (tmpfs, some FUSE), reads can be page-cache hits and
the figure overstates the device: the check says so. A queue of ``jobs`` synchronous threads is not fio's
libaio at iodepth 32; it reads lower than fio on the same disk, never higher (with O_DIRECT).
"""

from __future__ import annotations

import mmap
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

BLOCK = 4096
PLAN_IOPS = 50_000
MAX_SIZE_MIB = 16_384
MAX_SECONDS = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class IopsResult:
    read_iops: float
    write_iops: float
    direct: bool
    size_mib: int


def _open(path: Path) -> tuple[int, bool]:
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, 0o600), True
        except OSError:
            pass  # EINVAL: this file system takes no O_DIRECT
    return os.open(path, flags, 0o600), False


def _fill(fd: int, size: int) -> None:
    chunk = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
    chunk.write(os.urandom(1 << 20))
    done = 0
    while done < size:
        done += os.pwritev(fd, [chunk], done)
    os.fsync(fd)


def _worker(fd: int, blocks: int, write: bool, until: float, counts: list[int], i: int) -> None:
    buf = mmap.mmap(-1, BLOCK)
    rnd = random.Random(i)
    n = 0
    while time.monotonic() < until:
        off = rnd.randrange(blocks) * BLOCK
        (os.pwritev if write else os.preadv)(fd, [buf], off)
        n += 1
    counts[i] = n


def _phase(fd: int, blocks: int, *, write: bool, seconds: float, jobs: int) -> float:
    counts = [0] * jobs
    start = time.monotonic()
    until = start + seconds
    threads = [threading.Thread(target=_worker, args=(fd, blocks, write, until, counts, i)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / max(time.monotonic() - start, 1e-9)


def measure(directory: Path, *, seconds: float, size_mib: int, jobs: int) -> IopsResult:
    """Run the probe in ``directory``. Raises ``OSError`` (no space, not writable)."""
    seconds = min(max(seconds, 0.2), MAX_SECONDS)
    size = min(max(size_mib, 1), MAX_SIZE_MIB) << 20
    path = directory / f".rackscale-iops-{os.getpid()}"
    fd, direct = _open(path)
    try:
        _fill(fd, size)
        blocks = size // BLOCK
        r = _phase(fd, blocks, write=False, seconds=seconds / 2, jobs=jobs)
        w = _phase(fd, blocks, write=True, seconds=seconds / 2, jobs=jobs)
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return IopsResult(read_iops=r, write_iops=w, direct=direct, size_mib=size >> 20)


def iops(_probe: HostProbe, opts: Options) -> list[Check]:
    c = CheckName.iops
    need = f">= {PLAN_IOPS:,} 4 KiB random IOPS"
    if opts.iops_path is None:
        return [
            Check(
                check=c,
                name="4k random",
                status=Status.SKIP,
                found="not asked (opt-in: --iops-probe PATH)",
                required=need,
            )
        ]
    try:
        res = measure(opts.iops_path, seconds=opts.iops_seconds, size_mib=opts.iops_size_mib, jobs=opts.iops_jobs)
    except OSError as err:
        return [
            Check(
                check=c,
                name="4k random",
                status=Status.FAIL,
                found=f"{opts.iops_path}: {err.strerror or err}",
                required=need,
                fix="give a writable directory on the storage to test",
            )
        ]
    note = "" if res.direct else " (no O_DIRECT here: page-cache hits overstate it)"
    out: list[Check] = []
    for name, v in (("4k random read", res.read_iops), ("4k random write", res.write_iops)):
        ok = v >= PLAN_IOPS
        out.append(
            Check(
                check=c,
                name=name,
                status=Status.PASS if ok else Status.WARN,
                found=f"{v:,.0f} IOPS, {opts.iops_jobs} threads, {res.size_mib} MiB file{note}",
                required=need,
                fix="" if ok else "below the plan's 50K: check the device, or measure with fio --iodepth=32",
            )
        )
    return out
