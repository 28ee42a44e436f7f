"""The vectorised serving accounting (host/serve_table.py) adds exactly what the scalar loop adds.

The serving table is kept between instants and rebuilt only when a service starts, stops or is rescaled;
a simulation with every instant vectorised must end with the very KPIs (every bit) of one with none, and
at any instant the kept table must equal one built from scratch.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict

import numpy as np
import pytest

from rackscale.host import services
from rackscale.host.serve_table import build_table, fold
from rackscale.model import GPUCluster
from rackscale.sim import SimConfig, Simulator
from rackscale.sim.faults import FaultConfig
from rackscale.workloads import SyntheticConfig, synthetic_jobs


@pytest.mark.parametrize(
    ("n", "scale"),
    [(1, 1.0), (3, 1e-300), (10_000, 1.0), (10_000, 1e12)],
    ids=["one", "subnormal-ish", "ten-thousand", "large-magnitudes"],
)
def test_fold_adds_left_to_right_like_a_python_loop(n: int, scale: float) -> None:
    rng = random.Random(n)
    terms = [rng.uniform(-1.0, 1.0) * scale * 10 ** rng.randint(-8, 8) for _ in range(n)]
    start = rng.uniform(0.0, 1.0)
    expected = start
    for t in terms:
        expected += t
    # (np.sum's pairwise summation rounds differently on ten thousand terms of mixed magnitudes.)
    assert fold(start, np.array(terms)).hex() == expected.hex()


def _run(monkeypatch: pytest.MonkeyPatch, *, vector_min: int, faults: FaultConfig) -> Simulator:
    monkeypatch.setattr(services, "VECTOR_MIN", vector_min)
    cluster = GPUCluster.uniform(racks_per_region=4, regions=1, total_gpus=4 * 72, name="4 x NVL72")
    jobs = synthetic_jobs(SyntheticConfig(jobs=300, duration_s=12 * 3600.0, max_gpus=cluster.total_gpus, seed=3))
    sim = Simulator(cluster, jobs, SimConfig(seed=3, record_series=False, faults=faults))
    sim.run()
    return sim


@pytest.mark.parametrize(
    "faults",
    [FaultConfig(), FaultConfig(gpu_mtbf_h=200.0, node_mtbf_h=2_000.0, uplink_mtbf_h=500.0)],
    ids=["no-faults", "failing-parts"],
)
def test_a_run_vectorised_at_every_instant_ends_with_the_scalar_runs_kpis(
    monkeypatch: pytest.MonkeyPatch, faults: FaultConfig
) -> None:
    scalar = _run(monkeypatch, vector_min=10**9, faults=faults)
    vector = _run(monkeypatch, vector_min=1, faults=faults)
    assert hasattr(vector, "_serve_cache") and not hasattr(scalar, "_serve_cache")  # each took its path
    got, want = asdict(vector.kpi), asdict(scalar.kpi)
    assert want["tokens"] > 0 and want["user_tokens"] > 0  # services (LLM ones too) were served
    assert {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}


def test_the_kept_table_equals_one_built_from_scratch_at_every_instant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step a run by hand; after each instant's accounting the kept table is the one a rebuild gives."""
    monkeypatch.setattr(services, "VECTOR_MIN", 1)
    cluster = GPUCluster.uniform(racks_per_region=2, regions=1, total_gpus=2 * 72, name="2 x NVL72")
    jobs = synthetic_jobs(SyntheticConfig(jobs=150, duration_s=6 * 3600.0, max_gpus=cluster.total_gpus, seed=5))
    sim = Simulator(cluster, jobs, SimConfig(seed=5, record_series=False))
    checked = 0
    while sim.q and sim.active > 0:
        events = sim.q.pop_batch()
        now = sim.q.now
        sim.account(now)
        if sim.serving_jobs:
            kept = sim._serve_table()
            fresh = build_table(
                version=kept.version,
                names=sorted(sim.serving_jobs),
                runs=sim.runs,
                running=sim.state.running,
                profile_of=sim._profile,
                groups=getattr(sim, "_llm_replicas", {}),
            )
            assert kept.names == fresh.names
            for field in ("capacity", "replicas", "mu", "slo", "tokens_per_request", "ok", "peak", "trough", "wave"):
                assert np.array_equal(getattr(kept, field), getattr(fresh, field)), field
            assert kept.peak_hours == fresh.peak_hours
            assert (kept.llm is None) == (fresh.llm is None)
            if kept.llm is not None and fresh.llm is not None:
                assert np.array_equal(kept.llm.steps, fresh.llm.steps)
                assert np.array_equal(kept.llm.share, fresh.llm.share)
            checked += 1
        for ev in events:
            sim.kpi.events += 1
            sim.cycles.freed |= sim._handle(ev, now)
        sim.cycle(now)
    assert checked > 50
    assert math.isfinite(sim.kpi.tokens)
