"""Collectives run on the tier their group spans.

domain 0 (NVLink)          domain 1 (NVLink)
[g0 g1 g2 g3] --- NIC --- [g4 g5 g6 g7]
"""

from __future__ import annotations

import pytest

from rackscale.llm.fabric import AllReduce, Links, Span, all_reduce_s, all_to_all_s, ring_bytes_per_nic

LINKS = Links(nvlink_bytes_s=900e9, nic_bytes_s=50e9, backbone_bytes_s=25e9)
GB = 1e9


@pytest.mark.parametrize(
    ("gpus", "domain", "expected"),
    [(8, 8, (8,)), (16, 8, (8, 8)), (12, 8, (8, 4)), (1, 72, (1,)), (72, 72, (72,))],
    ids=["one-domain", "two-full", "full-and-part", "single-gpu", "nvl72"],
)
def test_packed_span_fills_domains_in_order(gpus: int, domain: int, expected: tuple[int, ...]) -> None:
    assert Span.packed(gpus, domain).per_domain == expected


@pytest.mark.parametrize(
    ("gpus", "domain", "expected"),
    [
        (64, 9, (8,) * 8),  # packed: 7 domains of 9 and one of 1
        (12, 8, (6, 6)),
        (17, 8, (6, 6, 5)),
        (16, 8, (8, 8)),
        (5, 72, (5,)),
        (1, 8, (1,)),
    ],
    ids=["dp64-nine-to-a-domain", "two-halves", "uneven-by-one", "two-full", "one-domain", "single-gpu"],
)
def test_balanced_span_uses_as_few_domains_as_packed_spread_evenly(
    gpus: int, domain: int, expected: tuple[int, ...]
) -> None:
    got = Span.balanced(gpus, domain)
    assert got.per_domain == expected
    assert got.domains == Span.packed(gpus, domain).domains and got.gpus == gpus


def test_a_domain_left_with_one_rank_is_the_hierarchical_all_reduces_bottleneck() -> None:
    packed, balanced = Span.packed(64, 9), Span.balanced(64, 9)
    slow = all_reduce_s(LINKS, packed, 1 * GB, algorithm=AllReduce.HIERARCHICAL)
    fast = all_reduce_s(LINKS, balanced, 1 * GB, algorithm=AllReduce.HIERARCHICAL)
    assert fast < slow / 4  # each NIC carries an eighth of the bytes, not all of them


def test_all_reduce_leaving_the_domain_runs_at_the_nic() -> None:
    inside = all_reduce_s(LINKS, Span((8,)), 1 * GB)
    split = all_reduce_s(LINKS, Span((4, 4)), 1 * GB)
    # the ring's slowest edge is the NIC: the split ring is slower by about the bandwidth ratio
    assert split / inside == pytest.approx(900 / 50, rel=0.05)


def test_hierarchical_all_reduce_sends_a_shard_per_nic() -> None:
    ring = all_reduce_s(LINKS, Span((8, 8)), 1 * GB)
    hier = all_reduce_s(LINKS, Span((8, 8)), 1 * GB, algorithm=AllReduce.HIERARCHICAL)
    assert hier < ring / 4
    # bigger domains: fewer bytes per NIC
    assert ring_bytes_per_nic(Span((36, 36)), GB, algorithm=AllReduce.HIERARCHICAL) < ring_bytes_per_nic(
        Span((8,) * 9), GB, algorithm=AllReduce.HIERARCHICAL
    )


def test_contention_slows_only_the_part_between_domains() -> None:
    assert all_reduce_s(LINKS, Span((8,)), GB, slowdown=4.0) == all_reduce_s(LINKS, Span((8,)), GB)
    assert all_reduce_s(LINKS, Span((4, 4)), GB, slowdown=2.0) > 1.9 * all_reduce_s(LINKS, Span((4, 4)), GB) - 1e-3


def test_regions_use_the_backbone() -> None:
    assert all_reduce_s(LINKS, Span((4, 4), regions=2), GB) > all_reduce_s(LINKS, Span((4, 4)), GB)


@pytest.mark.parametrize(
    ("span", "nic_share"),
    [(Span((16,)), 0.0), (Span((8, 8)), 8 / 15), (Span((8,) * 4), 24 / 31)],
    ids=["ep16-one-domain", "ep16-two-nodes", "ep32-four-nodes"],
)
def test_all_to_all_sends_the_off_domain_share_over_the_nic(span: Span, nic_share: float) -> None:
    send = 1 * GB
    t = all_to_all_s(LINKS, span, send)
    if nic_share == 0:
        assert t == pytest.approx(send / LINKS.nvlink_bytes_s + LINKS.nvlink_a2a_latency_s)
    else:
        assert t == pytest.approx(send * nic_share / LINKS.nic_bytes_s + LINKS.nic_latency_s)


@pytest.mark.parametrize(
    ("ep", "bytes_per_value", "measured_s"),
    [(16, 1.0, 118e-6), (32, 1.0, 155e-6), (64, 1.0, 173e-6), (16, 2.0, 195e-6), (32, 2.0, 273e-6), (64, 2.0, 314e-6)],
    ids=["dispatch-ep16", "dispatch-ep32", "dispatch-ep64", "combine-ep16", "combine-ep32", "combine-ep64"],
)
def test_all_to_all_over_the_nic_predicts_deepep(ep: int, bytes_per_value: float, measured_s: float) -> None:
    """A prediction, not a fit: DeepEP's low-latency kernels (deepseek-ai/DeepEP docs/legacy.md, H800 with a
    CX7 400 Gb/s InfiniBand NIC per GPU, 128 tokens per GPU, hidden 7168, top-8, FP8 dispatch and BF16
    combine, 8 GPUs per node) measured these latencies. The model (NIC 50 GB/s, 25 us per collective, the
    node-local share over NVLink) lands within 25 %."""
    send = 128 * 8 * 7168 * bytes_per_value
    links = Links(nvlink_bytes_s=160e9, nic_bytes_s=50e9, backbone_bytes_s=50e9)
    t = all_to_all_s(links, Span((8,) * (ep // 8)), send)
    assert t == pytest.approx(measured_s, rel=0.25)


def test_sub_spans_stay_inside_a_domain_when_they_fit() -> None:
    assert Span((8, 8)).sub(8).domains == 1
    assert Span((8, 8)).sub(16).domains == 2
    assert Span((4, 4)).sub(8).domains == 2
