"""The number formats weights and matmuls run in, and what each costs in bytes.

Bytes per parameter decide whether a model fits in HBM and how long a decode step spends reading weights;
the tensor-core rate per format lives with the chip (:mod:`rackscale.llm.hardware`). Sources:
``docs/perf-catalogue.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from rackscale.model.errors import RackscaleError


class Precision(StrEnum):
    """A weight/matmul format. Ordered here from widest to narrowest."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP4 = "fp4"


# FP4 is NVFP4: a 4-bit E2M1 value plus one FP8 (E4M3) scale per 16-value block, i.e. 4 + 8/16 = 4.5 bits per
# value (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025). The per-tensor
# FP32 scale is one number per tensor and is ignored. FP8 per-block scales (one per 128x128 block in
# DeepSeek-V3's checkpoint) are < 0.01 % of the bytes and are ignored too.
BYTES_PER_PARAM: Mapping[Precision, float] = MappingProxyType(
    {Precision.BF16: 2.0, Precision.FP8: 1.0, Precision.FP4: 4.5 / 8}
)


class PrecisionError(RackscaleError, ValueError):
    """A precision name that is not one of :class:`Precision`."""


def parse_precision(text: str) -> Precision:
    """``"BF16"``, ``" fp8 "`` -> :class:`Precision`; anything else is a :class:`PrecisionError` listing choices."""
    if isinstance(text, str):
        key = text.strip().lower()
        for precision in Precision:
            if precision.value == key:
                return precision
    choices = ", ".join(p.value for p in Precision)
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "") if isinstance(text, str) else type(text).__name__
    raise PrecisionError(f"unknown precision {shown}: choose one of {choices}")


__all__ = ["BYTES_PER_PARAM", "Precision", "PrecisionError", "parse_precision"]
