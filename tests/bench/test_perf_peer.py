"""The aiconfigurator side-by-side harness, without aiconfigurator or the network.

The configs must name models and systems rackscale knows and describe a plan both tools can run; the script
that runs in the peer's venv is exercised with this project's own Python through its ``--dry-run``; and a
venv that is missing, lacks aiconfigurator or crashes gives one line saying what to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rackscale.bench.perf_peer import (
    AIC_VERSION,
    PEER_CONFIGS,
    SCRIPT,
    Backend,
    PeerConfig,
    PeerError,
    ensure_venv,
    run_peer,
    run_peer_pareto,
    script_args,
)
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.precision import Precision
from rackscale.model.errors import RackscaleError

IDS = [c.key for c in PEER_CONFIGS]


def dry_run(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls the peer script would make, run with this project's Python (no aiconfigurator needed)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps({**args, "dry_run": True})],
        capture_output=True,
        text=True,
        check=True,
    )
    calls: list[dict[str, Any]] = json.loads(done.stdout)["calls"]
    return calls


def test_config_keys_are_unique() -> None:
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("config", PEER_CONFIGS, ids=IDS)
def test_config_names_what_rackscale_knows(config: PeerConfig) -> None:
    model = model_named(config.model)
    system = system_named(config.system)
    assert isinstance(config.precision, Precision)
    assert isinstance(config.backend, Backend)
    # Only a mixture of experts has experts to spread; a dense model's plan must not claim EP.
    assert (config.ep > 1) == (model.experts > 0)
    # The plan fits one NVLink domain of the rackscale system, as the peer's single instance does.
    assert config.gpus <= system.domain_gpus
    assert config.aic_system.startswith(config.system)


@pytest.mark.parametrize("config", PEER_CONFIGS, ids=IDS)
def test_config_plan_is_consistent(config: PeerConfig) -> None:
    assert min(config.tp, config.pp, config.ep, config.dp, config.batch, config.isl, config.osl) >= 1
    assert config.batch % config.dp == 0, "every attention-DP rank gets the same number of sequences"
    assert (config.tp * config.dp) % config.ep == 0, "experts are spread over the attention GPUs"
    assert config.backend_version, "an unpinned backend version lets a new default move the figures"


@pytest.mark.parametrize("config", PEER_CONFIGS, ids=IDS)
def test_dry_run_estimates_the_config_plan(config: PeerConfig) -> None:
    calls = dry_run(script_args(config))
    assert [c["mode"] for c in calls] == ["agg", "static_gen"]
    for call in calls:
        assert call["model_path"] == config.aic_model
        assert call["system_name"] == config.aic_system
        assert call["backend_name"] == config.backend.value
        assert call["backend_version"] == config.backend_version
        assert call["database_mode"] == "SILICON"
        assert (call["isl"], call["osl"]) == (config.isl, config.osl)
        assert (call["tp_size"], call["pp_size"], call["attention_dp_size"]) == (config.tp, config.pp, config.dp)
        # The peer counts batch per DP rank; rackscale per instance.
        assert call["batch_size"] * call["attention_dp_size"] == config.batch
        if config.ep > 1:
            assert call["moe_ep_size"] == config.ep
            assert call["moe_tp_size"] * call["moe_ep_size"] == config.tp * config.dp
        else:
            assert "moe_ep_size" not in call and "moe_tp_size" not in call


@pytest.mark.parametrize(
    ("tp", "dp", "ep", "batch", "want"),
    [(8, 1, 1, 96, (96, None, None)), (1, 8, 8, 512, (64, 1, 8)), (2, 4, 4, 40, (10, 2, 4))],
    ids=["tp8-dense", "dp8-ep8", "tp2-dp4-ep4"],
)
def test_dry_run_splits_batch_and_experts(tp: int, dp: int, ep: int, batch: int, want: tuple[Any, ...]) -> None:
    base = PEER_CONFIGS[0]
    args = {**script_args(base), "tp": tp, "dp": dp, "ep": ep, "batch": batch}
    call = dry_run(args)[0]
    assert (call["batch_size"], call.get("moe_tp_size"), call.get("moe_ep_size")) == want


def test_dry_run_pareto_searches_the_given_gpus() -> None:
    config = PEER_CONFIGS[-1]
    args = script_args(config, pareto=True, total_gpus=16, targets=[20.0], ttft_ms=5000.0, tpot_ms=1000.0)
    (call,) = dry_run(args)
    assert (call["total_gpus"], call["system"], call["model_path"]) == (16, config.aic_system, config.aic_model)
    assert (call["ttft"], call["tpot"]) == (5000.0, 1000.0)


def _fake_python(venv: Path, body: str) -> Path:
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return venv


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (None, "no Python at"),
        # -S: no site-packages, so this Python can import nothing but the standard library.
        (f'exec "{sys.executable}" -S "$@"', f"pip install aiconfigurator=={AIC_VERSION}"),
        ("echo 'Traceback: boom' >&2; exit 2", "exit code 2"),
    ],
    ids=["no-venv", "no-aiconfigurator", "crash"],
)
def test_a_broken_venv_is_one_line_saying_what_to_do(tmp_path: Path, body: str | None, needle: str) -> None:
    venv = tmp_path / "venv" if body is None else _fake_python(tmp_path / "venv", body)
    with pytest.raises(PeerError) as caught:
        run_peer(PEER_CONFIGS[0], venv=venv)
    message = str(caught.value)
    assert needle in message and str(venv) in message
    assert "\n" not in message
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, RackscaleError)


def test_pareto_on_a_missing_venv_is_the_same_error(tmp_path: Path) -> None:
    with pytest.raises(PeerError, match="no Python at"):
        run_peer_pareto(PEER_CONFIGS[0], venv=tmp_path / "absent", total_gpus=8)


def test_ensure_venv_refuses_the_project_environment() -> None:
    with pytest.raises(PeerError, match="own environment"):
        ensure_venv(Path(sys.prefix))
