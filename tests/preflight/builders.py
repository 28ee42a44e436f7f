"""A fake host for the preflight checks: a /sys, /proc, /etc tree in tmp_path and recorded command outputs.

    host = HostTree(tmp_path).sysctl("vm.swappiness", 0).ib_port("mlx5_0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
    host.command("nvidia-smi topo --matrix", fixture("topo_h100_nv18.txt"))
    checks = run_checks(host.probe(), Options())

gives the tree::

    tmp_path/
    ├── proc/sys/vm/swappiness                      "0"
    ├── sys/class/infiniband/mlx5_0/ports/1/state   "4: ACTIVE"
    └── commands.json                               (what `rackscale preflight --root` reads)
"""

from __future__ import annotations

import json
from pathlib import Path

from rackscale.preflight.host_facts import HostProbe, recorded_runner

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class HostTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.commands: dict[str, tuple[int, str]] = {}
        self.binaries: set[str] = set()

    def write(self, path: str, text: str) -> HostTree:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return self

    def sysctl(self, key: str, value: int | str) -> HostTree:
        return self.write("/proc/sys/" + key.replace(".", "/"), f"{value}\n")

    def plan_sysctls(self) -> HostTree:
        for key, v in (
            ("vm.swappiness", 0),
            ("vm.dirty_background_ratio", 3),
            ("vm.dirty_ratio", 15),
            ("net.core.rmem_max", 16777216),
            ("net.core.wmem_max", 16777216),
        ):
            self.sysctl(key, v)
        return self

    def ib_port(self, dev: str, port: int, state: str, rate: str = "") -> HostTree:
        base = f"/sys/class/infiniband/{dev}/ports/{port}"
        self.write(f"{base}/state", state + "\n")
        return self.write(f"{base}/rate", rate + "\n") if rate else self

    def command(self, line: str, out: str, rc: int = 0) -> HostTree:
        self.commands[line] = (rc, out)
        return self

    def binary(self, name: str) -> HostTree:
        self.binaries.add(name)
        return self.write(f"/usr/bin/{name}", "")

    def probe(self) -> HostProbe:
        return HostProbe(
            root=self.root,
            run=recorded_runner(dict(self.commands)),
            which=lambda n: f"/usr/bin/{n}" if n in self.binaries else None,
        )

    def save_commands(self) -> HostTree:
        """Write commands.json, for `rackscale preflight --root`."""
        doc = {k: {"rc": rc, "out": out} for k, (rc, out) in self.commands.items()}
        return self.write("/commands.json", json.dumps(doc))


def gpu_host(root: Path, topo_fixture: str, name: str = "NVIDIA H100 80GB HBM3", fabric: str = "") -> HostTree:
    """A host whose nvidia-smi prints the recorded matrix ``topo_fixture`` (and GPU names, fabric)."""
    host = HostTree(root).command("nvidia-smi topo --matrix", fixture(topo_fixture))
    n = (
        sum(1 for line in fixture(topo_fixture).splitlines() if line.split()[:1] and line.split()[0].startswith("GPU"))
        - 1
    )
    host.command("nvidia-smi --query-gpu=name --format=csv,noheader", "\n".join([name] * n) + "\n")
    if fabric:
        host.command("nvidia-smi -q", fabric)
    return host
