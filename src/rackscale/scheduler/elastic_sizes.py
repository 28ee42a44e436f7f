"""The sizes an elastic gang may start at when the one it asked for does not fit (``elastic.py``)."""

from __future__ import annotations

from dataclasses import replace

from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec, Level
from rackscale.scheduler.placement.request import racks_descending


def smaller_sizes(job: JobSpec, state: StateView, models: tuple[str, ...]) -> list[int]:
    """The worker counts below ``job.units`` worth trying for an elastic gang, best first: the largest that
    fits the emptiest rack (if it fits one rack at its minimum), else the largest the free GPUs allow; each
    a multiple of the gang's ``resize_step`` (its minimum is one)."""
    g = job.unit.gpus
    lo = job.min_units or job.units
    if not g or lo >= job.units:
        return []
    step = job.resize_step  # whole data-parallel ranks of an LLM gang (``llm.jobs.elastic_llm``), else 1
    top = next(racks_descending(state, models, 0), None)  # the rack with the most free GPUs (an index read)
    rack = state.rack_whole[top] // g if top is not None else 0
    if min(lo, job.units) * g <= state.cluster.max_rack_gpus and rack >= lo:
        return [min(rack, job.units - 1) // step * step]
    if job.topology.required is Level.RACK:
        return []
    free = sum(state.model_free_whole[m] for m in models) // g
    return [min(free, job.units - 1) // step * step] if free >= lo else []


def at_size(job: JobSpec, units: int) -> JobSpec:
    """The gang as a fixed-size job of ``units`` workers (what a placer is asked for)."""
    return replace(job, units=units, min_units=0, max_units=0)
