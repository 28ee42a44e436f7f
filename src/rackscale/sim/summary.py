"""What a run's KPIs say, in words a reader takes in at once: units, goals judged, the policies named, a
computed verdict, and why the last job ended so long after the last arrival.

Shared by ``rackscale simulate`` and the HTML report (:mod:`rackscale.sim.report`), so both say the same.
Values stay raw numbers everywhere else (JSON); these helpers only write them for people. ``None`` (a KPI
with nothing to measure, see :mod:`rackscale.host.kpis`) is always written "n/a".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.sim.records import SimResult

Kpis = Mapping[str, float | int | None]
NA = "n/a"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


RATIOS = _words(
    "allocation_ratio idle_rate idle_fitting_rate idle_no_work_share intra_rack_traffic_share single_rack_share "
    "fewest_racks_share "
    "slo_attainment fragmentation inference_overloaded_share interactivity_slo_attainment ttft_slo_attainment"
)
HIGHER = _words(
    "allocation_ratio intra_rack_traffic_share slo_attainment single_rack_share fewest_racks_share completed "
    "training_samples_per_s "
    "inference_tokens_per_s cost_efficiency_samples cost_efficiency_tokens cost_efficiency_gain "
    "interactivity_slo_attainment ttft_slo_attainment mean_user_tokens_per_s"
)
LOWER = _words(  # and every cost_per_*
    "idle_rate idle_fitting_rate mean_jct_s p50_jct_s p99_jct_s mean_queueing_s p50_queueing_s p99_queueing_s "
    "failed fragmentation "
    "lost_gpu_hours inference_overloaded_share makespan_s worst_p99_latency_s mean_ttft_s"
)
COUNTS = _words("completed failed preemptions restarts resizes events cycles jobs")
LABELS = {
    "allocation_ratio": "GPU allocation",
    "idle_rate": "idle rate (while jobs wait)",
    "idle_no_work_share": "idle with no work waiting",
    "idle_fitting_rate": "... of it while a waiting job fitted",
    "intra_rack_traffic_share": "intra-rack (NVLink) traffic",
    "single_rack_share": "multi-GPU training in one rack (of the gangs that fit one)",
    "fewest_racks_share": "training larger than a rack in the fewest racks",
    "rdma_bytes": "RDMA traffic (between racks)",
    "backbone_bytes": "backbone traffic (between regions)",
    "training_samples_per_s": "training throughput",
    "inference_tokens_per_s": "inference throughput",
    "cost_per_hour": "cluster cost per hour",
    "cost_per_million_tokens": "cost per million tokens",
    "cost_per_million_samples": "cost per million samples",
    "cost_efficiency_samples": "seed cost efficiency, samples",
    "cost_efficiency_tokens": "seed cost efficiency, tokens",
    "slo_attainment": "inference SLO attainment",
    "worst_p99_latency_s": "worst inference p99 latency",
    "inference_overloaded_share": "inference overloaded (share of demand-time)",
    "interactivity_slo_attainment": "LLM interactivity SLO attainment (tokens/s per user)",
    "ttft_slo_attainment": "LLM time-to-first-token SLO attainment",
    "mean_user_tokens_per_s": "LLM tokens/s per user (mean)",
    "mean_ttft_s": "LLM time to first token (mean)",
    "fragmentation": "fragmentation (stranded GPUs)",
    "lost_gpu_hours": "GPU-hours lost to restarts",
    "resizes": "elastic gangs shrunk or grown",
    "makespan_s": "makespan",
}
# The goals DESIGN.md sets: a threshold ("<= 0.05") is met or missed; "higher"/"lower" ranks the policies.
GOALS = {
    "idle_rate": "<= 0.05",
    "intra_rack_traffic_share": ">= 0.90",
    "single_rack_share": "higher",
    "fewest_racks_share": "higher",
    "mean_jct_s": "lower",
    "slo_attainment": "higher",
    "interactivity_slo_attainment": "higher",
    "ttft_slo_attainment": "higher",
}
# What each scheduling profile stands for (src/rackscale/scheduler/placement/). They differ only in placement.
POLICY_NOTES = {
    "rackscale": "this project: packs each gang into the fewest NVLink domains (racks), keeps whole racks free",
    "first-fit": "the default Kubernetes scheduler: LeastAllocated spread over nodes, ties broken at random",
    "best-fit": "bin packing without topology (Kubernetes MostAllocated): the fullest node that holds each unit",
    "random": "a random node that holds each unit (seeded)",
    "tiresias": "Tiresias' 2D-LAS (NSDI'19): queues by attained GPU-time, preempts equal priorities that had "
    "more; packed into the fewest racks, no reservations",
    "rackscale-fairshare": "rackscale with its order before issue 13: priority, fair share, submit time",
    "slurm-tree": "Slurm's topology/tree best fit: the fullest rack (leaf switch) that holds the job, "
    "else the racks with the most free nodes",
    "kueue-tas": "Kueue's topology-aware scheduling: the lowest level (rack, else region) that holds the gang, "
    "best fit; batch tasks fill the fullest nodes (LeastFreeCapacity)",
    "slurm-block": "Slurm's topology/block: each segment in the best-fit rack (block), a gang of whole racks "
    "one segment per rack, others in the smallest aggregated block of racks",
    "kai": "NVIDIA KAI-Scheduler: the lowest level (rack, else region) that holds the gang, the tightest region "
    "then its tightest rack; pods binpacked (the fullest node first), the roomiest rack first when it spills",
    "volcano": "Volcano's network-topology-aware scheduling: the lowest HyperNode tier (rack, region) that "
    "holds the gang, the fullest of that tier; no topology: the fullest rack, random nodes",
}
SAME_REST = (
    "the placement baselines share one queue order (priority, fair share, submit time), EASY backfill and "
    "preemption of lower priorities, and differ in placement; rackscale adds least-attained-service order, "
    "preemption between equal priorities, loans of reserved GPUs and elastic gangs (minGpus/maxGpus) resized; "
    "tiresias is 2D-LAS without reservations"
)
CURRENCY_CODES = {"元": "CNY", "RMB": "CNY", "$": "USD", "€": "EUR", "£": "GBP"}


def plural(n: int, word: str) -> str:
    """``1 job``, ``600 jobs``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def policy_note(name: str) -> str:
    return POLICY_NOTES.get(name, "a custom profile")


