"""Least attained service (``las.py``), table-driven: Tiresias' queues, the order inside them, starvation
promotion, and preemption between equal priorities with its bounds.

Service is in GPU-seconds (2D-LAS: GPUs x seconds), over all of a job's runs. With Tiresias' thresholds
(3,250 and 7,200 GPU-s) there are three queues; the tests number them 1..3 as the reasons do (the code
counts from 0). Unless told, a cluster is one rack of 2 nodes x 4 GPUs, full with one 8-GPU job::

    region-0
    └── r000: n00 [xxxx] n01 [xxxx]

and the waiting job asks for 4 GPUs: it runs only if somebody is preempted.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest
from builders import ClusterBuilder, check_all_invariants, snapshot

from rackscale.model import ClusterState, JobKind, JobSpec, PreemptionPolicy, inference, training
from rackscale.model.running import RunningJob
from rackscale.model.topology import MILLI_PER_GPU
from rackscale.model.view import StateView
from rackscale.scheduler import Decisions, PendingQueue, PreemptionCause, ResourceScheduler, apply_decisions
from rackscale.scheduler.framework import PROFILES, QUEUE_SORTS, VICTIM_CHOOSERS, AttainedService, CycleContext
from rackscale.scheduler.las import LasConfig, LasVictims, LeastAttainedService, lost_on_preempt
from rackscale.scheduler.preemption import last_checkpoint

CFG = LasConfig()
Q1, Q2, Q3 = 0, 1, 2  # the code's queue indexes


def svc(
    gpu_s: float, *, run_s: float = 1000.0, waited_s: float = 0.0, stopped_at: float = 0.0, runs: int = 0
) -> AttainedService:
    """A record of earlier runs (``runs=0``: the minimum run of its next run is not doubled)."""
    return AttainedService(gpu_s=gpu_s, run_s=run_s, waited_s=waited_s, stopped_at=stopped_at, runs=runs)


def schedule(
    state: ClusterState,
    jobs: Sequence[JobSpec],
    *,
    now: float,
    attained: Mapping[str, AttainedService] | None = None,
    profile: str = "tiresias",
) -> Decisions:
    """One cycle with the jobs' service: schedule (the state is left alone), apply, check the invariants."""
    before = snapshot(state)
    d = ResourceScheduler(profile=profile).schedule(state, list(jobs), now, attained=attained or {})
    assert snapshot(state) == before, "schedule() changed the state"
    apply_decisions(state, d, now=now)
    check_all_invariants(state)
    return d


# ---------------------------------------------------------------------------------------------- queues

LEVELS = {
    # (earlier runs, running: (GPUs, seconds) or None) -> queue
    "never-ran": (None, None, Q1),
    "just-below-the-first-threshold": (svc(3249.9), None, Q1),
    "at-the-first-threshold": (svc(3250.0), None, Q2),
    "just-below-the-second": (svc(7199.0), None, Q2),
    "at-the-second": (svc(7200.0), None, Q3),
    "running-8-gpus-405s": (None, (8, 405.0), Q1),  # 3,240 GPU-s
    "running-8-gpus-407s": (None, (8, 407.0), Q2),  # 3,256 GPU-s
    "earlier-runs-count-with-the-current-one": (svc(3000.0), (1, 250.0), Q2),  # 3,000 + 250
    "earlier-runs-alone": (svc(7300.0), (1, 1.0), Q3),
}


@pytest.mark.parametrize(("earlier", "running", "want"), LEVELS.values(), ids=LEVELS.keys())
def test_tiresias_thresholds_split_gpu_seconds_into_three_queues(
    earlier: AttainedService | None, running: tuple[int, float] | None, want: int
) -> None:
    now = 10_000.0
    if earlier is not None:
        earlier = earlier._replace(stopped_at=now)  # it just stopped: no wait to promote it
    rj = None
    if running is not None:
        gpus, ran = running
        state = ClusterBuilder().racks(1).with_running("r", gpus=gpus, rack=0, started_at=now - ran).build()
        rj = state.running["r"]
    assert CFG.level(earlier, now, rj) == want


