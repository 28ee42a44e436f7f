"""``perf serve`` points as sweep cells: the options of one ``rackscale perf serve`` run (:class:`PerfOptions`)
and what a worker computes from them (:func:`run_perf_cell`).

A perf cell is deterministic (no seed) and takes well under a second, so it shares the runner, the results
file and the report with the simulate cells; its KPIs are the best tokens/s per GPU at each interactivity
target (``tok_s_gpu_at_<target>``, ``null`` where no plan reaches it), the TTFT of that point, and the peak.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rackscale.llm.inputs import DEFAULT_TARGETS, MAX_INTERACTIVITY, MAX_TOKENS, MAX_TTFT_S

PERF_KIND: Final = "perf-serve"
Mode = Literal["best", "aggregated", "disaggregated"]


class PerfOptions(BaseModel):
    """One ``rackscale perf serve`` run (its flag in brackets); ``--vs`` is another cell of the grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["perf-serve"] = PERF_KIND
    model: str = Field(max_length=4096)  # --model: a built-in name or a Hugging Face config.json
    gpu: str = Field(max_length=64)  # --gpu: a system, NAME:N for an NVLink domain of N GPUs
    precision: str | None = Field(None, max_length=16)  # --precision (default fp8; bf16 on A100)
    isl: int = Field(1024, ge=1, le=MAX_TOKENS)
    osl: int = Field(1024, ge=1, le=MAX_TOKENS)
    ttft_s: float | None = Field(None, gt=0.0, le=MAX_TTFT_S)
    mtp: bool = False
    mode: Mode = "best"
    interactivity: tuple[float, ...] = Field(DEFAULT_TARGETS, min_length=1, max_length=64)

    @field_validator("gpu")
    @classmethod
    def _system(cls, v: str) -> str:
        from rackscale.llm.hardware import system_named

        system_named(v)  # its RackscaleError (a ValueError) names the systems
        return v

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str | None) -> str | None:
        from rackscale.llm.precision import parse_precision

        if v is not None:
            parse_precision(v)
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        """A built-in name is checked here; a file when the cell runs (it may change until then)."""
        from rackscale.llm.models import model_named
        from rackscale.workloads.llm_models import names_a_file

        if "\x00" in v:  # no file name holds one (the OS refuses the path), no built-in name either
            raise ValueError("a model is a built-in name or a config.json path, neither of which holds NUL")
        if not names_a_file(v):
            model_named(v)
        return v

    @field_validator("interactivity")
    @classmethod
    def _targets(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        for x in v:
            if not math.isfinite(x) or x <= 0 or x > MAX_INTERACTIVITY:
                raise ValueError(
                    f"each target is more than 0 and at most {MAX_INTERACTIVITY:g} tokens/s per user (got {x:g})"
                )
        return v

    def canonical(self) -> dict[str, Any]:
        """The options that differ from their defaults, and always the kind: what names and keys a cell."""
        return {"kind": self.kind, **self.model_dump(mode="json", exclude_defaults=True)}


PERF_OPTION_NAMES = tuple(n for n in PerfOptions.model_fields if n != "kind")


def model_file(options: PerfOptions) -> Path | None:
    """The config.json a cell reads, if its model is one (a change to it makes a new cell)."""
    from rackscale.workloads.llm_models import names_a_file

    return Path(options.model) if names_a_file(options.model) else None


def target_kpi(prefix: str, target: float) -> str:
    return f"{prefix}_at_{target:g}"


PREFIXES = ("tok_s_gpu", "ttft_s")


def perf_kpi_order(names: Iterable[str]) -> list[str]:
    """Perf KPI names, each kind by its target (a results file keeps its keys sorted as text: 125 < 25):
    tokens/s per GPU, then TTFT, then the peak's."""

    def key(name: str) -> tuple[int, float, str]:
        for i, prefix in enumerate(PREFIXES):
            if name.startswith(prefix + "_at_"):
                try:
                    return i, float(name.removeprefix(prefix + "_at_")), name
                except ValueError:
                    break
        return len(PREFIXES), 0.0, name

    return sorted(set(names), key=key)


def run_perf_cell(options: dict[str, Any]) -> dict[str, Any]:
    """One perf cell, in a worker: what ``rackscale perf serve --json`` says of its points, as KPIs."""
    import time

    from rackscale.llm.calibration import serving_efficiency
    from rackscale.llm.hardware import system_named
    from rackscale.llm.precision import parse_precision
    from rackscale.llm.serving import ServeWorkload, ServingMode, serve_curve
    from rackscale.workloads.llm_models import load_model, model_mtp

    cell = PerfOptions.model_validate(options)
    t0 = time.perf_counter()
    loaded = load_model(cell.model)  # a ModelFileError names the problem: the runner records it
    system = system_named(cell.gpu)
    precision = parse_precision(cell.precision) if cell.precision is not None else system.gpu.default_precision()
    work = ServeWorkload(
        model=loaded.spec,
        precision=precision,
        isl=cell.isl,
        osl=cell.osl,
        mtp=model_mtp(loaded, cell.mtp),
        ttft_s=cell.ttft_s,
    )
    curve = serve_curve(work, system, eff=serving_efficiency(system.gpu), mode=ServingMode(cell.mode))
    kpis: dict[str, float | None] = {}
    points = []
    for x in cell.interactivity:
        p = curve.best_at(x)
        kpis[target_kpi("tok_s_gpu", x)] = None if p is None else p.tok_s_gpu
        kpis[target_kpi("ttft_s", x)] = None if p is None else p.ttft_s
        points.append(None if p is None else {"target_tok_s_user": x, **p.as_dict()})
    peak = curve.peak
    kpis["peak_tok_s_gpu"] = None if peak is None else peak.tok_s_gpu
    kpis["peak_interactivity_tok_s_user"] = None if peak is None else peak.interactivity
    return {
        "kpis": kpis,
        "points": points,
        "system": system.name,
        "model": loaded.spec.name,
        "precision": precision.value,
        "gpus": system.domain_gpus,
        "load_s": 0.0,
        "sim_s": time.perf_counter() - t0,
    }


def perf_compare(records: Iterable[Mapping[str, Any]], *, baseline: str) -> list[dict[str, Any]]:
    """Each ``ok`` perf cell against the one that differs only by ``gpu`` (= ``baseline``): the ratio of
    tokens/s per GPU at each target and at the peak (``perf serve --vs``'s ratios); ``None`` where either
    side is unreachable."""
    import json

    def rest(o: Mapping[str, Any]) -> str:
        return json.dumps({k: v for k, v in o.items() if k != "gpu"}, sort_keys=True)

    ok = [r for r in records if r.get("status") == "ok"]
    base = {rest(r["options"]): r for r in ok if r["options"].get("gpu") == baseline}
    out: list[dict[str, Any]] = []
    for r in ok:
        gpu = r["options"].get("gpu")
        b = base.get(rest(r["options"]))
        if gpu == baseline or b is None:
            continue
        mine, theirs = r.get("kpis") or {}, b.get("kpis") or {}
        names = [k for k in perf_kpi_order(mine) if k.startswith("tok_s_gpu_at_") or k == "peak_tok_s_gpu"]
        ratios: dict[str, float | None] = {}
        for k in names:
            x, y = mine.get(k), theirs.get(k)
            ratios[k] = x / y if isinstance(x, int | float) and isinstance(y, int | float) and y > 0 else None
        shown = ", ".join(
            f"{k.removeprefix('tok_s_gpu_at_').replace('peak_tok_s_gpu', 'peak')}: "
            + ("n/a" if v is None else f"x{v:.2f}")
            for k, v in ratios.items()
        )
        text = f"{gpu} vs {baseline}, tokens/s per GPU at tok/s/user {shown}"
        out.append({"options": r["options"], "gpu": gpu, "baseline": baseline, "ratios": ratios, "text": text})
    return out
