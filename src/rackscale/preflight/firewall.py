"""The plan's firewall (section 7.1): tcp 22, 443 and 6443 open inbound, every other inbound closed.

Read from ``nft -j list ruleset`` (libnftables-json(5): base chains carry ``hook`` and ``policy``; a rule's
``expr`` is a list of ``match`` statements and a verdict) or else from ``iptables-save`` (``:INPUT DROP``,
``-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT``). Inbound is closed when the input chain's policy is drop
or its last rule drops/rejects unconditionally. Jumps into other chains (ufw-*, KUBE-*) are not followed:
a port opened only there is reported missing, and the report says which dump it read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rackscale.preflight.checks import Check, CheckName, Options, Status
from rackscale.preflight.host_facts import HostProbe

REQUIRED_TCP = (22, 443, 6443)
MAX_RANGE = 4096  # a dport range wider than this is "many ports", not listed one by one


@dataclass(slots=True)
class Chain:
    name: str
    policy: str = "accept"
    ports: set[int] = field(default_factory=set)  # tcp dports accepted
    wide: list[str] = field(default_factory=list)  # accepted ranges too wide to list
    accept_all: bool = False  # an accept with no match at all: everything is open
    final_block: bool = False  # the last rule drops/rejects whatever reaches it

    @property
    def closed(self) -> bool:
        return not self.accept_all and (self.policy == "drop" or self.final_block)


def _ports(right: Any, chain: Chain) -> None:
    if isinstance(right, int):
        chain.ports.add(right)
    elif isinstance(right, dict) and "set" in right:
        for item in right["set"]:
            _ports(item, chain)
    elif isinstance(right, dict) and "range" in right:
        lo, hi = (int(x) for x in right["range"])
        if hi - lo > MAX_RANGE:
            chain.wide.append(f"{lo}-{hi}")
        else:
            chain.ports.update(range(lo, hi + 1))


def _is_tcp_dport(left: Any) -> bool:
    p = left.get("payload") if isinstance(left, dict) else None
    return isinstance(p, dict) and p.get("protocol") == "tcp" and p.get("field") == "dport"


def parse_nft(text: str) -> list[Chain]:
    """The base chains hooked to input. Raises ``ValueError`` when the text is not nft's JSON."""
    data: Any = json.loads(text)
    objs = data.get("nftables") if isinstance(data, dict) else None
    if not isinstance(objs, list):
        raise ValueError('not `nft -j list ruleset` output (no "nftables" list)')
    chains: dict[tuple[str, str, str], Chain] = {}
    rules: list[dict[str, Any]] = []
    for o in objs:
        if not isinstance(o, dict):
            continue
        if isinstance(o.get("chain"), dict) and o["chain"].get("hook") == "input":
            ch = o["chain"]
            key = (str(ch.get("family")), str(ch.get("table")), str(ch.get("name")))
            chains[key] = Chain(name=f"{key[0]} {key[1]} {key[2]}", policy=str(ch.get("policy", "accept")))
        elif isinstance(o.get("rule"), dict):
            rules.append(o["rule"])
    last: dict[tuple[str, str, str], bool] = {}
    for r in rules:
        key = (str(r.get("family")), str(r.get("table")), str(r.get("chain")))
        chain = chains.get(key)
        if chain is None:
            continue
        expr = [e for e in r.get("expr") or [] if isinstance(e, dict)]
        matches = [e["match"] for e in expr if isinstance(e.get("match"), dict)]
        verdict = next((k for e in expr for k in ("accept", "drop", "reject", "jump", "goto") if k in e), None)
        if verdict == "accept":
            dports = [m for m in matches if _is_tcp_dport(m.get("left"))]
            for m in dports:
                _ports(m.get("right"), chain)
            if not matches:
                chain.accept_all = True
        last[key] = verdict in ("drop", "reject") and not matches
    for key, block in last.items():
        chains[key].final_block = block
    return list(chains.values())


def parse_iptables_save(text: str) -> list[Chain]:
    """The INPUT chain of the filter table(s) in an ``iptables-save`` dump."""
    chains: list[Chain] = []
    chain: Chain | None = None
    table = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:]
            chain = None
        elif table == "filter" and line.startswith(":INPUT "):
            chain = Chain(name="iptables filter INPUT", policy=line.split()[1].lower())
            chains.append(chain)
        elif table == "filter" and chain is not None and line.startswith("-A INPUT"):
            _iptables_rule(line.split()[2:], chain)
    return chains


