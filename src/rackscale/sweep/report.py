"""The sweep's HTML report: one self-contained file (plots inline as SVG), the comparison and the tables.

matplotlib is imported only here and only when it is installed; without it the report has the tables
and says why there are no plots.
"""

from __future__ import annotations

import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rackscale.sweep.perf_cells import perf_kpi_order
from rackscale.sweep.spec import CellOptions

# A record names only the options that differ from the defaults; a table shows every swept one.
DEFAULTS: dict[str, Any] = {k: f.default for k, f in CellOptions.model_fields.items()}

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}"
    "td.l,th.l{text-align:left}.failed{color:#b00}.note{color:#555}"
)


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _est(e: Mapping[str, Any] | None) -> str:
    if not e:
        return "n/a"
    ci = "" if e.get("ci95") is None else f" ± {e['ci95']:.3g}"
    return f"{e['mean']:.4g}{ci} (n={e['n']})"


def _table(heads: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1, cls: str = "") -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(heads))
    body = []
    for r in rows:
        tds = "".join(f'<td class="{"l" if i < left else ""}">{html.escape(c)}</td>' for i, c in enumerate(r))
        body.append(f"<tr>{tds}</tr>")
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _label(options: Mapping[str, Any], varying: Sequence[str]) -> str:
    return ", ".join(f"{k}={json.dumps(_value(options, k))}" for k in varying) or "(all cells alike)"


def _value(options: Mapping[str, Any], key: str) -> Any:
    return options.get(key, DEFAULTS.get(key))


def _plots(groups: Sequence[Mapping[str, Any]], kpis: Sequence[str], varying: Sequence[str]) -> tuple[str, str]:
    """Each KPI against the first swept option that is not the policy, one line per policy, CI error bars.
    Returns (the SVGs, a note)."""
    try:
        import matplotlib  # type: ignore[import-not-found, import-untyped, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return "", "No plots: matplotlib is not installed (pip install matplotlib); the tables hold every number."
    axes = [k for k in varying if k != "policy"]
    x_opt = axes[0] if axes else None
    out = []
    for kpi in kpis:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        by_policy: dict[str, list[tuple[Any, float, float]]] = {}
        for g in groups:
            e = g.get(kpi)
            if not e:
                continue
            policy = str(_value(g["options"], "policy"))
            x = _value(g["options"], x_opt) if x_opt else policy  # nothing else swept: one point per policy
            by_policy.setdefault(policy, []).append((x, e["mean"], e["ci95"] or 0.0))
        # A numeric axis only when every x is a number: an option left at its default (None) beside set
        # values, or a list, makes the axis categorical (matplotlib refuses numbers on a categorical axis).
        numeric = all(
            isinstance(p[0], int | float) and not isinstance(p[0], bool) for v in by_policy.values() for p in v
        )
        for policy, pts in sorted(by_policy.items()):
            if numeric:
                pts.sort(key=lambda p: p[0])
                xs: list[Any] = [p[0] for p in pts]
            else:
                pts.sort(key=lambda p: json.dumps(p[0], sort_keys=True))
                xs = ["default" if p[0] is None else p[0] if isinstance(p[0], str) else json.dumps(p[0]) for p in pts]
            ax.errorbar(xs, [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3, label=policy)
        ax.set_xlabel(x_opt or "policy")
        ax.set_ylabel(kpi)
        if by_policy:  # a KPI n/a in every group has no line to name
            ax.legend(fontsize="small")
        buf = io.StringIO()
        fig.tight_layout()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        svg = buf.getvalue()
        out.append(svg[svg.find("<svg") :])
    return "".join(out), "Error bars: 95 % confidence intervals over seeds (Student t)."


def write_report(
    path: Path,
    *,
    name: str,
    records: Sequence[Mapping[str, Any]],
    groups: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Mapping[str, Any]],
    kpis: Sequence[str],
    perf: Sequence[Mapping[str, Any]] = (),
    perf_comparisons: Sequence[Mapping[str, Any]] = (),
) -> None:
    keys = sorted({k for g in groups for k in g["options"]} | {k for r in records for k in r.get("options", {})})
    varying = [k for k in keys if k != "seed" and len({json.dumps(_value(g["options"], k)) for g in groups}) > 1]
    if "policy" not in varying and any("policy" in g["options"] for g in groups):
        varying.insert(0, "policy")
    plots, note = _plots(groups, kpis, varying) if groups else ("", "No simulate cells.")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>sweep {html.escape(name)}</title>"]
    parts.append(f"<style>{STYLE}</style></head><body><h1>Sweep {html.escape(name)}</h1>")
    every = [*records, *perf]
    ok = sum(1 for r in every if r.get("status") == "ok")
    parts.append(f"<p>{ok} cells done, {len(every) - ok} failed.</p>")
    if comparisons:
        parts.append("<h2>Comparison (paired by seed, mean relative difference ± 95 % CI)</h2>")
        rows = [[_label(c["options"], [v for v in varying if v != "policy"]), c["text"]] for c in comparisons]
        parts.append(_table(["cells", "comparison"], rows, left=2, cls="compare"))
    parts.append(f"<h2>Plots</h2><p class='note'>{html.escape(note)}</p>{plots}")
    parts.append("<h2>Means over seeds (± 95 % CI)</h2>")
    rows = [[_label(g["options"], varying), ",".join(map(str, g["seeds"])), *(_est(g.get(k)) for k in kpis)]
            for g in groups]  # fmt: skip
    parts.append(_table(["cells", "seeds", *kpis], rows, left=2, cls="groups"))
    parts.append("<h2>Cells</h2>")
    rows = [[_label(r.get("options", {}), [*varying, "seed"]), str(r.get("status")),
             *(_fmt((r.get("kpis") or {}).get(k)) for k in kpis), str(r.get("error") or "")]
            for r in records]  # fmt: skip
    parts.append(_table(["cell", "status", *kpis, "error"], rows, left=2, cls="cells"))
    if perf:
        parts.append(_perf_section(perf))
    if perf_comparisons:
        parts.append("<h2>perf serve points against the baseline system (ratio of tokens/s per GPU)</h2>")
        parts.append(_table(["comparison"], [[c["text"]] for c in perf_comparisons], cls="perf-compare"))
    parts.append("</body></html>\n")
    tmp = path.with_name(path.name + ".part")
    tmp.write_text("".join(parts), encoding="utf-8")
    tmp.replace(path)


def _perf_section(perf: Sequence[Mapping[str, Any]]) -> str:
    """The ``perf serve`` cells: one row each, the best tokens/s per GPU at each target and the peak."""
    kpis = [k for k in perf_kpi_order(k for r in perf for k in (r.get("kpis") or {})) if k.startswith("tok_s_gpu_at_")]
    heads = ["cell", "status", *(k.removeprefix("tok_s_gpu_at_") + " tok/s/user" for k in kpis), "peak", "error"]
    rows = []
    for r in perf:
        o = {k: v for k, v in r.get("options", {}).items() if k != "kind"}
        got = r.get("kpis") or {}
        cells = ["unreachable" if r.get("status") == "ok" and got.get(k) is None else _fmt(got.get(k)) for k in kpis]
        rows.append([_label(o, list(o)), str(r.get("status")), *cells, _fmt(got.get("peak_tok_s_gpu")),
                     str(r.get("error") or "")])  # fmt: skip
    return (
        "<h2>perf serve points (tokens/s per GPU at each interactivity target)</h2>"
        "<p class='note'>Predictions of the performance model (docs/perf.md), not measurements.</p>"
        + _table(heads, rows, left=2, cls="perf")
    )
