"""The inputs of the static-packing experiment: the openb cluster and pods as the product reads them, and the
inflated arrival order of one seed.

Nodes and pods come from :mod:`rackscale.workloads.alibaba`, the reader ``--trace alibaba:`` uses: a
:class:`GPUCluster` (one rack per node) and one batch :class:`JobSpec` per pod, so every reading error is
the same one ``rackscale simulate`` reports. Bad rows are rejected, not skipped: a benchmark runs on the
whole trace or not at all.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.scheduler.placement.fgd import PodType, pod_type
from rackscale.workloads.alibaba import load_alibaba_nodes, load_alibaba_pods

IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """The cluster and the pods of a trace."""

    cluster: GPUCluster
    pods: tuple[JobSpec, ...]

    @classmethod
    def read(cls, *, nodes: str | os.PathLike[str], pods: str | os.PathLike[str]) -> Trace:
        """Raises :class:`rackscale.model.spec_errors.SpecError` naming each bad row (file:line)."""
        # Pods come in the loader's order (by creation time, file order without one); each seed shuffles them.
        trace = cls(cluster=load_alibaba_nodes(nodes), pods=load_alibaba_pods(pods, on_error="reject").jobs)
        # The experiment measures GPU allocation: without GPUs on either side there is nothing to measure.
        if trace.capacity_gpus == 0:
            fix = "give a node list with GPUs (the gpu column)"
            raise SpecError([SpecProblem((), "no node has a GPU: the allocation ratio is undefined", fix)], str(nodes))
        if not (trace.demand_milli > 0).any():
            fix = "give a pod list with GPU pods (num_gpu, gpu_milli)"
            raise SpecError([SpecProblem((), "no pod asks for a GPU: nothing to pack", fix)], str(pods))
        return trace

    @property
    def capacity_gpus(self) -> int:
        return self.cluster.total_gpus

    @property
    def demand_milli(self) -> IntArray:
        """GPU demand of each pod in milli-GPU (a whole GPU is 1000)."""
        return np.asarray([j.unit.gpu_demand_milli for j in self.pods], dtype=np.int64)

    def workload(self) -> dict[PodType, float]:
        """The pod-type mix of the trace (what FGD measures fragmentation against)."""
        return dict(Counter(pod_type(j.unit) for j in self.pods))


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrivals:
    """One seed's arrival order: indexes into the pods, original pods first, then the inflation copies."""

    seed: int
    order: IntArray
    originals: int  # the first ``originals`` entries are the shuffled trace, the rest are copies


def inflate(*, demand: IntArray, capacity_gpus: int, ratio: float, seed: int) -> Arrivals:
    """Shuffle the pods with ``seed``, then append uniformly random pods (with replacement, same RNG) until
    the arrived GPU demand exceeds ``ratio`` x capacity, as the FGD authors' simulator inflates a workload."""
    if not (demand > 0).any():
        raise ValueError("the pod list asks for no GPU at all; nothing to inflate")
    rng = np.random.default_rng(seed)
    count = len(demand)
    order = rng.permutation(count)
    target = ratio * capacity_gpus * MILLI_PER_GPU
    total = int(demand[order].sum())
    extra: list[int] = []
    # Draw in batches (far faster than one draw per pod); the unused tail of the last batch is dropped, which
    # is harmless because this generator serves the arrival order only.
    while total <= target:
        for i in rng.integers(0, count, size=1024).tolist():
            if total > target:
                break
            extra.append(i)
            total += int(demand[i])
    full = np.concatenate([order, np.asarray(extra, dtype=np.int64)]).astype(np.int64)
    return Arrivals(seed=seed, order=full, originals=count)