def _iptables_rule(words: list[str], chain: Chain) -> None:
    target, ports, conds, tcp = "", [], 0, False
    i = 0
    while i < len(words):
        w, nxt = words[i], words[i + 1] if i + 1 < len(words) else ""
        if w in ("-j", "-g"):
            target = nxt
            break  # what follows is the target's own options (--reject-with ...)
        if w == "-p":
            tcp = nxt == "tcp"
        elif w in ("--dport", "--dports", "--destination-port"):
            ports.extend(nxt.split(","))
        elif w == "-m" and nxt in ("tcp", "multiport"):
            pass  # part of the port match itself
        elif w.startswith("-"):
            conds += 1
        i += 2 if w.startswith("-") and nxt and not nxt.startswith("-") else 1
    if target == "ACCEPT":
        if not ports and not conds and not tcp:
            chain.accept_all = True
        for p in ports if tcp else []:
            lo, _, hi = p.partition(":")
            if lo.isdigit() and (not hi or hi.isdigit()):
                _ports({"range": [int(lo), int(hi or lo)]}, chain)
    chain.final_block = target in ("DROP", "REJECT") and not ports and not conds and not tcp


def firewall(probe: HostProbe, _opts: Options) -> list[Check]:
    c = CheckName.firewall
    chains: list[Chain] | None = None
    source = ""
    rc, out = probe.command("nft", "-j", "list", "ruleset")
    if rc == 0:
        try:
            chains, source = parse_nft(out), "nft -j list ruleset"
        except ValueError:
            chains = None
    if not chains:
        rc2, out2 = probe.command("iptables-save")
        if rc2 == 0 and out2.strip():
            chains, source = parse_iptables_save(out2), "iptables-save"
    if chains is None:
        return [
            Check(
                check=c,
                name="ruleset",
                status=Status.SKIP,
                found="neither `nft -j list ruleset` nor `iptables-save` answered (not installed, or not root)",
                required="tcp 22, 443, 6443 open; other inbound closed",
            )
        ]
    closing = [ch for ch in chains if ch.closed]
    found = "; ".join(
        f"{ch.name}: policy {ch.policy}{', final drop/reject' if ch.final_block else ''}" for ch in chains
    )
    out_checks = [
        Check(
            check=c,
            name="inbound default",
            status=Status.PASS if closing else Status.FAIL,
            found=f"{found or 'no input chain'} ({source})",
            required="input policy drop, or a final drop/reject",
            fix=""
            if closing
            else "allow 22/443/6443 first, then `nft add chain inet filter input '{ type filter "
            "hook input priority 0; policy drop; }'` (or `iptables -P INPUT DROP`)",
        )
    ]
    for port in REQUIRED_TCP:
        ok = all(port in ch.ports for ch in closing)  # no closed chain: open, with everything else
        found = (
            ("accepted" if closing else "open (inbound is not closed at all)")
            if ok
            else "not accepted by every closed input chain"
        )
        out_checks.append(
            Check(
                check=c,
                name=f"tcp/{port}",
                status=Status.PASS if ok else Status.FAIL,
                found=found,
                required="open inbound",
                fix="" if ok else f"nft add rule inet filter input tcp dport {port} accept",
            )
        )
    if not closing:
        out_checks.append(
            Check(
                check=c,
                name="other inbound",
                status=Status.FAIL,
                found="every port is open",
                required="closed",
                fix="close inbound by default (see `inbound default`)",
            )
        )
        return out_checks
    extra = sorted({p for ch in closing for p in ch.ports} - set(REQUIRED_TCP))
    wide = [w for ch in closing for w in ch.wide]
    shown = [str(p) for p in extra[:20]] + wide + (["..."] if len(extra) > 20 else [])
    out_checks.append(
        Check(
            check=c,
            name="other inbound",
            status=Status.WARN if shown else Status.PASS,
            found=f"also open: tcp {', '.join(shown)}" if shown else "none besides 22, 443, 6443",
            required="closed",
            fix="remove the rules that accept them, unless the plan lists them" if shown else "",
        )
    )
    return out_checks
