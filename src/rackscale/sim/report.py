"""A self-contained HTML report of simulation runs: KPIs side by side and inline SVG charts.

One file, no external resources (no JS, CSS, fonts or images to fetch): the charts are SVG written
here. The output depends only on the inputs, so the same runs give the same bytes.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from rackscale.model.topology import GPUCluster
from rackscale.sim.simulator import SimResult
from rackscale.sim.summary import (
    HIGHER,
    LOWER,
    SAME_REST,
    currency_code,
    fmt_kpi,
    goal_text,
    judge_all,
    label,
    mark,
    policy_note,
    timeline,
    verdict,
)

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
HEAT_STOPS = ((0.0, (247, 251, 255)), (0.5, (107, 174, 214)), (1.0, (8, 48, 107)))  # idle -> full
MAX_HEAT_ROWS, MAX_HEAT_COLS, MAX_POINTS = 64, 180, 2000  # heatmap rows (rack buckets) and columns, line points

# The seed's figures (DESIGN.md section 5): shown beside measured values, never used as results.
REFERENCES = {
    "training_samples_per_s": "280,000 samples/s (ResNet50 training, one cluster)",
    "cost_per_million_tokens": "CNY 300 (CNY 0.0003 per token)",
    "cost_efficiency_gain": "x15 cost efficiency",
}
LOCALITY = ("single_rack_share", "intra_rack_traffic_share")  # the placement KPIs the first chart shows
LLM_KPIS = ("interactivity_slo_attainment", "ttft_slo_attainment", "mean_user_tokens_per_s", "mean_ttft_s")
LLM_NOTE = (
    "LLM services (jobs that name their model): each replica is timed on its own placement by the LLM model. "
    "Interactivity SLO attainment is the share of their demand-time whose tokens/s per user met the service's "
    "target, TTFT SLO attainment the share whose time to first token did (an overloaded interval misses it); "
    "tokens/s per user is weighted by the tokens served, TTFT by demand-time (overloaded intervals left out)."
)

CSS = """
body{font:14px/1.45 system-ui,sans-serif;color:#222;margin:24px auto;max-width:1320px;padding:0 16px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}dt{color:#666}dd{margin:0}
table.kpi{border-collapse:collapse;font-variant-numeric:tabular-nums}.note{color:#666;font-size:12px}
table.kpi th,table.kpi td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
table.kpi th:first-child,table.kpi td:first-child{text-align:left}table.kpi td.best{background:#e3f4e1;font-weight:600}
table.kpi .ref{background:#f6f3ea;color:#6b5a2a;font-style:italic;text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:16px}figure{margin:0;padding:6px;
border:1px solid #e4e4e4;border-radius:4px}
figcaption{font-size:12px;padding-left:56px}figcaption span{margin-right:16px;white-space:nowrap}
figcaption i{display:inline-block;width:18px;height:3px;margin:0 5px 3px}
svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}svg .title{font-size:13px}
ul.verdict{margin:8px 0;padding-left:20px}figure p.note{margin:6px 8px 2px 56px}
"""


def write_report(
    path: str | os.PathLike[str], *, cluster: GPUCluster, results: Sequence[SimResult], workload: str
) -> None:
    """Write :func:`render_report` to ``path`` (UTF-8)."""
    Path(path).write_text(render_report(cluster=cluster, results=results, workload=workload), encoding="utf-8")


def render_report(*, cluster: GPUCluster, results: Sequence[SimResult], workload: str) -> str:
    """The whole report as one HTML document: the KPIs and the verdict, then placement and locality, job
    completion times, the racks over time, and last the cluster's load over time with its tail explained."""
    policies = [r.policy for r in results]
    colours = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(policies)}
    currency = currency_code(cluster.pricing.currency)
    models = ", ".join(cluster.gpu_models) or "-"
    meta = {
        "cluster": cluster.name,
        "GPUs": f"{cluster.total_gpus:,} ({models})",
        "racks": f"{len(cluster.racks):,} in {len(cluster.regions)} region(s)",
        "price": f"{currency} {cluster.pricing.per_gpu_hour:,.2f} per GPU-hour",
        "workload": workload,
        "policies compared": ", ".join(policies) or "-",
    }
    over_time, traffic = _time_charts(results, colours)
    span = max((_sample_ends(r.series.get("t", []))[-1] for r in results if r.series.get("t")), default=1.0)
    if results and over_time:
        over_time[0] += f'<p class="note">{escape(_tail_note(results, cluster))}</p>'
    sections = {
        "KPIs": _kpi_table(results, currency) + _policies(results) + _verdict(results),
        "Placement and locality": _figures([_locality_chart(results, colours), *traffic]),
        "Job completion times": _figures([_jct_cdf(results, colours)]),
        "Per-rack allocation": _figures([_heatmap(r, cluster, span) for r in results]),
        "Cluster over time": _figures(over_time),
    }
    return "\n".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f"<title>rackscale report: {escape(cluster.name)}</title><style>{CSS}</style></head><body>",
            f"<h1>rackscale simulation report: {escape(cluster.name)}</h1>",
            "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in meta.items()) + "</dl>",
            *(f"<h2>{escape(title)}</h2>\n{body}" for title, body in sections.items()),
            "</body></html>\n",
        ]
    )


