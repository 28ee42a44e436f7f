"""RDMA devices, port state and rate, and the plan's mlx5/ib_uverbs module options (plan section 3.3).

``/sys/class/infiniband/<dev>/ports/<n>/state`` holds ``"4: ACTIVE"`` and ``rate`` holds
``"200 Gb/sec (4X HDR)"`` (the kernel's ib_core sysfs); module options live in ``/etc/modprobe.d/*.conf``
as ``options <module> <name>=<value> ...``.
"""

from __future__ import annotations

import shlex

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

IB = "/sys/class/infiniband"
PLAN_OPTIONS = (("mlx5_core", "log_num_mgm_entry_size", "-1"), ("ib_uverbs", "disable_raw_qp", "1"))
OPTIONS_FILE = "/etc/modprobe.d/rackscale-rdma.conf"


def modprobe_options(probe: HostProbe) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, option) -> (value, file) over /etc/modprobe.d/*.conf; a later file wins, as modprobe reads
    them in name order."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for path in probe.glob("/etc/modprobe.d/*.conf"):
        text = probe.read("/" + str(path.relative_to(probe.root)))
        for raw in (text or "").splitlines():
            line = raw.split("#", 1)[0].strip()
            try:
                words = shlex.split(line)
            except ValueError:
                continue  # an unbalanced quote: modprobe ignores such a line too
            if len(words) < 3 or words[0] != "options":
                continue
            for w in words[2:]:
                name, eq, value = w.partition("=")
                if eq:
                    found[(words[1], name)] = (value, path.name)
    return found


def rdma(probe: HostProbe, _opts: Options) -> list[Check]:
    c = CheckName.rdma
    ports = probe.glob(f"{IB}/*/ports/*")
    if not ports:
        return [
            Check(
                check=c,
                name="rdma devices",
                status=Status.SKIP,
                found=f"no device in {IB}",
                required="RDMA ports ACTIVE; mlx5/ib_uverbs options",
            )
        ]
    out: list[Check] = []
    for port in ports:
        rel = "/" + str(port.relative_to(probe.root))
        dev = port.parent.parent.name
        state = (probe.read(f"{rel}/state") or "?").strip()
        rate = (probe.read(f"{rel}/rate") or "").strip()
        active = state.split(":")[-1].strip().upper() == "ACTIVE"
        out.append(
            Check(
                check=c,
                name=f"{dev} port {port.name}",
                status=Status.PASS if active else Status.FAIL,
                found=f"{state}, {rate}" if rate else state,
                required="4: ACTIVE",
                fix=""
                if active
                else f"check the cable and the subnet manager (ibstat {dev}); `systemctl status opensm` on the SM host",
            )
        )
    have = modprobe_options(probe)
    for module, option, want in PLAN_OPTIONS:
        got = have.get((module, option))
        ok = got is not None and got[0] == want
        found = f"{option}={got[0]} ({got[1]})" if got else "not set in /etc/modprobe.d"
        out.append(
            Check(
                check=c,
                name=f"{module} {option}",
                status=Status.PASS if ok else Status.FAIL,
                found=found,
                required=f"options {module} {option}={want}",
                fix=""
                if ok
                else f"echo 'options {module} {option}={want}' >> {OPTIONS_FILE}; then update-initramfs -u and reboot",
            )
        )
    return out