def job(name: str, gpus: int = 1, **kw: object) -> JobSpec:
    """``job("a1")`` is a 1-GPU job of tenant ``a``."""
    kw.setdefault("queue", name.rstrip("0123456789"))
    return training(name, gpus, **kw)


@dataclass
class OrderCase:
    jobs: list[JobSpec]
    attained: dict[str, AttainedService]
    want: list[str]
    held_by_a: int = 4  # GPUs tenant a holds already (its dominant share is higher than b's)
    now: float = 0.0
    config: LasConfig = field(default_factory=LasConfig)


ORDER = {
    # Queue 1 first (fair share: b holds nothing, so b1 before a's jobs), then queue 2, then queue 3;
    # a higher priority goes first whatever its service.
    "priority-then-las-queue-then-fair-share-then-submit": OrderCase(
        [
            job("a1", submit_time=1),
            job("a2", submit_time=2),
            job("b1", submit_time=3),
            job("b2", submit_time=4),
            job("a3", submit_time=0),
            job("b3", submit_time=5),
            job("h1", submit_time=9, priority=5, queue="h"),
        ],
        {"b2": svc(4000), "a3": svc(8000), "b3": svc(5000), "h1": svc(9000)},
        ["h1", "b1", "a1", "a2", "b2", "b3", "a3"],
    ),
    # Inside a later queue too, the tenant with the lower share goes first, then submit time.
    "fair-share-inside-a-later-queue": OrderCase(
        [job("a1", submit_time=1), job("b1", submit_time=2), job("a2", submit_time=3), job("n1", queue="a")],
        {"a1": svc(4000), "b1": svc(4000), "a2": svc(4000)},
        ["n1", "b1", "a1", "a2"],
    ),
    # Service of running jobs is in the map too: it does not disturb the order of the waiting ones.
    "running-jobs-records-are-skipped": OrderCase(
        [job("a1", submit_time=1), job("a2", submit_time=2)],
        {"a2": svc(4000), "held": svc(99_999)},
        ["a1", "a2"],
    ),
}


@pytest.mark.parametrize("case", ORDER.values(), ids=ORDER.keys())
def test_the_order_is_priority_las_queue_fair_share_submit_time(case: OrderCase) -> None:
    state = ClusterBuilder().racks(2).with_running("held", gpus=case.held_by_a, rack=0, queue="a").build()
    ctx = CycleContext(now=case.now, queues={}, models=state.cluster.gpu_models, attained=case.attained)
    got = [j.name for j in LeastAttainedService(case.config).order(PendingQueue(case.jobs), state, ctx)]
    assert got == case.want


STARVATION = {
    # p ran 1,000 s on 8 GPUs (queue 3) and stopped at t=1,000; n never ran (queue 1) but came later.
    # (now, seconds p waited between earlier runs, config) -> order
    "waited-3.99x-its-run-still-in-its-queue": (1000.0 + 3990.0, 0.0, LasConfig(), ["n", "p"]),
    "waited-4x-its-run-promoted-to-the-first-queue": (1000.0 + 4000.0, 0.0, LasConfig(), ["p", "n"]),
    "earlier-waits-count": (1000.0 + 3000.0, 1000.0, LasConfig(), ["p", "n"]),  # 4,000 s in all
    "no-promotion-without-a-starve-limit": (1000.0 + 99_000.0, 0.0, LasConfig(starve_limit=0), ["n", "p"]),
}


@pytest.mark.parametrize(("now", "waited", "config", "want"), STARVATION.values(), ids=STARVATION.keys())
def test_a_job_that_waited_starve_limit_times_its_run_is_promoted(
    now: float, waited: float, config: LasConfig, want: list[str]
) -> None:
    jobs = [job("p", 8, submit_time=0.0), job("n", submit_time=500.0, queue="p")]
    earlier = {"p": svc(8000, run_s=1000, stopped_at=1000, waited_s=waited)}
    state = ClusterBuilder().racks(1).build()
    ctx = CycleContext(now=now, queues={}, models=state.cluster.gpu_models, attained=earlier)
    assert [j.name for j in LeastAttainedService(config).order(PendingQueue(jobs), state, ctx)] == want