def currency_code(currency: str) -> str:
    """An ISO code ("CNY"), also for a sign ("元"): a sign may need a font the reader does not have."""
    c = currency.strip()
    return CURRENCY_CODES.get(c, CURRENCY_CODES.get(c.upper(), c.upper() or "CNY"))


# ---------------------------------------------------------------------------------------------- units
def fmt_number(v: float, sig: int = 3) -> str:
    """``sig`` significant digits, thousands separators, never an exponent: 2,965 / 540 / 7.46 / 0.000143."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    decimals = max(0, sig - 1 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_duration(s: float) -> str:
    """``42 s``, ``5 min 3 s``, ``2 h 10 min``, ``1 d 20 h``: the two largest units."""
    if s < 0:
        return "-" + fmt_duration(-s)
    if s < 9.95:
        return f"{fmt_number(s, 2)} s"
    if round(s) < 60:
        return f"{round(s)} s"
    if round(s) < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m} min {sec} s" if sec else f"{m} min"
    if round(s / 60) < 24 * 60:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(s / 3600), 24)
    return f"{d:,} d {h} h" if h else f"{d:,} d"


def fmt_bytes(b: float) -> str:
    """Decimal units: ``1.2 TB``, ``340 GB``."""
    for unit, size in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            v = b / size
            return f"{v:,.1f} {unit}" if v < 100 else f"{v:,.0f} {unit}"
    return f"{b:,.0f} B"


def fmt_money(v: float, currency: str) -> str:
    """The currency code first: ``CNY 1,014``, ``CNY 7.46``, ``CNY 0.0003``."""
    code = currency_code(currency)
    if abs(v) >= 100:
        return f"{code} {v:,.0f}"
    return f"{code} {v:,.2f}" if abs(v) >= 1 else f"{code} {fmt_number(v, 3)}"


def fmt_pct(r: float) -> str:
    """A ratio as a percentage: ``19.0 %``."""
    return f"{r * 100:.1f} %"


def fmt_kpi(key: str, v: float | int | None, currency: str = "CNY") -> str:
    """One KPI value as a person reads it; "n/a" where there was nothing to measure."""
    if v is None:
        return NA
    if key in RATIOS:
        return fmt_pct(v)
    if key == "cost_efficiency_gain":
        return f"x{v:.2f}"
    if key in COUNTS or isinstance(v, bool):
        return f"{int(v):,}"
    if key.startswith("cost_per_"):
        return fmt_money(v, currency)
    if key.endswith("_bytes"):
        return fmt_bytes(v)
    if key.endswith("_per_s"):
        what = key.removesuffix("_per_s").rpartition("_")[2]
        return f"{fmt_number(v, 4 if v >= 1000 else 3)} {what}/s"
    if key.endswith("_s") or "_s_" in key:
        return fmt_duration(v)
    if key.endswith("_hours"):
        return f"{fmt_number(v, 4 if v >= 1000 else 3)} GPU-h"
    if isinstance(v, int):
        return f"{v:,}"
    return fmt_number(v)


def label(key: str) -> str:
    """A KPI's name in words: ``mean_jct_s`` -> ``mean JCT``."""
    if key in LABELS:
        return LABELS[key]
    words = key.removesuffix("_s").replace("_s_", "_").split("_")
    return " ".join("JCT" if w == "jct" else w for w in words)


