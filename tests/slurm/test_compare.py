"""The rackscale-vs-Slurm comparison, test-sized, on the fixture's live Slurm."""

from __future__ import annotations

from rackscale.bench.slurm_compare import SIZES, compare, job_mix
from rackscale.slurm.emulated import EmulatedSlurm


def test_job_mix_is_seeded() -> None:
    a = job_mix(10, seed=3)
    assert a == job_mix(10, seed=3) and a != job_mix(10, seed=4)
    assert {g.gpus for g in a} <= set(SIZES) and [g.arrive_s for g in a] == sorted(g.arrive_s for g in a)


def test_compare_runs_both_sides_on_live_slurm(slurm: EmulatedSlurm) -> None:
    a, b, c = compare(slurm.slurm, slurm.cluster, 6, seed=1, spread_s=1.0)
    for r in (a, b, c):
        assert r.jobs == r.started == 6, r
        assert r.mean_wait_s >= 0
    assert b.one_rack == 6  # rackscale keeps every gang (<= 16 GPUs = one 4-node rack) inside one rack
    assert c.one_rack == 6 and c.label == "rackscale, one rack required"  # required: never split
