"""The inputs of the static-packing experiment: a node table, a pod table, and the inflated arrival order.

Everything here is plain arrays (one entry per node or pod) so that policies can score all nodes at once.
A pod asks for ``num_gpu`` GPUs of ``gpu_milli`` milli-GPU each: ``gpu_milli`` is 1000 for whole-GPU pods,
below 1000 for a shared pod (``num_gpu == 1``) and 0 for CPU-only pods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

MILLI = 1000
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class Nodes:
    """The cluster. ``model[i]`` indexes ``models``."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model: IntArray
    models: tuple[str, ...]

    @classmethod
    def build(
        cls,
        *,
        names: list[str],
        cpu_milli: list[int],
        memory_mib: list[int],
        gpus: list[int],
        models: list[str],
    ) -> Nodes:
        known = tuple(dict.fromkeys(models))
        lookup = {m: i for i, m in enumerate(known)}
        return cls(
            names=tuple(names),
            cpu_milli=np.asarray(cpu_milli, dtype=np.int64),
            memory_mib=np.asarray(memory_mib, dtype=np.int64),
            gpus=np.asarray(gpus, dtype=np.int64),
            model=np.asarray([lookup[m] for m in models], dtype=np.int64),
            models=known,
        )

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    def model_mask(self, spec: str) -> BoolArray:
        """Nodes whose GPU model the pod accepts (``spec`` is '|'-separated models, empty = any)."""
        if not spec:
            return np.ones(self.count, dtype=np.bool_)
        allowed = [i for i, m in enumerate(self.models) if m in spec.split("|")]
        return np.isin(self.model, np.asarray(allowed, dtype=np.int64))


@dataclass(frozen=True, slots=True, kw_only=True)
class Pods:
    """The pod list of a trace, in file order. ``spec[i]`` is the pod's allowed GPU models ('' = any)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    spec: tuple[str, ...]

    @classmethod
    def build(
        cls,
        *,
        names: list[str],
        cpu_milli: list[int],
        memory_mib: list[int],
        num_gpu: list[int],
        gpu_milli: list[int],
        spec: list[str],
    ) -> Pods:
        k = np.asarray(num_gpu, dtype=np.int64)
        raw = np.asarray(gpu_milli, dtype=np.int64)
        # Normalise to milli per GPU: only a one-GPU pod can share a GPU (0 < milli < 1000); multi-GPU pods, and
        # one-GPU pods without a valid fraction, take whole GPUs.
        shared = (k == 1) & (raw > 0) & (raw < MILLI)
        per_gpu = np.where(k == 0, 0, np.where(shared, raw, MILLI))
        return cls(
            names=tuple(names),
            cpu_milli=np.asarray(cpu_milli, dtype=np.int64),
            memory_mib=np.asarray(memory_mib, dtype=np.int64),
            num_gpu=k,
            gpu_milli=per_gpu.astype(np.int64),
            spec=tuple(spec),
        )

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def demand_milli(self) -> IntArray:
        """GPU demand of each pod in milli-GPU (a whole GPU is 1000)."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """One seed's arrival order: indexes into :class:`Pods`, original pods first, then the inflation copies."""

    seed: int
    order: IntArray
    originals: int  # the first ``originals`` entries are the shuffled trace, the rest are copies


def inflate(*, pods: Pods, capacity_gpus: int, ratio: float, seed: int) -> Arrivals:
    """Shuffle the trace with ``seed``, then append uniformly random pods (with replacement, same RNG) until
    the arrived GPU demand exceeds ``ratio`` x capacity, as the FGD authors' simulator inflates a workload."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(pods.count)
    demand = pods.demand_milli
    target = ratio * capacity_gpus * MILLI
    total = int(demand[order].sum())
    extra: list[int] = []
    if not (demand > 0).any():
        raise ValueError("the pod list asks for no GPU at all; nothing to inflate")
    # Draw in batches (far faster than one draw per pod); the unused tail of the last batch is dropped, which
    # is harmless because this generator serves the arrival order only.
    while total <= target:
        batch = rng.integers(0, pods.count, size=1024)
        for i in batch.tolist():
            if total > target:
                break
            extra.append(i)
            total += int(demand[i])
    full = np.concatenate([order, np.asarray(extra, dtype=np.int64)]).astype(np.int64)
    return Arrivals(seed=seed, order=full, originals=pods.count)