@pytest.mark.parametrize("plugin", ["priority-las"])
def test_the_las_order_yields_every_job_once_priority_descending(plugin: str) -> None:
    rng = random.Random(7)
    jobs = [job(f"{q}{i}", priority=rng.choice((0, 5, -1)), submit_time=rng.random()) for q in "abc" for i in range(30)]
    attained = {j.name: svc(rng.choice((0, 4000, 9000))) for j in jobs if rng.random() < 0.5}
    state = ClusterBuilder().racks(1).build()
    ctx = CycleContext(now=0, queues={}, models=state.cluster.gpu_models, attained=attained)
    got = list(QUEUE_SORTS[plugin]().order(PendingQueue(jobs), state, ctx))
    assert sorted(j.name for j in got) == sorted(j.name for j in jobs)
    assert [j.priority for j in got] == sorted((j.priority for j in jobs), reverse=True)
    for prio in {j.priority for j in jobs}:
        levels = [CFG.level(attained.get(j.name), 0.0) for j in got if j.priority == prio]
        assert levels == sorted(levels), "inside a priority level, the LAS queues in order"


# ---------------------------------------------------------------------------------------------- preemption


@dataclass
class Case:
    cluster: ClusterBuilder
    jobs: list[JobSpec]
    now: float
    attained: dict[str, AttainedService] = field(default_factory=dict)
    want_victims: set[str] = field(default_factory=set)


def full(**kw: object) -> ClusterBuilder:
    """The rack full with ``old``, an 8-GPU training job of priority 0 (keywords: its spec's)."""
    started = float(kw.pop("started_at", 0.0))  # type: ignore[arg-type]
    spec = training("old", 8, **kw)  # type: ignore[arg-type]
    return ClusterBuilder().racks(1).with_running("old", spec=spec, on={(0, 0): 4, (0, 1): 4}, started_at=started)


CKPT = {"checkpoint_interval_s": 1800.0}
SAVES = {"checkpoint_on_preempt": True}
NEW = training("new", 4)

