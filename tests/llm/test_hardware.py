"""The GPU catalogue against its datasheets, the precision fallback rule, and --gpu NAME[:DOMAIN] parsing."""

from __future__ import annotations

import dataclasses

import pytest

from rackscale.llm.hardware import GPUS, MAX_DOMAIN_GPUS, SYSTEMS, GpuSpec, HardwareError, system_named
from rackscale.llm.precision import Precision
from rackscale.model.errors import RackscaleError

# (gpu, bf16, fp8, fp4 dense TFLOP/s or None, HBM GB, HBM TB/s, NVLink GB/s one way, NIC GB/s, domain): the
# datasheets' sparse figures halved; NVLink "600 / 900 / 1800 GB/s" totals halved (docs/perf-catalogue.md).
DATASHEET = [
    ("a100", 312, None, None, 80, 2.039, 300, 25, 8),
    ("h100", 989, 1979, None, 80, 3.35, 450, 50, 8),
    ("h200", 989, 1979, None, 141, 4.8, 450, 50, 8),
    ("b200", 2250, 4500, 9000, 180, 8.0, 900, 50, 8),
    ("gb200", 2500, 5000, 10000, 186, 8.0, 900, 50, 72),
]


@pytest.mark.parametrize(
    ("key", "bf16", "fp8", "fp4", "hbm_gb", "hbm_tb_s", "nvlink", "nic", "domain"),
    DATASHEET,
    ids=[d[0] for d in DATASHEET],
)
def test_catalogue_matches_the_datasheets(
    key: str,
    bf16: float,
    fp8: float | None,
    fp4: float | None,
    hbm_gb: float,
    hbm_tb_s: float,
    nvlink: float,
    nic: float,
    domain: int,
) -> None:
    gpu = GPUS[key]
    assert gpu.flops(Precision.BF16) == bf16 * 1e12
    for precision, rate in ((Precision.FP8, fp8), (Precision.FP4, fp4)):
        assert gpu.supports(precision) is (rate is not None)
        if rate is not None:
            assert gpu.flops(precision) == rate * 1e12
    assert (gpu.hbm_bytes, gpu.hbm_bytes_per_s) == (hbm_gb * 1e9, hbm_tb_s * 1e12)
    assert (gpu.nvlink_bytes_per_s, gpu.nic_bytes_per_s, gpu.domain_gpus) == (nvlink * 1e9, nic * 1e9, domain)
    assert gpu.sources, "every catalogue entry names its sources"


def test_gb200_memory_is_the_rack_total_over_72() -> None:
    # NVIDIA's GB200 NVL72 page: "up to 13.4 TB HBM3e" for 72 GPUs -> 186 GB each (not the 192 GB of B200 dies).
    assert GPUS["gb200"].hbm_gb == pytest.approx(13.4e3 / 72, abs=0.5)


FALLBACK = [
    ("a100", Precision.FP8, Precision.BF16),  # no FP8 tensor cores: fp8 weights are upcast to bf16
    ("a100", Precision.FP4, Precision.BF16),
    ("h100", Precision.FP4, Precision.FP8),  # Hopper: fp4 runs at the fp8 rate, the fastest wider format
    ("h200", Precision.FP4, Precision.FP8),
]


@pytest.mark.parametrize(("key", "asked", "runs_at"), FALLBACK, ids=[f"{f[0]}-{f[1]}" for f in FALLBACK])
def test_a_missing_precision_runs_at_the_fastest_wider_one(key: str, asked: Precision, runs_at: Precision) -> None:
    gpu = GPUS[key]
    assert not gpu.supports(asked)
    assert gpu.flops(asked) == gpu.flops(runs_at)


def test_fallback_never_picks_a_narrower_format() -> None:
    # A made-up chip whose fp4 is fast but lacks fp8: an fp8 matmul cannot run on fp4 units, so bf16.
    odd = dataclasses.replace(GPUS["b200"], dense_tflops=((Precision.BF16, 100.0), (Precision.FP4, 400.0)))
    assert odd.flops(Precision.FP8) == 100e12


BAD_GPUS = [
    ("no-bf16", {"dense_tflops": ((Precision.FP8, 10.0),)}, "bf16"),
    ("twice", {"dense_tflops": ((Precision.BF16, 1.0), (Precision.BF16, 2.0))}, "twice"),
    ("zero-hbm", {"hbm_gb": 0.0}, "hbm_gb"),
    ("nan-bandwidth", {"hbm_tb_s": float("nan")}, "hbm_tb_s"),
    ("negative-rate", {"dense_tflops": ((Precision.BF16, -1.0),)}, "TFLOP/s"),
    ("domain-too-big", {"domain_gpus": MAX_DOMAIN_GPUS + 1}, "domain_gpus"),
    ("negative-price", {"price_per_gpu_hour": -1.0}, "price"),
]


