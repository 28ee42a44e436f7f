"""``rackscale sweep``: run a what-if grid of ``simulate`` (and ``perf serve``) cells on a process pool or on Ray."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from rackscale.cli.output import OutputFormat, console, emit, err_console, fail, printable


# The help is rich markup: a bare [sweep] would be read as a style tag and vanish, so it is escaped (\\[).
def sweep(
    file: Path = typer.Option(..., "-f", "--file", help="The Sweep document (YAML); docs/sweep.md."),
    out: Path | None = typer.Option(None, "--out", help="Results folder (default sweeps/NAME); a rerun resumes."),
    workers: int | None = typer.Option(None, "--workers", min=1, max=1024, help="Pool processes (default: CPUs)."),
    ray_address: str | None = typer.Option(
        None, "--ray", metavar="auto|ADDRESS", help="Run on a Ray cluster: auto (this machine's) or its address."
    ),
    retries: int = typer.Option(2, "--retries", min=0, max=20, help="Retries of a cell whose worker was lost."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table, json or yaml."),
) -> None:
    """Run every cell of a sweep (a grid and/or a list of scenarios over simulate's options, and perf serve
    points under spec.perf) and write the
    results: results.jsonl (append-only, one line per finished cell, the source of truth), results.csv,
    results.parquet (with pyarrow), summary.json and report.html under --out. Seeds are aggregated into a
    mean and a 95 % confidence interval; each policy is compared with spec.compare.baseline, paired by
    seed. A rerun skips the cells already done (keyed by options, project version and input files); a
    failed cell is recorded with its error and the sweep goes on; a cell whose worker was killed is
    retried (--retries). Locally on a process pool; with --ray on a Ray cluster (pip install
    'rackscale\\[sweep]'), one task per cell, the trace put in the object store once.

    Examples:\n
      rackscale sweep -f sweep.yaml\n
      rackscale sweep -f sweep.yaml --workers 2 --out results/policies\n
      rackscale sweep -f sweep.yaml --ray auto            # on the Ray cluster this machine is part of\n
      rackscale sweep -f sweep.yaml --ray 10.0.0.5:6379 -o json
    """
    from rackscale.sweep import SweepError, load_sweep
    from rackscale.sweep.results import ResultsWriter, read_results
    from rackscale.sweep.runner import make_cells, run_pool, run_ray

    try:
        spec = load_sweep(file)
        options = spec.expand()
    except SweepError as e:
        fail(str(e))
    folder = out if out is not None else Path("sweeps") / spec.metadata.name
    results_path = folder / "results.jsonl"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        cells, skipped = make_cells(options, done=read_results(results_path))
    except OSError as e:
        fail(f"--out {folder}: cannot write there ({e.strerror or e})")
    if skipped:
        err_console.print(f"{skipped} of {len(options)} cells already done in {results_path}: skipped")
    with ResultsWriter(results_path) as writer, _progress(len(cells)) as on_event:
        try:
            if ray_address is not None:
                stats = run_ray(cells, writer, address=ray_address, retries=retries, on_event=on_event)
            else:
                n = workers or os.cpu_count() or 1
                stats = run_pool(cells, writer, workers=n, retries=retries, on_event=on_event)
        except SweepError as e:
            fail(str(e))
    summary = _finish(spec, options, folder, stats=stats, skipped=skipped)
    if output is not OutputFormat.table:
        emit(summary, output)
        return
    _print(summary)


def _finish(spec: Any, options: list[Any], folder: Path, *, stats: Any, skipped: int) -> dict[str, Any]:
    """Exports, statistics and the report over this sweep's cells (a results file may hold others)."""
    import json

    from rackscale.sweep.cells import cell_key
    from rackscale.sweep.perf_cells import PERF_KIND, perf_compare, perf_kpi_order
    from rackscale.sweep.report import write_report
    from rackscale.sweep.results import aggregate, compare, read_results, write_csv, write_parquet

    kpis = list(spec.spec.compare.kpis)
    everything = read_results(folder / "results.jsonl")
    records = [everything[k] for k in (cell_key(o) for o in options) if k in everything]
    perf = [r for r in records if r.get("options", {}).get("kind") == PERF_KIND]
    simulated = [r for r in records if r.get("options", {}).get("kind") != PERF_KIND]
    columns = (kpis if simulated else []) + perf_kpi_order(k for r in perf for k in (r.get("kpis") or {}))
    write_csv(records, folder / "results.csv", columns)
    parquet = write_parquet(records, folder / "results.parquet", columns)
    groups = aggregate(simulated, kpis)
    baseline = spec.spec.compare.baseline
    comparisons = compare(simulated, baseline=baseline, kpis=kpis) if baseline else []
    gpu = spec.spec.perf.baseline if spec.spec.perf is not None else None
    perf_comparisons = perf_compare(perf, baseline=gpu) if gpu else []
    write_report(folder / "report.html", name=spec.metadata.name, records=simulated, groups=groups,
                 comparisons=comparisons, kpis=kpis, perf=perf, perf_comparisons=perf_comparisons)  # fmt: skip
    files = ["results.jsonl", "results.csv", *(["results.parquet"] if parquet else []), "summary.json", "report.html"]
    summary = {
        "name": spec.metadata.name,
        "cells": len(options),
        "run": stats.done + stats.failed,
        "skipped": skipped,
        "done": sum(1 for r in records if r.get("status") == "ok"),
        "failed": sum(1 for r in records if r.get("status") != "ok"),
        "retried": stats.retried,
        "wall_s": round(stats.wall_s, 3),
        "cells_per_min": round(60.0 * (stats.done + stats.failed) / stats.wall_s, 2)
        if stats.wall_s > 0 and stats.done + stats.failed
        else None,
        "folder": str(folder),
        "files": files,
        "groups": groups,
        "comparisons": comparisons,
        "perf": [{"options": r["options"], "kpis": r.get("kpis")} for r in perf if r.get("status") == "ok"],
        "perf_comparisons": perf_comparisons,
        "errors": sorted({str(r.get("error")) for r in records if r.get("status") != "ok"}),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=True) + "\n", encoding="utf-8")
    return summary