# ---------------------------------------------------------------------------------------------- goals
def goal_text(key: str) -> str:
    """The goal as shown: ``<= 5 %``, ``>= 90 %``, ``higher``, ``lower`` (raw in JSON: ``<= 0.05``)."""
    goal = GOALS.get(key, "")
    op, _, threshold = goal.partition(" ")
    if op in ("<=", ">=") and threshold:
        value = float(threshold)
        return f"{op} {fmt_pct(value).replace('.0 %', ' %')}" if key in RATIOS else f"{op} {fmt_kpi(key, value)}"
    return goal


def judge(key: str, values: Mapping[str, float | int | None], currency: str = "CNY") -> dict[str, str]:
    """Each policy's standing on ``key``'s goal: ``met`` / ``missed`` for a threshold; ``best`` /
    ``worse than X`` / ``same`` for "higher" and "lower" (compared as shown, so 80.7 % and 80.7 % tie);
    ``n/a`` where the policy has no value. Empty when ``key`` has no goal."""
    goal = GOALS.get(key)
    if goal is None:
        return {}
    out = {p: NA for p, v in values.items() if v is None}
    valid = {p: float(v) for p, v in values.items() if v is not None}
    op, _, threshold = goal.partition(" ")
    if op in ("<=", ">="):
        limit = float(threshold)
        for p, v in valid.items():
            out[p] = "met" if (v <= limit if op == "<=" else v >= limit) else "missed"
        return {p: out[p] for p in values}
    sign = 1.0 if goal == "higher" else -1.0
    shown = {p: fmt_kpi(key, v, currency) for p, v in valid.items()}
    if len(valid) == 1:
        out.update(dict.fromkeys(valid, "only one to compare"))
    elif len(set(shown.values())) == 1:
        out.update(dict.fromkeys(valid, "same"))
    elif valid:
        top = shown[max(valid, key=lambda p: sign * valid[p])]
        best = [p for p in valid if shown[p] == top]
        for p in valid:
            out[p] = "best" if p in best else f"worse than {' and '.join(best)}"
    return {p: out[p] for p in values}


def judge_all(runs: Mapping[str, Kpis], currency: str = "CNY") -> dict[str, dict[str, str]]:
    """``{kpi: {"goal": "<= 0.05", policy: "missed", ...}}`` for every KPI with a goal (the JSON form)."""
    return {
        key: {"goal": goal, **judge(key, {p: k.get(key) for p, k in runs.items()}, currency)}
        for key, goal in GOALS.items()
    }


