"""The result of one check, the names of the checks, and the options they read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class CheckName(StrEnum):
    """The checks, in the order they run (``--check NAME`` picks a subset)."""

    kernel = "kernel"
    driver = "driver"
    runtime = "runtime"
    kubernetes = "kubernetes"
    topology = "topology"
    rdma = "rdma"
    sysctl = "sysctl"
    subnets = "subnets"
    firewall = "firewall"
    storage = "storage"
    iops = "iops"
    spec = "spec"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One line of the report: what was looked at, what was found, what the plan requires, and the fix."""

    check: CheckName
    name: str  # what exactly: "vm.swappiness", "mlx5_0 port 1", "GPU0 -> NIC"
    status: Status
    found: str
    required: str
    fix: str = ""

    def row(self) -> dict[str, str]:
        return {
            "check": self.check.value,
            "name": self.name,
            "status": self.status.value,
            "found": self.found,
            "required": self.required,
            "fix": self.fix,
        }


# The plan's network (section 3.3): three /16s, one per traffic class.
DEFAULT_SUBNETS: Mapping[str, str] = {
    "compute": "10.0.0.0/16",
    "storage": "10.1.0.0/16",
    "management": "10.2.0.0/16",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What the checks are told by the command line."""

    subnets: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SUBNETS))
    storage_path: str | None = None  # the high-speed-storage mount; None: look for an NVMe-backed one
    iops_path: Path | None = None  # opt-in: the directory the IOPS probe writes its temp file in
    iops_seconds: float = 3.0
    iops_size_mib: int = 256
    iops_jobs: int = 8
    cluster_spec: Path | None = None


def worst(statuses: list[Status]) -> Status:
    """fail > warn > pass > skip: the status of a group of results."""
    for s in (Status.FAIL, Status.WARN, Status.PASS):
        if s in statuses:
            return s
    return Status.SKIP
