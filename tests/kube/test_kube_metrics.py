"""`rackscale kube-scheduler`'s /metrics (cli/kube_metrics.py), scraped over HTTP from the health server while
the scheduler runs against the fake API server (tests/kube/fake_apiserver.py; no real cluster).

One scenario, step by step, on two racks of four 8-GPU nodes: a gang whose bind fails midway (rolled back),
the same gang bound whole once its deleted pods are recreated, a pod too big for any node (unschedulable),
then a cycle whose decisions the adapter refuses. After each step the scrape's counters must have moved by
exactly what the step did (or, for counters every retry cycle bumps, by at least that), and the gauges must
read the state the step left.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.kube.conftest import FAST, add_racks, pod, wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault, binding_path

from rackscale.cli.kube import serve_health
from rackscale.cli.kube_metrics import METRIC_NAMES, kube_registry
from rackscale.kube.observed import CYCLE_BUCKETS, AttemptResult
from rackscale.kube.scheduler import KubeScheduler
from rackscale.scheduler.decisions import Decisions, Preemption, PreemptionCause

Start = Callable[..., KubeScheduler]
Series = tuple[str, frozenset[tuple[str, str]]]  # (sample name, labels)
Scrape = dict[Series, float]
GANG = [f"train-{i}" for i in range(4)]
DOCS = Path(__file__).resolve().parents[2] / "docs"


def s(name: str, **labels: str) -> Series:
    return name, frozenset(labels.items())


def scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        text = r.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def served(fake: FakeAPIServer, start_scheduler: Start) -> Iterator[tuple[KubeScheduler, int]]:
    add_racks(fake, racks=2, nodes=4)
    sched = start_scheduler(dataclasses.replace(FAST, price_per_gpu_hour=2.5))  # a price: the cost has a series
    server = serve_health(sched, 0, metrics=kube_registry(sched))
    wait_for(lambda: sched.is_leader and all(sched.synced.values()), what="leading, caches synced")
    yield sched, int(server.server_address[1])
    server.shutdown()


def add_gang(fake: FakeAPIServer, names: list[str]) -> None:
    for name in names:
        fake.put("pods", pod(name, gpus=8, group="train", min_member=4))


def roll_back(fake: FakeAPIServer, sched: KubeScheduler) -> None:
    fake.inject(Fault(method="POST", path=binding_path("train-2"), status=500, message="etcdserver: timeout"))
    add_gang(fake, GANG)


def recreate(fake: FakeAPIServer, sched: KubeScheduler) -> None:
    add_gang(fake, ["train-0", "train-1"])  # the pods the undo deleted, as their controller would


def too_big(fake: FakeAPIServer, sched: KubeScheduler) -> None:
    fake.put("pods", pod("big", gpus=16, namespace="research"))


def refuse(fake: FakeAPIServer, sched: KubeScheduler) -> None:
    """The core decides a stop (a profile turning preemption back on): the adapter carries out nothing."""
    real = sched.sched.schedule
    stop = Preemption(victim="v", preemptor="x", reason="r", cause=PreemptionCause.PRIORITY)

    def with_a_stop(*args: Any, **kw: Any) -> Decisions:
        return dataclasses.replace(real(*args, **kw), preemptions=(stop,))

    sched.sched.schedule = with_a_stop  # type: ignore[method-assign]
    fake.put("pods", pod("fits", gpus=8))


ATTEMPTS = "rackscale_schedule_attempts_total"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    act: Callable[[FakeAPIServer, KubeScheduler], None]
    done: Callable[[KubeScheduler], bool]  # the step's cycle is over (the scheduler's books say so, its attempts last)
    moved: Mapping[Series, float]  # counters: exactly this much since the step before
    grew: Mapping[Series, float] = field(default_factory=dict)  # counters that retries bump: at least this
    reads: Mapping[Series, float | None] = field(default_factory=dict)  # gauges now (None: no such series)


STEPS = {
    "gang-bind-rolled-back": Step(
        act=roll_back,
        done=lambda k: k.stats.undone == 2 and k.stats.attempts[AttemptResult.ERROR] == 1,
        moved={
            s("rackscale_kube_bind_errors_total"): 1,
            s("rackscale_kube_gang_rollbacks_total"): 1,
            s("rackscale_kube_undone_pods_total"): 2,  # train-0 and train-1, bound before train-2 failed
            s("rackscale_kube_undo_errors_total"): 0,
            s("rackscale_kube_binds_total"): 0,  # a gang bound halfway is no bind
            s(ATTEMPTS, result="scheduled"): 0,
            s(ATTEMPTS, result="error"): 1,
            s("rackscale_kube_refused_cycles_total"): 0,
        },
        grew={s("rackscale_kube_cycles_total"): 1, s("rackscale_scheduling_attempt_duration_seconds_count"): 1},
    ),
    "gang-bound-whole": Step(
        act=recreate,
        done=lambda k: k.stats.binds == 4 and k.stats.attempts[AttemptResult.SCHEDULED] == 1,
        moved={
            s("rackscale_kube_binds_total"): 4,
            s(ATTEMPTS, result="scheduled"): 1,
            s(ATTEMPTS, result="error"): 0,
            s("rackscale_kube_bind_errors_total"): 0,
            s("rackscale_kube_gang_rollbacks_total"): 0,
            s("rackscale_kube_undone_pods_total"): 0,
        },
        reads={s("rackscale_pending_jobs", queue="default"): None},  # nothing waits: no series
    ),
    "pod-too-big-unschedulable": Step(
        act=too_big,
        done=lambda k: "research" in k.waiting.queues,  # published once the cycle's attempts are counted
        moved={
            s("rackscale_kube_binds_total"): 0,
            s(ATTEMPTS, result="scheduled"): 0,
            s(ATTEMPTS, result="error"): 0,
        },
        grew={s(ATTEMPTS, result="unschedulable"): 1},
        reads={
            s("rackscale_pending_jobs", queue="research"): 1,
            s("rackscale_kube_pending_pods", queue="research"): 1,
            s("rackscale_pending_jobs", queue="default"): None,
        },
    ),
    "cycle-refused": Step(
        act=refuse,
        done=lambda k: k.stats.refused_cycles >= 1 and k.stats.attempts[AttemptResult.ERROR] >= 2,
        moved={s("rackscale_kube_binds_total"): 0, s(ATTEMPTS, result="scheduled"): 0},
        grew={s("rackscale_kube_refused_cycles_total"): 1, s(ATTEMPTS, result="error"): 1},
        reads={s("rackscale_pending_jobs", queue="default"): 1},  # "fits" is not bound: it waits
    ),
}


def test_scrape_follows_the_scheduler_step_by_step(fake: FakeAPIServer, served: tuple[KubeScheduler, int]) -> None:
    sched, port = served
    before = scrape(port)
    for series in (s(ATTEMPTS, result=r) for r in ("scheduled", "unschedulable", "error")):
        assert before[series] == 0  # every result has its series before its first attempt (rate() needs it)
    assert before[s("rackscale_leader", replica=sched.identity)] == 1
    assert before[s("rackscale_kube_cache_synced", kind="pods")] == 1
    assert before[s("rackscale_kube_watch_lists_total", kind="nodes")] >= 1
    for name, step in STEPS.items():
        step.act(fake, sched)
        wait_for(lambda step=step: step.done(sched), what=name)
        for series, value in step.reads.items():  # the next cycle's view, once it ran
            wait_for(lambda series=series, value=value: scrape(port).get(series) == value, what=f"{name}: {series}")
        now = scrape(port)
        for series, delta in step.moved.items():
            assert now[series] - before[series] == delta, f"{name}: {series}"
        for series, least in step.grew.items():
            assert now[series] - before[series] >= least, f"{name}: {series}"
        before = now
    age = before[s("rackscale_oldest_pending_job_age_seconds", queue="research")]
    assert 0 <= age < 120  # "big" was created moments ago (the fake stamps creationTimestamp)


def test_the_duration_histogram_is_serves(served: tuple[KubeScheduler, int]) -> None:
    """Same name, same buckets as `rackscale serve`'s, so one histogram_quantile reads both."""
    from rackscale.service.metrics import Metrics

    (family,) = [f for f in Metrics().registry.collect() if f.name == "rackscale_scheduling_attempt_duration_seconds"]
    serve_le = [x.labels["le"] for x in family.samples if x.name.endswith("_bucket")]
    _, port = served
    ours = scrape(port)
    kube_le = sorted(
        (dict(labels)["le"] for name, labels in ours if name == "rackscale_scheduling_attempt_duration_seconds_bucket"),
        key=float,
    )
    assert kube_le == serve_le and len(kube_le) == len(CYCLE_BUCKETS)