@pytest.mark.parametrize(("case", "changes", "field"), BAD_GPUS, ids=[b[0] for b in BAD_GPUS])
def test_impossible_chips_are_refused(case: str, changes: dict[str, object], field: str) -> None:
    with pytest.raises(HardwareError, match=field):
        dataclasses.replace(GPUS["h100"], **changes)  # type: ignore[arg-type]


NAMES = [
    ("gb200", "GB200 NVL72", 72, "gb200"),
    ("B200", "B200 x8", 8, "b200"),
    ("b200:72", "B200 NVL72 (what-if)", 72, "b200"),
    ("h100:8", "H100 x8", 8, "h100"),
    (" H200 : 16 ", "H200 NVL16 (what-if)", 16, "h200"),
    ("a100", "A100 x8", 8, "a100"),
    ("a100-nvl72", "A100 NVL72 (what-if)", 72, "a100"),
    ("gb200:576", "GB200 NVL576 (what-if)", 576, "gb200"),
    ("gb200:1", "GB200 x1 (what-if)", 1, "gb200"),
]


@pytest.mark.parametrize(("text", "name", "domain", "gpu"), NAMES, ids=[n[0] for n in NAMES])
def test_system_named(text: str, name: str, domain: int, gpu: str) -> None:
    system = system_named(text)
    assert (system.name, system.domain_gpus, system.gpu) == (name, domain, GPUS[gpu])
    # An override changes only the domain: the chip's NIC and price stay those of its usual system.
    assert (system.nic_gb_s, system.price_per_gpu_hour) == (GPUS[gpu].nic_gb_s, GPUS[gpu].price_per_gpu_hour)
    assert system.nic_bytes_per_s == GPUS[gpu].nic_gb_s * 1e9


def test_usual_systems() -> None:
    assert {key: s.name for key, s in SYSTEMS.items()} == {
        "a100": "A100 x8",
        "h100": "H100 x8",
        "h200": "H200 x8",
        "b200": "B200 x8",
        "gb200": "GB200 NVL72",
        "a100-nvl72": "A100 NVL72 (what-if)",
    }
    assert SYSTEMS["gb200"].with_domain(8).name == "GB200 x8 (what-if)"


BAD_NAMES = [
    ("unknown", "mi300x", "unknown system"),
    ("empty", "", "unknown system"),
    ("empty-domain", "b200:", "bad NVLink domain"),
    ("zero", "b200:0", "bad NVLink domain"),
    ("negative", "b200:-8", "bad NVLink domain"),
    ("too-big", "b200:577", "bad NVLink domain"),
    ("huge", "b200:" + "9" * 5000, "bad NVLink domain"),
    ("float", "b200:7.5", "bad NVLink domain"),
    ("word", "b200:eight", "bad NVLink domain"),
    ("unicode-digits", "b200:\u0667\u0662", "bad NVLink domain"),
    ("two-colons", "b200:8:8", "bad NVLink domain"),
    ("unknown-with-domain", "tpu:8", "unknown system"),
]


@pytest.mark.parametrize(("case", "text", "says"), BAD_NAMES, ids=[b[0] for b in BAD_NAMES])
def test_system_named_refuses_bad_text_naming_it_and_the_choices(case: str, text: str, says: str) -> None:
    with pytest.raises(HardwareError) as caught:
        system_named(text)
    message = str(caught.value)
    assert isinstance(caught.value, RackscaleError) and isinstance(caught.value, ValueError)
    assert says in message and len(message) < 400
    assert repr(text)[:20] in message
    if says == "unknown system":
        assert "gb200" in message and "a100-nvl72" in message
    else:
        assert str(MAX_DOMAIN_GPUS) in message


def test_with_domain_validates() -> None:
    with pytest.raises(HardwareError, match="domain"):
        SYSTEMS["b200"].with_domain(0)
    with pytest.raises(HardwareError, match="domain"):
        SYSTEMS["b200"].with_domain(True)


def test_gpu_spec_is_frozen() -> None:
    gpu: GpuSpec = GPUS["b200"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.hbm_gb = 1.0  # type: ignore[misc]
