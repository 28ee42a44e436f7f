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

from rackscale.model.errors import RackscaleError
from rackscale.model.spec_errors import SpecError, SpecProblem
from rackscale.model.specs import MAX_SYNTHETIC_JOBS
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.scheduler.placement.fgd import PodType, pod_type
from rackscale.workloads.alibaba import load_alibaba_nodes, load_alibaba_pods

IntArray = NDArray[np.int64]

# The most pod arrivals one run (one policy, one seed) may be inflated to: the synthetic mix's bound (one
# run's arrivals are that run's jobs). The openb trace inflates to ~10,800; a legal trace (nodes of up to
# 1,048,576 GPUs, pods of 1 milli-GPU) would otherwise build billions of arrivals.
MAX_ARRIVALS = MAX_SYNTHETIC_JOBS
_BATCH = 1024  # copies drawn at once


class InflationTooLarge(RackscaleError, ValueError):
    """The trace would inflate to more than :data:`MAX_ARRIVALS` pod arrivals in one run."""


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


def expected_arrivals(*, demand: IntArray, capacity_gpus: int, ratio: float) -> float:
    """The pod arrivals :func:`inflate` builds on average, from two sums and nothing built: the ``n`` pods of
    the trace (demand ``S`` milli-GPU in all), then copies drawn uniformly (``S / n`` each on average) until
    the demand passes ``ratio`` x capacity, i.e. ``n x target / S`` (+1, the copy that passes it), or just
    ``n`` when the trace alone passes it. It grows with the capacity and shrinks with the pods' mean demand."""
    count = len(demand)
    total = int(demand.sum())  # a Python int: no int64 overflow, whatever the trace
    target = ratio * capacity_gpus * MILLI_PER_GPU
    if total <= 0:
        return float("inf")  # no copy would ever add demand: inflate refuses it on its own
    return float(count) if total > target else count * target / total + 1


def check_arrivals(*, demand: IntArray, capacity_gpus: int, ratio: float) -> None:
    """Raise :class:`InflationTooLarge` naming the inputs responsible when the trace would inflate to more
    than :data:`MAX_ARRIVALS` arrivals (on average): before anything is drawn or allocated."""
    if not (demand > 0).any():
        return  # nothing to inflate at all, which inflate (and Trace.read) refuse in their own words
    expected = expected_arrivals(demand=demand, capacity_gpus=capacity_gpus, ratio=ratio)
    if expected <= MAX_ARRIVALS:
        return
    count = len(demand)
    mean_gpu = int(demand.sum()) / count / MILLI_PER_GPU
    if expected == count:  # no copies: the pod list alone is too long
        why = f"the pod list has {count:,} pods"
        fix = "fewer pods"
    else:
        why = (
            f"{ratio:g} x {capacity_gpus:,} GPUs of nodes to fill with pods of {mean_gpu:.3g} GPU on average "
            f"({count:,} pod{'' if count == 1 else 's'})"
        )
        fix = "fewer or smaller nodes (the gpu column), or pods that ask for more GPU (num_gpu, gpu_milli)"
    raise InflationTooLarge(
        f"the trace would inflate to {expected:.3g} pod arrivals per run, more than {MAX_ARRIVALS:,}: {why} "
        f"(fix: {fix})"
    )


def inflate(*, demand: IntArray, capacity_gpus: int, ratio: float, seed: int) -> Arrivals:
    """Shuffle the pods with ``seed``, then append uniformly random pods (with replacement, same RNG) until
    the arrived GPU demand exceeds ``ratio`` x capacity, as the FGD authors' simulator inflates a workload.

    Raises :class:`InflationTooLarge` before drawing anything when the expected arrivals exceed
    :data:`MAX_ARRIVALS` (:func:`check_arrivals`), and while drawing should this seed's draws run past it
    (a trace whose demand sits in a few rare pods varies that much from the mean)."""
    if not (demand > 0).any():
        raise ValueError("the pod list asks for no GPU at all; nothing to inflate")
    check_arrivals(demand=demand, capacity_gpus=capacity_gpus, ratio=ratio)
    rng = np.random.default_rng(seed)
    count = len(demand)
    order = rng.permutation(count)
    target = ratio * capacity_gpus * MILLI_PER_GPU
    total = int(demand[order].sum())
    extra: list[int] = []
    # Draw in batches (far faster than one draw per pod); the unused tail of the last batch is dropped, which
    # is harmless because this generator serves the arrival order only.
    while total <= target:
        if count + len(extra) > MAX_ARRIVALS:  # memory stays bounded whatever the draws
            raise InflationTooLarge(
                f"seed {seed}: the trace inflated past {MAX_ARRIVALS:,} pod arrivals in one run (its GPU "
                "demand is in few pods) (fix: fewer or smaller nodes, or more pods that ask for GPU)"
            )
        for i in rng.integers(0, count, size=_BATCH).tolist():
            if total > target:
                break
            extra.append(i)
            total += int(demand[i])
    full = np.concatenate([order, np.asarray(extra, dtype=np.int64)]).astype(np.int64)
    return Arrivals(seed=seed, order=full, originals=count)
