"""Subnets from real `ip -j addr` output; the firewall from real nft/iptables dumps (fixtures/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.builders import HostTree, fixture

from rackscale.preflight.checks import Options, Status
from rackscale.preflight.firewall import firewall, parse_iptables_save, parse_nft
from rackscale.preflight.network import parse_fib_trie, parse_subnets, subnets


def test_subnets_from_a_recorded_ip_addr(tmp_path: Path) -> None:
    """ip_addr_ns_lo.json: 10.0.3.7/16 and 10.2.0.9/16 on lo of a network namespace; no 10.1/16."""
    probe = HostTree(tmp_path).command("ip -j addr", fixture("ip_addr_ns_lo.json")).probe()
    got = {c.name: (c.status, c.found) for c in subnets(probe, Options())}
    assert got["compute"] == (Status.PASS, "lo 10.0.3.7")
    assert got["management"] == (Status.PASS, "lo 10.2.0.9")
    assert got["storage"][0] is Status.FAIL


def test_a_configured_subnet_replaces_the_default(tmp_path: Path) -> None:
    probe = HostTree(tmp_path).command("ip -j addr", fixture("ip_addr_host.json")).probe()
    opts = Options(subnets={"compute": "192.0.2.0/24", "storage": "fd00::/64"})
    got = {c.name: c.status for c in subnets(probe, opts)}
    assert got == {"compute": Status.PASS, "storage": Status.PASS}


def test_fib_trie_fallback_and_skip(tmp_path: Path) -> None:
    trie = (
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.1.4.20\n        /32 host LOCAL\n"
        "     |-- 10.1.255.255\n        /32 link BROADCAST\n"
    )
    assert [str(a.ip) for _, a in parse_fib_trie(trie)] == ["10.1.4.20"]
    probe = HostTree(tmp_path).write("/proc/net/fib_trie", trie).probe()
    got = {c.name: c.status for c in subnets(probe, Options())}
    assert got["storage"] is Status.PASS and got["compute"] is Status.FAIL
    (skip,) = subnets(HostTree(tmp_path / "empty").probe(), Options())
    assert skip.status is Status.SKIP


@pytest.mark.parametrize(
    "bad",
    ["compute", "=10.0.0.0/16", "compute=10.0.0.300/16", "compute=banana"],
    ids=["no-equals", "no-role", "bad-octet", "not-a-cidr"],
)
def test_bad_subnet_option_is_one_line(bad: str) -> None:
    with pytest.raises(ValueError, match="--subnet"):
        parse_subnets([bad])


NFT = "nft -j list ruleset"


@pytest.mark.parametrize(
    ("cmd", "dump", "default", "ports", "other"),
    [
        (NFT, "nft_plan.json", Status.PASS, Status.PASS, Status.PASS),
        (NFT, "nft_extra_port_reject.json", Status.PASS, Status.PASS, Status.WARN),
        (NFT, "nft_open.json", Status.FAIL, Status.PASS, Status.FAIL),
        ("iptables-save", "iptables_plan.txt", Status.PASS, Status.PASS, Status.PASS),
        ("iptables-save", "iptables_reject_extra.txt", Status.PASS, Status.PASS, Status.WARN),
        ("iptables-save", "iptables_open.txt", Status.FAIL, Status.PASS, Status.FAIL),
    ],
    ids=[
        "nft-plan",
        "nft-final-reject-plus-9100",
        "nft-policy-accept",
        "ipt-plan",
        "ipt-final-reject-plus-8888",
        "ipt-policy-accept",
    ],
)
def test_firewall_on_real_dumps(
    tmp_path: Path, cmd: str, dump: str, default: Status, ports: Status, other: Status
) -> None:
    checks = {c.name: c for c in firewall(HostTree(tmp_path).command(cmd, fixture(dump)).probe(), Options())}
    assert checks["inbound default"].status is default
    assert {checks[f"tcp/{p}"].status for p in (22, 443, 6443)} == {ports}
    assert checks["other inbound"].status is other


def test_nft_open_ruleset_accepts_only_22_of_the_three(tmp_path: Path) -> None:
    """nft_open.json: policy accept, rules for 22 and 8080: inbound is open, so every port is open."""
    checks = {c.name: c for c in firewall(HostTree(tmp_path).command(NFT, fixture("nft_open.json")).probe(), Options())}
    assert checks["tcp/443"].status is Status.PASS and "not closed at all" in checks["tcp/443"].found
    assert checks["other inbound"].found == "every port is open"


def test_parsers_read_the_ports_and_the_extra_port() -> None:
    (nft,) = parse_nft(fixture("nft_extra_port_reject.json"))
    assert nft.ports == {22, 443, 6443, 9100} and nft.final_block and nft.policy == "accept"
    (ipt,) = parse_iptables_save(fixture("iptables_reject_extra.txt"))
    assert ipt.ports == {22, 443, 6443, 8888} and ipt.final_block


def test_empty_nft_falls_back_to_iptables_and_none_is_a_skip(tmp_path: Path) -> None:
    host = (
        HostTree(tmp_path)
        .command(NFT, fixture("nft_empty.json"))
        .command("iptables-save", fixture("iptables_plan.txt"))
    )
    checks = firewall(host.probe(), Options())
    assert "iptables-save" in checks[0].found and checks[0].status is Status.PASS
    (skip,) = firewall(HostTree(tmp_path / "none").probe(), Options())
    assert skip.status is Status.SKIP


@pytest.mark.parametrize("garbage", ["not json", "[1, 2]", '{"nftables": 3}'], ids=["text", "list", "no-list"])
def test_hostile_nft_output_is_not_a_crash(tmp_path: Path, garbage: str) -> None:
    with pytest.raises(ValueError):
        parse_nft(garbage)
    (skip,) = firewall(HostTree(tmp_path).command(NFT, garbage).probe(), Options())
    assert skip.status is Status.SKIP
