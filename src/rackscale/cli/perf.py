"""``rackscale perf serve|train``: what the LLM performance model (``rackscale.llm``) predicts for one model on
one system, and with ``--vs`` the ratio to another. Predictions of a model, not measurements: each verb
prints the assumptions under its numbers (docs/cli-perf.md). ``train`` lives in :mod:`rackscale.cli.perf_train`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.output import OutputFormat, emit, fail
from rackscale.cli.perf_args import (
    GPU_HELP,
    MODE_HELP,
    MODEL_HELP,
    OUTPUT_HELP,
    Mode,
    check_positive,
    efficiency_line,
    finish,
    model_line,
    num,
    parse_targets,
    precision_lines,
    print_lines,
    ratio_text,
    resolve_model,
    resolve_mtp,
    resolve_precision,
    resolve_system,
    system_line,
    target_text,
    unique,
)
from rackscale.cli.perf_train import train

if TYPE_CHECKING:
    from rackscale.llm.hardware import System
    from rackscale.llm.precision import Precision
    from rackscale.llm.serving import ServeCurve, ServePoint, ServeWorkload

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def serve_side(work: ServeWorkload, system: System, mode: Mode) -> ServeCurve:
    from rackscale.llm.calibration import serving_efficiency
    from rackscale.llm.serving import ServingMode, serve_curve

    return serve_curve(work, system, eff=serving_efficiency(system.gpu), mode=ServingMode(mode.value))


def vs_precision(text: str | None, main: Precision, system: System) -> Precision:
    """``--vs-precision``, else the main precision where the other chip has it, else its own default."""
    if text is None and system.gpu.supports(main):
        return main
    return resolve_precision(text, system.gpu, option="--vs-precision")


@app.command()
def serve(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP)],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help=GPU_HELP)],
    domain: Annotated[int | None, typer.Option("--domain", help="NVLink domain size (GPUs).")] = None,
    precision: Annotated[
        str | None, typer.Option("--precision", "-p", help="bf16, fp8 or fp4 (default fp8; bf16 on A100).")
    ] = None,
    isl: Annotated[int, typer.Option("--isl", help="Input (prompt) tokens per request.")] = 1024,
    osl: Annotated[int, typer.Option("--osl", help="Output tokens per request.")] = 1024,
    ttft_s: Annotated[float | None, typer.Option("--ttft-s", help="Time-to-first-token bound, seconds.")] = None,
    interactivity: Annotated[
        list[str] | None,
        typer.Option("--interactivity", "-i", help="Targets, tok/s/user (repeat or comma-separate)."),
    ] = None,
    mode: Annotated[Mode, typer.Option("--mode", help=MODE_HELP)] = Mode.best,
    mtp: Annotated[bool, typer.Option("--mtp", help="Multi-token prediction (DeepSeek's MTP head).")] = False,
    vs: Annotated[str | None, typer.Option("--vs", help="Compare with this system: G2[:DOMAIN2].")] = None,
    vs_prec: Annotated[str | None, typer.Option("--vs-precision", help="Precision on --vs.")] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.table,
    as_json: Annotated[bool, typer.Option("--json", help="Same as -o json.")] = False,
) -> None:
    """The best tokens/s per GPU at each interactivity target (tokens/s per user), the plan that reaches it
    (TP/EP/PP/DP, batch, aggregated or disaggregated), its TTFT and the term that bounds its decode step.

    Examples:

      rackscale perf serve --model deepseek-r1 --gpu gb200 --precision fp4 --mtp --vs b200

      rackscale perf serve -m llama-3.1-70b -g h100 -i 25 -i 50,100 --ttft-s 2 --json

      rackscale perf serve --model ./Qwen3-32B/config.json --gpu b200:16 --isl 8192 --osl 512

    Default targets 10 25 50 100 125 200 300 tok/s/user; a target no plan reaches is "unreachable" (null in
    JSON). --vs-precision defaults to --precision where the other chip has it. docs/cli-perf.md.
    """
    from rackscale.llm.serving import ServeWorkload

    check_positive(isl=isl, osl=osl, ttft_s=ttft_s)
    if vs_prec is not None and vs is None:
        fail(f"--vs-precision {vs_prec} is the precision on --vs, which is not given: add --vs G2, or drop it")
    targets = parse_targets(interactivity)
    loaded = resolve_model(model)
    system = resolve_system(gpu, domain=domain)
    prec = resolve_precision(precision, system.gpu)
    work = ServeWorkload(
        model=loaded.spec, precision=prec, isl=isl, osl=osl, mtp=resolve_mtp(loaded, mtp), ttft_s=ttft_s
    )
    other = None if vs is None else resolve_system(vs, option="--vs")
    other_work = None if other is None else replace(work, precision=vs_precision(vs_prec, prec, other))
    curve = serve_side(work, system, mode)
    lines = serve_assumptions(work, system, mode)
    vs_side = None
    if other is not None and other_work is not None:
        vs_side = (other, other_work, serve_side(other_work, other, mode))
        lines = unique(lines + serve_assumptions(other_work, other, mode))
    payload = serve_payload(work, system, curve, targets, vs_side, lines)
    if finish(payload, output, as_json, ctx=ctx):
        return
    title = f"{loaded.spec.name} on {system.name} {prec.value.upper()}, ISL/OSL {isl}/{osl}" + (", MTP" if mtp else "")
    if other is not None and other_work is not None:
        title += f" vs {other.name} {other_work.precision.value.upper()}"
    emit(serve_rows(curve, targets, None if vs_side is None else vs_side[2]), OutputFormat.table, title=title)
    print_lines(lines)


def serve_assumptions(work: ServeWorkload, system: System, mode: Mode) -> list[str]:
    from rackscale.llm.calibration import serving_efficiency

    ttft = "none" if work.ttft_s is None else f"{target_text(work.ttft_s)} s"
    mtp = (
        "off"
        if work.mtp.drafts == 0
        else f"up to {work.mtp.drafts} draft(s), "
        + ", ".join(f"{work.mtp.with_drafts(d).tokens_emitted:g}" for d in range(1, work.mtp.drafts + 1))
        + " tokens per step"
    )
    return [
        model_line(work.model, work.precision),
        system_line(system),
        efficiency_line(system.gpu, serving_efficiency(system.gpu)),
        *precision_lines(system.gpu, work.precision),
        f"ISL {work.isl} / OSL {work.osl} tokens; TTFT bound {ttft}; MTP {mtp}; serving mode {mode.value}.",
        "tok/s/GPU: output tokens/s over every GPU, prefill's included; tok/s/user (interactivity): the output "
        "tokens/s one user sees. A prediction of the model, not a measurement.",
    ]


def point_dict(p: ServePoint | None, target: float | None = None) -> dict[str, Any] | None:
    if p is None:
        return None
    d = p.as_dict()
    if target is not None:
        d["target_tok_s_user"] = target
    return d


def point_ratio(a: ServePoint | None, b: ServePoint | None) -> float | None:
    if a is None or b is None or b.tok_s_gpu <= 0:
        return None
    return a.tok_s_gpu / b.tok_s_gpu


def side_dict(work: ServeWorkload, system: System, curve: ServeCurve, targets: tuple[float, ...]) -> dict[str, Any]:
    return {
        "system": system.name,
        "model": work.model.name,
        "precision": work.precision.value,
        "points": [point_dict(curve.best_at(x), x) for x in targets],
        "peak": point_dict(curve.peak),
    }


def serve_payload(
    work: ServeWorkload,
    system: System,
    curve: ServeCurve,
    targets: tuple[float, ...],
    vs_side: tuple[System, ServeWorkload, ServeCurve] | None,
    lines: list[str],
) -> dict[str, Any]:
    """The JSON the issue asks for: points per target (null when unreachable), the same for ``vs``, ratios."""
    vs = None if vs_side is None else side_dict(vs_side[1], vs_side[0], vs_side[2], targets)
    ratios = []
    peak_ratio = None
    if vs_side is not None:
        other = vs_side[2]
        ratios = [
            {"interactivity_tok_s_user": x, "ratio": point_ratio(curve.best_at(x), other.best_at(x))} for x in targets
        ]
        peak_ratio = point_ratio(curve.peak, other.peak)
    return {
        **side_dict(work, system, curve, targets),
        "workload": {
            "isl": work.isl,
            "osl": work.osl,
            "ttft_s": work.ttft_s,
            "mtp": work.mtp.drafts > 0,
            "mtp_tokens_per_step": [work.mtp.with_drafts(d).tokens_emitted for d in range(1, work.mtp.drafts + 1)]
            or None,
        },
        "targets": list(targets),
        "vs": vs,
        "ratios": ratios,
        "peak_ratio": peak_ratio,
        "assumptions": lines,
    }


def _cells(p: ServePoint | None) -> dict[str, str]:
    if p is None:
        return {"tok/s/GPU": "unreachable", "at tok/s/user": "-", "TTFT s": "-", "plan": "-", "bound by": "-"}
    mode = "disagg" if p.mode.value == "disaggregated" else "agg"
    return {
        "tok/s/GPU": num(p.tok_s_gpu),
        "at tok/s/user": num(p.interactivity, ",.1f"),
        "TTFT s": num(p.ttft_s, ",.2f"),
        "plan": f"{p.plan.label()} {mode}",
        "bound by": p.step.dominant,
    }


def serve_rows(curve: ServeCurve, targets: tuple[float, ...], vs_curve: ServeCurve | None) -> list[dict[str, str]]:
    """One row per target and one for the peak; with ``--vs`` the other system's figure and the ratio."""
    picks: list[tuple[str, ServePoint | None, ServePoint | None]] = [
        (target_text(x), curve.best_at(x), None if vs_curve is None else vs_curve.best_at(x)) for x in targets
    ]
    picks.append(("peak", curve.peak, None if vs_curve is None else vs_curve.peak))
    rows = []
    for label, p, q in picks:
        row = {"target tok/s/user": label, **_cells(p)}
        if vs_curve is not None:
            row["vs tok/s/GPU"] = "unreachable" if q is None else num(q.tok_s_gpu)
            row["vs plan"] = _cells(q)["plan"]
            row["ratio"] = ratio_text(point_ratio(p, q))
        rows.append(row)
    return rows


app.command()(train)