def mark(judgement: str) -> str:
    """The short form for a table cell: ``worse than rackscale`` -> ``worse``."""
    return "" if judgement in ("", NA, "same", "only one to compare") else judgement.partition(" than ")[0]


# ---------------------------------------------------------------------------------------------- verdict
# (KPI, name in the verdict, "pt": a difference of percentage points, "%": a relative change)
VERDICT_KPIS = (
    ("mean_jct_s", "mean JCT", "%"),
    ("p99_jct_s", "p99 JCT", "%"),
    ("mean_queueing_s", "mean wait", "%"),
    ("single_rack_share", "single-rack share", "pt"),
    ("intra_rack_traffic_share", "intra-rack traffic", "pt"),
    ("idle_rate", "idle rate", "pt"),
    ("slo_attainment", "SLO attainment", "pt"),
    ("interactivity_slo_attainment", "interactivity SLO attainment", "pt"),
    ("ttft_slo_attainment", "TTFT SLO attainment", "pt"),
    ("allocation_ratio", "allocation", "pt"),
    ("training_samples_per_s", "training throughput", "%"),
    ("inference_tokens_per_s", "inference throughput", "%"),
    ("makespan_s", "makespan", "%"),
)


@dataclass(frozen=True, slots=True)
class Change:
    key: str
    name: str
    delta: float  # percentage points, or a relative change in per cent
    unit: str  # "pt" or "%"
    better: bool

    @property
    def text(self) -> str:
        digits = 0 if abs(self.delta) >= 10 else 1
        return f"{self.name} {self.delta:+.{digits}f} {self.unit}"


def changes(ours: Kpis, theirs: Kpis) -> list[Change]:
    """How ``ours`` differs from ``theirs`` on the verdict's KPIs; a change that rounds to 0 is none, and a
    KPI either side lacks (n/a) is left out."""
    out: list[Change] = []
    for key, name, unit in VERDICT_KPIS:
        a, b = ours.get(key), theirs.get(key)
        if a is None or b is None:
            continue
        if unit == "pt":
            delta = (float(a) - float(b)) * 100.0
        elif b:
            delta = (float(a) - float(b)) / abs(float(b)) * 100.0
        else:
            continue
        if round(delta, 1) == 0:
            continue
        out.append(Change(key, name, delta, unit, (delta > 0) == (key in HIGHER)))
    return out


def verdict(policy: str, baseline: str, ours: Kpis, theirs: Kpis) -> dict[str, Any]:
    """``policy`` against ``baseline``: what it gained and lost (two lines of text, and the numbers)."""
    found = changes(ours, theirs)
    better = [c for c in found if c.better]
    worse = [c for c in found if not c.better]
    head = f"{policy} vs {baseline}: "
    comparable = any(ours.get(k) is not None and theirs.get(k) is not None for k, _, _ in VERDICT_KPIS)
    if found:
        lines = [
            head + "better on " + (", ".join(c.text for c in better) or "nothing measured"),
            " " * len(head) + "worse on " + (", ".join(c.text for c in worse) or "nothing measured"),
        ]
    else:
        lines = [head + ("the same on every KPI compared" if comparable else "nothing to compare: no KPI has data")]

    def numbers(cs: Sequence[Change]) -> dict[str, dict[str, float | str]]:
        return {c.key: {"change": round(c.delta, 3), "unit": c.unit} for c in cs}

    return {"baseline": baseline, "better": numbers(better), "worse": numbers(worse), "lines": lines}


