"""Issue 13's goals, judged on the runs of a ``goals-*`` scenario of ``rackscale bench simulate``.

A scenario's results are ``{policy: result}`` (one run) or ``{policy: {"runs": [result, ...]}}`` (one run per
seed). ``rackscale`` is judged against every other policy (the baselines):

- idle rate <= 5 %, intra-rack traffic share >= 90 %, single-rack share of multi-GPU training >= 90 %, on
  every run;
- mean JCT lower than every baseline's on every seed (the same seed: the same jobs);
- training throughput and makespan no worse than the best baseline's, inference SLO attainment (each of
  the three kinds a run reports) no worse than any baseline's: seed means, no tolerance;
- GPU-hours lost to preemption: reported beside the baselines' (what the loans and preemptions trade).

Each comparison also carries its paired difference (``paired``): seed by seed, rackscale's value against
the deciding baseline's on the same jobs (relative for JCT, throughput and makespan; in points for the SLOs),
their mean and the half-width of its 95 % confidence interval (Student t over the seeds). ``within_noise``
says whether that interval holds zero: a goal met or missed by less than the seeds' spread says little.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from rackscale.sim.stats import estimate

Result = dict[str, Any]

THRESHOLDS: tuple[tuple[str, str, float, str], ...] = (
    ("idle_rate", "<=", 0.05, "idle rate while jobs wait"),
    ("intra_rack_traffic_share", ">=", 0.90, "intra-rack (NVLink) traffic share"),
    ("single_rack_share", ">=", 0.90, "multi-GPU training in one rack"),
)
SLOS = ("slo_attainment", "interactivity_slo_attainment", "ttft_slo_attainment")


def runs_of(entry: Mapping[str, Any]) -> list[Result]:
    return list(entry["runs"]) if "runs" in entry else [dict(entry)]


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def paired(mine: list[Result], theirs: list[Result], key: str, *, relative: bool) -> Result | None:
    """Seed by seed (the same seed: the same jobs), ``mine`` against ``theirs``: ``{"mean", "ci95", "seeds"}``
    of ``x / y - 1`` (``relative``) or ``x - y``; ``ci95`` is None for one seed. None: no seed has both."""
    by_seed = {r.get("seed"): r.get(key) for r in theirs}
    diffs: list[float] = []
    for r in mine:
        x, y = r.get(key), by_seed.get(r.get("seed"))
        if not isinstance(x, int | float) or not isinstance(y, int | float):
            continue
        if relative:
            if y:
                diffs.append(x / y - 1.0)
        else:
            diffs.append(x - y)
    e = estimate(diffs)
    return None if e is None else {"mean": e.mean, "ci95": e.ci95, "seeds": e.n}


def _noise(p: Result | None) -> bool | None:
    """Whether the paired interval holds zero (None: no interval; False where every seed differs alike, e.g.
    not at all: then the difference is exact)."""
    if p is None or p["ci95"] is None:
        return None
    return bool(p["ci95"] > 0.0 and abs(p["mean"]) <= p["ci95"])


def _shown(p: Result | None, *, relative: bool) -> str:
    if p is None:
        return "no paired seeds"
    unit = " %" if relative else " pt"  # a relative difference in per cent, a share's in points: x 100 either way
    half = "" if p["ci95"] is None else f" ± {p['ci95'] * 100:.2f}"
    return f"{p['mean'] * 100:+.2f}{half}{unit} over {p['seeds']} seed(s)"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def _against_best(
    mine: list[Result],
    others: Mapping[str, list[Result]],
    key: str,
    label: str,
    *,
    target: str,
    higher: bool,
    relative: bool,
) -> Result:
    """Our seed mean of ``key`` against the best baseline's (``higher`` or lower is better), with the paired
    difference against that baseline (relative, or absolute for shares)."""
    ours_mean = _mean([r.get(key) for r in mine])
    means = {p: v for p, rs in others.items() if (v := _mean([r.get(key) for r in rs])) is not None}
    top = (max if higher else min)(means, key=means.__getitem__) if means else None
    best = means[top] if top is not None else None
    met = None if ours_mean is None or best is None else (ours_mean >= best if higher else ours_mean <= best)
    d = paired(mine, others[top], key, relative=relative) if top is not None else None
    return {
        "goal": label,
        "target": target,
        "value": ours_mean,
        "met": met,
        "paired": {top: d} if top is not None else {},
        "within_noise": _noise(d),
        "detail": f"best baseline {top} {_num(best)}; paired: {_shown(d, relative=relative)}",
    }


def judge(per_policy: Mapping[str, Mapping[str, Any]], *, ours: str = "rackscale") -> list[Result]:
    """One verdict per goal: ``{"goal", "target", "value", "met", "detail"}`` (``met`` None: nothing to judge)."""
    if ours not in per_policy:
        return []
    mine = runs_of(per_policy[ours])
    others = {p: runs_of(e) for p, e in per_policy.items() if p != ours}
    out: list[Result] = []
    for key, op, limit, label in THRESHOLDS:
        vals = [r.get(key) for r in mine]
        known = [v for v in vals if v is not None]
        worst = (max(known) if op == "<=" else min(known)) if known else None
        met = None if worst is None else (worst <= limit if op == "<=" else worst >= limit)
        out.append(
            {
                "goal": label,
                "target": f"{op} {limit:.0%} on every run",
                "value": worst,
                "met": met,
                "detail": f"worst of {len(known)} run(s); mean {_mean(vals)}",
            }
        )
    # Mean JCT, seed by seed against each baseline.
    by_seed = {r.get("seed"): r for r in mine}
    wins: dict[str, tuple[int, int]] = {}
    for p, rs in others.items():
        won = total = 0
        for r in rs:
            m = by_seed.get(r.get("seed"))
            if m is None or m.get("mean_jct_s") is None or r.get("mean_jct_s") is None:
                continue
            total += 1
            won += m["mean_jct_s"] < r["mean_jct_s"]
        wins[p] = (won, total)
    all_won = all(w == t and t > 0 for w, t in wins.values()) if wins else None
    jct = {p: paired(mine, rs, "mean_jct_s", relative=True) for p, rs in others.items()}
    out.append(
        {
            "goal": "mean JCT lower than every baseline on every seed",
            "target": "every seed, every baseline",
            "value": {p: f"{w}/{t}" for p, (w, t) in wins.items()},
            "met": all_won,
            "paired": jct,
            "within_noise": None,
            "detail": "seeds won / seeds, per baseline; JCT against each: "
            + "; ".join(f"{p} {_shown(d, relative=True)}" for p, d in jct.items()),
        }
    )
    for key, better, label in (
        ("training_samples_per_s", "higher", "training throughput no worse than the best baseline"),
        ("makespan_s", "lower", "makespan no worse than the best baseline"),
    ):
        target = f"seed mean {better} or equal"
        out.append(_against_best(mine, others, key, label, target=target, higher=better == "higher", relative=True))
    for key in SLOS:
        label = f"{key.replace('_', ' ')} no worse than any baseline"
        out.append(_against_best(mine, others, key, label, target="seed mean >=", higher=True, relative=False))
    lost = _mean([r.get("lost_gpu_hours") for r in mine])
    theirs_lost = {p: _mean([r.get("lost_gpu_hours") for r in rs]) for p, rs in others.items()}
    out.append(
        {
            "goal": "GPU-hours lost to preemption (reported)",
            "target": "reported",
            "value": lost,
            "met": None,
            "detail": ", ".join(f"{p} {v:.0f}" for p, v in theirs_lost.items() if v is not None),
        }
    )
    return out
