"""The runtime predictor: back-off between groups, quantiles, bounded memory, hostile inputs, determinism.

Groups, most specific first (a group answers once it has ``min_history`` completed jobs)::

    (queue, kind, size bucket) -> (queue, kind) -> (kind, size bucket) -> (kind) -> None
"""

from __future__ import annotations

import math
import random
import tracemalloc
from dataclasses import replace

import pytest

from rackscale.model.workload import JobKind, JobSpec, batch, inference, training
from rackscale.scheduler.predictor import (
    BUCKETS,
    MIN_RUNTIME_S,
    RELATIVE_ACCURACY,
    GroupLevel,
    LogHistogram,
    RuntimePredictor,
    size_bucket,
)

REL = RELATIVE_ACCURACY + 1e-9  # what a bucket's representative may be off by


def _job(queue: str, gpus: int, kind: JobKind = JobKind.TRAINING, name: str = "j") -> JobSpec:
    if kind is JobKind.BATCH:
        return batch(name, gpus=gpus, queue=queue)
    return training(name, gpus, queue=queue)


# (history: (queue, gpus, kind, runtime s, how many), target (queue, gpus, kind), expected level, p50)
T, B = JobKind.TRAINING, JobKind.BATCH
BACKOFF_CASES = [
    ([("a", 8, T, 100.0, 3)], ("a", 8, T), GroupLevel.QUEUE_KIND_SIZE, 100.0),
    # 5..8 GPUs share a size bucket: a 6-GPU job learns from 8-GPU ones
    ([("a", 8, T, 100.0, 3)], ("a", 6, T), GroupLevel.QUEUE_KIND_SIZE, 100.0),
    # two 8-GPU jobs are too few: the queue's training jobs answer (2 x 100 s, 3 x 500 s: median 500)
    ([("a", 8, T, 100.0, 2), ("a", 1, T, 500.0, 3)], ("a", 8, T), GroupLevel.QUEUE_KIND, 500.0),
    # nothing in queue a: 8-GPU training jobs of any queue
    ([("b", 8, T, 700.0, 3), ("b", 1, T, 20.0, 5)], ("a", 8, T), GroupLevel.KIND_SIZE, 700.0),
    # nothing of its size anywhere, nothing in its queue: every training job (3 x 700 s, 5 x 20 s: median 20)
    ([("b", 8, T, 700.0, 3), ("b", 1, T, 20.0, 5)], ("a", 32, T), GroupLevel.KIND, 20.0),
    # batch history says nothing about training
    ([("a", 8, B, 100.0, 10)], ("a", 8, T), None, None),
    ([], ("a", 8, T), None, None),
]


@pytest.mark.parametrize(
    ("history", "target", "level", "p50"),
    BACKOFF_CASES,
    ids=["own-group", "same-size-bucket", "to-queue", "to-kind-size", "to-kind", "other-kind-only", "empty"],
)
def test_backoff_picks_the_most_specific_group_with_enough_history(
    history: list[tuple[str, int, JobKind, float, int]],
    target: tuple[str, int, JobKind],
    level: GroupLevel | None,
    p50: float | None,
) -> None:
    p = RuntimePredictor(min_history=3, recent=None)
    for queue, gpus, kind, runtime, n in history:
        for _ in range(n):
            p.observe(_job(queue, gpus, kind), runtime_s=runtime)
    got = p.predict(_job(*target))
    if level is None:
        assert got is None
        return
    assert got is not None
    assert got.level is level
    assert got.p50_s == pytest.approx(p50, rel=REL)


@pytest.mark.parametrize(
    ("spec", "bucket"),
    [
        (training("t", 1), 1),
        (training("t", 2), 2),
        (training("t", 3), 3),
        (training("t", 4), 3),
        (training("t", 5), 4),
        (training("t", 8), 4),
        (training("t", 9), 5),
        (training("t", 64, gpus_per_worker=8), 7),
        (inference("i", 4, gpu_milli=500), 0),
    ],
    ids=["1", "2", "3", "4", "5", "8", "9", "64", "fractional"],
)
def test_size_buckets_are_powers_of_two(spec: JobSpec, bucket: int) -> None:
    assert size_bucket(spec) == bucket


def _exponential(n: int, mean: float) -> list[float]:
    """n values at the midpoints of an exponential distribution's quantiles (deterministic)."""
    return [-mean * math.log(1 - (i + 0.5) / n) for i in range(n)]


@pytest.mark.parametrize("quantile", [0.5, 0.8, 0.9], ids=["p50", "p80", "p90"])
def test_quantiles_of_an_exponential_distribution(quantile: float) -> None:
    mean = 3600.0
    p = RuntimePredictor(quantile=quantile, recent=None)
    values = _exponential(20_000, mean)
    random.Random(1).shuffle(values)
    for v in values:
        p.observe(training("t", 1), runtime_s=v)
    got = p.predict(training("t", 1))
    assert got is not None
    # The exponential distribution's q-quantile is -mean * ln(1 - q).
    assert got.p50_s == pytest.approx(mean * math.log(2), rel=REL + 0.001)
    assert got.p80_s == pytest.approx(mean * math.log(5), rel=REL + 0.001)
    assert got.p90_s == pytest.approx(mean * math.log(10), rel=REL + 0.001)
    assert got.estimate_s == pytest.approx(-mean * math.log(1 - quantile), rel=REL + 0.001)
    assert got.history == 20_000


def test_quantiles_of_a_uniform_distribution_on_the_histogram() -> None:
    h = LogHistogram()
    for v in range(1, 10_001):
        h.add(h.bucket_of(float(v)))
    for q in (0.1, 0.25, 0.5, 0.75, 0.99):
        assert h.quantile(q) == pytest.approx(q * 10_000, rel=REL + 0.001)


