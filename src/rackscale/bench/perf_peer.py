"""Side by side with a peer: NVIDIA's aiconfigurator on the same serving plans as ``rackscale.llm``.

aiconfigurator (Apache-2.0, https://github.com/ai-dynamo/aiconfigurator, on PyPI) predicts serving from
kernel timings measured per GPU, framework and version. It is never a dependency of rackscale: it brings
its own numpy/pandas/pyarrow/pydantic stack and about 115 MB of performance tables (850 MB installed), so
it lives in a throwaway virtualenv that :func:`ensure_venv` makes and :func:`run_peer` drives through
``subprocess``. The script that runs inside that venv is :data:`SCRIPT`; its dry run prints the calls it
would make, so its argument handling is tested here without aiconfigurator.

Each :class:`PeerConfig` is one fixed plan (tp/pp/ep/dp/batch) fed to aiconfigurator's single-point
``cli_estimate`` (``aiconfigurator cli estimate``), never its search: the figures are for exactly the
plan rackscale is given. ``batch`` counts sequences per serving instance, as ``ServePlan.batch`` does;
aiconfigurator's ``batch_size`` is per attention-DP rank, so the script passes ``batch // dp``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from rackscale.llm.precision import Precision
from rackscale.model.errors import RackscaleError

AIC_VERSION = "0.12.0"  # the release every figure in docs/benchmarks.md was taken with
PARETO_TARGETS = (20.0, 50.0, 100.0)  # tokens/s per user


class PeerError(RackscaleError, RuntimeError):
    """The peer could not be run: no venv, no aiconfigurator in it, or the estimate failed."""


class Backend(StrEnum):
    """The serving framework whose measured kernels aiconfigurator replays."""

    TRTLLM = "trtllm"
    SGLANG = "sglang"
    VLLM = "vllm"


class PeerMode(StrEnum):
    AGGREGATED = "aggregated"  # prefill and decode share the GPUs (in-flight batching)


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerConfig:
    key: str
    model: str  # rackscale's name (rackscale.llm.models.model_named)
    aic_model: str  # aiconfigurator's (a Hugging Face id whose config.json it ships)
    system: str  # rackscale's (rackscale.llm.hardware.system_named)
    aic_system: str  # aiconfigurator's systems/<name>.yaml
    backend: Backend
    backend_version: str  # pinned, so a newer aiconfigurator default cannot move the figures silently
    precision: Precision
    isl: int
    osl: int
    tp: int
    pp: int = 1
    ep: int = 1
    dp: int = 1  # attention data parallelism
    batch: int  # sequences per instance (all DP ranks together)
    mode: PeerMode = PeerMode.AGGREGATED

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp


PEER_CONFIGS: tuple[PeerConfig, ...] = (
    # NVIDIA's ModelOpt FP8 checkpoint: aiconfigurator infers per-tensor static FP8 GEMMs (fp8_static), FP8 KV
    # cache and FP8 attention from its hf_quant_config.json.
    PeerConfig(
        key="llama70b-fp8-h200-tp4", model="llama-3.1-70b", aic_model="nvidia/Llama-3.1-70B-Instruct-FP8",
        system="h200", aic_system="h200_sxm", backend=Backend.TRTLLM, backend_version="1.3.0rc20",
        precision=Precision.FP8, isl=1024, osl=1024, tp=4, batch=64,
    ),
    # DeepSeek-R1 in NVFP4: aiconfigurator ships no R1-FP4 config, so the NVFP4 checkpoint of V3.1 stands in (the
    # same DeepseekV3ForCausalLM dimensions; NVFP4 experts and dense GEMMs, FP8 KV cache). One DP8/EP8 instance in
    # an 8-GPU NVLink domain, 64 sequences per rank.
    PeerConfig(
        key="dsr1-fp4-b200-dep8", model="deepseek-r1", aic_model="nvidia/DeepSeek-V3.1-NVFP4",
        system="b200", aic_system="b200_sxm", backend=Backend.TRTLLM, backend_version="1.3.0rc20",
        precision=Precision.FP4, isl=1024, osl=1024, tp=1, ep=8, dp=8, batch=512,
    ),
    # The same plan on GB200. aiconfigurator models a GB200 "node" as one 4-GPU tray, so EP8 spans two nodes and
    # its DeepEP tables fall back to EP4 data (reported in moe_comm_fallbacks); rackscale sees one NVL72 domain.
    PeerConfig(
        key="dsr1-fp4-gb200-dep8", model="deepseek-r1", aic_model="nvidia/DeepSeek-V3.1-NVFP4",
        system="gb200", aic_system="gb200", backend=Backend.TRTLLM, backend_version="1.3.0rc20",
        precision=Precision.FP4, isl=1024, osl=1024, tp=1, ep=8, dp=8, batch=512,
    ),
)  # fmt: skip


# Runs inside the aiconfigurator venv (any Python >= 3.9 there), so it imports nothing from rackscale.
SCRIPT = r'''
import json
import sys


def estimate_calls(a):
    """cli_estimate keyword arguments: agg (the serving figures) and static_gen (pure decode, no prefill)."""
    kw = dict(
        model_path=a["aic_model"], system_name=a["aic_system"], backend_name=a["backend"],
        backend_version=a["backend_version"], database_mode="SILICON", isl=a["isl"], osl=a["osl"],
        batch_size=a["batch"] // a["dp"], tp_size=a["tp"], pp_size=a["pp"], attention_dp_size=a["dp"],
    )
    if a["ep"] > 1:
        kw.update(moe_tp_size=a["tp"] * a["dp"] // a["ep"], moe_ep_size=a["ep"])
    return [dict(kw, mode="agg"), dict(kw, mode="static_gen")]


def pareto_call(a):
    return dict(
        model_path=a["aic_model"], total_gpus=a["total_gpus"], system=a["aic_system"], backend=a["backend"],
        backend_version=a["backend_version"], database_mode="SILICON", isl=a["isl"], osl=a["osl"],
        ttft=a["ttft_ms"], tpot=a["tpot_ms"],
    )


def estimate(api, a):
    agg, gen = (api.cli_estimate(**kw) for kw in estimate_calls(a))
    step = (agg.per_ops_data or {}).get("genonly_step") or {}
    raw = agg.raw
    return {
        "tok_s_gpu": float(raw["tokens/s/gpu"]), "tok_s_user": float(raw["tokens/s/user"]),
        "ttft_s": float(agg.ttft) / 1e3, "tpot_s": float(agg.tpot) / 1e3,
        "step_s": sum(float(v) for v in step.values()) / 1e3 if step else None,
        "step_ops_ms": {k: round(float(v), 4) for k, v in step.items()},
        "decode_tpot_s": float(gen.tpot) / 1e3, "decode_tok_s_gpu": float(gen.raw["tokens/s/gpu"]),
        "memory_gb": float(raw["memory"]), "gpus": int(raw["num_total_gpus"]),
        "quant": {k: raw.get(k) for k in ("gemm", "kvcache", "fmha", "moe", "comm")},
        "moe_comm_fallbacks": sorted({repr(f) for r in (agg, gen) for f in (r.moe_comm_fallbacks or ())}),
        "backend_version": agg.backend_version,
    }


def pareto(api, a):
    res = api.cli_default(**pareto_call(a))
    out = []
    for mode, df in sorted(res.pareto_fronts.items()):
        for target in a["targets"]:
            ok = None if df is None else df[df["tokens/s/user"].astype(float) >= target]
            if ok is None or not len(ok):
                out.append({"mode": mode, "target": target, "tok_s_gpu": None})
                continue
            best = ok.loc[ok["tokens/s/gpu"].astype(float).idxmax()]
            plan = best.get("parallel", best.get("(d)parallel"))
            batch = best.get("bs", best.get("(d)bs"))
            out.append({
                "mode": mode, "target": target, "tok_s_gpu": float(best["tokens/s/gpu"]),
                "tok_s_user": float(best["tokens/s/user"]), "ttft_s": float(best["ttft"]) / 1e3,
                "plan": str(plan), "batch_per_rank": int(batch), "gpus": int(best["num_total_gpus"]),
            })
    return {"pareto": out}


def main(argv):
    a = json.loads(argv[1])
    calls = [pareto_call(a)] if a.get("pareto") else estimate_calls(a)
    if a.get("dry_run"):
        print(json.dumps({"calls": calls}))
        return 0
    import logging
    import warnings

    warnings.filterwarnings("ignore")  # the package warns that `cli` moves to aisimulate in 0.13
    logging.disable(logging.WARNING)
    try:
        from importlib.metadata import version

        import aiconfigurator.cli.api as api
    except ImportError as exc:
        print(json.dumps({"error": "missing", "detail": str(exc)}))
        return 3
    out = pareto(api, a) if a.get("pareto") else estimate(api, a)
    out["aic_version"] = version("aiconfigurator")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def script_args(config: PeerConfig, **extra: Any) -> dict[str, Any]:
    """The JSON the script reads: the config's fields (enums as their values) plus ``extra``."""
    args = {k: (v.value if isinstance(v, StrEnum) else v) for k, v in asdict(config).items()}
    return {**args, **extra}


