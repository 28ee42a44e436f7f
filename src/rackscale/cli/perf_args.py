"""What ``rackscale perf`` and ``compare-arch`` share: the text of ``--model``, ``--gpu``, ``--precision``,
``--interactivity`` turned into the performance model's objects, each bad value one ``fail`` line that
names the option and the choices, and the assumption lines both verbs print under their numbers.

The model itself (``rackscale.llm``) is pure; reading a ``config.json`` from disk happens here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from rackscale.cli.output import OutputFormat, chosen_format, console, emit, fail, printable
from rackscale.llm.inputs import DEFAULT_TARGETS, MAX_INTERACTIVITY, MAX_TOKENS, MAX_TTFT_S

if TYPE_CHECKING:
    from rackscale.llm.decode import Efficiency, Mtp
    from rackscale.llm.hardware import GpuSpec, System
    from rackscale.llm.models import ModelSpec
    from rackscale.llm.precision import Precision
    from rackscale.workloads.llm_models import LoadedModel


class Mode(StrEnum):
    """``--mode``: the values of ``rackscale.llm.serving.ServingMode`` (imported lazily: the CLI starts fast)."""

    best = "best"
    aggregated = "aggregated"
    disaggregated = "disaggregated"


MODE_HELP = "best, aggregated or disaggregated serving."
MODEL_HELP = "A built-in model (deepseek-r1, llama-3.1-70b, ...) or a Hugging Face config.json file."
GPU_HELP = "System: a100, h100, h200, b200, gb200, a100-nvl72; NAME:N sets the NVLink domain (b200:72)."
OUTPUT_HELP = "table, json or yaml."


def resolve_model(text: str, *, option: str = "--model") -> LoadedModel:
    """A built-in name (``deepseek-r1``), or a Hugging Face ``config.json`` (``workloads.llm_models``)."""
    from rackscale.workloads.llm_models import ModelFileError, load_model

    try:
        return load_model(text)
    except ModelFileError as err:
        fail(f"{option} {text}: {err.detail}" if err.in_file else f"{option}: {err.detail}")


def resolve_system(text: str, *, domain: int | None = None, option: str = "--gpu") -> System:
    """``gb200``, ``b200:72`` (a domain of 72), or a name with ``--domain N``."""
    from rackscale.llm.hardware import system_named
    from rackscale.model.errors import RackscaleError

    if domain is not None:
        if ":" in text:
            fail(f"give the NVLink domain once: {option} {text} or --domain {domain}, not both")
        if domain < 1:
            fail(f"--domain must be at least 1 (got {domain})")
        text = f"{text}:{domain}"
    try:
        return system_named(text)
    except RackscaleError as err:
        fail(f"{option}: {err}")


def resolve_precision(text: str | None, gpu: GpuSpec, *, option: str = "--precision") -> Precision:
    from rackscale.llm.precision import parse_precision
    from rackscale.model.errors import RackscaleError

    if text is None:
        return gpu.default_precision()
    try:
        return parse_precision(text)
    except RackscaleError as err:
        fail(f"{option}: {err}")


def resolve_mtp(model: LoadedModel, wanted: bool) -> Mtp:
    """DeepSeek's MTP head (one draft token, accepted 85 %) when asked for; other models have no head."""
    from rackscale.workloads.llm_models import ModelFileError, model_mtp

    try:
        return model_mtp(model, wanted)
    except ModelFileError as err:
        fail(f"--mtp: {err.detail}")


def parse_targets(values: Sequence[str] | None, *, option: str = "--interactivity") -> tuple[float, ...]:
    """``--interactivity 50 --interactivity 100,125`` -> (50, 100, 125); each a finite number above 0."""
    if not values:
        return DEFAULT_TARGETS
    out: list[float] = []
    for value in values:
        for part in value.split(","):
            word = part.strip()
            try:
                x = float(word)
            except ValueError:
                fail(f"{option} must be a number of tokens/s per user (got {word!r})")
            if not math.isfinite(x) or x <= 0:
                fail(f"{option} must be more than 0 tokens/s per user, and finite (got {word})")
            if x > MAX_INTERACTIVITY:
                fail(f"{option} must be at most {MAX_INTERACTIVITY:g} tokens/s per user (got {word})")
            out.append(x)
    return tuple(out)


_LIMITS = {"isl": MAX_TOKENS, "osl": MAX_TOKENS, "ttft_s": MAX_TTFT_S}


