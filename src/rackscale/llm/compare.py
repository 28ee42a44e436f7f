"""Two architectures on one serving workload, and a ratio taken apart into its factors.

``A / B`` at an interactivity target is a product of steps from B to A, each changing one thing:

1. **chip**: B's system with A's GPU (same precision, same NVLink domain, same NIC);
2. **precision**: then A's precision;
3. **NVLink domain**: then A's domain size and NIC — the step rack-scale NVLink sells.

The product of the three factors is the whole ratio (each step divides out), so a claim such as "x28" can be
shown as what it is: chip x precision x domain at one interactivity, beside what the model measures.
Cost per million tokens uses each system's own price per GPU-hour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rackscale.llm.calibration import serving_efficiency
from rackscale.llm.hardware import System
from rackscale.llm.precision import Precision
from rackscale.llm.serving import ServeCurve, ServePoint, ServeWorkload, ServingMode, serve_curve

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Arch:
    system: System
    precision: Precision

    @property
    def label(self) -> str:
        return f"{self.system.name} {self.precision.value.upper()}"


def cost_per_million_tokens(system: System, tok_s_gpu: float) -> float | None:
    if tok_s_gpu <= 0:
        return None
    return system.price_per_gpu_hour / (tok_s_gpu * SECONDS_PER_HOUR) * 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetComparison:
    interactivity: float
    a: ServePoint | None
    b: ServePoint | None
    factors: tuple[tuple[str, float | None], ...]  # (step name, factor), product = ratio

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return self.a.tok_s_gpu / self.b.tok_s_gpu


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    a: Arch
    b: Arch
    targets: tuple[TargetComparison, ...]
    curve_a: ServeCurve
    curve_b: ServeCurve


def _curve(
    work: ServeWorkload, arch: Arch, mode: ServingMode, cache: dict[tuple[object, ...], ServeCurve]
) -> ServeCurve:
    key = (arch.system, arch.precision, mode)
    if key not in cache:
        w = replace(work, precision=arch.precision)
        cache[key] = serve_curve(w, arch.system, eff=serving_efficiency(arch.system.gpu), mode=mode)
    return cache[key]


def chain(a: Arch, b: Arch) -> tuple[tuple[str, Arch], ...]:
    """The configurations from B to A, one change at a time."""
    chip = Arch(system=replace(b.system, gpu=a.system.gpu), precision=b.precision)
    prec = Arch(system=chip.system, precision=a.precision)
    return (("chip", chip), ("precision", prec), ("nvlink-domain", a))


def compare(
    work: ServeWorkload,
    a: Arch,
    b: Arch,
    *,
    targets: Sequence[float],
    mode: ServingMode = ServingMode.BEST,
) -> Comparison:
    cache: dict[tuple[object, ...], ServeCurve] = {}
    curve_a, curve_b = _curve(work, a, mode, cache), _curve(work, b, mode, cache)
    steps = chain(a, b)
    out = []
    for x in targets:
        prev = curve_b.best_at(x)
        factors: list[tuple[str, float | None]] = []
        for name, arch in steps:
            cur = _curve(work, arch, mode, cache).best_at(x)
            f = None if (cur is None or prev is None or prev.tok_s_gpu <= 0) else cur.tok_s_gpu / prev.tok_s_gpu
            factors.append((name, f))
            prev = cur
        out.append(
            TargetComparison(interactivity=x, a=curve_a.best_at(x), b=curve_b.best_at(x), factors=tuple(factors))
        )
    return Comparison(a=a, b=b, targets=tuple(out), curve_a=curve_a, curve_b=curve_b)