def _run_script(venv: Path, args: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
    python = _python(venv)
    if not python.exists():
        raise PeerError(f"no Python at {python}: make the venv with --install (about 850 MB), or give --venv PATH")
    try:
        proc = subprocess.run(
            [str(python), "-c", SCRIPT, json.dumps(args)], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerError(f"aiconfigurator ran past {timeout_s:.0f} s in {venv}") from exc
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        out: dict[str, Any] = json.loads(last[0])
    except json.JSONDecodeError:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise PeerError(f"aiconfigurator failed in {venv} (exit code {proc.returncode}): {tail[0][:300]}") from None
    if out.get("error") == "missing":
        raise PeerError(f"aiconfigurator is not installed in {venv}: pip install aiconfigurator=={AIC_VERSION}")
    return out


def run_peer(config: PeerConfig, *, venv: Path, timeout_s: float = 300.0) -> dict[str, Any]:
    """aiconfigurator's figures for ``config``'s exact plan (``tok_s_gpu``, ``tok_s_user``, ``ttft_s``, ...)."""
    return _run_script(venv, script_args(config), timeout_s=timeout_s)


def run_peer_pareto(
    config: PeerConfig,
    *,
    venv: Path,
    total_gpus: int,
    targets: Sequence[float] = PARETO_TARGETS,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """aiconfigurator's own search on ``total_gpus``: its best tokens/s/GPU at each tokens/s/user target.

    Loose latency limits (TTFT 5 s, TPOT 1 s) keep the whole front; the targets then pick points on it.
    """
    extra = {"pareto": True, "total_gpus": total_gpus, "targets": list(targets), "ttft_ms": 5000.0, "tpot_ms": 1000.0}
    return _run_script(venv, script_args(config, **extra), timeout_s=timeout_s)


def ensure_venv(path: Path) -> Path:
    """A venv at ``path`` with ``aiconfigurator==AIC_VERSION``, made (and pip-installed) if missing."""
    path = path.expanduser().resolve()
    if path == Path(sys.prefix).resolve():
        raise PeerError(f"{path} is this project's own environment: give a separate path for aiconfigurator")
    python = _python(path)
    probe = "import importlib.metadata as m; print(m.version('aiconfigurator'))"
    if python.exists():
        have = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
        if have.returncode == 0 and have.stdout.strip() == AIC_VERSION:
            return path
    else:
        print(f"creating a virtualenv at {path}", file=sys.stderr)
        made = subprocess.run([sys.executable, "-m", "venv", str(path)], capture_output=True, text=True)
        if made.returncode != 0:  # a file, a device, a folder that cannot be written: say so, no traceback
            tail = (made.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise PeerError(f"cannot make a virtualenv at {path} (--venv): {tail}")
    print(f"installing aiconfigurator=={AIC_VERSION} into {path} (about 850 MB installed)", file=sys.stderr)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", f"aiconfigurator=={AIC_VERSION}"]
    done = subprocess.run(pip, stdout=sys.stderr)
    if done.returncode != 0:
        raise PeerError(f"pip install aiconfigurator=={AIC_VERSION} failed in {path} (exit code {done.returncode})")
    return path


__all__ = [
    "AIC_VERSION",
    "PARETO_TARGETS",
    "PEER_CONFIGS",
    "SCRIPT",
    "Backend",
    "PeerConfig",
    "PeerError",
    "PeerMode",
    "ensure_venv",
    "run_peer",
    "run_peer_pareto",
    "script_args",
]
