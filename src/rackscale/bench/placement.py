"""Placement benchmark: decision latency and throughput of a scheduler profile at cluster scale.

A cluster of NVL72 racks (18 nodes x 4 GPUs) is filled to ~90 % allocated with training gangs whose sizes
follow the Microsoft Philly ``num_gpus`` distribution plus a large-job tail, then kept there: every
arrival is one timed decision (``schedule(state, [job], now)`` + ``apply_decisions``), and running jobs
depart in order of their expected end until the allocation is back under 90 %. At the end, one cycle with
a backlog of ``pending`` jobs is timed. Each (size, policy) configuration runs in a fresh process so that
its peak RSS is its own.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from rackscale.bench import ChildProgress, Result, machine_info, peak_rss_mb, percentile, run_isolated
from rackscale.model import ClusterState, GPUCluster, JobSpec, training
from rackscale.scheduler import Decisions, ResourceScheduler, apply_decisions
from rackscale.scheduler.pending import PendingQueue

# Microsoft Philly (2017), jobs by num_gpus (see ../shared/traces/README.md).
PHILLY_SIZES: dict[int, int] = {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
LARGE_TAIL: tuple[int, ...] = (128, 256, 512, 1024)
LARGE_SHARE = 0.01  # share of jobs drawn from the large tail
# Philly durations: p50 1,144 s, p90 11,265 s -> a log-normal through both quantiles.
DURATION_MU = math.log(1_144.0)
DURATION_SIGMA = (math.log(11_265.0) - math.log(1_144.0)) / 1.2816
RACK_GPUS = 72  # NVL72: 18 nodes x 4 GPUs
NODES_PER_RACK = 18
GPUS_PER_NODE = 4
MAX_RACKS_PER_REGION = 256
TARGET_UTILISATION = 0.90
DEFAULT_GPUS: tuple[int, ...] = (10_000, 100_000)
DEFAULT_POLICIES: tuple[str, ...] = ("rackscale", "first-fit")
QUICK_GPUS: tuple[int, ...] = (720, 1_440)

# The goals this benchmark checks (for the ``rackscale`` profile); documented in docs/benchmarks.md.
TARGETS: dict[str, tuple[str, float]] = {
    "decisions_per_s": (">=", 10_000.0),
    "p99_us_le72": ("<=", 1_000.0),
    "cycle_10k_pending_ms": ("<=", 100.0),
    "peak_rss_mb": ("<=", 500.0),
    "single_domain_share": (">=", 0.99),
}

ProgressFn = Callable[[str, str, int, int], None]  # (config label, phase, done, total)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    gpus: int
    policy: str
    decisions: int
    pending: int
    seed: int = 0
    large_share: float = LARGE_SHARE
    cycle_budget_s: float = 60.0  # stop repeating the backlog cycle once this much time is spent

    @property
    def label(self) -> str:
        return f"{self.gpus} GPUs / {self.policy}"


class Workload:
    """A seeded stream of training gangs: Philly sizes, plus ``large_share`` drawn from the large tail."""

    def __init__(self, *, seed: int, large_share: float = LARGE_SHARE, prefix: str = "j") -> None:
        self._rng = random.Random(seed)
        self._sizes = list(PHILLY_SIZES)
        self._cum = list(itertools.accumulate(PHILLY_SIZES.values()))
        self._large_share = large_share
        self._prefix = prefix
        self._n = 0

    def size(self) -> int:
        if self._rng.random() < self._large_share:
            return self._rng.choice(LARGE_TAIL)
        return self._rng.choices(self._sizes, cum_weights=self._cum)[0]

    def next_job(self, *, now: float) -> JobSpec:
        gpus = self.size()
        duration = min(self._rng.lognormvariate(DURATION_MU, DURATION_SIGMA), 30 * 86_400.0)
        self._n += 1
        return training(
            f"{self._prefix}{self._n}",
            gpus,
            gpus_per_worker=min(gpus, GPUS_PER_NODE) if gpus % GPUS_PER_NODE else GPUS_PER_NODE,
            duration_estimate_s=max(duration, 1.0),
            submit_time=now,
        )


def cluster_for(*, gpus: int) -> GPUCluster:
    """Whole NVL72 racks nearest to ``gpus``, in regions of at most 256 racks."""
    racks = max(1, round(gpus / RACK_GPUS))
    regions = -(-racks // MAX_RACKS_PER_REGION)
    return GPUCluster.uniform(
        name=f"nvl72-{racks}",
        regions=regions,
        racks_per_region=-(-racks // regions),
        nodes_per_rack=NODES_PER_RACK,
        gpus_per_node=GPUS_PER_NODE,
        total_gpus=racks * RACK_GPUS,
    )


class _Run:
    """One configuration's simulation: state, scheduler, clock and departures."""

    def __init__(self, cfg: BenchConfig, progress: ProgressFn | None) -> None:
        self.cfg = cfg
        self.cluster = cluster_for(gpus=cfg.gpus)
        self.state = ClusterState(self.cluster)
        self.sched = ResourceScheduler(profile=cfg.policy, seed=cfg.seed)
        self.jobs = Workload(seed=cfg.seed, large_share=cfg.large_share)
        self.target_milli = int(TARGET_UTILISATION * self.cluster.total_gpus * 1_000)
        self.ends: list[tuple[float, str]] = []  # (expected end, job) of running jobs
        self.now = 0.0
        self._progress = progress
        self._shown = 0.0

    def report(self, phase: str, done: int, total: int) -> None:
        """Progress, at most ~10 times a second (and never inside a timed region)."""
        t = time.monotonic()
        if self._progress is not None and (done >= total or t - self._shown >= 0.1):
            self._shown = t
            self._progress(self.cfg.label, phase, done, total)

    def decide(self, job: JobSpec) -> tuple[Decisions, int]:
        """One timed decision: schedule the arriving job and apply the result."""
        t0 = time.perf_counter_ns()
        d = self.sched.schedule(self.state, [job], self.now)
        apply_decisions(self.state, d, now=self.now)
        dt = time.perf_counter_ns() - t0
        for p in d.placed:
            heapq.heappush(self.ends, (p.expected_end if p.expected_end is not None else self.now, p.spec.name))
        return d, dt

    def depart(self) -> None:
        """Release jobs in order of expected end (advancing the clock) until allocation is back at target."""
        while self.state.used_milli > self.target_milli and self.ends:
            end, name = heapq.heappop(self.ends)
            if name in self.state.running:  # a preempted job is gone already
                self.now = max(self.now, end)
                self.state.release(name)

    def fill(self) -> float:
        t0 = time.perf_counter()
        goal = self.target_milli // 1_000
        for _ in range(20 * self.cluster.total_gpus + 1_000):
            if self.state.used_milli // 1_000 >= goal:
                break
            self.decide(self.jobs.next_job(now=self.now))
            self.report("fill (GPUs)", min(self.state.used_milli // 1_000, goal), goal)
        if self.state.used_milli // 1_000 < goal:
            raise RuntimeError(f"could not fill {self.cfg.label} to {TARGET_UTILISATION:.0%}")
        # The cluster model and its indexes live as long as the scheduler: move them out of the cyclic
        # GC's reach, as a long-running scheduler process does after start-up (see docs/benchmarks.md).
        gc.collect()
        gc.freeze()
        return time.perf_counter() - t0

    def steady(self) -> Result:
        lat: list[int] = []
        by_size: tuple[list[int], list[int]] = ([], [])  # (<= 72 GPUs, > 72 GPUs)
        placed = one_rack = placed_small = 0
        used = 0.0
        nodes, n = self.cluster.nodes, self.cfg.decisions
        for i in range(n):
            used += self.state.used_milli
            job = self.jobs.next_job(now=self.now)
            d, dt = self.decide(job)
            small = job.total_gpus <= RACK_GPUS
            lat.append(dt)
            by_size[0 if small else 1].append(dt)
            if d.placed:
                placed += 1
                if small:
                    placed_small += 1
                    one_rack += len({nodes[a.node].rack for a in d.placed[0].placement.allocs}) == 1
            self.depart()
            self.report("decisions", i + 1, n)
        total_s = sum(lat) / 1e9
        return {
            "decisions": n,
            "placed": placed,
            "failed": n - placed,
            "decisions_per_s": n / total_s if total_s else None,
            "p50_us": percentile(lat, 50),
            "p99_us": percentile(lat, 99),
            "p99_us_le72": percentile(by_size[0], 99),
            "p99_us_gt72": percentile(by_size[1], 99),
            "decisions_le72": len(by_size[0]),
            "decisions_gt72": len(by_size[1]),
            "single_domain_share": one_rack / placed_small if placed_small else None,
            "mean_utilisation": used / n / (self.cluster.total_gpus * 1_000),
        }

    def cycle(self) -> Result:
        """One ``schedule()`` call with a backlog of the same mix (pure: the state is unchanged); median of 3.

        Timed as the host runs it: the backlog is the :class:`PendingQueue` the simulator and the service
        keep between cycles (built as jobs arrive, its shape summaries kept up to date), not rebuilt per
        cycle, and the scheduler has seen it in an earlier cycle (one untimed cycle first). Each timed cycle
        is at a new instant, a millisecond after the last, as a host's are: what a plugin keeps per instant
        is read again, not found from the cycle before (``las-victims``' fitness of each running job was,
        which made repeated cycles at one instant ~10 % faster than a host's). ``cycle_10k_from_list_ms``
        is the same cycle from a plain list, which builds and sorts the queue first (a caller that keeps
        no queue, e.g. the Kubernetes scheduler's)."""
        backlog = Workload(seed=self.cfg.seed + 1, large_share=self.cfg.large_share, prefix="p")
        jobs = [backlog.next_job(now=self.now) for _ in range(self.cfg.pending)]
        queue = PendingQueue(jobs)
        queue.shape_count()  # its per-shape summaries: a kept queue has them from its first cycle on
        self.sched.schedule(self.state, queue, self.now)  # the cycle before: what a host's scheduler knows
        at = itertools.count(1)
        times: list[float] = []
        from_list: list[float] = []
        placed = 0
        # Full (oldest-generation) collections during the timed runs: one adds tens of ms at 100,000
        # GPUs (it walks every object made since start-up), and says why one run is slower than another.
        # Each run starts after a collection, so that none pays for the garbage of what came before it
        # (building the 10,000 jobs, the other run): a collection the cycle's own objects trigger counts.
        gen2 = 0
        for i in range(3):
            gc.collect()
            before = gc.get_stats()[2]["collections"]
            now = self.now + next(at) * 1e-3
            t0 = time.perf_counter_ns()
            d = self.sched.schedule(self.state, queue, now)
            times.append((time.perf_counter_ns() - t0) / 1e6)
            gen2 += gc.get_stats()[2]["collections"] - before
            placed = len(d.placed)
            gc.collect()
            now = self.now + next(at) * 1e-3
            t0 = time.perf_counter_ns()
            self.sched.schedule(self.state, jobs, now)
            from_list.append((time.perf_counter_ns() - t0) / 1e6)
            self.report("backlog cycle", i + 1, 3)
            if (sum(times) + sum(from_list)) / 1e3 > self.cfg.cycle_budget_s:
                break
        return {
            "pending": self.cfg.pending,
            "cycle_10k_pending_ms": statistics.median(times),
            "cycle_10k_from_list_ms": statistics.median(from_list),
            "cycle_runs": len(times),
            "cycle_runs_ms": times,
            "cycle_gen2_gcs": gen2,
            "cycle_placed": placed,
        }


def run_config(cfg: BenchConfig, *, progress: ProgressFn | None = None) -> Result:
    """Run one configuration in this process."""
    t0 = time.perf_counter()
    run = _Run(cfg, progress)
    fill_s = run.fill()
    out: Result = {"racks": len(run.cluster.racks), "regions": len(run.cluster.regions)}
    out.update(run.steady())
    out.update(run.cycle())
    out.update(fill_s=fill_s, wall_s=time.perf_counter() - t0, peak_rss_mb=peak_rss_mb())
    return out


def run_config_json(config: Result, progress: ChildProgress) -> Result:
    """:func:`run_config` for the harness's child process (config and progress as JSON values)."""
    cfg = BenchConfig(**config)
    return run_config(cfg, progress=lambda _label, *rest: progress(*rest))


def run_config_isolated(cfg: BenchConfig, *, progress: ProgressFn | None = None) -> Result:
    """Run one configuration in a fresh Python process, so that its peak RSS is its own."""
    show = (lambda values: progress(cfg.label, *values)) if progress is not None else None
    return run_isolated(f"{__name__}:run_config_json", asdict(cfg), progress=show)


def run_benchmark(
    *,
    gpus: Iterable[int] = DEFAULT_GPUS,
    policies: Iterable[str] = DEFAULT_POLICIES,
    decisions: int = 20_000,
    pending: int = 10_000,
    seed: int = 0,
    isolate: bool = True,
    progress: ProgressFn | None = None,
) -> Result:
    """Run every (size, policy) configuration, each in a fresh process unless ``isolate`` is false."""
    sizes, names = list(gpus), list(policies)
    run = run_config_isolated if isolate else run_config
    results: dict[str, dict[str, Result]] = {}
    for g in sizes:
        for policy in names:
            cfg = BenchConfig(gpus=g, policy=policy, decisions=decisions, pending=pending, seed=seed)
            results.setdefault(str(g), {})[policy] = run(cfg, progress=progress)
    params: Result = {"gpus": sizes, "policies": names, "decisions": decisions, "pending": pending, "seed": seed}
    params.update(large_share=LARGE_SHARE, target_utilisation=TARGET_UTILISATION, isolated=isolate)
    return {"machine": machine_info(), "params": params, "results": results}


def check_targets(result: Result, *, policy: str = "rackscale") -> list[tuple[str, str, float, float | None, bool]]:
    """(size, metric, target, measured, met) for each of :data:`TARGETS`, on ``policy``'s results."""
    out: list[tuple[str, str, float, float | None, bool]] = []
    for size, by_policy in result["results"].items():
        res = by_policy.get(policy)
        if res is None:
            continue
        for metric, (op, goal) in TARGETS.items():
            got = res.get(metric)
            out.append((size, metric, goal, got, got is not None and (got >= goal if op == ">=" else got <= goal)))
    return out