def test_recent_history_outweighs_old_with_ageing() -> None:
    """100 jobs of 100 s, then 100 of 10,000 s: without ageing the median sits on the old value (rank 100
    of 200), with ``recent=8`` the new habit has taken over."""
    spec = training("t", 1)
    ageless, ageing = RuntimePredictor(recent=None), RuntimePredictor(recent=8)
    for runtime in [100.0] * 100 + [10_000.0] * 100:
        ageless.observe(spec, runtime_s=runtime)
        ageing.observe(spec, runtime_s=runtime)
    old, new = ageless.predict(spec), ageing.predict(spec)
    assert old is not None and new is not None
    assert old.p50_s == pytest.approx(100.0, rel=REL)
    assert new.p50_s == pytest.approx(10_000.0, rel=REL)
    assert new.p90_s == pytest.approx(10_000.0, rel=REL)


def test_a_million_observations_stay_in_a_fixed_histogram() -> None:
    h = LogHistogram()
    before = h.entries()
    for i in range(1_000_000):
        h.add(i % BUCKETS)  # every bucket, many times over
    assert h.entries() == before <= BUCKETS + 1
    assert h.count == 1_000_000
    assert h.quantile(0.5) == pytest.approx(LogHistogram.value_of(BUCKETS // 2 - 1), rel=1e-9)


def test_predictor_memory_does_not_grow_with_the_jobs() -> None:
    """The groups are fixed by the queues, kinds and sizes: 10x more jobs, the same numbers held, and next
    to no memory allocated (a reservoir or a list of the runtimes would grow with every job)."""
    rng = random.Random(7)
    specs = [training("t", g, queue=q) for q in ("a", "b", "c") for g in (1, 2, 4, 8, 16)]
    p = RuntimePredictor()

    def feed(n: int) -> None:
        for _ in range(n):
            p.observe(rng.choice(specs), runtime_s=rng.lognormvariate(7.0, 2.5))

    feed(2_000)
    entries, groups = p.entries(), p.groups
    assert entries == groups * (BUCKETS + 1)
    tracemalloc.start()  # (slow: it traces every allocation)
    feed(20_000)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (p.entries(), p.groups) == (entries, groups)
    assert peak < 32 * 1024  # 20,000 runtimes in a list: 160 kB of pointers alone
    assert p.observed == 22_000


@pytest.mark.parametrize(
    "runtime", [math.nan, math.inf, -math.inf, -1.0, -1e-9], ids=["nan", "inf", "-inf", "negative", "tiny-negative"]
)
def test_impossible_runtimes_are_refused_and_change_nothing(runtime: float) -> None:
    p = RuntimePredictor(min_history=1)
    with pytest.raises(ValueError, match="runtime_s"):
        p.observe(training("t", 1), runtime_s=runtime)
    assert p.observed == 0
    assert p.predict(training("t", 1)) is None


@pytest.mark.parametrize("runtime", [0.0, 1e-6, 0.5, MIN_RUNTIME_S], ids=["zero", "micro", "half", "floor"])
def test_runtimes_under_the_floor_count_as_the_floor(runtime: float) -> None:
    p = RuntimePredictor(min_history=1)
    p.observe(training("t", 1), runtime_s=runtime)
    got = p.predict(training("t", 1))
    assert got is not None
    assert got.p50_s == pytest.approx(MIN_RUNTIME_S, rel=REL)


def test_runtimes_over_the_range_clamp_to_the_top() -> None:
    p = RuntimePredictor(min_history=1)
    p.observe(training("t", 1), runtime_s=1e300)
    got = p.predict(training("t", 1))
    assert got is not None
    assert math.isfinite(got.p90_s)
    assert got.p50_s == pytest.approx(LogHistogram.value_of(BUCKETS - 1))
    assert got.p50_s > 1e8  # years: long enough to never fit before a reservation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quantile": 0.0},
        {"quantile": 1.0},
        {"quantile": math.nan},
        {"min_history": 0},
        {"recent": 0},
    ],
    ids=["q0", "q1", "qnan", "min-history-0", "recent-0"],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RuntimePredictor(**kwargs)  # type: ignore[arg-type]


def test_the_estimate_is_never_read_from_the_job() -> None:
    p = RuntimePredictor(min_history=1)
    p.observe(training("t", 1), runtime_s=300.0)
    plain = training("t", 1)
    assert p.predict(replace(plain, duration_estimate_s=5.0)) == p.predict(plain)


def test_same_observations_same_predictions_and_order_does_not_matter_without_ageing() -> None:
    rng = random.Random(3)
    obs = [(training("t", rng.choice((1, 2, 8)), queue=rng.choice("xyz")), rng.uniform(1, 1e5)) for _ in range(3000)]
    targets = [training("t", g, queue=q) for q in "xyzw" for g in (1, 2, 8, 64)]

    def run(order: list[tuple[JobSpec, float]], recent: int | None) -> list[object]:
        p = RuntimePredictor(recent=recent)
        for spec, runtime in order:
            p.observe(spec, runtime_s=runtime)
        return [p.predict(t) for t in targets]

    assert run(obs, 32) == run(list(obs), 32)  # deterministic, ageing or not
    shuffled = list(obs)
    rng.shuffle(shuffled)
    assert run(obs, None) == run(shuffled, None)  # counts do not depend on the order
    assert all(x is not None for x in run(obs, None))


def test_quantiles_are_ordered() -> None:
    rng = random.Random(5)
    p = RuntimePredictor(quantile=0.8, min_history=1)
    for _ in range(500):
        p.observe(training("t", 1), runtime_s=rng.expovariate(1 / 600))
    got = p.predict(training("t", 1))
    assert got is not None
    assert got.p50_s <= got.p80_s <= got.p90_s
    assert got.estimate_s == got.p80_s
