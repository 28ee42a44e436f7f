"""``rackscale bench perf``: the performance model against published figures, and its speed."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table

from rackscale.cli.output import (
    OutputFormat,
    ReportJsonOpt,
    ReportOutputOpt,
    chosen_format,
    console,
    emit_document,
)


def bench_perf(
    ctx: typer.Context,
    as_json: ReportJsonOpt = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=100, help="Curves timed for the speed figure.")] = 5,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Reproduce the published figures (docs/perf.md) and time one serving curve.

    Prints each measured InferenceX run against the model's replay of its recipe (the two calibration runs
    marked), then, per figure: the published A/B ratio, the model's (InferenceX: read off the replayed runs as
    the post reads its own; MLPerf: each side's best plan), the error, the plan and the dominant term. Then the
    time of a `perf serve` curve (DeepSeek-R1 FP4 on GB200 NVL72, every plan and batch), the median of --repeat
    runs.

    Example: rackscale bench perf -o json
    """
    fmt = chosen_format(output, as_json, ctx=ctx)
    payload = perf_report(repeat=repeat)
    if fmt is not OutputFormat.table:
        emit_document(payload, fmt)
        return
    _render_perf(payload, repeat=repeat)


def perf_report(*, repeat: int) -> dict[str, Any]:
    """``bench perf``'s document: the figures, the replayed runs, training and the speed of --repeat curves.

    (Its own function so that the CLI's output can be tested on a fixed document: the speed is a timing.)"""
    from rackscale.bench.perf_figures import (
        KNOWN_MISSES,
        KNOWN_RUN_MISSES,
        iso_conditioning,
        run_results,
        serving_results,
        training_results,
    )
    from rackscale.llm.calibration import serving_efficiency
    from rackscale.llm.decode import DEEPSEEK_MTP
    from rackscale.llm.hardware import system_named
    from rackscale.llm.models import model_named
    from rackscale.llm.precision import Precision
    from rackscale.llm.serving import ServeWorkload, serve_curve

    rows: list[dict[str, Any]] = []
    for res in serving_results():
        fig = res.figure
        rows.append(
            {
                "figure": fig.key,
                "published_a": fig.value_a,
                "published_b": fig.value_b,
                "published_ratio": round(res.published_ratio, 3),
                "counts": str(fig.counts),
                "method": res.method,
                "model_a": None if res.a is None else round(res.a.value),
                "model_b": None if res.b is None else round(res.b.value),
                "model_ratio": None if res.ratio is None else round(res.ratio, 3),
                "error": None if res.error is None else round(res.error, 3),
                "plan_a": None if res.a is None else res.a.plan,
                "plan_b": None if res.b is None else res.b.plan,
                "dominant_a": None if res.a is None else res.a.dominant,
                "dominant_b": None if res.b is None else res.b.dominant,
                "known_miss": KNOWN_MISSES.get(fig.key),
                "conditioning": iso_conditioning(fig),
            }
        )
    runs: list[dict[str, Any]] = [
        {
            "system": r.point.system,
            "concurrency": r.point.conc,
            "decode": r.model.plan.label(),
            "mtp_drafts": r.point.mtp_drafts,
            "published_tok_s_user": r.point.tok_s_user,
            "model_tok_s_user": round(r.model.interactivity, 1),
            "interactivity_error": round(r.interactivity_error, 3),
            "published_tok_s_gpu": r.point.tok_s_gpu,
            "model_tok_s_gpu": round(r.model.total_tok_s_gpu, 1),
            "throughput_error": round(r.throughput_error, 3),
            "dominant": r.model.step.dominant,
            "step_ms": round(r.model.step.step_s * 1e3, 2),
            "calibrates": r.calibrated,
            "known_miss": KNOWN_RUN_MISSES.get((r.point.system, r.point.conc)),
        }
        for r in run_results()
    ]
    training: list[dict[str, Any]] = [
        {
            "figure": t.figure.key,
            "published_tflops_per_gpu": t.figure.tflops_per_gpu,
            "model_tflops_per_gpu": None if t.tflops_per_gpu is None else round(t.tflops_per_gpu, 1),
            "error": None if t.error is None else round(t.error, 3),
            "model_mfu": None if t.mfu is None else round(t.mfu, 3),
            "dominant": t.dominant,
            "calibration_point": t.calibrated,
            "note": t.note or KNOWN_MISSES.get(t.figure.key, ""),
        }
        for t in training_results()
    ]
    work = ServeWorkload(
        model=model_named("deepseek-r1"), precision=Precision.FP4, isl=1024, osl=1024, mtp=DEEPSEEK_MTP
    )
    system = system_named("gb200")
    times = []
    evaluated = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        curve = serve_curve(work, system, eff=serving_efficiency(system.gpu))
        times.append(time.perf_counter() - t0)
        evaluated = curve.evaluated
    times.sort()
    speed = {"curve_s_median": times[len(times) // 2], "points_evaluated": evaluated}
    return {"serving": rows, "runs": runs, "training": training, "speed": speed}


def _render_perf(payload: dict[str, Any], *, repeat: int) -> None:
    from rackscale.bench.perf_figures import RUN_ERROR

    rows, runs, training, speed = payload["serving"], payload["runs"], payload["training"], payload["speed"]
    rtable = Table(title="InferenceX's runs, each recipe replayed (tok/s/user; tok/s/GPU counts input + output)")
    columns = ("run", "decode", "MTP", "tok/s/user pub / model", "error", "tok/s/GPU pub / model", "error")
    for col in (*columns, "step ms, dominant"):
        rtable.add_column(col)
    for run in runs:
        mark = f" ({run['calibrates']})" if run["calibrates"] else (" (miss)" if run["known_miss"] else "")
        rtable.add_row(
            f"{run['system']} conc {run['concurrency']:,}{mark}",
            run["decode"],
            str(run["mtp_drafts"]),
            f"{run['published_tok_s_user']:.1f} / {run['model_tok_s_user']:.1f}",
            f"{run['interactivity_error']:+.0%}",
            f"{run['published_tok_s_gpu']:,.0f} / {run['model_tok_s_gpu']:,.0f}",
            f"{run['throughput_error']:+.0%}",
            f"{run['step_ms']:.1f}, {run['dominant']}",
        )
    console.print(rtable)
    table = Table(title="published figures: model vs published (A / B tok/s/GPU)")
    sway = f"published ratio if one run is {RUN_ERROR:.0%} off"
    for col in ("figure", "method", "published", "model", "error", sway, "A: plan, dominant", "B: plan, dominant"):
        table.add_column(col)
    for row in rows:
        r = row
        err = "n/a" if r["error"] is None else f"{r['error']:+.0%}"
        if r["known_miss"]:
            err += " (miss)"
        table.add_row(
            r["figure"],
            f"{r['method']}, {r['counts']} tokens",
            f"{r['published_a']:,.0f} / {r['published_b']:,.0f} = x{r['published_ratio']:.2f}",
            "n/a" if r["model_ratio"] is None else f"{r['model_a']:,} / {r['model_b']:,} = x{r['model_ratio']:.2f}",
            err,
            _sway(r["conditioning"]),
            "-" if r["plan_a"] is None else f"{r['plan_a']}, {r['dominant_a']}",
            "-" if r["plan_b"] is None else f"{r['plan_b']}, {r['dominant_b']}",
        )
    console.print(table)
    ttable = Table(title="training: TFLOP/s per GPU, model vs published (as the source counts)")
    for col in ("figure", "published", "model", "error", "MFU (model)", "dominant", "note"):
        ttable.add_column(col)
    for row in training:
        err = "n/a" if row["error"] is None else f"{row['error']:+.0%}"
        mark = " (calibration)" if row["calibration_point"] else ""
        ttable.add_row(
            str(row["figure"]) + mark,
            f"{row['published_tflops_per_gpu']:g}",
            "n/a" if row["model_tflops_per_gpu"] is None else f"{row['model_tflops_per_gpu']:g}",
            err,
            "n/a" if row["model_mfu"] is None else f"{row['model_mfu']:.0%}",
            str(row["dominant"] or "-"),
            str(row["note"] or ""),
        )
    console.print(ttable)
    console.print(
        f"speed: one serving curve (DeepSeek-R1 FP4, GB200 NVL72, {speed['points_evaluated']} plan x batch points) in "
        f"{speed['curve_s_median'] * 1e3:.0f} ms (median of {repeat})"
    )


def _sway(conditioning: float | None) -> str:
    if conditioning is None:
        return "-"
    return "off its curve" if conditioning == float("inf") else f"±{conditioning:.0%}"


def bench_perf_peer(
    ctx: typer.Context,
    venv: Annotated[
        str, typer.Option("--venv", help="The peer's own virtualenv (never the project's).")
    ] = "~/.cache/rackscale/aiconfigurator-venv",
    install: Annotated[
        bool, typer.Option("--install", help="Create the venv and pip-install the pinned peer.")
    ] = False,
    as_json: ReportJsonOpt = False,
    output: ReportOutputOpt = OutputFormat.table,
) -> None:
    """Side by side with NVIDIA's aiconfigurator on identical fixed plans (docs/benchmarks.md).

    aiconfigurator is never a dependency: it lives in its own virtualenv (--install makes it, about 850 MB)
    and runs there through a subprocess. For each plan: its estimate and rackscale's, with the step's terms.

    Example: rackscale bench perf-peer --install
    """
    from pathlib import Path

    from rackscale.bench.perf_peer import AIC_VERSION, PEER_CONFIGS, PeerError, ensure_venv, run_peer
    from rackscale.bench.perf_peer_ours import ours
    from rackscale.cli.output import fail

    fmt = chosen_format(output, as_json, ctx=ctx)  # before the venv is made (850 MB) or the peer runs
    if not venv.strip():  # Path("") is the current folder: --install would make the venv there
        fail("--venv is empty: give the peer's virtualenv folder (default ~/.cache/rackscale/aiconfigurator-venv)")
    path = Path(venv).expanduser()
    rows: list[dict[str, Any]] = []
    try:
        if install:
            ensure_venv(path)
        for config in PEER_CONFIGS:
            rows.append(
                {"config": config.key, "aiconfigurator": run_peer(config, venv=path), "rackscale": ours(config)}
            )
    except PeerError as exc:
        fail(str(exc))
    if fmt is not OutputFormat.table:
        emit_document({"aiconfigurator_version": AIC_VERSION, "rows": rows}, fmt)
        return
    table = Table(title=f"rackscale vs aiconfigurator {AIC_VERSION} (same plan, aggregated, ISL/OSL 1024)")
    for col in ("plan", "tok/s/GPU aic / ours", "tok/s/user aic / ours", "decode step ms aic / ours", "ours: dominant"):
        table.add_column(col)
    for r in rows:
        a, o = r["aiconfigurator"], r["rackscale"]
        table.add_row(
            r["config"],
            f"{a['tok_s_gpu']:,.0f} / {o['tok_s_gpu']:,.0f}",
            f"{a['tok_s_user']:.1f} / {o['tok_s_user']:.1f}",
            f"{a['step_s'] * 1e3:.2f} / {o['step_s'] * 1e3:.2f}",
            o["dominant"],
        )
    console.print(table)