def test_a_standby_says_it_and_reports_no_queue(
    fake: FakeAPIServer, start_scheduler: Start, served: tuple[KubeScheduler, int]
) -> None:
    leader, _ = served
    fake.put("pods", pod("big", gpus=16))
    wait_for(lambda: "default" in leader.waiting.queues, what="the leader sees it waiting")
    standby = start_scheduler()
    wait_for(lambda: all(standby.synced.values()), what="the standby's caches")
    registry = kube_registry(standby)
    samples = {(x.name, frozenset(x.labels.items())): x.value for f in registry.collect() for x in f.samples}
    assert samples[s("rackscale_leader", replica=standby.identity)] == 0
    assert not [k for k in samples if k[0] == "rackscale_pending_jobs"]  # the leader's to say


def test_the_series_are_exported_and_documented(fake: FakeAPIServer, served: tuple[KubeScheduler, int]) -> None:
    """Every name in METRIC_NAMES is in a scrape and in docs/kubernetes.md's Metrics section, and no other."""
    sched, port = served
    add_gang(fake, GANG)  # a gang runs: the modelled bytes move, and the intra-rack share has a sample
    wait_for(lambda: scrape(port).get(s("rackscale_traffic_bytes_total", tier="nvlink"), 0) > 0, what="bytes moving")
    too_big(fake, sched)  # something waits: the pending gauges have a series
    wait_for(lambda: "research" in sched.waiting.queues, what="a pod waiting")
    exported = {re.sub(r"_(bucket|count|sum)$", "", name) for name, _ in scrape(port)}
    assert exported == set(METRIC_NAMES)
    section = (DOCS / "kubernetes.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(rackscale_[a-z0-9_]+)`", section)) >= set(METRIC_NAMES)


def test_without_leader_election_it_leads(start_scheduler: Start, fake: FakeAPIServer) -> None:
    sched = start_scheduler(dataclasses.replace(FAST, leader_elect=False))
    samples = {
        (x.name, frozenset(x.labels.items())): x.value for f in kube_registry(sched).collect() for x in f.samples
    }
    assert samples[s("rackscale_leader", replica=sched.identity)] == 1
