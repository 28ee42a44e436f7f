"""``rackscale perf train``: step time, tokens/s and MFU of one training job on a system, under a plan given on
the command line (checked: it must cover ``--gpus`` and fit HBM) or the fastest plan that fits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.output import OutputFormat, emit, fail
from rackscale.cli.perf_args import (
    GPU_HELP,
    MODEL_HELP,
    OUTPUT_HELP,
    calibration_note,
    finish,
    model_line,
    num,
    precision_lines,
    print_lines,
    ratio_text,
    resolve_model,
    resolve_precision,
    resolve_system,
    system_line,
    unique,
)

if TYPE_CHECKING:
    from rackscale.llm.hardware import System
    from rackscale.llm.training import TrainPlan, TrainStep, TrainWorkload

TOKENS_PER_STEP = 1 << 22  # default global batch: about 4M tokens, as Llama 3 and Megatron-LM runs use
MAX_GPUS = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    system: System
    plan: TrainPlan
    step: TrainStep
    memory_bytes: float
    given: bool


def _usable(system: System) -> float:
    from rackscale.llm.train_plans import HBM_USABLE

    return system.gpu.hbm_bytes * HBM_USABLE


def _check_fits(work: TrainWorkload, plan: TrainPlan, system: System, option: str) -> float:
    from rackscale.llm.train_plans import HBM_USABLE, train_memory_bytes

    mem = train_memory_bytes(work, plan)
    if mem > _usable(system):
        fail(
            f"{option}the plan does not fit {system.name}: {mem / 1e9:,.1f} GB per GPU needed, "
            f"{_usable(system) / 1e9:,.1f} GB usable ({HBM_USABLE:.0%} of {system.gpu.hbm_gb:g} GB); "
            "try --recompute, a larger --tp or --pp, or more --gpus"
        )
    return mem


def _run(work: TrainWorkload, system: System, gpus: int, plan: TrainPlan | None, option: str) -> Run:
    """``plan`` checked and timed on ``system``, or the fastest plan that fits; ``option`` prefixes errors."""
    from rackscale.llm.calibration import training_efficiency
    from rackscale.llm.serving import links_of
    from rackscale.llm.train_plans import best_train_plan
    from rackscale.llm.training import train_step

    eff, links = training_efficiency(system.gpu), links_of(system)
    if plan is not None:
        mem = _check_fits(work, plan, system, option)
        step = train_step(work, plan, gpu=system.gpu, links=links, domain_gpus=system.domain_gpus, eff=eff)
        return Run(system=system, plan=plan, step=step, memory_bytes=mem, given=True)
    choice = best_train_plan(work, system, gpus=gpus, links=links, eff=eff)
    if choice is None:
        fail(
            f"{option}no plan of {gpus} GPUs fits {work.model.name} in {system.name}'s HBM "
            f"({_usable(system) / 1e9:,.1f} GB usable per GPU) with --global-batch {work.global_batch}: "
            "try more --gpus, a shorter --seq-len or a --global-batch with more factors of 2"
        )
    return Run(system=system, plan=choice.plan, step=choice.step, memory_bytes=choice.memory_bytes, given=False)


def _plan(
    gpus: int,
    *,
    tp: int | None,
    pp: int | None,
    dp: int | None,
    micro: int | None,
    recompute: bool | None,
    ep: int | None = None,
    cp: int | None = None,
    virtual_stages: int | None = None,
) -> TrainPlan | None:
    """The plan the options give (None when they give none); tp, cp and pp default to 1, dp to what is left."""
    from rackscale.llm.training import TrainPlan

    given = (tp, pp, dp, micro, recompute, ep, cp, virtual_stages)
    if all(option is None for option in given):
        return None
    t, c, p = tp or 1, cp or 1, pp or 1
    if dp is None:
        if gpus % (t * c * p):
            fail(f"--tp x --cp x --pp = {t * c * p} must divide --gpus {gpus}")
        dp = gpus // (t * c * p)
    if t * c * p * dp != gpus:
        fail(f"--tp x --cp x --pp x --dp = {t} x {c} x {p} x {dp} = {t * c * p * dp}, not the {gpus} GPUs of --gpus")
    e = ep or 1
    if dp % e:
        fail(f"--ep {e} must divide the data-parallel degree {dp} (expert parallelism spreads experts over DP ranks)")
    v = virtual_stages or 1
    if v > 1 and p == 1:
        fail(f"--virtual-stages {v} needs a pipeline: give --pp (interleaving splits each pipeline rank's layers)")
    return TrainPlan(tp=t, cp=c, pp=p, dp=dp, ep=e, micro_batch=micro or 1, virtual_stages=v, recompute=bool(recompute))


def _global_batch(given: int | None, seq_len: int, unit: int) -> int:
    if given is not None:
        return given
    return unit * max(1, round(TOKENS_PER_STEP / seq_len / unit))


def train(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP)],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help=GPU_HELP)],
    gpus: Annotated[int, typer.Option("--gpus", "-n", min=1, max=MAX_GPUS, help="GPUs of the job.")],
    domain: Annotated[int | None, typer.Option("--domain", help="NVLink domain size (GPUs).")] = None,
    precision: Annotated[str, typer.Option("--precision", "-p", help="bf16, fp8 or fp4 matmuls.")] = "bf16",
    seq_len: Annotated[int, typer.Option("--seq-len", min=1, max=1 << 22, help="Tokens per sequence.")] = 4096,
    global_batch: Annotated[
        int | None, typer.Option("--global-batch", min=1, max=1 << 24, help="Sequences per step (default: ~4M tokens).")
    ] = None,
    tp: Annotated[int | None, typer.Option("--tp", min=1, help="Tensor parallel.")] = None,
    cp: Annotated[
        int | None,
        typer.Option("--cp", min=1, help="Context parallel: ranks that split each sequence (long contexts)."),
    ] = None,
    pp: Annotated[int | None, typer.Option("--pp", min=1, help="Pipeline stages.")] = None,
    virtual_stages: Annotated[
        int | None,
        typer.Option("--virtual-stages", min=1, help="Interleaved pipeline: model chunks per pipeline rank."),
    ] = None,
    dp: Annotated[int | None, typer.Option("--dp", min=1, help="Data parallel (default: what is left).")] = None,
    ep: Annotated[int | None, typer.Option("--ep", min=1, help="Expert parallel (MoE), over the DP ranks.")] = None,
    micro_batch: Annotated[int | None, typer.Option("--micro-batch", min=1, help="Sequences per micro-batch.")] = None,
    recompute: Annotated[
        bool | None, typer.Option("--recompute/--no-recompute", help="Full activation recomputation.")
    ] = None,
    unfused_attention: Annotated[
        bool,
        typer.Option(
            "--unfused-attention",
            help="Attention without a fused (flash) kernel, as Megatron-LM ran in 2021: its s x s scores go "
            "through HBM and are kept for the backward pass.",
        ),
    ] = False,
    vs: Annotated[str | None, typer.Option("--vs", help="Compare with this system: G2[:DOMAIN2].")] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help=OUTPUT_HELP)] = OutputFormat.table,
    as_json: Annotated[bool, typer.Option("--json", help="Same as -o json.")] = False,
) -> None:
    """Step time, tokens/s, MFU and achieved TFLOP/s per GPU of a training job, the plan and the terms of
    its step (compute, attention through HBM when unfused, pipeline bubble, TP all-reduce, PP sends, DP
    all-reduce, EP all-to-all, CP all-gather).

    Examples:

      rackscale perf train --model llama-3.1-70b --gpu h100 --gpus 512

      rackscale perf train -m llama-3.1-405b -g gb200 -n 576 --tp 8 --pp 8 --recompute --vs h100

      rackscale perf train -m gpt3-175b -g a100 -n 1024 --seq-len 2048 --global-batch 1536 --json

      rackscale perf train -m deepseek-v3 -g gb200 -n 512 -p fp8 --pp 16 --ep 32 --recompute --vs b200

      rackscale perf train -m llama-3.1-405b -g h100 -n 16384 --seq-len 131072 --global-batch 128 \
        --tp 8 --cp 16 --pp 16 --virtual-stages 8 --recompute

      rackscale perf train -m gpt3-175b -g a100 -n 384 --seq-len 2048 --global-batch 1536 --tp 8 --pp 12 \
        --recompute --unfused-attention      # Megatron-LM's 2021 run: 153 TFLOP/s per GPU published

    Any of --tp/--cp/--pp/--dp/--ep/--micro-batch/--virtual-stages/--recompute gives the plan (checked: tp x cp
    x pp x dp = --gpus, and it must fit HBM); none of them: the fastest plan that fits (searched without CP or
    interleaving). With --vs the other system runs the same plan
    (given) or its own fastest one.
    """
    from rackscale.llm.training import TrainWorkload

    loaded = resolve_model(model)
    system = resolve_system(gpu, domain=domain)
    other = None if vs is None else resolve_system(vs, option="--vs")
    prec = resolve_precision(precision, system.gpu)
    plan = _plan(
        gpus,
        tp=tp,
        pp=pp,
        dp=dp,
        micro=micro_batch,
        recompute=recompute,
        ep=ep,
        cp=cp,
        virtual_stages=virtual_stages,
    )
    if plan is not None and plan.ep > 1 and (not loaded.spec.is_moe or loaded.spec.experts % plan.ep):
        fail(f"--ep {plan.ep} needs a MoE model whose {loaded.spec.experts} experts it divides ({loaded.spec.name})")
    if plan is not None and plan.pp > loaded.spec.layers:
        fail(f"--pp {plan.pp} is more than the {loaded.spec.layers} layers of {loaded.spec.name}")
    if plan is not None and plan.pp * plan.virtual_stages > loaded.spec.layers + 2:
        # Llama 3's layout: one layer per chunk at most, plus an embedding-only and an output-only chunk
        fail(
            f"--pp {plan.pp} x --virtual-stages {plan.virtual_stages} is more chunks than the {loaded.spec.layers} "
            f"layers of {loaded.spec.name} (and embedding, output)"
        )
    if plan is not None and plan.cp > 1 and seq_len % (2 * plan.cp):
        fail(f"--seq-len {seq_len} must split into 2 x --cp = {2 * plan.cp} equal chunks (each CP rank takes two)")
    unit = gpus if plan is None else plan.dp * plan.micro_batch
    batch = _global_batch(global_batch, seq_len, unit)
    if plan is not None and batch % unit:
        fail(f"--global-batch {batch} must be a multiple of dp x micro-batch = {unit}")
    work = TrainWorkload(
        model=loaded.spec, precision=prec, seq_len=seq_len, global_batch=batch, fused_attention=not unfused_attention
    )
    main = _run(work, system, gpus, plan, "")
    vs_run = None if other is None else _run(work, other, gpus, plan, "--vs: ")
    lines = train_assumptions(work, main)
    if vs_run is not None:
        lines = unique(lines + train_assumptions(work, vs_run))
    ratio = None if vs_run is None else main.step.tokens_per_s / vs_run.step.tokens_per_s
    payload = {
        "model": loaded.spec.name,
        **_run_dict(main),
        "precision": prec.value,
        "gpus": gpus,
        "workload": {
            "seq_len": seq_len,
            "global_batch": batch,
            "tokens_per_step": batch * seq_len,
            "fused_attention": not unfused_attention,
        },
        "vs": None if vs_run is None else _run_dict(vs_run),
        "ratio": ratio,
        "assumptions": lines,
    }
    if finish(payload, output, as_json, ctx=ctx):
        return
    runs = [main] if vs_run is None else [main, vs_run]
    title = f"{loaded.spec.name} on {gpus} GPUs, {prec.value.upper()}, {batch} x {seq_len} tokens per step"
    emit([_summary_row(r) for r in runs], OutputFormat.table, title=title)
    emit(_term_rows(runs), OutputFormat.table, title="step terms (seconds)")
    if ratio is not None and vs_run is not None:
        print_lines([f"tokens/s {main.system.name} / {vs_run.system.name}: {ratio_text(ratio)}"])
    print_lines(lines)


def _run_dict(run: Run) -> dict[str, Any]:
    return {
        "system": run.system.name,
        "plan": run.plan.as_dict(),
        "plan_source": "given" if run.given else "best",
        "memory_gb_per_gpu": run.memory_bytes / 1e9,
        "step": run.step.as_dict(),
    }


def _plan_label(plan: TrainPlan) -> str:
    text = f"TP{plan.tp}" + (f" CP{plan.cp}" if plan.cp > 1 else "") + f" PP{plan.pp}"
    text += f" (V{plan.virtual_stages})" if plan.virtual_stages > 1 else ""
    text += f" DP{plan.dp}" + (f" EP{plan.ep}" if plan.ep > 1 else "") + f" mb{plan.micro_batch}"
    return text + (" recompute" if plan.recompute else "")


def _summary_row(run: Run) -> dict[str, str]:
    s = run.step
    return {
        "system": run.system.name,
        "plan": _plan_label(run.plan) + ("" if run.given else " (best)"),
        "step s": num(s.step_s, ",.3f"),
        "tokens/s": num(s.tokens_per_s),
        "MFU": f"{s.mfu:.1%}",
        "TFLOP/s/GPU": num(s.achieved_tflops_per_gpu, ",.0f"),
        "GB/GPU": num(run.memory_bytes / 1e9, ",.1f"),
        "bound by": s.dominant,
    }


def _term_rows(runs: list[Run]) -> list[dict[str, str]]:
    terms = (
        ("compute", "compute_s"), ("attention-hbm", "attention_hbm_s"), ("pp-bubble", "bubble_s"),
        ("tp-all-reduce", "tp_comm_s"),
        ("pp-send", "pp_comm_s"), ("dp-all-reduce", "dp_comm_s"), ("ep-all-to-all", "ep_comm_s"),
        ("cp-all-gather", "cp_comm_s"), ("step", "step_s"),
    )  # fmt: skip
    names = [r.system.name for r in runs]
    if len(set(names)) < len(names):  # --vs the same system (another precision or plan): keep both columns
        names = [f"{n} ({i + 1})" for i, n in enumerate(names)]
    return [
        {"term": term, **{n: num(getattr(r.step, attr), ",.4f") for n, r in zip(names, runs, strict=True)}}
        for term, attr in terms
    ]


def train_assumptions(work: TrainWorkload, run: Run) -> list[str]:
    from rackscale.llm.calibration import attention_note, training_efficiency
    from rackscale.llm.train_plans import SCORE_BYTES
    from rackscale.llm.training import SCORE_PASSES_BACKWARD, SCORE_PASSES_FORWARD

    gpu = run.system.gpu
    eff = training_efficiency(gpu)
    return [
        model_line(work.model, work.precision, kv=False),
        system_line(run.system),
        *precision_lines(gpu, work.precision),
        f"{gpu.name} training kernels at {eff.compute:.1%} of the dense peak, "
        f"{calibration_note('training')}; {attention_note(gpu)}.",
        "Mixed precision, distributed optimizer (2 + 2 + 12/(dp x cp) bytes per parameter), 1F1B pipeline; the DP "
        "gradient all-reduce is hierarchical and not overlapped with the backward pass (conservative).",
        "MFU = 6 x active parameters x tokens / (step x GPUs x dense peak); TFLOP/s/GPU counts attention and "
        "recomputation too. A prediction of the model, not a measurement.",
        *(
            []
            if work.fused_attention
            else [
                f"Attention unfused (--unfused-attention): each head's s x s scores go through HBM "
                f"{SCORE_PASSES_FORWARD:g} times forward and {SCORE_PASSES_BACKWARD:g} times backward "
                f"({SCORE_PASSES_FORWARD:g} more when recomputing), at {eff.memory:.0%} of its bandwidth, and "
                f"{SCORE_BYTES:g} bytes a score are kept for the backward pass (docs/perf.md)."
            ]
        ),
    ]