PREEMPTION = {
    # old: 8 GPUs x 3,700 s = 29,600 GPU-s (queue 3), 100 s since its checkpoint at 3,600 (800 GPU-s lost:
    # 2.7 % of its service); new never ran (queue 1) and is still in queue 1 after 600 s (2,400 GPU-s).
    "more-service-is-preempted-for-less": Case(full(**CKPT), [NEW], now=3700.0, want_victims={"old"}),
    # 1,000 s since the checkpoint: 8,000 GPU-s lost, 21.7 % of 36,800: too much to throw away
    "not-when-it-loses-too-much": Case(full(**CKPT), [NEW], now=4600.0),
    # ... unless it saves on the stop signal: it loses its save (60 s x 8 GPUs)
    "a-job-that-saves-on-stop-loses-only-its-save": Case(
        full(**CKPT, **SAVES), [NEW], now=4600.0, want_victims={"old"}
    ),
    # restarted 400 s ago (20,000 GPU-s before): under the minimum run of 600 s
    "not-before-its-minimum-run": Case(
        full(**SAVES, started_at=3300.0), [NEW], now=3700.0, attained={"old": svc(20_000)}
    ),
    "after-its-minimum-run": Case(
        full(**SAVES, started_at=3000.0), [NEW], now=3700.0, attained={"old": svc(20_000)}, want_victims={"old"}
    ),
    # its second run (one before): the minimum doubles to 1,200 s
    "a-second-run-has-twice-the-minimum": Case(
        full(**SAVES, started_at=2700.0), [NEW], now=3700.0, attained={"old": svc(20_000, runs=1)}
    ),
    "a-second-run-past-twice-the-minimum": Case(
        full(**SAVES, started_at=2400.0), [NEW], now=3700.0, attained={"old": svc(20_000, runs=1)}, want_victims={"old"}
    ),
    # restarted 700 s ago after 100,000 GPU-s: it would lose 5,600 GPU-s (5.3 %), but that is this whole
    # run (no checkpoint yet: every 1,800 s from its start); a run is never thrown away whole
    "not-a-run-that-has-not-saved-yet": Case(
        full(**CKPT, started_at=3000.0), [NEW], now=3700.0, attained={"old": svc(100_000)}
    ),
    "a-run-that-saved": Case(
        full(**CKPT, started_at=1800.0), [NEW], now=3700.0, attained={"old": svc(100_000)}, want_victims={"old"}
    ),
    # the waiting job has had as much service (queue 3): they are equals
    "not-for-a-job-in-the-same-queue": Case(full(**CKPT), [NEW], now=3700.0, attained={"new": svc(30_000)}),
    "not-a-job-that-may-not-be-preempted": Case(full(**CKPT, preemptible=False), [NEW], now=3700.0),
    "not-for-a-job-that-never-preempts": Case(
        full(**CKPT), [training("new", 4, preemption_policy=PreemptionPolicy.NEVER)], now=3700.0
    ),
    "not-a-higher-priority-job": Case(full(**CKPT, priority=1), [NEW], now=3700.0),
    # region-0
    # └── r000: n00 [svc svc svc svc] n01 [svc svc svc svc]   an inference service of priority 0 (it
    # would lose only its save: only its kind protects it)
    "never-an-inference-service-of-equal-priority": Case(
        ClusterBuilder()
        .racks(1)
        .with_running("svc", spec=inference("svc", 2, gpus_per_replica=4, **SAVES), on={(0, 0): 4, (0, 1): 4}),
        [NEW],
        now=3700.0,
    ),
    # region-0
    # └── r000: n00 [low low low low] n01 [old old old old]   low: priority -1, old: 0 (queue 3)
    "a-lower-priority-job-goes-before-an-equal-one": Case(
        ClusterBuilder()
        .racks(1)
        .with_running("low", on={(0, 0): 4}, priority=-1, checkpoint_interval_s=1800.0)
        .with_running("old", on={(0, 1): 4}, checkpoint_interval_s=1800.0),
        [NEW],
        now=3700.0,
        want_victims={"low"},
    ),
}


@pytest.mark.parametrize("case", PREEMPTION.values(), ids=PREEMPTION.keys())
def test_equal_priority_preemption_only_where_it_pays(case: Case) -> None:
    state = case.cluster.build()
    before = dict(state.running)
    d = schedule(state, case.jobs, now=case.now, attained=case.attained)
    assert {p.victim for p in d.preemptions} == case.want_victims
    for p in d.preemptions:
        rj, preemptor = before[p.victim], next(j for j in case.jobs if j.name == p.preemptor)
        assert rj.spec.preemptible and preemptor.preemption_policy is not PreemptionPolicy.NEVER
        if rj.spec.priority == preemptor.priority:
            assert rj.spec.kind is not JobKind.INFERENCE
            assert case.now - rj.started_at >= CFG.min_run(case.attained.get(rj.spec.name))
            service = CFG.service(case.attained.get(rj.spec.name), case.now, rj)[0]
            assert lost_on_preempt(rj, case.now) <= CFG.max_lost_share * service
            assert rj.spec.checkpoint_on_preempt or last_checkpoint(rj, case.now) > rj.started_at
    if case.want_victims:
        assert {p.spec.name for p in d.placed} == {j.name for j in case.jobs}


def test_without_las_equal_priorities_are_never_preempted() -> None:
    state = full(**CKPT).build()
    d = schedule(state, [NEW], now=3700.0, profile="rackscale-fairshare")
    assert not d.preemptions and not d.placed


