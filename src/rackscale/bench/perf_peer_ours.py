"""rackscale's figures for a :class:`~rackscale.bench.perf_peer.PeerConfig`: the same fixed plan, our model.

The decode step at the plan and batch (mean context ``ISL + OSL/2``), and aggregated serving of that plan
(``tok/s/GPU = 1 / (1/D + (ISL/OSL)/P)``, the user's steps stretched by the prefill share), as
``rackscale.llm.serving`` computes every point of a curve.
"""

from __future__ import annotations

from typing import Any

from rackscale.bench.perf_peer import PeerConfig
from rackscale.llm.calibration import serving_efficiency
from rackscale.llm.decode import decode_step, prefill
from rackscale.llm.fabric import Span
from rackscale.llm.hardware import system_named
from rackscale.llm.models import model_named
from rackscale.llm.plans import ServePlan, gpu_memory

AGG_PREFILL_TOKENS = 8192


def ours(config: PeerConfig) -> dict[str, Any]:
    model, system = model_named(config.model), system_named(config.system)
    gpu, eff = system.gpu, serving_efficiency(system.gpu)
    from rackscale.llm.serving import links_of

    links = links_of(system)
    plan = ServePlan(tp=config.tp, dp=config.dp, ep=config.ep, pp=config.pp, batch=config.batch)
    span = Span.packed(plan.gpus, system.domain_gpus)
    context = config.isl + config.osl / 2.0
    step = decode_step(model, config.precision, plan, gpu=gpu, links=links, span=span, context=context, eff=eff)
    requests = max(1, AGG_PREFILL_TOKENS // config.isl)
    pre = prefill(
        model, config.precision, plan, gpu=gpu, links=links, span=span, isl=config.isl, requests=requests, eff=eff
    )
    decode_rate = config.batch / step.step_s / plan.gpus
    prefill_rate = requests * config.isl / pre.time_s / plan.gpus
    t_dec, t_pre = 1.0 / decode_rate, (config.isl / config.osl) / prefill_rate
    share = t_pre / (t_dec + t_pre)
    mem = gpu_memory(model, config.precision, plan, context=config.isl + config.osl)
    ttft = prefill(
        model, config.precision, plan, gpu=gpu, links=links, span=span, isl=config.isl, requests=1, eff=eff
    ).time_s
    return {
        "tok_s_gpu": 1.0 / (t_dec + t_pre),
        "tok_s_user": (1.0 / step.step_s) * (1.0 - share),
        "ttft_s": ttft + step.step_s,
        "step_s": step.step_s,
        "decode_tok_s_gpu": decode_rate,
        "memory_gb": mem.total / 1e9,
        "terms_ms": {k: v * 1e3 for k, v in step.as_dict().items() if isinstance(v, float)},
        "dominant": step.dominant,
    }
