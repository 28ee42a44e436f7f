"""Kernel, driver, runtime and Kubernetes versions: tuples of integers, and skip where the tool is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.builders import HostTree

from rackscale.preflight.checks import Options, Status
from rackscale.preflight.versions import driver, kernel, kubernetes, parse_version, runtime


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("5.15.0-1051-azure", (5, 15, 0)),
        ("6.18.44-fc-v669", (6, 18, 44)),
        ("4.19", (4, 19)),
        ("Kubernetes v1.28.2", (1, 28, 2)),
        ("containerd github.com/containerd/containerd v1.7.2 0cae528d", (1, 7, 2)),
        ("535.104.05", (535, 104, 5)),
        ("no digits", None),
    ],
    ids=["azure-kernel", "this-vm", "two-parts", "kubelet", "containerd", "driver", "garbage"],
)
def test_parse_version(text: str, want: tuple[int, ...] | None) -> None:
    assert parse_version(text) == want


@pytest.mark.parametrize(
    ("release", "status"),
    [("5.4.0-42-generic", Status.PASS), ("5.3.18-lp152", Status.FAIL), ("6.8.0", Status.PASS), ("weird", Status.FAIL)],
    ids=["5.4-exactly", "5.3-too-old", "6.8", "unreadable"],
)
def test_kernel(tmp_path: Path, release: str, status: Status) -> None:
    (c,) = kernel(HostTree(tmp_path).write("/proc/sys/kernel/osrelease", release + "\n").probe(), Options())
    assert c.status is status


@pytest.mark.parametrize(
    ("smi", "proc", "status", "found"),
    [
        ("535.104.05\n535.104.05\n", None, Status.PASS, "535.104.05"),
        ("470.63.01\n", None, Status.FAIL, "470.63.01"),
        (
            None,
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n",
            Status.PASS,
            "550.54.15",
        ),
        (None, None, Status.SKIP, "no NVIDIA driver"),
    ],
    ids=["nvidia-smi-535", "nvidia-smi-470-too-old", "proc-driver-version", "no-gpu"],
)
def test_driver(tmp_path: Path, smi: str | None, proc: str | None, status: Status, found: str) -> None:
    host = HostTree(tmp_path)
    if smi is not None:
        host.command("nvidia-smi --query-gpu=driver_version --format=csv,noheader", smi)
    if proc is not None:
        host.write("/proc/driver/nvidia/version", proc)
    (c,) = driver(host.probe(), Options())
    assert c.status is status and found in c.found


DOCKER = "docker version --format {{.Server.Version}}"


@pytest.mark.parametrize(
    ("cmds", "status", "name"),
    [
        ({DOCKER: (0, "24.0.7\n")}, Status.PASS, "docker"),
        ({DOCKER: (0, "19.03.15\n")}, Status.FAIL, "docker"),
        (
            {DOCKER: (1, ""), "containerd --version": (0, "containerd containerd.io 1.6.28 ae07eda\n")},
            Status.PASS,
            "containerd",
        ),
        ({DOCKER: (1, "")}, Status.FAIL, "container runtime"),
        ({}, Status.FAIL, "container runtime"),
    ],
    ids=["docker-24", "docker-19-too-old", "containerd-when-docker-is-down", "daemon-down", "none"],
)
def test_runtime(tmp_path: Path, cmds: dict[str, tuple[int, str]], status: Status, name: str) -> None:
    host = HostTree(tmp_path)
    for k, (rc, out) in cmds.items():
        host.command(k, out, rc)
    (c,) = runtime(host.probe(), Options())
    assert (c.status, c.name) == (status, name)


def test_kubernetes_skips_off_a_node(tmp_path: Path) -> None:
    (c,) = kubernetes(HostTree(tmp_path).probe(), Options())
    assert c.status is Status.SKIP


def test_kubernetes_on_a_node_checks_the_three_tools(tmp_path: Path) -> None:
    host = HostTree(tmp_path).write("/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n")
    host.command("kubelet --version", "Kubernetes v1.28.2\n")
    host.command("kubeadm version -o short", "v1.25.9\n")
    host.command(
        "kubectl version --client -o json",
        '{"clientVersion": {"major": "1", "minor": "29", "gitVersion": "v1.29.1"}, "kustomizeVersion": "v5.0.4"}',
    )
    got = {c.name: (c.status, c.found) for c in kubernetes(host.probe(), Options())}
    assert got == {
        "kubelet": (Status.PASS, "Kubernetes v1.28.2"),
        "kubeadm": (Status.FAIL, "v1.25.9"),
        "kubectl": (Status.PASS, "v1.29.1"),
    }


def test_kubernetes_missing_tool_is_a_fail_on_a_node(tmp_path: Path) -> None:
    host = HostTree(tmp_path).binary("kubelet").command("kubelet --version", "Kubernetes v1.30.0\n")
    got = {c.name: c.status for c in kubernetes(host.probe(), Options())}
    assert got == {"kubelet": Status.PASS, "kubeadm": Status.FAIL, "kubectl": Status.FAIL}