# ---------------------------------------------------------------------------------------------- timeline
@dataclass(frozen=True, slots=True)
class Timeline:
    """When the arrivals stop, when the last job ends, and what runs in between (the first run's tail)."""

    arrivals_span_s: float
    makespans: dict[str, float | None]
    policy: str  # whose tail is described
    left: int  # jobs that ended after the last arrival
    big: int  # of those, gangs of more than half the cluster: they run one at a time
    biggest_gpus: int
    tail_s: float  # last arrival to the last end
    tail_running: float | None  # jobs running on average in the tail (from the samples)
    tail_allocated: float | None  # share of the GPUs allocated on average in the tail

    @property
    def has_tail(self) -> bool:
        return self.left > 0 and self.tail_s > max(0.1 * self.arrivals_span_s, 3600.0)

    def text(self) -> str:
        known = {p: m for p, m in self.makespans.items() if m is not None}
        if not known:
            return "nothing ran: no job started, so there is no makespan"
        if self.arrivals_span_s > 0:
            arrivals = f"arrivals span {fmt_duration(self.arrivals_span_s)}"
        else:
            arrivals = "every job arrived at once"
        ends = sorted(set(known.values()))
        if len(known) == 1 or len(ends) == 1:
            last = f"the last job ended {fmt_duration(ends[0])} after the first arrival"
        else:
            each = ", ".join(f"{fmt_duration(m)} ({p})" for p, m in known.items())
            last = f"the last job ended after {each}"
        if not self.has_tail:
            return f"{arrivals}; {last}"
        tail = f"the tail ({self.policy}): {plural(self.left, 'job')} ended after the last arrival"
        if self.big:
            gangs = "gang" if self.big == 1 else "gangs"
            tail += (
                f", {self.big:,} of them {gangs} of more than half the cluster (up to {self.biggest_gpus:,} GPUs) "
                "that can only run one at a time"
            )
        if self.tail_running is not None and self.tail_allocated is not None:
            tail += (
                f"; in those last {fmt_duration(self.tail_s)}, {self.tail_running:.1f} jobs ran on average, "
                f"holding {fmt_pct(self.tail_allocated)} of the GPUs"
            )
        return f"{arrivals}; {last}: {tail}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "arrivals_span_s": self.arrivals_span_s,
            "makespan_s": self.makespans,
            "tail": {
                "policy": self.policy,
                "tail_s": self.tail_s,
                "jobs_ended_after_last_arrival": self.left,
                "gangs_over_half_the_cluster": self.big,
                "biggest_gpus": self.biggest_gpus,
                "mean_running_jobs": self.tail_running,
                "mean_allocated_share": self.tail_allocated,
            },
            "note": self.text(),
        }


def timeline(results: Sequence[SimResult], cluster: GPUCluster) -> Timeline:
    """The arrivals' span, each run's makespan, and the first run's tail after the last arrival."""
    makespans = {r.policy: _num(r.kpis.get("makespan_s")) for r in results}
    first = results[0] if results else None
    runs = list(first.jobs.values()) if first is not None else []
    submits = [r.spec.submit_time for r in runs]
    t0, last_arrival = (min(submits), max(submits)) if submits else (0.0, 0.0)
    left = [r for r in runs if r.end is not None and r.end > last_arrival and r.first_start is not None]
    half = cluster.total_gpus / 2

    def gpus(r: Any) -> float:
        return float(r.spec.unit.gpu_demand_milli * r.spec.required_units / MILLI_PER_GPU)

    big = [r for r in left if gpus(r) > half]
    end = max((r.end for r in left if r.end is not None), default=last_arrival)
    running = allocated = None
    if first is not None:
        t = first.series.get("t", [])
        idx = [i for i, x in enumerate(t) if x >= last_arrival - t0]
        if idx and len(first.series.get("running", [])) == len(t) and len(first.series.get("allocated", [])) == len(t):
            running = statistics.fmean(first.series["running"][i] for i in idx)
            allocated = statistics.fmean(first.series["allocated"][i] for i in idx)
    return Timeline(
        arrivals_span_s=last_arrival - t0,
        makespans=makespans,
        policy=first.policy if first is not None else "",
        left=len(left),
        big=len(big),
        biggest_gpus=round(max((gpus(r) for r in big), default=0.0)),
        tail_s=max(end - last_arrival, 0.0),
        tail_running=running,
        tail_allocated=allocated,
    )


def _num(v: float | int | None) -> float | None:
    return None if v is None else float(v)