def _policies(results: Sequence[SimResult]) -> str:
    items = "".join(f"<li><b>{escape(r.policy)}</b>: {escape(policy_note(r.policy))}</li>" for r in results)
    return f'<ul class="verdict">{items}</ul><p class="note">The policies: {escape(SAME_REST)}.</p>'


def _verdict(results: Sequence[SimResult]) -> str:
    if len(results) < 2:
        return ""
    ours = results[0]
    lines = [verdict(ours.policy, r.policy, ours.kpis, r.kpis)["lines"] for r in results[1:]]
    items = "".join(f"<li>{escape('; '.join(line.strip() for line in pair))}</li>" for pair in lines)
    return f'<h3>Verdict</h3><ul class="verdict">{items}</ul>'


def _tail_note(results: Sequence[SimResult], cluster: GPUCluster) -> str:
    tl = timeline(results, cluster)
    text = tl.text()
    if tl.has_tail:
        return f"The arrivals stop at hour {tl.arrivals_span_s / 3600:,.0f}: {text}."
    return text[:1].upper() + text[1:] + "."


# ---------------------------------------------------------------------------------------------- KPI table
def _kpi_table(results: Sequence[SimResult], currency: str) -> str:
    keys = list(dict.fromkeys(k for r in results for k in r.kpis))

    Row = tuple[str, str, list[float | int | None]]
    rows: list[Row] = [(k, label(k), [r.kpis.get(k) for r in results]) for k in keys]
    if len(results) > 1:
        base = results[-1]
        metric = "cost_efficiency_samples" if base.kpis.get("cost_efficiency_samples") else "cost_efficiency_tokens"
        denom = base.kpis.get(metric)
        gains: list[float | int | None] = []
        for r in results:
            v = r.kpis.get(metric)
            gains.append(float(v) / float(denom) if v is not None and denom else None)
        rows.append(("cost_efficiency_gain", f"cost efficiency relative to {base.policy}", gains))
    goals = judge_all({r.policy: r.kpis for r in results}, currency)
    head = "".join(f"<th>{escape(r.policy)}</th>" for r in results)
    ref_head = '<th>goal</th><th class="ref">seed reference (not a result)</th></tr></thead><tbody>'
    out = [f'<table class="kpi"><thead><tr><th>KPI</th>{head}{ref_head}']
    for key, name, values in rows:
        shown = [fmt_kpi(key, v, currency) for v in values]
        best = _best(key, values, shown)
        judged = goals.get(key, {})
        marks = [judged.get(r.policy, "") for r in results]
        cells = "".join(
            ('<td class="best">' if i in best else "<td>") + escape(v + (f" ({m})" if mark(m) else "")) + "</td>"
            for i, (v, m) in enumerate(zip(shown, marks, strict=True))
        )
        goal, ref = escape(goal_text(key)), escape(REFERENCES.get(key, ""))
        out.append(
            f'<tr><td title="{escape(key)}">{escape(name)}</td>{cells}<td>{goal}</td><td class="ref">{ref}</td></tr>'
        )
    out.append(
        '</tbody></table><p class="note">Green: the better value, where the better direction is known; a goal is '
        "met or missed, or ranks the policies (best / worse). n/a: nothing to measure (e.g. no job completed, no "
        "inference served). The reference column quotes the seed's figures (DESIGN.md section 5) for comparison; "
        "they were not measured here. The simulated workload is not ResNet50; cost-efficiency gains are against "
        "the last policy.</p>"
    )
    if any(r.kpis.get(k) is not None for r in results for k in LLM_KPIS):
        out.append(f'<p class="note">{escape(LLM_NOTE)}</p>')
    return "".join(out)


