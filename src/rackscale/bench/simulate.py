"""Simulation benchmarks: speed of the event simulator and the quality rackscale reaches vs first-fit.

Scenarios (each policy of each scenario runs in a fresh process, so ``peak_rss_mb`` is its own):

- ``philly-speed``: the full Philly trace (82,247 jobs) on 32 NVL72 racks, as recorded (target <= 60 s).
- ``philly-backlog``: three busy weeks of Philly (days 28-49) with arrivals x4 on 32 racks: a backlog
  forms, so the idle rate means something (target <= 5 %); intra-rack share (>= 99 %) and mean JCT.
- ``synthetic``: the embedded default (4 NVL72 racks, 600 jobs over 24 h with its multi-rack tail):
  intra-rack traffic share (>= 90 %) and mean JCT, rackscale vs first-fit.
- ``million`` (opt-in): 1,000,000 synthetic jobs on 100,000 GPUs: does it complete, how long, how much memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rackscale.bench import ChildProgress, Result, machine_info, peak_rss_mb, run_isolated

SCENARIOS: dict[str, dict[str, Any]] = {
    "philly-speed": {"trace": "philly", "racks": 32, "arrival_scale": 1.0, "policies": ["rackscale"]},
    "philly-backlog": {
        "trace": "philly",
        "racks": 32,
        "arrival_scale": 4.0,
        "window_days": [28.0, 49.0],
        "policies": ["rackscale", "first-fit"],
    },
    "synthetic": {"racks": 4, "jobs": 600, "policies": ["rackscale", "first-fit"]},
    # Issue 13's goals: the embedded default over 10 seeds, and Philly with backlogs, against every baseline.
    "goals-synthetic": {"racks": 4, "jobs": 600, "seeds": list(range(10)), "policies": "goals"},
    # The same with half the generic training gangs elastic (minGpus/maxGpus): what elastic training buys.
    "goals-elastic": {"racks": 4, "jobs": 600, "seeds": list(range(10)), "policies": "goals", "elastic_share": 0.5},
    # Ablation: the same elastic jobs with and without the elastic plugins (ABLATIONS below).
    "elastic-ab": {
        "racks": 4,
        "jobs": 600,
        "seeds": list(range(10)),
        "policies": ["rackscale", "rackscale-no-elastic"],
        "elastic_share": 0.5,
    },
    "goals-philly-x4": {
        "trace": "philly",
        "racks": 32,
        "arrival_scale": 4.0,
        "window_days": [28.0, 49.0],
        "policies": "goals",
    },
    "goals-philly-x8": {
        "trace": "philly",
        "racks": 32,
        "arrival_scale": 8.0,
        "window_days": [28.0, 49.0],
        "policies": "goals",
    },
    # Scheduled scaling: the default mix with and without a night quota and night replica caps (schedule_ab).
    "schedule-ab": {
        "racks": 4,
        "jobs": 600,
        "policies": ["rackscale", "rackscale+schedules", "rackscale+service-schedules"],
    },
    "million": {"racks": 1389, "jobs": 1_000_000, "duration_h": 24.0 * 30, "policies": ["rackscale"]},
}
DEFAULT_SCENARIOS = ("philly-speed", "philly-backlog", "synthetic")
KEEP = (
    "completed",
    "failed",
    "allocation_ratio",
    "idle_rate",
    "idle_fitting_rate",
    "intra_rack_traffic_share",
    "single_rack_share",
    "fewest_racks_share",
    "mean_jct_s",
    "mean_queueing_s",
    "training_samples_per_s",
    "slo_attainment",
    "interactivity_slo_attainment",
    "ttft_slo_attainment",
    "makespan_s",
    "preemptions",
    "lost_gpu_hours",
    "resizes",
    "events",
    "cycles",
)
# The default profile with one mechanism switched off, by name, for the ablation scenarios (not registered
# as profiles: they are measurements, not choices).
ABLATIONS: dict[str, dict[str, bool]] = {
    "rackscale-no-elastic": {"elastic": False},
}


def profile_of(policy: str) -> Any:
    """A registered profile's name, or an ablation's ``Profile``."""
    if policy in ("rackscale+schedules", "rackscale+service-schedules"):  # the schedules are the difference
        return "rackscale"
    if policy not in ABLATIONS:
        return policy
    from dataclasses import replace

    from rackscale.scheduler.framework import PROFILES

    off: dict[str, Any] = dict(ABLATIONS[policy])
    return replace(PROFILES["rackscale"], name=policy, **off)


# The baselines the goals scenarios compare against: every one registered (the peers' profiles included).
GOAL_BASELINES = ("first-fit", "best-fit", "slurm-tree", "slurm-block", "kueue-tas", "kai", "volcano", "tiresias")


def goal_policies() -> list[str]:
    from rackscale.scheduler.framework import PROFILES

    return ["rackscale", *(p for p in GOAL_BASELINES if p in PROFILES)]


def _with_seeds(scenario: dict[str, Any], seeds: int | None) -> dict[str, Any]:
    """The scenario, with seeds ``0 .. seeds-1`` if it runs several and ``seeds`` is given."""
    if seeds is None or "seeds" not in scenario:
        return scenario
    return {**scenario, "seeds": list(range(seeds))}


def default_philly() -> Path:
    """``../shared/traces/philly/philly.csv`` next to the checkout (or the current directory's parent)."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        p = base.parent / "shared" / "traces" / "philly" / "philly.csv"
        if p.exists():
            return p
    return Path.cwd().parent / "shared" / "traces" / "philly" / "philly.csv"


def run_one(config: Result, progress: ChildProgress) -> Result:
    """One (scenario, policy) run, in the child process."""
    from rackscale.model import GPUCluster
    from rackscale.sim import SimConfig, Simulator
    from rackscale.sim.gc_policy import batch_gc
    from rackscale.workloads import SyntheticConfig, load_trace, synthetic_jobs

    racks = int(config["racks"])
    regions = max(1, -(-racks // 256))  # at most 256 racks per region; the last region may be smaller
    cluster = GPUCluster.uniform(
        racks_per_region=-(-racks // regions), regions=regions, total_gpus=racks * 72, name=f"{racks} x NVL72"
    )
    t0 = time.perf_counter()
    if config.get("trace") == "philly":
        window = config.get("window_days")
        loaded = load_trace(
            f"philly:{config['philly']}",
            arrival_scale=float(config.get("arrival_scale", 1.0)),
            time_window=(window[0] * 86_400.0, window[1] * 86_400.0) if window else None,
        )
        jobs = list(loaded.jobs)
    else:
        jobs = synthetic_jobs(
            SyntheticConfig(
                jobs=int(config["jobs"]),
                duration_s=float(config.get("duration_h", 24.0)) * 3600.0,
                max_gpus=cluster.total_gpus,
                seed=int(config.get("seed", 0)),
                elastic_share=float(config.get("elastic_share", 0.0)),
            )
        )
    load_s = time.perf_counter() - t0
    seed = int(config.get("seed", 0))
    from rackscale.bench.schedule_ab import schedules_of

    schedules = schedules_of(str(config["policy"]), jobs)
    policy = profile_of(str(config["policy"]))
    sim_config = SimConfig(policy=policy, seed=seed, record_series=False, schedules=schedules)
    sim = Simulator(cluster, jobs, sim_config)
    last = [0.0]

    def tick(done: int, total: int, _now: float) -> None:
        t = time.monotonic()
        if t - last[0] > 0.5 or done == total:
            last[0] = t
            progress(done, total)

    t1 = time.perf_counter()
    with batch_gc():
        result = sim.run(on_progress=tick)
    sim_s = time.perf_counter() - t1
    out: Result = {k: result.kpis[k] for k in KEEP}
    out.update(
        jobs=len(jobs),
        gpus=cluster.total_gpus,
        load_s=load_s,
        sim_s=sim_s,
        events_per_s=(result.kpis["events"] or 0) / sim_s if sim_s > 0 else None,
        peak_rss_mb=peak_rss_mb(),
    )
    if schedules or config.get("scenario") == "schedule-ab":
        hours = result.allocated_gpu_s / 3600.0
        out.update(allocated_gpu_hours=hours, cost=hours * cluster.pricing.per_gpu_hour, fired=len(result.fired))
    return out


def check_philly_trace(scenarios: Iterable[str], philly: Path | None) -> Path:
    """The Philly trace the scenarios read (``philly`` or :func:`default_philly`), checked once before any run
    starts: a missing path is a ``FileNotFoundError``, a folder, a device or a header-less file a
    :class:`~rackscale.model.spec_errors.SpecError` (a ``ValueError``), rather than a traceback from each run."""
    trace = philly or default_philly()
    if any(SCENARIOS.get(n, {}).get("trace") == "philly" for n in scenarios):
        if not trace.exists():
            raise FileNotFoundError(f"the Philly trace is not at {trace}; pass --philly PATH")
        from rackscale.workloads.philly import check_philly_file

        check_philly_file(trace)
    return trace


def run_simulation_benchmark(
    *,
    scenarios: Iterable[str] = DEFAULT_SCENARIOS,
    philly: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    seeds: int | None = None,
    workers: int = 1,
) -> Result:
    """Run each scenario's policies (and seeds), each in a fresh process.

    ``seeds``: the scenarios that run several seeds (``goals-synthetic`` and the like) run seeds
    ``0 .. seeds-1`` instead of their own list; the others are unchanged. ``workers``: how many runs at once
    (each still its own process). The KPIs do not depend on it; the timings (``sim_s``, ``events_per_s``)
    are then measured beside the other runs."""
    if seeds is not None and seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    names = list(dict.fromkeys(scenarios))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    trace = philly or default_philly()
    used = {n: _with_seeds(SCENARIOS[n], seeds) for n in names}
    check_philly_trace(names, trace)
    configs: list[Result] = []  # one per run, in the report's order
    for name in names:
        scenario = used[name]
        policies = goal_policies() if scenario["policies"] == "goals" else scenario["policies"]
        for policy in policies:
            for seed in scenario.get("seeds") or [None]:
                config = {k: v for k, v in scenario.items() if k not in ("policies", "seeds")}
                config.update(policy=policy, philly=str(trace), scenario=name)
                if seed is not None:
                    config["seed"] = seed
                configs.append(config)

    def one(config: Result) -> Result:
        seed = config.get("seed")
        label = f"{config['scenario']} / {config['policy']}" + (f" / seed {seed}" if seed is not None else "")
        show = (lambda values: progress(label, *values)) if progress is not None else None
        return run_isolated(f"{__name__}:run_one", config, progress=show)

    if workers == 1:
        got_all = [one(config) for config in configs]
    else:
        # Threads only wait for the child processes; the results are gathered in the runs' order.
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            futures = [pool.submit(one, config) for config in configs]
            got_all = [f.result() for f in futures]
        except BaseException:
            pool.shutdown(cancel_futures=True)  # a failed run stops the benchmark: the queued runs never start
            raise
        pool.shutdown()
    results: dict[str, dict[str, Result]] = {}
    for config, got in zip(configs, got_all, strict=True):
        name, policy, seed = config["scenario"], config["policy"], config.get("seed")
        if seed is None:
            results.setdefault(name, {})[policy] = got
        else:
            got["seed"] = seed
            results.setdefault(name, {}).setdefault(policy, {"runs": []})["runs"].append(got)
    out: Result = {"machine": machine_info(), "scenarios": used, "results": results}
    if "schedule-ab" in results:
        from rackscale.bench.schedule_ab import ARMS, ratios

        out["schedule_ab_ratios"] = {arm: ratios(results["schedule-ab"], arm) for arm in ARMS}
    if any(n.startswith("goals-") for n in names):
        from rackscale.bench.goals import judge

        out["goals"] = {n: judge(results[n]) for n in names if n.startswith("goals-")}
    return out
