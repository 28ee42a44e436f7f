"""Which pending gangs become rackscale jobs this cycle, and why the others do not: pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rackscale.kube.pods import Gang, gang_spec
from rackscale.model.workload import JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    jobs: dict[str, tuple[Gang, JobSpec]] = field(default_factory=dict)  # by job name
    rejected: list[tuple[Gang, str]] = field(default_factory=list)  # (gang, why it is not a job yet)


def plan(
    pending: Iterable[Gang],
    *,
    gpu_resource: str,
    max_node_gpus: int,
    submitted: Mapping[str, float],
    held: Mapping[str, str],
) -> Plan:
    """``submitted``: each gang's submit time (seconds since the scheduler started, for fair ordering);
    ``held``: gangs that must not be placed now, with the reason (an undo still in progress)."""
    out = Plan()
    for g in pending:
        why = held.get(g.job)
        if why is not None:
            out.rejected.append((g, why))
            continue
        if not g.ready:
            exist = g.bound + len(g.pending)
            out.rejected.append((g, f"pod group {g.group!r}: {exist} of {g.min_member} members exist (min-member)"))
            continue
        spec = gang_spec(g, gpu_resource, submit_time=submitted[g.job])
        if isinstance(spec, str):
            out.rejected.append((g, spec))
            continue
        if spec.unit.gpus > max_node_gpus:
            out.rejected.append((g, f"each pod asks for {spec.unit.gpus} GPUs; the largest node has {max_node_gpus}"))
            continue
        out.jobs[spec.name] = (g, spec)
    return out
