"""The mount behind the ``high-speed-storage`` class (plan section 5.1): NVMe-backed, or a parallel FS.

/proc/mounts gives the device of the mount that holds the path (the longest mount point above it);
/sys/block/<disk>/queue/rotational says whether the disk spins (a partition is named after its disk:
nvme0n1p2 -> nvme0n1, sda1 -> sda). Without ``--storage-path`` any NVMe-backed mount other than /boot*
is taken. Network and parallel file systems cannot be judged from here: a warn, and the IOPS probe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

NETWORK_FS = frozenset(
    {"nfs", "nfs4", "lustre", "beegfs", "gpfs", "wekafs", "cephfs", "ceph", "glusterfs", "fuse.weka"}
)
_NVME_PART = re.compile(r"^(nvme\d+n\d+)(p\d+)?$")
_SD_PART = re.compile(r"^([a-z]+[a-z])(\d+)?$")
REQUIRED = "an NVMe-backed mount (or a parallel file system) for high-speed-storage"


@dataclass(frozen=True, slots=True)
class Mount:
    device: str
    point: str
    fstype: str


def _unescape(field_: str) -> str:
    """/proc/mounts writes a space as \\040, a tab as \\011 (octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def parse_mounts(text: str) -> list[Mount]:
    out: list[Mount] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2]))
    return out


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that holds ``path``: the longest mount point that is ``path`` or one of its parents."""
    p = path.rstrip("/") or "/"
    best: Mount | None = None
    for m in mounts:
        mp = m.point.rstrip("/") or "/"
        if (p == mp or p.startswith(mp + "/") or mp == "/") and (
            best is None or len(mp) >= len(best.point.rstrip("/") or "/")
        ):
            best = m
    return best


def disk_of(device: str) -> str | None:
    """/dev/nvme0n1p2 -> nvme0n1; /dev/sda1 -> sda; None when it is no block device path."""
    if not device.startswith("/dev/"):
        return None
    name = device.removeprefix("/dev/")
    m = _NVME_PART.match(name) or _SD_PART.match(name)
    return m.group(1) if m else name


def judge(probe: HostProbe, m: Mount) -> Check:
    c = CheckName.storage
    where = f"{m.point} ({m.device}, {m.fstype})"
    if m.fstype in NETWORK_FS or m.fstype.startswith("fuse."):
        return Check(
            check=c,
            name="high-speed-storage",
            status=Status.WARN,
            found=f"{where}: a network file system",
            required=REQUIRED,
            fix="its speed is the fabric's: measure it with --iops-probe PATH",
        )
    disk = disk_of(m.device)
    rot = probe.read(f"/sys/block/{disk}/queue/rotational") if disk else None
    if disk and disk.startswith("nvme") and (rot is None or rot.strip() == "0"):
        return Check(check=c, name="high-speed-storage", status=Status.PASS, found=f"{where}: NVMe", required=REQUIRED)
    if rot is not None and rot.strip() == "1":
        return Check(
            check=c,
            name="high-speed-storage",
            status=Status.FAIL,
            found=f"{where}: a rotating disk",
            required=REQUIRED,
            fix="put the high-speed-storage class on NVMe",
        )
    kind = "an SSD, not NVMe" if rot is not None else "of unknown kind (no /sys/block entry)"
    return Check(
        check=c,
        name="high-speed-storage",
        status=Status.WARN,
        found=f"{where}: {kind}",
        required=REQUIRED,
        fix="prefer NVMe; measure with --iops-probe PATH",
    )


def storage(probe: HostProbe, opts: Options) -> list[Check]:
    c = CheckName.storage
    text = probe.read("/proc/mounts")
    if text is None:
        return [
            Check(
                check=c,
                name="high-speed-storage",
                status=Status.SKIP,
                found="/proc/mounts not readable",
                required=REQUIRED,
            )
        ]
    mounts = parse_mounts(text)
    if opts.storage_path:
        m = mount_of(opts.storage_path, mounts)
        if m is None:
            return [
                Check(
                    check=c,
                    name="high-speed-storage",
                    status=Status.FAIL,
                    found=f"no mount holds {opts.storage_path}",
                    required=REQUIRED,
                    fix="mount the fast storage there, or pass --storage-path",
                )
            ]
        return [judge(probe, m)]
    nvme = [m for m in mounts if (d := disk_of(m.device)) and d.startswith("nvme") and not m.point.startswith("/boot")]
    if nvme:
        return [judge(probe, nvme[0])]
    return [
        Check(
            check=c,
            name="high-speed-storage",
            status=Status.WARN,
            found="no NVMe-backed mount (see /proc/mounts)",
            required=REQUIRED,
            fix="pass --storage-path PATH for the class's mount, or mount an NVMe device",
        )
    ]