def _best(key: str, values: Sequence[float | int | None], shown: Sequence[str]) -> set[int]:
    """The better value(s) of a row, compared as shown: no highlight when every shown value is the same."""
    sign = 1.0 if key in HIGHER else -1.0 if key in LOWER or key.startswith("cost_per_") else 0.0
    valid = {i: float(v) for i, v in enumerate(values) if v is not None}
    if sign == 0.0 or len({shown[i] for i in valid}) < 2:
        return set()
    top = shown[max(valid, key=lambda i: sign * valid[i])]
    return {i for i in valid if shown[i] == top}


# ---------------------------------------------------------------------------------------------- charts
Series = tuple[str, str, Sequence[float], Sequence[float]]  # label, colour, xs (seconds), ys
W, H, ML, MR, MT, MB = 620, 262, 62, 14, 28, 40
PCT = "{:.0%}".format
LOG_TICKS = ((1, "1s"), (10, "10s"), (60, "1m"), (600, "10m"), (3600, "1h"), (36000, "10h"), (86400, "1d"))


def _figures(svgs: Sequence[str]) -> str:
    return '<div class="grid">' + "".join(f"<figure>{s}</figure>" for s in svgs) + "</div>"


def _svg(title: str, height: int) -> list[str]:
    t = escape(title)
    return [
        f'<svg viewBox="0 0 {W} {height}" role="img" aria-label="{t}">',
        f'<text class="title" x="{ML}" y="16">{t}</text>',
    ]


def _num(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:,.0f}k"
    return f"{v:,.0f}" if v == int(v) else f"{v:g}"


