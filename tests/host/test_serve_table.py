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

from rackscale.host import serve_table, services
from rackscale.host.serve_batch import BATCH_LIMIT, ServeBatch
from rackscale.host.serve_pass import fold
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


def _run(
    monkeypatch: pytest.MonkeyPatch, *, vector_min: int, faults: FaultConfig, batch: int | None = None
) -> Simulator:
    """``batch``: (instant, service) pairs per pass (``ServeBatch.limit``); None: a pass per instant (no batch)."""
    monkeypatch.setattr(services, "VECTOR_MIN", vector_min)
    cluster = GPUCluster.uniform(racks_per_region=4, regions=1, total_gpus=4 * 72, name="4 x NVL72")
    jobs = synthetic_jobs(SyntheticConfig(jobs=300, duration_s=12 * 3600.0, max_gpus=cluster.total_gpus, seed=3))
    sim = Simulator(cluster, jobs, SimConfig(seed=3, record_series=False, faults=faults))
    if batch is None:
        del sim._serve_batch
    else:
        sim._serve_batch = ServeBatch(limit=batch)
    sim.run()
    return sim


FAULTS = [FaultConfig(), FaultConfig(gpu_mtbf_h=200.0, node_mtbf_h=2_000.0, uplink_mtbf_h=500.0)]


@pytest.mark.parametrize("faults", FAULTS, ids=["no-faults", "failing-parts"])
@pytest.mark.parametrize(
    ("vector_min", "batch"),
    [(1, None), (1, 1), (1, 40), (1, BATCH_LIMIT), (3, BATCH_LIMIT)],
    # (mixed: with fewer than 3 services the scalar loop adds, so owed instants are added before it)
    ids=["per-instant", "passes-of-1", "passes-of-40-pairs", "batched", "mixed-with-scalar"],
)
def test_a_run_vectorised_ends_with_the_scalar_runs_kpis(
    monkeypatch: pytest.MonkeyPatch, faults: FaultConfig, vector_min: int, batch: int | None
) -> None:
    """However the instants are grouped into numpy passes, every KPI bit is the scalar loop's."""
    scalar = _run(monkeypatch, vector_min=10**9, faults=faults)
    vector = _run(monkeypatch, vector_min=vector_min, faults=faults, batch=batch)
    assert hasattr(vector, "_serve_cache") and not hasattr(scalar, "_serve_cache")  # each took its path
    got, want = asdict(vector.kpi), asdict(scalar.kpi)
    assert want["tokens"] > 0 and want["user_tokens"] > 0  # services (LLM ones too) were served
    assert {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}


def test_the_kept_table_equals_one_built_from_scratch_at_every_instant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step a run by hand; after each instant's accounting the kept table (mostly spliced from the one
    before: ``next_table``) is, bit for bit, the one a full build gives."""
    monkeypatch.setattr(services, "VECTOR_MIN", 1)
    full = 0
    real_full = serve_table.full_table

    def counted(*args: object, **kwargs: object) -> serve_table.ServeTable:
        nonlocal full
        full += 1
        return real_full(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(serve_table, "full_table", counted)
    cluster = GPUCluster.uniform(racks_per_region=4, regions=1, total_gpus=4 * 72, name="4 x NVL72")
    jobs = synthetic_jobs(SyntheticConfig(jobs=300, duration_s=12 * 3600.0, max_gpus=cluster.total_gpus, seed=5))
    sim = Simulator(cluster, jobs, SimConfig(seed=5, record_series=False))
    checked, tables, last = 0, 0, None
    while sim.q and sim.active > 0:
        events = sim.q.pop_batch()
        now = sim.q.now
        sim.account(now)
        if sim.serving_jobs:
            kept = sim._serve_table()
            tables += kept is not last
            last = kept
            fresh = real_full(
                kept.version,
                sorted(sim.serving_jobs),
                serve_table.Inputs(
                    runs=sim.runs,
                    running=sim.state.running,
                    profile_of=sim._profile,
                    groups=getattr(sim, "_llm_replicas", {}),
                    rows={},
                ),
            )
            assert kept.names == fresh.names and kept.vector == fresh.vector
            assert all(a is b for a, b in zip(kept.running, fresh.running, strict=True))
            for field in ("cols", "lcols", "wave", "service"):
                a, b = getattr(kept, field), getattr(fresh, field)
                assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), field
            assert kept.peak_hours == fresh.peak_hours
            assert [r.vec for r in kept.rows] == [r.vec for r in fresh.rows]
            checked += 1
        for ev in events:
            sim.kpi.events += 1
            sim.cycles.freed |= sim._handle(ev, now)
        sim.cycle(now)
    assert checked > 50
    assert tables > 2 * full > 0  # most tables were spliced from the one before
    sim.flush_serving()
    assert math.isfinite(sim.kpi.tokens) and sim.kpi.tokens > 0
