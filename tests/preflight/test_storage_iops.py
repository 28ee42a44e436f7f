"""The high-speed-storage mount from a fake /proc/mounts and /sys/block; the IOPS probe on a real tmp file."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.builders import HostTree

from rackscale.preflight.checks import Options, Status
from rackscale.preflight.iops import iops, measure
from rackscale.preflight.storage import disk_of, mount_of, parse_mounts, storage

MOUNTS = """/dev/nvme0n1p2 / ext4 rw,relatime 0 0
/dev/nvme0n1p1 /boot/efi vfat rw 0 0
/dev/nvme1n1 /mnt/fast xfs rw,noatime 0 0
/dev/sda1 /mnt/slow ext4 rw 0 0
/dev/sdb1 /mnt/ssd ext4 rw 0 0
10.1.0.5:/export /mnt/nfs nfs4 rw,vers=4.1 0 0
/dev/nvme2n1 /mnt/with\\040space ext4 rw 0 0
"""


def host(tmp_path: Path) -> HostTree:
    return (
        HostTree(tmp_path)
        .write("/proc/mounts", MOUNTS)
        .write("/sys/block/nvme1n1/queue/rotational", "0\n")
        .write("/sys/block/sda/queue/rotational", "1\n")
        .write("/sys/block/sdb/queue/rotational", "0\n")
    )


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/mnt/fast/ckpt", Status.PASS, "NVMe"),
        ("/mnt/slow", Status.FAIL, "rotating"),
        ("/mnt/ssd/x", Status.WARN, "an SSD, not NVMe"),
        ("/mnt/nfs/data", Status.WARN, "network file system"),
        ("/mnt/with space", Status.PASS, "NVMe"),
        ("/srv/data", Status.PASS, "/ (/dev/nvme0n1p2"),  # held by the root mount
    ],
    ids=["nvme", "hdd", "sata-ssd", "nfs", "escaped-space", "root-fs"],
)
def test_storage_path(tmp_path: Path, path: str, status: Status, says: str) -> None:
    (c,) = storage(host(tmp_path).probe(), Options(storage_path=path))
    assert c.status is status and says in c.found, c


def test_without_a_path_an_nvme_mount_not_boot_is_taken(tmp_path: Path) -> None:
    (c,) = storage(host(tmp_path).probe(), Options())
    assert c.status is Status.PASS and c.found.startswith("/ (/dev/nvme0n1p2")


@pytest.mark.parametrize(
    ("device", "disk"),
    [("/dev/nvme0n1p2", "nvme0n1"), ("/dev/nvme3n1", "nvme3n1"), ("/dev/sda1", "sda"), ("tmpfs", None)],
    ids=["nvme-part", "nvme-disk", "sd-part", "not-a-device"],
)
def test_disk_of(device: str, disk: str | None) -> None:
    assert disk_of(device) == disk


def test_mount_of_prefers_the_longest_mount_point() -> None:
    m = mount_of("/mnt/fast/a/b", parse_mounts(MOUNTS))
    assert m is not None and m.point == "/mnt/fast"
    assert mount_of("/mnt/fastx", parse_mounts(MOUNTS)).point == "/"  # type: ignore[union-attr]


def test_iops_probe_runs_bounded_and_cleans_up(tmp_path: Path) -> None:
    res = measure(tmp_path, seconds=0.4, size_mib=4, jobs=2)
    assert res.read_iops > 0 and res.write_iops > 0 and res.size_mib == 4
    assert list(tmp_path.iterdir()) == []  # the temp file is gone
    checks = iops(
        HostTree(tmp_path).probe(), Options(iops_path=tmp_path, iops_seconds=0.4, iops_size_mib=4, iops_jobs=2)
    )
    assert [c.name for c in checks] == ["4k random read", "4k random write"]
    assert all(c.status in (Status.PASS, Status.WARN) for c in checks)
    if not res.direct:
        assert "page-cache hits overstate it" in checks[0].found


def test_iops_is_opt_in_and_an_unwritable_dir_is_a_fail(tmp_path: Path) -> None:
    (skip,) = iops(HostTree(tmp_path).probe(), Options())
    assert skip.status is Status.SKIP
    (bad,) = iops(HostTree(tmp_path).probe(), Options(iops_path=tmp_path / "missing"))
    assert bad.status is Status.FAIL
