"""The collector's settings for a batch simulation (sim/gc_policy.py): on for the run, restored after it,
and invisible in the results."""

from __future__ import annotations

import gc

import pytest

from rackscale.model import GPUCluster
from rackscale.sim import SimConfig, Simulator
from rackscale.sim.gc_policy import YOUNG_EVERY, batch_gc
from rackscale.workloads import SyntheticConfig, synthetic_jobs


def test_the_run_sees_the_batch_settings_and_the_process_gets_its_own_back() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with batch_gc():
        assert gc.get_threshold()[0] == YOUNG_EVERY
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > frozen  # what existed before the run is out of the collections
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_failing_run_restores_them_too() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="mid-run"), batch_gc():
        raise RuntimeError("mid-run")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_kpis_are_the_same_with_and_without_it() -> None:
    cluster = GPUCluster.uniform(racks_per_region=4, regions=1, total_gpus=288, name="4 x NVL72")
    jobs = synthetic_jobs(SyntheticConfig(jobs=150, duration_s=21_600.0, max_gpus=288, seed=3))
    config = SimConfig(policy="rackscale", seed=3, record_series=False)
    plain = Simulator(cluster, jobs, config).run().kpis.as_dict()
    with batch_gc():
        batched = Simulator(cluster, jobs, config).run().kpis.as_dict()
    assert batched == plain
    assert plain["completed"]  # (a run that did something)
