"""`rackscale preflight` end to end: a fixture tree (--root), the exit codes, hostile usage, and once for
real on this machine (no GPU here: the GPU checks say skip)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.preflight.builders import HostTree, fixture, gpu_host
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.preflight import CHECKS, CheckName, Options, Status, run_checks
from rackscale.preflight.checks import Check
from rackscale.preflight.host_facts import HostProbe

runner = CliRunner()


def ready_host(root: Path) -> HostTree:
    """Every check passes (iops and spec are opt-in: skip)::

    8x H100 NV18, rails mlx5_0..7 ACTIVE at NDR; plan sysctls; 10.0/10.1/10.2 addresses; nft plan ruleset
    """
    host = gpu_host(root, "topo_h100_nv18.txt").plan_sysctls()
    host.write("/proc/sys/kernel/osrelease", "5.15.0-1051-azure\n")
    host.command("nvidia-smi --query-gpu=driver_version --format=csv,noheader", "550.54.15\n" * 8)
    host.command("docker version --format {{.Server.Version}}", "24.0.7\n")
    for i in range(8):
        host.ib_port(f"mlx5_{i}", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    host.write(
        "/etc/modprobe.d/rackscale-rdma.conf",
        "options mlx5_core log_num_mgm_entry_size=-1\noptions ib_uverbs disable_raw_qp=1\n",
    )
    addrs = [
        {"ifname": f"ib{i}", "addr_info": [{"family": "inet", "local": f"10.{i}.0.7", "prefixlen": 16}]}
        for i in range(3)
    ]
    host.command("ip -j addr", json.dumps(addrs))
    host.command("nft -j list ruleset", fixture("nft_plan.json"))
    host.write("/proc/mounts", "/dev/nvme1n1 /mnt/fast xfs rw 0 0\n").write(
        "/sys/block/nvme1n1/queue/rotational", "0\n"
    )
    return host


def test_a_ready_host_passes_every_check(tmp_path: Path) -> None:
    checks = run_checks(ready_host(tmp_path).probe(), Options())
    bad = [c for c in checks if c.status not in (Status.PASS, Status.SKIP)]
    assert bad == []
    assert {c.check for c in checks if c.status is Status.SKIP} == {
        CheckName.kubernetes,
        CheckName.iops,
        CheckName.spec,
    }


def test_no_check_crashes_on_an_empty_tree(tmp_path: Path) -> None:
    checks = run_checks(HostTree(tmp_path).probe(), Options())
    assert {c.check for c in checks} == set(CheckName)
    assert [c for c in checks if c.name == "crashed"] == []


def test_a_crash_is_that_checks_fail_and_the_others_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_probe: HostProbe, _opts: Options) -> list[Check]:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setitem(CHECKS, CheckName.rdma, boom)
    checks = run_checks(HostTree(tmp_path).probe(), Options())
    (crash,) = [c for c in checks if c.check is CheckName.rdma]
    assert (crash.status, crash.found) == (Status.FAIL, "RuntimeError: disk on fire")
    assert CheckName.sysctl in {c.check for c in checks}


def invoke(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["preflight", *args])
    return r.exit_code, r.stdout, r.stderr


def test_cli_on_a_fixture_tree_json_and_labels(tmp_path: Path) -> None:
    ready_host(tmp_path).save_commands()
    code, out, _ = invoke("--root", str(tmp_path), "-o", "json")
    doc = json.loads(out)
    assert code == 0 == doc["exitCode"]
    assert doc["labels"] == {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert doc["summary"]["fail"] == 0


@pytest.mark.parametrize(
    ("mutate", "code"),
    [("/proc/sys/vm/swappiness", 2), ("/sys/class/infiniband/mlx5_0/ports/1/state", 2), (None, 1)],
    ids=["sysctl-fail", "port-down-fail", "warn-only"],
)
def test_cli_exit_codes(tmp_path: Path, mutate: str | None, code: int) -> None:
    host = ready_host(tmp_path)
    if mutate == "/proc/sys/vm/swappiness":
        host.sysctl("vm.swappiness", 60)
    elif mutate:
        host.write(mutate, "1: DOWN\n")
    else:
        host.command("nft -j list ruleset", fixture("nft_extra_port_reject.json"))  # tcp/9100 also open: a warn
    host.save_commands()
    assert invoke("--root", str(tmp_path), "-o", "json")[0] == code


def test_cli_fix_writes_the_file_and_says_so(tmp_path: Path) -> None:
    ready_host(tmp_path).sysctl("vm.swappiness", 60).save_commands()
    conf = tmp_path / "etc/sysctl.d/90-rackscale.conf"
    code, _, _ = invoke("--root", str(tmp_path), "--check", "sysctl")
    assert code == 2 and not conf.exists()  # never without --fix
    code, _, err = invoke("--root", str(tmp_path), "--check", "sysctl", "--fix")
    assert "vm.swappiness = 0" in conf.read_text()
    assert f"wrote {conf}" in err and "vm.swappiness = 0" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--check", "kernal"], "--check 'kernal': unknown check"),
        (["--subnet", "compute"], "--subnet 'compute': must be ROLE=CIDR"),
        (["--cluster-spec", "/nonexistent.yaml"], "nonexistent.yaml"),
        (["--iops-probe", "/nonexistent"], "--iops-probe '/nonexistent': not a directory"),
        (["--timeout", "inf"], "--timeout must be at most 3600"),  # a hung command would hang preflight
        (["--timeout", "1e12"], "--timeout must be at most 3600"),
    ],
    ids=["unknown-check", "bad-subnet", "missing-spec", "iops-not-a-dir", "timeout-inf", "timeout-huge"],
)
def test_hostile_usage_is_one_line_exit_2(args: list[str], says: str) -> None:
    code, out, err = invoke(*args)
    assert code == 2 and says in err and "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1


def test_cli_spec_mismatch_and_table(tmp_path: Path) -> None:
    ready_host(tmp_path).save_commands()
    spec = Path(__file__).resolve().parents[2] / "examples" / "cluster-nvl72.yaml"
    code, out, _ = invoke(
        "--root", str(tmp_path), "--check", "spec", "--check", "topology", "--cluster-spec", str(spec)
    )
    assert code == 2
    assert "spec says 4 GPUs per node with NVLink" in out and "this host has 8, NVLink" in out
    assert "kubectl label node" in out and "nvidia.com/gpu.count=8" in out


def test_preflight_for_real_on_this_machine() -> None:
    """This machine has no GPU: the GPU checks skip; the kernel check passes with the real `uname -r`."""
    code, out, err = invoke("-o", "json", "--timeout", "5")
    assert code in (0, 1, 2), err
    doc = json.loads(out)
    kernel = next(c for c in doc["checks"] if c["check"] == "kernel")
    assert kernel == {**kernel, "status": "pass", "found": os.uname().release}
    assert not [c for c in doc["checks"] if c["name"] == "crashed"]
    if not any(Path(d, "nvidia-smi").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        topo = next(c for c in doc["checks"] if c["check"] == "topology")
        assert (topo["status"], topo["found"]) == ("skip", "nvidia-smi not found")
