"""The hardware catalogue: GPUs (compute, HBM, NVLink) and the systems they usually ship in.

A :class:`GpuSpec` is one chip's datasheet numbers; a :class:`System` is that chip in a box or rack: its
NVLink domain size, its scale-out NIC and a price per GPU-hour. ``--gpu b200:72`` names a system with its
domain overridden, so "what if B200s sat in a 72-GPU NVLink domain" is one flag. Every number and its
source: ``docs/perf-catalogue.md``. Units follow the datasheets (TFLOP/s, GB, TB/s, GB/s) and the
``*_per_s`` / ``*_bytes`` properties convert to SI so the maths never multiplies by 1e12 itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from rackscale.llm.precision import BYTES_PER_PARAM, Precision
from rackscale.model.errors import RackscaleError

# NVLink 5 connects at most 576 GPUs in one domain (NVIDIA's NVLink Switch System); no override may exceed it.
MAX_DOMAIN_GPUS = 576


class HardwareError(RackscaleError, ValueError):
    """A system name or NVLink domain that is not in the catalogue, or a chip description that cannot be."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU's datasheet numbers. Bandwidths are ONE direction (NVLink "1.8 TB/s" is 900 GB/s each way)."""

    name: str  # "B200"
    dense_tflops: tuple[tuple[Precision, float], ...]  # dense (no sparsity) tensor TFLOP/s per precision
    hbm_gb: float  # capacity, GB (1e9 bytes)
    hbm_tb_s: float  # HBM bandwidth, TB/s
    nvlink_gb_s: float  # NVLink bandwidth per GPU, one direction, GB/s
    nic_gb_s: float  # scale-out NIC bandwidth per GPU, one direction, GB/s (400 Gb/s = 50)
    domain_gpus: int  # NVLink domain size of its usual system (HGX: 8, NVL72: 72)
    price_per_gpu_hour: float  # USD; a documented default, overridable by callers
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        rates = dict(self.dense_tflops)
        if len(rates) != len(self.dense_tflops):
            raise HardwareError(f"GPU {self.name}: a precision appears twice in dense_tflops")
        if Precision.BF16 not in rates:
            # Every tensor-core generation here has bf16; it is the floor the fallback rule below relies on.
            raise HardwareError(f"GPU {self.name}: dense_tflops needs a bf16 rate")
        numbers = {"hbm_gb": self.hbm_gb, "hbm_tb_s": self.hbm_tb_s, "nvlink_gb_s": self.nvlink_gb_s}
        numbers.update({"nic_gb_s": self.nic_gb_s, **{f"{p} TFLOP/s": r for p, r in rates.items()}})
        for what, value in numbers.items():
            if not value > 0:
                raise HardwareError(f"GPU {self.name}: {what} is {value} (need a positive number)")
        if not self.price_per_gpu_hour >= 0:
            raise HardwareError(f"GPU {self.name}: price_per_gpu_hour is {self.price_per_gpu_hour} (need >= 0)")
        _check_domain(self.domain_gpus, f"GPU {self.name} domain_gpus")

    def supports(self, precision: Precision) -> bool:
        """Whether the tensor cores run this precision natively."""
        return any(p is precision for p, _ in self.dense_tflops)

    def default_precision(self) -> Precision:
        """FP8 where the chip has FP8 tensor cores (the usual serving checkpoint), else BF16: what ``perf`` and
        a sweep's perf cells serve at when no precision is given."""
        return Precision.FP8 if self.supports(Precision.FP8) else Precision.BF16

    def flops(self, precision: Precision) -> float:
        """Dense tensor FLOP/s at ``precision``.

        A chip without that format (A100 has no FP8 or FP4 tensor cores; Hopper has no FP4) runs the matmul
        in the fastest format it has that is *wider*: weights may still be stored narrow to save HBM and
        bandwidth, but they are upcast before the multiply. So A100 at fp8 computes at its bf16 rate.
        """
        rates = dict(self.dense_tflops)
        if precision in rates:
            return rates[precision] * 1e12
        wider = [rate for p, rate in rates.items() if BYTES_PER_PARAM[p] > BYTES_PER_PARAM[precision]]
        return max(wider) * 1e12  # never empty: bf16 is required and is the widest format

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_s * 1e12

    @property
    def nvlink_bytes_per_s(self) -> float:
        return self.nvlink_gb_s * 1e9

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gb_s * 1e9


@dataclass(frozen=True, slots=True, kw_only=True)
class System:
    """A GPU in a system: its NVLink domain size, NIC and price (what --gpu G[:DOMAIN] names)."""

    gpu: GpuSpec
    domain_gpus: int
    nic_gb_s: float
    price_per_gpu_hour: float

    def __post_init__(self) -> None:
        _check_domain(self.domain_gpus, f"{self.gpu.name} system domain_gpus")
        if not self.nic_gb_s > 0:
            raise HardwareError(f"{self.gpu.name} system: nic_gb_s is {self.nic_gb_s} (need a positive number)")
        if not self.price_per_gpu_hour >= 0:
            raise HardwareError(f"{self.gpu.name} system: price_per_gpu_hour is {self.price_per_gpu_hour}")

    @property
    def name(self) -> str:
        """``"GB200 NVL72"``, ``"B200 x8"``; a domain other than the chip's usual one is marked a what-if."""
        n = self.domain_gpus
        shape = f"{self.gpu.name} NVL{n}" if n > 8 else f"{self.gpu.name} x{n}"
        return shape if n == self.gpu.domain_gpus else f"{shape} (what-if)"

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gb_s * 1e9

    def with_domain(self, domain_gpus: int) -> System:
        return replace(self, domain_gpus=domain_gpus)