def check_positive(**values: int | float | None) -> None:
    """One line for the first option (``isl=0`` -> ``--isl``) that is not a finite number above 0 and within
    its limit."""
    for name, value in values.items():
        if value is None:
            continue
        option, top = f"--{name.replace('_', '-')}", _LIMITS.get(name, math.inf)
        if not math.isfinite(value) or value <= 0:
            fail(f"{option} must be more than 0 (got {value:g})")
        if value > top:
            fail(f"{option} must be at most {top:,.0f} (got {value:g})")


def precision_lines(gpu: GpuSpec, precision: Precision) -> list[str]:
    if gpu.supports(precision):
        return []
    return [f"{gpu.name} has no {precision.value.upper()} tensor cores: its matmuls run at the next wider rate."]


def model_line(model: ModelSpec, precision: Precision, *, kv: bool = True) -> str:
    from rackscale.llm.plans import KV_PRECISION

    active = f", {model.active_params() / 1e9:,.1f}B active" if model.is_moe else ""
    cache = f", KV cache {KV_PRECISION[precision].value.upper()}" if kv else ""
    return (
        f"{model.name}: {model.total_params() / 1e9:,.1f}B parameters{active}; weights "
        f"{precision.value.upper()} ({model.weight_bytes(precision) / 1e9:,.0f} GB){cache}."
    )


def system_line(system: System) -> str:
    gpu = system.gpu
    return (
        f"{system.name}: NVLink domain {system.domain_gpus} GPU{'' if system.domain_gpus == 1 else 's'} at "
        f"{gpu.nvlink_gb_s:,.0f} GB/s per GPU, NIC "
        f"{system.nic_gb_s:,.0f} GB/s per GPU (one way); HBM {gpu.hbm_gb:,.0f} GB at {gpu.hbm_tb_s:g} TB/s; "
        f"USD {system.price_per_gpu_hour:,.2f} per GPU-hour."
    )


def calibration_note(kind: str) -> str:
    """The published points the fitted constants come from (``kind``: serving or training), in words."""
    from rackscale.llm import calibration as cal

    if kind == "serving":
        c, o = cal.SERVING_COMPUTE_RUN, cal.SERVING_OVERHEAD_RUN
        return (
            f"compute share fitted on the measured run {c.key} ({c.system}: {c.tok_s_user:g} tok/s/user), step "
            f"cost on {o.key} ({o.system}: {o.tok_s_user:g} tok/s/user); docs/perf.md"
        )
    p = cal.TRAINING_POINT
    return f"fitted on one published point, {p.key} ({p.system}: {p.tflops_per_gpu:,.0f} TFLOP/s/GPU; docs/perf.md)"


def efficiency_line(gpu: GpuSpec, eff: Efficiency) -> str:
    return (
        f"{gpu.name} serving: {eff.compute:.1%} of the compute peak, {eff.memory:.0%} of the HBM bandwidth, "
        f"{eff.step_overhead_s * 1e3:g} ms per step + {eff.layer_overhead_s * 1e6:g} us per layer; "
        f"{calibration_note('serving')}."
    )


def unique(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def finish(payload: dict[str, Any], output: OutputFormat, as_json: bool, *, ctx: typer.Context | None = None) -> bool:
    """Print ``payload`` as JSON/YAML and say True; False means the caller prints its table."""
    fmt = chosen_format(output, as_json, ctx=ctx)
    if fmt is OutputFormat.table:
        return False
    emit(json.loads(json.dumps(payload, default=str)), fmt)  # plain types only, for YAML's safe dumper
    return True


def print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        console.print(Text(f"- {printable(line)}"), highlight=False)


def _not_rounded_away(x: float, text: str, digits: int) -> str:
    """``text`` (``x`` to a fixed number of decimals), or, where those round a non-zero ``x`` to nothing,
    ``x`` to ``digits`` significant digits, still without an exponent: ``0.000032``, not ``0`` (a point that
    serves 3.2e-05 tok/s/GPU is not one that serves none) nor ``3.2e-05``."""
    if x == 0 or not math.isfinite(x) or any(c in "123456789" for c in text):
        return text
    return format(Decimal(f"{x:.{digits}g}"), "f")


def num(x: float | None, fmt: str = ",.0f") -> str:
    """A figure for a table cell: grouped digits, never an exponent; a non-zero figure never shows as 0."""
    return "-" if x is None else _not_rounded_away(x, format(x, fmt), 2)


def target_text(x: float) -> str:
    """An interactivity target as given (``125``, ``12.5``, ``10,000,000``, ``0.0000001``): digits, never an
    exponent."""
    return _not_rounded_away(x, f"{x:,.6f}".rstrip("0").rstrip("."), 6)


def ratio_text(r: float | None) -> str:
    return "-" if r is None else "x" + _not_rounded_away(r, f"{r:,.2f}", 2)
