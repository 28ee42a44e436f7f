"""An elastic LLM gang through the whole simulator: admitted with its model shard fixed, started on the one
rack that is free instead of waiting for the two it asked for, grown into the second rack when it frees
(its request is wider than one rack), and finished sooner than either waiting or staying small.

    two GB200 NVL72 racks (72 GPUs each)
    0 s ..... 3,600 s  r000 [busy: 72 GPUs, not preemptible]   r001 [llm: 72 of the 144 asked]
    3,600 s ..........  r000 [llm]                              r001 [llm]   (one restart: 60 s)
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from rackscale.llm.jobs import job_ideal_step, job_step
from rackscale.model import GPUCluster, training
from rackscale.model.workload import JobKind, JobSpec, LlmWork
from rackscale.network.collectives import Layout
from rackscale.scheduler import PROFILES, Profile
from rackscale.sim import SimConfig, Simulator
from rackscale.workloads import SyntheticConfig, synthetic_jobs

CLUSTER = GPUCluster.uniform(racks_per_region=2)
RUN_S = 4 * 3600.0  # at the size asked, packed
BUSY_S = 3600.0
L70 = LlmWork(model="llama-3.1-70b", seq_len=8192)


def jobs(*, elastic: bool) -> list[JobSpec]:
    sizes = {"min_gpus": 72, "max_gpus": 144} if elastic else {}
    return [
        training("busy", 72, preemptible=False, duration_estimate_s=BUSY_S),
        training("llm", 144, llm=L70, duration_estimate_s=RUN_S, submit_time=1.0, **sizes),  # type: ignore[arg-type]
    ]


def test_an_elastic_llm_gang_starts_on_one_rack_and_grows_into_the_second() -> None:
    res = Simulator(CLUSTER, jobs(elastic=True), SimConfig(policy="rackscale")).run()
    r = res.jobs["llm"]
    assert r.spec.llm is not None and r.spec.llm.tp is not None and r.spec.llm.pp is not None  # shard fixed
    assert r.spec.is_elastic and r.spec.min_units * r.spec.unit.gpus <= 72  # (one rack, whole ranks)
    assert r.first_start == pytest.approx(1.0)  # did not wait for the busy rack
    assert res.kpis["resizes"] >= 1
    assert r.end is not None
    # On 72 GPUs it is about half as fast; after the busy job ends it grows to the 144 asked.
    slow = job_step(CLUSTER, r.spec, Layout.packed(CLUSTER, 72)).total_s / job_ideal_step(CLUSTER, r.spec).total_s
    assert 1.8 < slow < 2.1
    waited = BUSY_S + RUN_S  # the fixed gang's end
    stayed_small = 1.0 + RUN_S * slow
    assert r.end < waited - 0.5 * BUSY_S / slow  # it gained the first hour's work on one rack
    assert r.end < stayed_small - 3600.0


def test_the_same_gang_at_a_fixed_size_waits_for_both_racks() -> None:
    res = Simulator(CLUSTER, jobs(elastic=False), SimConfig(policy="rackscale")).run()
    r = res.jobs["llm"]
    assert r.first_start == pytest.approx(BUSY_S, abs=1.0)
    assert r.end == pytest.approx(BUSY_S + RUN_S, rel=0.01)
    assert res.kpis["resizes"] == 0


def test_the_generator_makes_llm_gangs_elastic_from_their_own_stream() -> None:
    """``elastic_share`` reaches LLM gangs too, drawn from a stream of their own: the generic gangs take their
    draws, in order, from the generic stream alone, so they are elastic exactly as they were when only they
    could be."""
    cfg = SyntheticConfig(jobs=600, max_gpus=288, seed=4, elastic_share=0.5)
    mix = synthetic_jobs(cfg)  # (sorted by submit time: the draws follow the generation order, the names)
    gangs = sorted((j for j in mix if j.kind is JobKind.TRAINING and j.units >= 2), key=lambda j: j.name)
    llm = [j for j in gangs if j.llm is not None]
    bounded = [j for j in llm if j.min_units or j.max_units]
    assert 0 < len(bounded) < len(llm)  # about half
    assert all(j.min_units * 2 == j.units for j in bounded)
    generic = random.Random(f"rackscale-elastic-{cfg.seed}")
    for j in (j for j in gangs if j.llm is None):
        assert (generic.random() < cfg.elastic_share) == (j.min_units > 0), j.name


@pytest.mark.parametrize(
    "policy",
    ["tiresias", "first-fit", replace(PROFILES["rackscale"], name="rackscale-fixed", elastic=False)],
    ids=["tiresias", "first-fit", "rackscale-fixed"],
)
def test_a_profile_that_runs_gangs_at_their_size_runs_an_elastic_llm_gang_as_asked(policy: str | Profile) -> None:
    """Only a profile that resizes gangs fixes an elastic LLM gang's shard at admission: under one that runs
    every gang at its size the gang is the fixed job it asked for (its plan chosen per placement), so the
    baselines of ``goals-elastic`` run the same jobs as on ``goals-synthetic``."""
    bounded = Simulator(CLUSTER, jobs(elastic=True), SimConfig(policy=policy)).run().jobs["llm"]
    fixed = Simulator(CLUSTER, jobs(elastic=False), SimConfig(policy=policy)).run().jobs["llm"]
    assert bounded.spec.llm is not None and bounded.spec.llm.tp is None and bounded.spec.llm.pp is None
    assert (bounded.first_start, bounded.end) == (fixed.first_start, fixed.end)
    assert bounded.first_start == pytest.approx(BUSY_S, abs=1.0)