def _check_domain(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DOMAIN_GPUS:
        shown = repr(value) if isinstance(value, int) and abs(value) < 10**18 else type(value).__name__
        raise HardwareError(f"{what} is {shown} (need an integer from 1 to {MAX_DOMAIN_GPUS})")


_TB = Precision.BF16, Precision.FP8, Precision.FP4

# Dense rates are the datasheets' "with sparsity" figures halved. Prices: see docs/perf-catalogue.md (the
# GB200 figure is SemiAnalysis's TCO model as InferenceX cites it; the others are assumptions).
_GPUS = (
    GpuSpec(
        name="A100",
        dense_tflops=((Precision.BF16, 312.0),),
        hbm_gb=80.0,
        hbm_tb_s=2.039,
        nvlink_gb_s=300.0,
        nic_gb_s=25.0,
        domain_gpus=8,
        price_per_gpu_hour=1.30,
        sources=("NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB)", "NVIDIA DGX A100 datasheet (HDR 200 Gb/s NICs)"),
    ),
    GpuSpec(
        name="H100",
        dense_tflops=((Precision.BF16, 989.0), (Precision.FP8, 1979.0)),
        hbm_gb=80.0,
        hbm_tb_s=3.35,
        nvlink_gb_s=450.0,
        nic_gb_s=50.0,
        domain_gpus=8,
        price_per_gpu_hour=1.60,
        sources=("NVIDIA H100 Tensor Core GPU datasheet (SXM)", "InferenceX GPU specifications"),
    ),
    GpuSpec(
        name="H200",
        dense_tflops=((Precision.BF16, 989.0), (Precision.FP8, 1979.0)),
        hbm_gb=141.0,
        hbm_tb_s=4.8,
        nvlink_gb_s=450.0,
        nic_gb_s=50.0,
        domain_gpus=8,
        price_per_gpu_hour=1.80,
        sources=("NVIDIA H200 Tensor Core GPU datasheet (SXM)", "InferenceX GPU specifications"),
    ),
    GpuSpec(
        name="B200",
        dense_tflops=tuple(zip(_TB, (2250.0, 4500.0, 9000.0), strict=True)),
        hbm_gb=180.0,
        hbm_tb_s=8.0,
        nvlink_gb_s=900.0,
        nic_gb_s=50.0,
        domain_gpus=8,
        price_per_gpu_hour=1.95,
        sources=("NVIDIA DGX B200 / HGX B200 datasheet", "InferenceX GPU specifications"),
    ),
    GpuSpec(
        name="GB200",
        dense_tflops=tuple(zip(_TB, (2500.0, 5000.0, 10000.0), strict=True)),
        hbm_gb=186.0,
        hbm_tb_s=8.0,
        nvlink_gb_s=900.0,
        nic_gb_s=50.0,
        domain_gpus=72,
        price_per_gpu_hour=2.21,
        sources=("NVIDIA GB200 NVL72 specifications", "InferenceX GPU specifications", "InferenceX blog (TCO)"),
    ),
)

GPUS: Mapping[str, GpuSpec] = MappingProxyType({g.name.lower(): g for g in _GPUS})


def _usual(gpu: GpuSpec) -> System:
    return System(
        gpu=gpu, domain_gpus=gpu.domain_gpus, nic_gb_s=gpu.nic_gb_s, price_per_gpu_hour=gpu.price_per_gpu_hour
    )


# The seed scenario's what-if: A100 chips, but in a 72-GPU NVLink domain (no such product exists).
SYSTEMS: Mapping[str, System] = MappingProxyType(
    {**{key: _usual(gpu) for key, gpu in GPUS.items()}, "a100-nvl72": _usual(GPUS["a100"]).with_domain(72)}
)


def system_named(text: str) -> System:
    """``"gb200"``, ``"B200"``, ``"b200:72"`` (NVLink domain override), ``"h100:8"``; case-insensitive."""
    shown = repr(text[:60]) + ("..." if len(text) > 60 else "") if isinstance(text, str) else type(text).__name__
    choices = ", ".join(sorted(SYSTEMS))
    if not isinstance(text, str):
        raise HardwareError(f"system {shown} is not text: choose one of {choices}")
    name, colon, domain = text.strip().lower().partition(":")
    system = SYSTEMS.get(name.strip())
    if system is None:
        raise HardwareError(f"unknown system {shown}: choose one of {choices}, optionally NAME:DOMAIN (e.g. b200:72)")
    if not colon:
        return system
    digits = domain.strip()
    if not (digits.isascii() and digits.isdecimal() and len(digits) <= 4 and 1 <= int(digits) <= MAX_DOMAIN_GPUS):
        raise HardwareError(
            f"bad NVLink domain in {shown}: {domain.strip()[:20]!r} must be an integer from 1 to {MAX_DOMAIN_GPUS}"
        )
    return system.with_domain(int(digits))


__all__ = ["GPUS", "MAX_DOMAIN_GPUS", "SYSTEMS", "GpuSpec", "HardwareError", "System", "system_named"]