_SHARES = ("_rate", "_share", "_attainment", "_ratio", "allocation")


def _kpi_text(kpi: str, stat: Any) -> str:
    """``mean ± half-width`` (the seeds' 95 % interval; the mean alone for one seed), in the KPI's unit."""
    if not isinstance(stat, dict) or stat.get("mean") is None:
        return "-"
    mean, ci = float(stat["mean"]), stat.get("ci95")
    share = kpi.endswith(_SHARES) or kpi.startswith("allocation")

    def one(x: float) -> str:
        return f"{100 * x:.1f} %" if share else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

    return one(mean) + (f" ± {one(float(ci))}" if ci is not None else "")


def _groups_table(groups: list[dict[str, Any]]) -> Any:
    """Each group of cells (the options but the seed) with its KPIs' means over the seeds."""
    from rich.table import Table

    kpis = [k for k in groups[0] if k not in ("options", "seeds")]
    table = Table(title="means over the seeds, ± the 95 % interval")
    table.add_column("cells (options set)")
    table.add_column("seeds", justify="right")
    for kpi in kpis:
        table.add_column(kpi, justify="right")
    from rackscale.sweep.spec import CellOptions

    policy = CellOptions.model_fields["policy"].default  # a group at the default policy says which it is
    for g in groups:
        where = ", ".join(f"{k}={v}" for k, v in {"policy": policy, **g["options"]}.items())
        table.add_row(printable(where), str(len(g["seeds"])), *(_kpi_text(k, g.get(k)) for k in kpis))
    return table


def _print(summary: dict[str, Any]) -> None:
    head = (
        f"sweep {summary['name']}: {summary['cells']} cells, {summary['run']} run, {summary['skipped']} skipped, "
        f"{summary['done']} done, {summary['failed']} failed ({summary['wall_s']:.1f} s)"
    )
    console.print(Text(printable(head)), highlight=False)
    if summary["groups"]:
        console.print(_groups_table(summary["groups"]))
    for c in summary["comparisons"]:
        where = ", ".join(f"{k}={v}" for k, v in c["options"].items())
        console.print(Text(printable(c["text"] + (f"  [{where}]" if where else ""))), highlight=False)
    for c in summary["perf_comparisons"]:
        console.print(Text(printable(c["text"])), highlight=False)
    for e in summary["errors"][:5]:
        err_console.print(Text(printable(f"failed: {e}")), highlight=False)
    console.print(Text(printable(f"results in {summary['folder']}: {', '.join(summary['files'])}")), highlight=False)


class _progress:
    """A rich bar of cells done / running / failed on a terminal; nothing on a pipe."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.running, self.failed = total, 0, 0, 0
        self.bar: Any = None

    def __enter__(self) -> Any:
        from rackscale.sweep.runner import Event

        if err_console.is_terminal and self.total:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                console=err_console, transient=True)  # fmt: skip
            self.bar.start()
            self.task = self.bar.add_task(self._text(), total=self.total)

        def on_event(kind: Event, _cell: Any) -> None:
            self.running += {Event.STARTED: 1, Event.DONE: -1, Event.FAILED: -1, Event.RETRIED: -1}[kind]
            self.done += kind is Event.DONE
            self.failed += kind is Event.FAILED
            if self.bar is not None:
                self.bar.update(self.task, completed=self.done + self.failed, description=self._text())

        return on_event

    def _text(self) -> str:
        return f"cells: {self.done} done, {self.running} running, {self.failed} failed of {self.total}"

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
