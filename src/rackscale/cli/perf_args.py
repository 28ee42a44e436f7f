"""What ``rackscale perf`` and ``compare-arch`` share: the text of ``--model``, ``--gpu``, ``--precision``,
``--interactivity`` turned into the performance model's objects, each bad value one ``fail`` line that
names the option and the choices, and the assumption lines both verbs print under their numbers.

The model itself (``rackscale.llm``) is pure; reading a ``config.json`` from disk happens here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from rackscale.cli.output import OutputFormat, console, emit, fail, printable

if TYPE_CHECKING:
    from rackscale.llm.decode import Efficiency, Mtp
    from rackscale.llm.hardware import GpuSpec, System
    from rackscale.llm.models import ModelSpec
    from rackscale.llm.precision import Precision


class Mode(StrEnum):
    """``--mode``: the values of ``rackscale.llm.serving.ServingMode`` (imported lazily: the CLI starts fast)."""

    best = "best"
    aggregated = "aggregated"
    disaggregated = "disaggregated"


MODE_HELP = "best, aggregated or disaggregated serving."
MODEL_HELP = "A built-in model (deepseek-r1, llama-3.1-70b, ...) or a Hugging Face config.json file."
GPU_HELP = "System: a100, h100, h200, b200, gb200, a100-nvl72; NAME:N sets the NVLink domain (b200:72)."
OUTPUT_HELP = "table, json or yaml."
DEFAULT_TARGETS = (10.0, 25.0, 50.0, 100.0, 125.0, 200.0, 300.0)  # tok/s/user: chat to agentic
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; a bigger file is not one
MTP_BUILTINS = frozenset({"deepseek-v3", "deepseek-r1"})  # built-ins that ship a multi-token-prediction head


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    spec: ModelSpec
    has_mtp_head: bool  # DeepSeek-V3/R1 (num_nextn_predict_layers >= 1): --mtp may use it
    origin: str  # "built-in" or the file it was read from


def _mtp_layers(config: Mapping[str, object]) -> int:
    """``num_nextn_predict_layers`` of a DeepSeek config (or of its ``text_config``); 0 when absent or junk."""
    for source in (config, config.get("text_config")):
        if isinstance(source, Mapping):
            value = source.get("num_nextn_predict_layers")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def resolve_model(text: str, *, option: str = "--model") -> LoadedModel:
    """A built-in name (``deepseek-r1``), or a Hugging Face ``config.json``: a path to an existing file or a
    text ending in ``.json`` (so that a mistyped path says "cannot read", not "unknown model")."""
    from rackscale.llm.hf_config import model_from_hf_config
    from rackscale.llm.models import model_named
    from rackscale.model.errors import RackscaleError

    path = Path(text)
    if text.lower().endswith(".json") or path.is_file():
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as err:
            fail(f"{option} {text}: cannot read the file ({err.strerror or err})")
        if len(raw) > MAX_CONFIG_BYTES:
            fail(f"{option} {text}: more than {MAX_CONFIG_BYTES >> 10} KiB; a config.json is a few KB")
        try:
            config = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
            fail(f"{option} {text}: not valid JSON ({err})")
        except RecursionError:  # thousands of nested brackets: no config.json is built like that
            fail(f"{option} {text}: JSON nested too deeply to be a config.json")
        if not isinstance(config, dict):
            fail(f"{option} {text}: a config.json holds one JSON object (got {type(config).__name__})")
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        try:
            spec = model_from_hf_config(config, name=name or "model")
        except RackscaleError as err:
            fail(f"{option} {text}: {err}")
        return LoadedModel(spec=spec, has_mtp_head=_mtp_layers(config) > 0, origin=str(path))
    try:
        spec = model_named(text)
    except RackscaleError as err:
        fail(f"{option}: {err}")
    return LoadedModel(spec=spec, has_mtp_head=text.strip().lower() in MTP_BUILTINS, origin="built-in")


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


def default_precision(gpu: GpuSpec) -> Precision:
    """FP8 where the chip has FP8 tensor cores (the usual serving checkpoint), else BF16."""
    from rackscale.llm.precision import Precision

    return Precision.FP8 if gpu.supports(Precision.FP8) else Precision.BF16


def resolve_precision(text: str | None, gpu: GpuSpec, *, option: str = "--precision") -> Precision:
    from rackscale.llm.precision import parse_precision
    from rackscale.model.errors import RackscaleError

    if text is None:
        return default_precision(gpu)
    try:
        return parse_precision(text)
    except RackscaleError as err:
        fail(f"{option}: {err}")


def resolve_mtp(model: LoadedModel, wanted: bool) -> Mtp:
    """DeepSeek's MTP head (one draft token, accepted 85 %) when asked for; other models have no head."""
    from rackscale.llm.decode import DEEPSEEK_MTP, NO_MTP

    if not wanted:
        return NO_MTP
    if not model.has_mtp_head:
        fail(f"--mtp: the model has no MTP head ({model.spec.name}; DeepSeek-V3/R1 have one)")
    return DEEPSEEK_MTP


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


# Beyond these no input means anything (the longest contexts are ~10M tokens), and past them the arithmetic
# would only print nonsense: a hostile value gets one line instead.
MAX_TOKENS = 1 << 24
MAX_TTFT_S = 86_400.0
MAX_INTERACTIVITY = 1e9  # far past any chip (the tests ask for unreachable targets below it)
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
        f"{system.name}: NVLink domain {system.domain_gpus} GPUs at {gpu.nvlink_gb_s:,.0f} GB/s per GPU, NIC "
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


def finish(payload: dict[str, Any], output: OutputFormat, as_json: bool) -> bool:
    """Print ``payload`` as JSON/YAML and say True; False means the caller prints its table."""
    fmt = OutputFormat.json if as_json else output
    if fmt is OutputFormat.table:
        return False
    emit(json.loads(json.dumps(payload, default=str)), fmt)  # plain types only, for YAML's safe dumper
    return True


def print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        console.print(Text(f"- {printable(line)}"), highlight=False)


def num(x: float | None, fmt: str = ",.0f") -> str:
    """A figure for a table cell: grouped digits, never an exponent."""
    return "-" if x is None else format(x, fmt)


def target_text(x: float) -> str:
    """An interactivity target as given (``125``, ``12.5``, ``10,000,000``): digits, never an exponent."""
    return f"{x:,.6f}".rstrip("0").rstrip(".")


def ratio_text(r: float | None) -> str:
    return "-" if r is None else f"x{r:,.2f}"
