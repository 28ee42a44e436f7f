"""RDMA ports and module options from a fake /sys and /etc; the sysctl values and --fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.builders import HostTree

from rackscale.preflight.checks import Options, Status
from rackscale.preflight.rdma import rdma
from rackscale.preflight.sysctl import FIX_FILE, fix_text, sysctl, write_fix


def test_no_rdma_device_is_a_skip(tmp_path: Path) -> None:
    (c,) = rdma(HostTree(tmp_path).probe(), Options())
    assert c.status is Status.SKIP


def test_ports_and_options(tmp_path: Path) -> None:
    """mlx5_0 port 1 ACTIVE at HDR, mlx5_1 port 1 DOWN; the options in two files, the later one wins::

    /etc/modprobe.d/10-mlx.conf        options mlx5_core log_num_mgm_entry_size=-7
    /etc/modprobe.d/50-rackscale.conf  options mlx5_core log_num_mgm_entry_size=-1   <- wins
    (ib_uverbs disable_raw_qp not set anywhere)
    """
    host = (
        HostTree(tmp_path)
        .ib_port("mlx5_0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
        .ib_port("mlx5_1", 1, "1: DOWN", "10 Gb/sec (4X SDR)")
        .write("/etc/modprobe.d/10-mlx.conf", "# vendor\noptions mlx5_core log_num_mgm_entry_size=-7\n")
        .write("/etc/modprobe.d/50-rackscale.conf", "options mlx5_core log_num_mgm_entry_size=-1  # plan\n")
        .write("/etc/modprobe.d/broken.conf", "options 'unbalanced\n")
    )
    got = {c.name: (c.status, c.found) for c in rdma(host.probe(), Options())}
    assert got["mlx5_0 port 1"] == (Status.PASS, "4: ACTIVE, 200 Gb/sec (4X HDR)")
    assert got["mlx5_1 port 1"][0] is Status.FAIL
    assert got["mlx5_core log_num_mgm_entry_size"] == (Status.PASS, "log_num_mgm_entry_size=-1 (50-rackscale.conf)")
    assert got["ib_uverbs disable_raw_qp"] == (Status.FAIL, "not set in /etc/modprobe.d")


@pytest.mark.parametrize(
    ("key", "value", "status"),
    [
        ("vm.swappiness", "0", Status.PASS),
        ("vm.swappiness", "60", Status.FAIL),
        ("vm.dirty_ratio", "15", Status.PASS),
        ("net.core.rmem_max", "33554432", Status.PASS),  # more than the plan is no harm
        ("net.core.wmem_max", "212992", Status.FAIL),
        ("vm.dirty_background_ratio", "lots", Status.FAIL),
    ],
    ids=["swappiness-0", "swappiness-60", "dirty-15", "rmem-larger", "wmem-default", "garbage"],
)
def test_sysctl_values(tmp_path: Path, key: str, value: str, status: Status) -> None:
    checks = {c.name: c for c in sysctl(HostTree(tmp_path).sysctl(key, value).probe(), Options())}
    assert checks[key].status is status
    assert all(c.status is Status.SKIP for k, c in checks.items() if k != key)  # the others are not in the tree


def test_write_fix_writes_one_file_under_the_root(tmp_path: Path) -> None:
    path, text = write_fix(tmp_path)
    assert path == tmp_path / FIX_FILE.lstrip("/")
    assert path.read_text() == text == fix_text()
    assert [p.name for p in path.parent.iterdir()] == ["90-rackscale.conf"]  # no temp file left
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == [
        "vm.swappiness = 0",
        "vm.dirty_background_ratio = 3",
        "vm.dirty_ratio = 15",
        "net.core.rmem_max = 16777216",
        "net.core.wmem_max = 16777216",
    ]
