"""Measured MoE kernels: what one MoE layer's expert computation costs on a chip, by kernel.

The routed experts of a decode step run as one fused MoE operation (routing, token permutation, the grouped
expert GEMMs, the weighted combine). A roofline at the chip's peak misses most of its cost at decode batch
sizes: a fixed cost per layer, and grouped GEMMs far below the dense peak, the further below the fewer
experts (so the less work) each GPU holds. Each kernel here is fitted to NVIDIA's own measurements of that
kernel, not to any serving figure, per expert-parallel degree:

    time per MoE layer = fixed + max(routed FLOPs / (peak x compute), touched expert bytes / (HBM x memory))

Source: aiconfigurator-core 0.12.0 (ai-dynamo/aiconfigurator, Apache-2.0), its measured TensorRT-LLM
1.3.0rc20 MoE tables ``systems/data/{b200_sxm,gb200}/moe/trtllm/1.3.0rc20/moe_perf.parquet``: DeepSeek's
shape (hidden 7168, expert FFN 2048, top-8 of 256 experts), NVFP4, balanced routing, 1-16,384 tokens entering
the EP group (27 counts) at each EP of 1-256. Each row below is a least-squares fit on log time of one EP's
points (docs/perf.md gives the script); its rms error is in the comment. Where one term never binds in an
EP's range its share is loosely determined (e.g. the memory share at EP256).

- ``CUTLASS``: TensorRT-LLM's throughput MoE (grouped GEMMs); the published runs' attention-DP recipes use it
  or CuteDSL, which has no measured table and borrows CUTLASS's numbers (an assumption);
- ``TRTLLM``: TensorRT-LLM's min-latency MoE, the published TP8/EP8 recipes' backend: cheap to start, but its
  cost grows quickly with tokens (measured up to 256 tokens; the model uses it only up to there).

A model of another shape borrows the row with the nearest experts per GPU (an assumption); a chip with no
measured kernel (Hopper, Ampere) uses the generic roofline: no fixed cost and the serving efficiency's shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class MoeBackend(StrEnum):
    CUTLASS = "cutlass"
    TRTLLM = "trtllm"  # min-latency


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeKernel:
    backend: MoeBackend
    fixed_s: float  # per MoE layer: routing, permutation, finalize, launches
    memory: float  # share of the HBM bandwidth its expert weight streams reach
    compute: float  # share of the chip's dense peak (in the experts' format) its grouped GEMMs reach
    max_tokens: float = float("inf")  # tokens entering the EP group it is measured (and used) up to


# (experts per GPU, fixed s, HBM share, compute share) per EP, fitted as the module's docstring says.
_FITS: dict[tuple[str, MoeBackend], tuple[tuple[int, float, float, float], ...]] = {
    ("B200", MoeBackend.CUTLASS): (
        (256, 52e-6, 0.700, 0.2442),  # EP1, rms 10%
        (128, 40e-6, 0.688, 0.2309),  # EP2, rms 11%
        (64, 63e-6, 0.412, 0.1743),  # EP4, rms 12%
        (32, 51e-6, 0.388, 0.1558),  # EP8, rms 11%
        (16, 34e-6, 0.600, 0.1558),  # EP16, rms 11%
        (8, 45e-6, 0.325, 0.0940),  # EP32, rms 8%
        (4, 47e-6, 0.325, 0.0634),  # EP64, rms 7%
        (2, 48e-6, 0.400, 0.0362),  # EP128, rms 6%
        (1, 49e-6, 0.775, 0.0206),  # EP256, rms 4%
    ),
    ("B200", MoeBackend.TRTLLM): (
        (256, 12e-6, 1.000, 0.0258),  # EP1, rms 35%
        (128, 32e-6, 0.750, 0.0195),  # EP2, rms 7%
        (64, 32e-6, 0.675, 0.0174),  # EP4, rms 8%
        (32, 34e-6, 0.662, 0.0174),  # EP8, rms 10%
        (16, 33e-6, 0.650, 0.0165),  # EP16, rms 11%
        (8, 39e-6, 0.975, 0.0218),  # EP32, rms 7%
        (4, 30e-6, 0.988, 0.0118),  # EP64, rms 10%
        (2, 23e-6, 0.525, 0.0105),  # EP128, rms 7%
        (1, 21e-6, 0.138, 0.0036),  # EP256, rms 5%
    ),
    ("GB200", MoeBackend.CUTLASS): (
        (256, 50e-6, 0.738, 0.2325),  # EP1, rms 10%
        (128, 40e-6, 0.725, 0.2198),  # EP2, rms 10%
        (64, 35e-6, 0.700, 0.2078),  # EP4, rms 11%
        (32, 53e-6, 0.388, 0.1483),  # EP8, rms 13%
        (16, 34e-6, 0.625, 0.1483),  # EP16, rms 11%
        (8, 34e-6, 0.562, 0.1120),  # EP32, rms 10%
        (4, 41e-6, 1.000, 0.0756),  # EP64, rms 13%
        (2, 52e-6, 0.625, 0.0364),  # EP128, rms 5%
        (1, 50e-6, 1.000, 0.0208),  # EP256, rms 3%
    ),
    ("GB200", MoeBackend.TRTLLM): (
        (256, 12e-6, 1.000, 0.0232),  # EP1, rms 40%
        (128, 34e-6, 0.775, 0.0157),  # EP2, rms 8%
        (64, 34e-6, 0.713, 0.0166),  # EP4, rms 7%
        (32, 34e-6, 0.750, 0.0089),  # EP8, rms 11%
        (16, 33e-6, 0.662, 0.0157),  # EP16, rms 13%
        (8, 37e-6, 0.950, 0.0208),  # EP32, rms 8%
        (4, 30e-6, 1.000, 0.0112),  # EP64, rms 11%
        (2, 23e-6, 0.625, 0.0095),  # EP128, rms 6%
        (1, 21e-6, 0.138, 0.0033),  # EP256, rms 5%
    ),
}
_MAX_TOKENS = {MoeBackend.CUTLASS: float("inf"), MoeBackend.TRTLLM: 256.0}

MEASURED_MOE_KERNELS: Mapping[tuple[str, MoeBackend], tuple[tuple[int, MoeKernel], ...]] = MappingProxyType(
    {
        key: tuple(
            (per_gpu, MoeKernel(backend=key[1], fixed_s=f, memory=m, compute=c, max_tokens=_MAX_TOKENS[key[1]]))
            for per_gpu, f, m, c in rows
        )
        for key, rows in _FITS.items()
    }
)


def moe_kernels(
    gpu_name: str, backend: MoeBackend | None, tokens: float, experts_per_gpu: float
) -> tuple[MoeKernel, ...]:
    """The measured kernels that may run ``tokens`` tokens on this chip with ``experts_per_gpu`` local experts
    (the fit of the nearest measured count): the named one, else every one that covers the count (the caller
    takes the faster). Empty: no measurement, the generic roofline applies."""
    found = []
    for (chip, kind), rows in MEASURED_MOE_KERNELS.items():
        if chip != gpu_name or (backend is not None and kind is not backend):
            continue
        _, kernel = min(rows, key=lambda r: abs(math.log(r[0]) - math.log(max(experts_per_gpu, 1e-9))))
        if tokens <= kernel.max_tokens:
            found.append(kernel)
    if not found and backend is MoeBackend.TRTLLM:  # past the min-latency kernel's range: the throughput one
        return moe_kernels(gpu_name, MoeBackend.CUTLASS, tokens, experts_per_gpu)
    return tuple(found)


__all__ = ["MEASURED_MOE_KERNELS", "MoeBackend", "MoeKernel", "moe_kernels"]
