"""The plan's three subnets (section 3.3), matched against the host's interface addresses.

Addresses come from ``ip -j addr`` (iproute2's JSON: ``[{"ifname", "addr_info": [{"family", "local",
"prefixlen"}]}]``); without iproute2, from /proc/net/fib_trie (a ``|-- A.B.C.D`` line followed by
``/32 host LOCAL`` is a local address); with neither, the check is skipped.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

Address = tuple[str, ipaddress.IPv4Interface | ipaddress.IPv6Interface]  # (interface, address/prefix)


def parse_subnets(items: list[str]) -> dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``["compute=10.0.0.0/16", ...]`` -> role -> network. Raises ``ValueError`` naming the bad item."""
    out: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for item in items:
        role, eq, cidr = item.partition("=")
        if not eq or not role.strip():
            raise ValueError(f"--subnet {item!r}: must be ROLE=CIDR, e.g. compute=10.0.0.0/16")
        try:
            out[role.strip()] = ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError:
            raise ValueError(f"--subnet {item!r}: {cidr.strip()!r} is not a CIDR such as 10.0.0.0/16") from None
    return out


def parse_ip_json(text: str) -> list[Address]:
    """``ip -j addr`` -> (interface, address). Raises ``ValueError`` when the text is not that JSON."""
    data: Any = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("`ip -j addr` did not print a JSON list")
    out: list[Address] = []
    for link in data:
        if not isinstance(link, dict):
            continue
        for a in link.get("addr_info") or []:
            if isinstance(a, dict) and a.get("family") in ("inet", "inet6") and "local" in a:
                try:
                    out.append(
                        (str(link.get("ifname", "?")), ipaddress.ip_interface(f"{a['local']}/{a.get('prefixlen', 32)}"))
                    )
                except ValueError:
                    continue
    return out


def parse_fib_trie(text: str) -> list[Address]:
    """Local IPv4 addresses from /proc/net/fib_trie (no interface names there: shown as "?")."""
    out: list[Address] = []
    last: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("|-- "):
            last = s[4:].strip()
        elif "/32 host LOCAL" in s and last:
            try:
                iface = ("?", ipaddress.ip_interface(last))
            except ValueError:
                continue
            if iface not in out:
                out.append(iface)
    return out


def host_addresses(probe: HostProbe) -> tuple[list[Address] | None, str]:
    """(addresses, where they came from); None when there is no source."""
    rc, out = probe.command("ip", "-j", "addr")
    if rc == 0:
        try:
            return parse_ip_json(out), "ip -j addr"
        except ValueError:
            pass
    trie = probe.read("/proc/net/fib_trie")
    if trie:
        return parse_fib_trie(trie), "/proc/net/fib_trie"
    return None, ""


def subnets(probe: HostProbe, opts: Options) -> list[Check]:
    nets = parse_subnets([f"{k}={v}" for k, v in opts.subnets.items()])
    addrs, source = host_addresses(probe)
    if addrs is None:
        return [
            Check(
                check=CheckName.subnets,
                name="interfaces",
                status=Status.SKIP,
                found="neither `ip -j addr` nor /proc/net/fib_trie",
                required="compute/storage/management subnets",
            )
        ]
    return [_one(role, net, addrs, source) for role, net in nets.items()]


def _one(role: str, net: Any, addrs: list[Address], source: str) -> Check:
    hits = [f"{iface} {a.ip}" for iface, a in addrs if a.ip.version == net.version and a.ip in net]
    if hits:
        return Check(
            check=CheckName.subnets,
            name=role,
            status=Status.PASS,
            found=", ".join(hits),
            required=f"an address in {net}",
        )
    return Check(
        check=CheckName.subnets,
        name=role,
        status=Status.FAIL,
        found=f"no address in {net} ({source})",
        required=f"an address in {net}",
        fix=f"give the {role} NIC an address in {net}, or pass --subnet {role}=CIDR if the plan uses another",
    )


def describe(subnets_: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in subnets_.items())
