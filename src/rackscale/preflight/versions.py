"""Kernel, NVIDIA driver, container runtime and Kubernetes tool versions (plan sections 3.1-3.2).

Versions compare as tuples of integers (``"5.15.0-1051-azure"`` -> ``(5, 15, 0)``): no packaging library,
and a suffix such as ``-azure`` or ``+k3s1`` never makes a version "greater".
"""

from __future__ import annotations

import json
import re

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import RC_NOT_FOUND, HostProbe

MIN_KERNEL = (5, 4)
MIN_DRIVER = (535,)
MIN_DOCKER = (20, 10)
MIN_CONTAINERD = (1, 6)  # containerd 1.6 is the oldest line Kubernetes 1.26 supports (CRI v1)
MIN_KUBE = (1, 26)

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, ...] | None:
    """The first ``X.Y[.Z]`` in ``text`` as a tuple, or None: ``"Kubernetes v1.28.2"`` -> ``(1, 28, 2)``."""
    m = _VERSION.search(text)
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def dotted(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in v)


def _compare(check: CheckName, name: str, raw: str, minimum: tuple[int, ...], fix: str) -> Check:
    v = parse_version(raw)
    need = f">= {dotted(minimum)}"
    if v is None:
        return Check(
            check=check,
            name=name,
            status=Status.FAIL,
            found=f"unreadable version {raw.strip()[:80]!r}",
            required=need,
            fix=fix,
        )
    status = Status.PASS if v[: len(minimum)] >= minimum else Status.FAIL
    return Check(
        check=check,
        name=name,
        status=status,
        found=raw.strip()[:80],
        required=need,
        fix="" if status is Status.PASS else fix,
    )


def kernel(probe: HostProbe, _opts: Options) -> list[Check]:
    """``uname -r``, read from /proc/sys/kernel/osrelease (the same string, and a file a fixture can hold)."""
    raw = probe.read("/proc/sys/kernel/osrelease")
    if raw is None or not raw.strip():
        return [
            Check(
                check=CheckName.kernel,
                name="linux",
                status=Status.SKIP,
                found="/proc/sys/kernel/osrelease not readable",
                required=">= 5.4",
            )
        ]
    fix = "upgrade the kernel (e.g. the distribution's HWE kernel) to 5.4 or newer and reboot"
    return [_compare(CheckName.kernel, "linux", raw.strip(), MIN_KERNEL, fix)]


def driver_version(probe: HostProbe) -> str | None:
    """NVML first, then ``nvidia-smi --query-gpu=driver_version``, then /proc/driver/nvidia/version."""
    v = probe.nvml_driver()
    if v:
        return v
    rc, out = probe.command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    if rc == 0 and out.strip():
        return out.strip().splitlines()[0].strip()
    proc = probe.read("/proc/driver/nvidia/version")  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05 ..."
    if proc:
        m = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", proc)
        if m:
            return m.group(1)
    return None


def driver(probe: HostProbe, _opts: Options) -> list[Check]:
    v = driver_version(probe)
    if v is None:
        return [
            Check(
                check=CheckName.driver,
                name="nvidia",
                status=Status.SKIP,
                found="no NVIDIA driver (NVML, nvidia-smi and /proc/driver/nvidia not found)",
                required=">= 535",
            )
        ]
    fix = "install an NVIDIA data-center driver of branch 535 or newer (e.g. nvidia-driver-535-server)"
    return [_compare(CheckName.driver, "nvidia", v, MIN_DRIVER, fix)]


def runtime(probe: HostProbe, _opts: Options) -> list[Check]:
    """Docker >= 20.10 (the server's version: the CLI alone runs nothing), or else containerd >= 1.6."""
    rc, out = probe.command("docker", "version", "--format", "{{.Server.Version}}")
    if rc == 0 and out.strip():
        fix = "upgrade Docker Engine to 20.10 or newer (docker-ce from download.docker.com)"
        return [_compare(CheckName.runtime, "docker", out.strip(), MIN_DOCKER, fix)]
    docker_cli = rc != RC_NOT_FOUND
    rc, out = probe.command("containerd", "--version")  # "containerd github.com/containerd/containerd v1.7.2 ..."
    if rc == 0 and out.strip():
        fix = "upgrade containerd to 1.6 or newer"
        return [_compare(CheckName.runtime, "containerd", out.strip(), MIN_CONTAINERD, fix)]
    found = (
        "docker CLI found but its daemon did not answer; no containerd"
        if docker_cli
        else "neither docker nor containerd found"
    )
    fix = "start the daemon (systemctl start docker)" if docker_cli else "install Docker >= 20.10 or containerd >= 1.6"
    return [
        Check(
            check=CheckName.runtime,
            name="container runtime",
            status=Status.FAIL,
            found=found,
            required="docker >= 20.10 or containerd >= 1.6",
            fix=fix,
        )
    ]


def is_kube_node(probe: HostProbe) -> bool:
    return probe.which("kubelet") is not None or probe.exists("/var/lib/kubelet")


def _kubectl_version(out: str) -> str:
    """``kubectl version --client -o json`` -> its clientVersion.gitVersion; any other text as it is."""
    try:
        data = json.loads(out)
    except ValueError:
        return out
    cv = data.get("clientVersion") if isinstance(data, dict) else None
    return str(cv.get("gitVersion", "")) if isinstance(cv, dict) else out


_KUBE_TOOLS = (
    ("kubelet", ("kubelet", "--version")),  # "Kubernetes v1.28.2"
    ("kubeadm", ("kubeadm", "version", "-o", "short")),  # "v1.28.2"
    ("kubectl", ("kubectl", "version", "--client", "-o", "json")),
)


def kubernetes(probe: HostProbe, _opts: Options) -> list[Check]:
    if not is_kube_node(probe):
        return [
            Check(
                check=CheckName.kubernetes,
                name="kubelet/kubeadm/kubectl",
                status=Status.SKIP,
                found="not a Kubernetes node (no kubelet binary, no /var/lib/kubelet)",
                required=">= 1.26",
            )
        ]
    out_checks: list[Check] = []
    for tool, argv in _KUBE_TOOLS:
        rc, out = probe.command(*argv)
        fix = f"install {tool} 1.26 or newer from pkgs.k8s.io (the same minor as the control plane)"
        if rc != 0 or not out.strip():
            why = "not found" if rc == RC_NOT_FOUND else f"`{' '.join(argv)}` exited {rc}"
            out_checks.append(
                Check(check=CheckName.kubernetes, name=tool, status=Status.FAIL, found=why, required=">= 1.26", fix=fix)
            )
            continue
        raw = _kubectl_version(out) if tool == "kubectl" else out
        out_checks.append(_compare(CheckName.kubernetes, tool, raw.strip().splitlines()[0], MIN_KUBE, fix))
    return out_checks
