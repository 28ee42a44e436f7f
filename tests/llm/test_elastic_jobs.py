"""Elastic LLM gangs (``llm.jobs.elastic_llm`` and the resized step): the host fixes the model shard of the
plan chosen for the size asked, the bounds become whole data-parallel ranks that fit HBM, and a gang on
fewer or more GPUs does the same work (the asked size's global batch) at its own speed.

    GB200 NVL72 racks (72 GPUs, 186 GB each); the 70B gang asks for 64 GPUs and gets tp 2 x pp 4 (a rank
    is 8 GPUs), the 405B gang asks for 288 and gets tp 8 x pp 4 (32 GPUs), the 8B gang asks for 8 and gets
    dp 8 (a rank is 1 GPU)
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rackscale.llm import jobs
from rackscale.llm.job_plans import TrainingJob
from rackscale.llm.train_plans import best_resized_plan, padded
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec, LlmWork, training
from rackscale.network.collectives import Layout

NVL72 = GPUCluster.uniform(racks_per_region=4)
L70 = LlmWork(model="llama-3.1-70b", seq_len=8192)
L8 = LlmWork(model="llama-3.1-8b", seq_len=8192)
L405 = LlmWork(model="llama-3.1-405b", seq_len=8192)


def gang(llm: LlmWork, gpus: int, lo: int, hi: int) -> JobSpec:
    return training("g", gpus, min_gpus=lo, max_gpus=hi, llm=llm)


def plan_of(spec: JobSpec) -> TrainingJob:
    job = jobs.resolve(NVL72, spec)
    assert isinstance(job, TrainingJob)
    return job


def test_the_host_fixes_the_shard_of_the_plan_chosen_for_the_size_asked() -> None:
    spec = gang(L70, 64, 32, 128)
    asked = plan_of(spec).plan
    e = jobs.elastic_llm(NVL72, spec)
    assert e.llm is not None and (e.llm.tp, e.llm.pp, e.llm.dp) == (asked.tp, asked.pp, None)
    assert e.is_elastic and e.resize_step == asked.tp * asked.pp
    assert plan_of(e).plan == asked  # the same plan at the size asked
    assert jobs.elastic_llm(NVL72, e) == e  # idempotent (a restored job is fixed again, the same)


def test_the_minimum_is_the_fewest_whole_ranks_that_fit_hbm() -> None:
    # 405B on 288 GPUs: tp 8 x pp 4, a rank of 32 GPUs; one rank's shard of the optimizer does not fit HBM
    e = jobs.elastic_llm(NVL72, gang(L405, 288, 32, 288))
    job = plan_of(e)
    step = e.resize_step
    lo_ranks = e.min_units // step
    assert step == 32 and e.min_units % step == 0 and e.min_units > 32
    fit = [
        best_resized_plan(job.work, job.plan, job.ctx.system, dp=d, links=job.ctx.links, eff=job.ctx.training)
        for d in (lo_ranks - 1, lo_ranks)
    ]
    assert fit[0] is None and fit[1] is not None
    # a minimum above that is kept, rounded up to whole ranks
    assert jobs.elastic_llm(NVL72, gang(L70, 64, 44, 64)).min_units == 48


def test_the_maximum_is_whole_ranks_and_at_most_one_sequence_a_rank() -> None:
    e = jobs.elastic_llm(NVL72, gang(L70, 64, 32, 100))
    assert e.max_units == 96  # 100 rounded down to ranks of 8
    tiny = replace(L8, global_batch=16)
    assert jobs.elastic_llm(NVL72, gang(tiny, 8, 4, 64)).max_units == 16  # 16 sequences: 16 ranks of 1


@pytest.mark.parametrize(
    "spec",
    [
        training("g", 8, llm=L8),  # fixed size
        training("g", 8, min_gpus=4, llm=replace(L8, dp=8)),  # dp fixes the size (the API refuses it)
        training("g", 8, min_gpus=4),  # no model: any worker count already
    ],
    ids=["fixed", "dp-given", "no-model"],
)
def test_other_jobs_are_left_as_they_are(spec: JobSpec) -> None:
    assert jobs.elastic_llm(NVL72, spec) is spec


@pytest.mark.parametrize(("gpus", "low", "high"), [(32, 1.85, 2.05), (128, 0.48, 0.56)], ids=["half", "double"])
def test_a_resized_gang_does_the_same_work_at_its_own_speed(gpus: int, low: float, high: float) -> None:
    e = jobs.elastic_llm(NVL72, gang(L70, 64, 32, 128))
    ideal = jobs.job_ideal_step(NVL72, e).total_s
    at = jobs.job_step(NVL72, e, Layout.packed(NVL72, gpus)).total_s
    assert low <= at / ideal <= high  # about asked / gpus: the compute is shared by more or fewer ranks
    assert jobs.job_step(NVL72, e, Layout.packed(NVL72, 64)).total_s == pytest.approx(ideal)
    assert jobs.samples_per_step(e) == plan_of(e).work.global_batch  # the batch of the size asked


def test_a_batch_the_ranks_do_not_divide_waits_for_the_ranks_with_one_more_micro_batch() -> None:
    # 8B asked on 8 GPUs (global batch 512) runs on 5: 512 / 5 is not whole, so 3 ranks do 103 sequences
    work = plan_of(jobs.elastic_llm(NVL72, gang(L8, 8, 4, 8))).work
    assert padded(work, 5).global_batch == 515 and padded(work, 4) is work
    e = jobs.elastic_llm(NVL72, gang(L8, 8, 4, 8))
    five = jobs.job_step(NVL72, e, Layout.packed(NVL72, 5)).total_s
    four = jobs.job_step(NVL72, e, Layout.packed(NVL72, 4)).total_s
    ideal = jobs.job_ideal_step(NVL72, e).total_s
    assert five > ideal * 8 / 5  # slower than a perfect share: the padded micro-batch
    assert five < four