PRECEDENCE = {
    # old: 8 GPUs x 625 s = 5,000 GPU-s (queue 2), saves on stop. Tiresias preempts it for any job of
    # queue 1; with ``precedence``, only for one still in queue 1 after 600 s of its own run: an 8-GPU job
    # has 4,800 GPU-s by then (queue 2, old's equal: old would have lost its work for nothing), a 4-GPU
    # job 2,400 (queue 1).
    "tiresias-8-gpus": (LasConfig(), 8, {"old"}),
    "precedence-8-gpus-catch-up-within-the-minimum-run": (LasConfig(precedence=True), 8, set()),
    "precedence-4-gpus-keep-it": (LasConfig(precedence=True), 4, {"old"}),
}


@pytest.mark.parametrize(("config", "gpus", "want"), PRECEDENCE.values(), ids=PRECEDENCE.keys())
def test_precedence_asks_the_waiting_job_to_stay_ahead_for_its_minimum_run(
    config: LasConfig, gpus: int, want: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(VICTIM_CHOOSERS, "test-las", lambda: LasVictims(config))
    profile = replace(PROFILES["tiresias"], name="test", victims="test-las")
    state = full(**SAVES).build()
    d = ResourceScheduler(profile=profile).schedule(state, [training("new", gpus)], 625.0)
    assert {p.victim for p in d.preemptions} == want


def test_the_reason_says_how_much_more_gpu_time_the_victim_had_and_names_no_job() -> None:
    state = full(**CKPT).build()
    ctx = CycleContext(now=3700.0, queues={}, models=state.cluster.gpu_models, attained={"new": svc(1800, run_s=900)})
    why = LasVictims().explain(NEW, state.running["old"], ctx)
    assert f"{8 * 3700 / 3600:.1f} GPU-h" in why and "queue 3 of 3" in why  # the victim's service and queue
    assert f"{1800 / 3600:.1f} GPU-h" in why and "queue 1" in why  # the waiting job's
    assert f"{8 * 100 / 3600:.2f} GPU-h since its last checkpoint" in why
    assert "'new'" not in why and "old" not in why
    lower = LasVictims().explain(training("hi", 4, priority=5), state.running["old"], ctx)
    assert lower == "priority 5 > 0", "a lower-priority victim is told as before"


# (the victim's checkpointing, the instant, what its owner is told the stop costs)
WHAT_THE_STOP_COSTS = [
    pytest.param(
        CKPT, 3700.0, f"loses {8 * 100 / 3600:.2f} GPU-h since its last checkpoint", id="work-since-checkpoint"
    ),
    # 1,000 s since its checkpoint but it saves on the signal: it pays the save (60 s x 8 GPUs), loses no work
    pytest.param(
        {**CKPT, **SAVES},
        4600.0,
        f"saves a checkpoint on the stop signal ({8 * 60 / 3600:.2f} GPU-h)",
        id="saves-on-stop",
    ),
    # saves on the signal, but checkpointed 20 s ago: the 20 s of work are cheaper than a save, and lost
    pytest.param(
        {**CKPT, **SAVES}, 3620.0, f"loses {8 * 20 / 3600:.2f} GPU-h since its last checkpoint", id="recent-checkpoint"
    ),
]


@pytest.mark.parametrize(("kw", "now", "told"), WHAT_THE_STOP_COSTS)
def test_the_reason_says_what_the_stop_costs_the_victim(kw: dict[str, float | bool], now: float, told: str) -> None:
    state = full(**kw).build()
    ctx = CycleContext(now=now, queues={}, models=state.cluster.gpu_models, attained={"new": svc(1800, run_s=900)})
    why = LasVictims().explain(NEW, state.running["old"], ctx)
    assert why.endswith(told), why


def test_a_full_cluster_with_no_lower_priority_still_examines_who_may_preempt_an_equal() -> None:
    """The cycle stops early once nothing fits and no lower priority runs (the rest would only wait), but
    not while a victim of equal priority may be taken: here the head of the queue may not preempt, and the
    job behind it takes ``old`` (queue 3). Before, the cycle stopped after the head: "cluster full"."""
    shy = training("shy", 4, submit_time=0.0, preemption_policy=PreemptionPolicy.NEVER)
    new = training("new", 4, submit_time=10.0)
    d = schedule(full(**CKPT).build(), [shy, new], now=3700.0)
    assert [p.victim for p in d.preemptions] == ["old"] and [p.spec.name for p in d.placed] == ["new"]
    assert d.not_examined == 0
    # No victim of equal priority fit (old saved nothing since its start): the cycle stops after the head.
    d = schedule(full().build(), [shy, new], now=3700.0)
    assert not d.preemptions and d.not_examined == 1


def test_the_decisions_carry_the_las_reason() -> None:
    d = schedule(full(**CKPT).build(), [NEW], now=3700.0)
    assert "more GPU time" in d.preemptions[0].reason
    assert d.preemptions[0].cause is PreemptionCause.ATTAINED_SERVICE


# ---------------------------------------------------------------------------------------------- property


def _world(rng: random.Random) -> tuple[ClusterState, list[JobSpec], dict[str, AttainedService], float]:
    """1-2 racks of 2 nodes x 4 GPUs, filled with equal-priority training jobs of random ages, services and
    checkpoints, and a few waiting jobs of the same priority, some with service of their own."""
    racks = rng.randint(1, 2)
    b = ClusterBuilder().racks(racks)
    now = rng.uniform(600.0, 20_000.0)
    attained: dict[str, AttainedService] = {}
    n = 0
    for r in range(racks):
        for node in range(2):
            left = 4
            while left:
                k = rng.choice([k for k in (1, 2, 4) if k <= left])
                name = f"r{n}"
                n += 1
                # Some runs save every 30 min; some never do (no interval), and of those some saved once
                # since their start: a run that never saved may never be a victim of equal priority.
                interval = 1800.0 if rng.random() < 0.6 else None
                spec = training(name, k, checkpoint_interval_s=interval, checkpoint_on_preempt=rng.random() < 0.5)
                started = rng.uniform(0.0, now)
                saved = rng.uniform(started, now) if interval is None and rng.random() < 0.5 else None
                b.with_running(name, spec=spec, on={(r, node): k}, started_at=started, checkpointed_at=saved)
                if rng.random() < 0.5:
                    attained[name] = svc(rng.uniform(0, 30_000), run_s=rng.uniform(1, 5000), stopped_at=0.0)
                left -= k
    waiting = []
    for i in range(rng.randint(1, 4)):
        name = f"w{i}"
        waiting.append(training(name, rng.choice((1, 2, 4, 8)), submit_time=rng.uniform(0, now)))
        if rng.random() < 0.3:
            attained[name] = svc(rng.uniform(0, 10_000), run_s=rng.uniform(1, 3000), stopped_at=now - 1.0)
    return b.build(), waiting, attained, now


@pytest.mark.parametrize("seed", range(40))
def test_a_preempted_job_does_not_preempt_its_preemptor_back_without_a_change(seed: int) -> None:
    rng = random.Random(seed)
    state, waiting, attained, now = _world(rng)
    running = dict(state.running)
    d = schedule(state, waiting, now=now, attained=attained)
    victims = {p.victim for p in d.preemptions}
    preemptors = {p.preemptor for p in d.preemptions}
    for p in d.preemptions:  # the host's bookkeeping: the victim's run is over, the preemptor started
        rj = running[p.victim]
        gpus = rj.placement.gpu_milli / MILLI_PER_GPU
        attained[p.victim] = attained.get(p.victim, AttainedService()).after_run(
            started=rj.started_at, now=now, gpus=gpus
        )
    for p in d.placed:
        if (old := attained.get(p.spec.name)) is not None:
            attained[p.spec.name] = old.restarted(now)
    placed = {p.spec.name for p in d.placed}
    again = [j for j in waiting if j.name not in placed] + [running[v].spec for v in sorted(victims)]
    for later in (now, now + 60.0):  # the same instant, and a minute on (less than the minimum run)
        d2 = ResourceScheduler(profile="tiresias").schedule(state, again, later, attained=attained)
        for p in d2.preemptions:
            assert not (p.victim in preemptors and p.preemptor in victims), f"{p.preemptor} preempts {p.victim} back"


def _equal_from_scratch(
    job: JobSpec, rj: RunningJob, now: float, attained: Mapping[str, AttainedService], protected: frozenset[str]
) -> bool:
    """The equal-priority rule read afresh for one pair (what ``las-victims`` derived per preemptor before it
    kept each running job's part per instant)."""
    spec, cfg = rj.spec, CFG
    if spec.priority != job.priority or not spec.preemptible or spec.kind is JobKind.INFERENCE:
        return False
    if spec.name in protected:
        return False
    svc_ = attained.get(spec.name)
    if now - rj.started_at < cfg.min_run(svc_):
        return False
    mine = cfg.level(attained.get(job.name), now)
    gpus = job.gpu_demand_milli / MILLI_PER_GPU
    reach = cfg.level_after(attained.get(job.name), now, run_s=cfg.min_run_s, gpus=gpus) if cfg.precedence else mine
    if cfg.level(svc_, now, rj) <= max(mine, reach):
        return False
    if not spec.checkpoint_on_preempt and last_checkpoint(rj, now) <= rj.started_at:
        return False
    return lost_on_preempt(rj, now) <= cfg.max_lost_share * cfg.service(svc_, now, rj)[0]


@pytest.mark.parametrize("seed", range(40))
def test_each_running_jobs_fitness_kept_per_instant_answers_as_read_afresh(seed: int) -> None:
    """One chooser asked for every waiting job at one instant, then after a victim's run ended and it runs
    again (a new RunningJob, a new record) at the same instant, then a minute on, then past the runs'
    minimum (the young runs it skipped by their start are fit now): each answer is the rule read afresh
    for that pair."""
    rng = random.Random(seed)
    state, waiting, attained, now = _world(rng)
    chooser = LasVictims()
    protected = frozenset(rng.sample(sorted(state.running), k=1))

    def check(at: float) -> None:
        ctx = CycleContext(now=at, queues={}, models=(), attained=attained)
        for w in waiting:
            ok = chooser.eligible(w, state, ctx, protected=protected)
            for rj in state.running.values():
                assert (ok is not None and ok(rj)) == _equal_from_scratch(w, rj, at, attained, protected), (
                    w.name,
                    rj.spec.name,
                    at,
                )

    check(now)
    name = rng.choice(sorted(state.running))
    old = state.running[name]
    attained[name] = attained.get(name, AttainedService()).after_run(
        started=old.started_at, now=now, gpus=old.placement.gpu_milli / MILLI_PER_GPU
    )
    state.running[name] = replace(old, started_at=now - CFG.min_run_s * 8, checkpointed_at=now - 1.0)
    check(now)
    check(now + 60.0)
    check(now + CFG.min_run_s)
    check(now + 5 * CFG.min_run_s)


class _NoShortcut(LasVictims):
    """``las-victims`` without the per-cycle bound: every preemptor's search runs."""

    def _latest(self, state: StateView, ctx: CycleContext) -> dict[int, int]:
        return {p: 1 << 30 for p in {rj.spec.priority for rj in state.running.values()}}


@pytest.mark.parametrize("seed", range(40))
def test_skipping_searches_the_cycles_bound_rules_out_changes_no_decision(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cycles (the second at the same instant, after the first is applied, as the simulator runs them)
    decide the same with the per-cycle bound as with every search run."""
    got = []
    for chooser in (LasVictims, _NoShortcut):
        monkeypatch.setitem(VICTIM_CHOOSERS, "las-victims", chooser)
        state, waiting, attained, now = _world(random.Random(seed))
        sched = ResourceScheduler(profile="tiresias")
        decided = []
        for _ in range(2):
            d = sched.schedule(state, waiting, now, attained=attained)
            apply_decisions(state, d, now=now)
            decided.append(
                (sorted(p.spec.name for p in d.placed), sorted((p.victim, p.preemptor) for p in d.preemptions))
            )
            placed = {p.spec.name for p in d.placed}
            waiting = [j for j in waiting if j.name not in placed]
        got.append(decided)
    assert got[0] == got[1]