def _time_unit(span_s: float) -> tuple[float, str]:
    return (3600.0, "hours") if span_s >= 3 * 3600 else (60.0, "minutes")


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values from at or below ``lo`` to at or above ``hi``."""
    hi = hi if hi > lo else lo + 1.0
    raw = (hi - lo) / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw * (1 - 1e-9))
    return [round(k * step, 10) for k in range(math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9) + 1)]


def _time_charts(results: Sequence[SimResult], colours: dict[str, str]) -> tuple[list[str], list[str]]:
    def chart(title: str, key: str, y_fmt: Callable[[float], str] = _num, y_hi: float = 5.0) -> str:
        s = [(r.policy, colours[r.policy], r.series.get("t", []), r.series.get(key, [])) for r in results]
        return _line_chart(title, s, x_label="since the first arrival", y_fmt=y_fmt, y_hi=y_hi)

    alloc = chart("GPU allocation", "allocated", PCT, 1.0)
    cluster = [alloc, chart("Queue length (jobs waiting)", "queued"), chart("Running jobs", "running")]
    tiers = {"NVLink": "inside racks", "RDMA": "between racks", "backbone": "between regions"}
    return cluster, [chart(f"{k} traffic {where}, Gb/s", f"{k.lower()}_gbps") for k, where in tiers.items()]


def _locality_chart(results: Sequence[SimResult], colours: dict[str, str]) -> str:
    """The placement KPIs as bars, one per policy: how much of the training stayed in one NVLink domain."""
    bar, gap, ml = 18, 16, 220
    pw = W - ml - 70
    height = MT + len(LOCALITY) * (len(results) * bar + gap) + 30
    out = _svg("Placement locality (higher is better)", height)
    y = MT + 6.0
    for key in LOCALITY:
        mid = y + len(results) * bar / 2 + 4
        out.append(f'<text x="{ml - 8}" y="{mid:.1f}" text-anchor="end">{escape(label(key))}</text>')
        for r in results:
            v = r.kpis.get(key)
            w = pw * min(max(float(v), 0.0), 1.0) if v is not None else 0.0
            out.append(f'<rect x="{ml}" y="{y:.1f}" width="{w:.1f}" height="{bar - 4}" fill="{colours[r.policy]}"/>')
            out.append(f'<text x="{ml + w + 5:.1f}" y="{y + bar - 8:.1f}">{escape(fmt_kpi(key, v))}</text>')
            y += bar
        y += gap
    out.append(f'<path d="M{ml} {MT}V{y:.1f}H{ml + pw}" fill="none" stroke="#666"/>')
    for k in range(5):
        out.append(_xtick(ml + pw * k / 4, y, f"{25 * k}%"))
    return "".join(out) + "</svg>" + _legend([(r.policy, colours[r.policy]) for r in results])


def _jct_cdf(results: Sequence[SimResult], colours: dict[str, str]) -> str:
    series: list[Series] = []
    for r in results:
        done = [j for j in r.jobs.values() if j.status == "completed" and j.end is not None]
        jct = sorted(max(j.end - j.spec.submit_time, 0.0) for j in done if j.end is not None)
        n = len(jct)
        ys = [k / n for i in range(n) for k in (i, i + 1)]  # a step: up at each completion time
        series.append((f"{r.policy} ({n} jobs)", colours[r.policy], [x for x in jct for _ in (0, 1)], ys))
    xs = [x for _, _, sx, _ in series for x in sx if x > 0]
    log = bool(xs) and max(xs) / min(xs) >= 20
    label = "job completion time, submit to end" + (", log scale" if log else "")
    return _line_chart("JCT CDF of completed jobs", series, x_label=label, y_fmt=PCT, y_hi=1.0, x_log=log)


def _line_chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_fmt: Callable[[float], str] = _num,
    y_hi: float = 0.0,
    x_log: bool = False,
) -> str:
    """Lines over a time axis in seconds (linear in minutes or hours, or log with duration ticks)."""
    pw, ph = W - ML - MR, H - MT - MB
    xs = [x for _, _, sx, _ in series for x in sx if x > 0 or not x_log]
    ys = [y for _, _, _, sy in series for y in sy]
    out = _svg(title, H)
    if not xs or not ys:
        return "".join(out) + f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text></svg>'
    if x_log:
        lo, hi = math.log10(min(xs)), math.log10(max(xs))
        xt = [(math.log10(v), lab) for v, lab in LOG_TICKS if lo <= math.log10(v) <= hi]
    else:
        div, unit = _time_unit(max(xs) - min(0.0, min(xs)))
        ticks = _ticks(min(0.0, min(xs)) / div, max(xs) / div)
        lo, hi, x_label = ticks[0] * div, ticks[-1] * div, f"{x_label} ({unit})"
        xt = [(v * div, _num(v)) for v in ticks]
    hi = hi if hi > lo else lo + 1.0
    yt = _ticks(0.0, max(*ys, y_hi) or 1.0)

    def px(x: float) -> float:
        return ML + ((math.log10(x) if x_log else x) - lo) / (hi - lo) * pw

    def py(y: float) -> float:
        return MT + ph - y / yt[-1] * ph

    for v in yt:
        y = f"{py(v):.1f}"
        out.append(f'<line x1="{ML}" x2="{ML + pw}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{ML - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{escape(y_fmt(v))}</text>')
    for v, lab in xt:
        out.append(_xtick(ML + (v - lo) / (hi - lo) * pw, MT + ph, lab))
    out.append(f'<path d="M{ML} {MT}V{MT + ph}H{ML + pw}" fill="none" stroke="#666"/>')
    out.append(f'<text x="{ML + pw / 2}" y="{H - 6}" text-anchor="middle">{escape(x_label)}</text>')
    for n, (_, colour, sx, sy) in enumerate(series):
        pts = [(x, y) for x, y in zip(sx, sy, strict=False) if x > 0 or not x_log]
        step = max(1, math.ceil(len(pts) / MAX_POINTS))
        pts = pts[::step] + pts[-1:] if step > 1 else pts
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="{max(1.2, 3.2 - n):.1f}"/>')
    return "".join(out) + "</svg>" + _legend([(label, colour) for label, colour, _, _ in series])


def _xtick(x: float, y: float, label: str) -> str:
    return (
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 4}" stroke="#666"/>'
        f'<text x="{x:.1f}" y="{y + 16}" text-anchor="middle">{escape(label)}</text>'
    )


def _legend(items: Sequence[tuple[str, str]]) -> str:
    keys = (f'<span><i style="background:{c}"></i>{escape(label)}</span>' for label, c in items)
    return "<figcaption>" + "".join(keys) + "</figcaption>"


# ---------------------------------------------------------------------------------------------- heatmap
def _heat_colour(share: float) -> str:
    s = min(max(share, 0.0), 1.0)
    for (a, ca), (b, cb) in itertools.pairwise(HEAT_STOPS):
        if s <= b:
            return "#" + "".join(f"{round(x + (y - x) * (s - a) / (b - a)):02x}" for x, y in zip(ca, cb, strict=True))
    return "#" + "".join(f"{x:02x}" for x in HEAT_STOPS[-1][1])


def _buckets(n: int, most: int) -> list[range]:
    size = max(1, math.ceil(n / most))
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def _sample_ends(t: Sequence[float]) -> list[float]:
    """Each sample stands for the time up to the next one (the last: one more sampling interval)."""
    return [*t[1:], t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0)]


def _heatmap(result: SimResult, cluster: GPUCluster, span: float) -> str:
    """Racks (bucketed, GPU-weighted) x time (bucketed); colour = allocated share; equal neighbours merged."""
    samples, t, racks = result.rack_series, result.series.get("t", []), cluster.racks
    ml, hh = 120, 300
    out = _svg(f"{result.policy}: allocated share per rack over time", hh + MT + MB)
    if not samples or len(t) != len(samples) or not racks:
        return "".join(out) + f'<text x="{W / 2}" y="{MT + hh / 2}" text-anchor="middle">no samples</text></svg>'
    ends = _sample_ends(t)  # t counts from the first arrival: the axis starts at 0
    t_end = max(span, ends[-1], 1e-9)
    rows, cols = _buckets(len(racks), MAX_HEAT_ROWS), _buckets(len(samples), MAX_HEAT_COLS)
    pw, rh = W - ml - 70, hh / len(rows)

    def px(x: float) -> float:
        return ml + x / t_end * pw

    out.append(f'<rect x="{ml}" y="{MT}" width="{pw}" height="{hh}" fill="#e4e4e4"/>')  # grey: not sampled
    for ri, rr in enumerate(rows):
        gpus = sum(racks[k].gpus for k in rr) or 1
        runs: list[tuple[float, float, str]] = []  # (x0, x1, colour), equal neighbours merged
        for cc in cols:
            share = sum(samples[i][k] * racks[k].gpus for i in cc for k in rr) / (gpus * len(cc))
            colour, x0, x1 = _heat_colour(round(share * 20) / 20), px(t[cc[0]]), px(ends[cc[-1]])
            if runs and runs[-1][2] == colour:
                x0 = runs.pop()[0]
            runs.append((x0, x1, colour))
        y, h = MT + ri * rh, rh + 0.3
        out += [
            f'<rect x="{a:.1f}" y="{y:.1f}" width="{b - a + 0.3:.1f}" height="{h:.1f}" fill="{c}"/>' for a, b, c in runs
        ]
    for ri in range(0, len(rows), max(1, math.ceil(len(rows) / 16))):
        first, last = racks[rows[ri][0]].name, racks[rows[ri][-1]].name
        name = first if first == last else f"{first}…{last}"
        out.append(f'<text x="{ml - 6}" y="{MT + (ri + 0.5) * rh + 4:.1f}" text-anchor="end">{escape(name)}</text>')
    div, unit = _time_unit(t_end)
    out += [_xtick(px(v * div), MT + hh, _num(v)) for v in _ticks(0.0, t_end / div) if v * div <= t_end]
    per = f"; each row averages {len(rows[0])} racks" if len(rows[0]) > 1 else ""
    label = f"since the first arrival ({unit}){per}"
    out.append(f'<text x="{ml + pw / 2}" y="{hh + MT + MB - 6}" text-anchor="middle">{label}</text>')
    bx, bh = W - 50, hh / 11  # the colour scale: 11 steps from 0% (bottom) to 100% (top)
    for k in range(11):
        y = MT + hh - (k + 1) * bh
        out.append(f'<rect x="{bx}" y="{y:.1f}" width="14" height="{bh + 0.3:.1f}" fill="{_heat_colour(k / 10)}"/>')
    out.append(f'<rect x="{bx}" y="{MT}" width="14" height="{hh}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{bx + 18}" y="{MT + 8}">100%</text><text x="{bx + 18}" y="{MT + hh}">0%</text>')
    return "".join(out) + "</svg>"
