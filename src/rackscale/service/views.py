"""What the API returns: pydantic models (they make the OpenAPI schema) and the functions that fill them
from the store and the live cluster. JSON keys are camelCase, like the job specs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from rackscale.model.placement import Placement
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster
from rackscale.scheduler.status import Status, relative
from rackscale.service.auth import Principal
from rackscale.service.live import LiveCluster
from rackscale.service.phase import JobPhase
from rackscale.service.store import EventRow, JobRow


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class NodeSlice(_Out):
    node: str
    rack: str
    gpus: list[int]
    milli_per_gpu: int


class PlacementOut(_Out):
    racks: list[str]
    nodes: list[NodeSlice]
    gpus: float


class RunOut(_Out):
    """An earlier run of a job's name (every submission of a name is a run; an ended one's name is free)."""

    run: int
    status: str
    reason: str
    submitted: float
    ended: float | None = None


class JobOut(_Out):
    name: str
    queue: str
    kind: str
    gpus: float
    priority: int
    status: str
    reason: str
    message: str
    submitted: float
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    restarts: int = 0
    placement: PlacementOut | None = None
    spec: dict[str, Any]
    # The store's id of this run (every submission is one; it grows with each): pass as ?run= for this run
    # once its name has been submitted again.
    run: int | None = None
    # GET /v1/jobs/NAME only (else null): how many runs of the name ended before this one, and the latest
    # of them (at most 5, the latest first).
    earlier_run_count: int | None = None
    earlier_runs: list[RunOut] | None = None


class JobList(_Out):
    items: list[JobOut]
    next_after: int | None  # pass as ?after= to get the next page (None: this was the last)


class EventOut(_Out):
    time: float
    type: str
    reason: str
    message: str


class EventList(_Out):
    job: str
    items: list[EventOut]
    run: int | None = None  # the run they belong to (the latest run of the name unless ?run= asked)


class GpuOut(_Out):
    index: int
    job: str | None  # the job holding (a share of) it
    used_milli: int
    failed: bool


class NodeOut(_Out):
    name: str
    rack: str
    region: str
    gpu_model: str
    gpus: int
    allocated: float
    failed: int
    jobs: list[str]
    # An operator's cordon or drain (rackscale.service.nodes_api): mode None when the node is schedulable.
    mode: str | None = None
    reason: str | None = None
    since: float | None = None
    deadline: float | None = None


class NodeDetail(NodeOut):
    gpu_grid: list[GpuOut]


class RackOut(_Out):
    name: str
    region: str
    gpu_model: str
    gpus: int
    allocated: float
    free: int
    failed: int
    jobs: list[str]


class RackDetail(RackOut):
    nodes: list[NodeDetail]


class RackList(_Out):
    items: list[RackOut]


class NodeList(_Out):
    items: list[NodeOut]


class QueueOut(_Out):
    name: str
    pending: int
    running: int
    gpus_allocated: float
    gpus_waiting: float


class QueueList(_Out):
    items: list[QueueOut]


class KpisOut(_Out):
    now: float
    gpus: int
    gpus_allocated: float
    gpus_failed: int
    allocation_ratio: float  # allocated / available GPU-seconds since the service started
    idle_rate: float  # idle while work waited / available GPU-seconds of those periods (DESIGN section 5)
    intra_rack_traffic_share: float | None  # NVLink bytes / all bytes; None before any byte moved
    traffic_bytes: dict[str, float]
    completed: int
    failed: int
    preemption_victims: int
    cost_per_hour: float
    currency: str


class ClusterOut(_Out):
    name: str
    backend: str
    regions: int
    racks: int
    nodes: int
    gpus: int
    gpus_allocated: float
    pending: int
    running: int
    now: float
    speed: float
    auth: bool


class WhoAmIOut(_Out):
    """Who a token is (``GET /v1/whoami``): the page names it, and asks before a link's token replaces it."""

    name: str  # the token file's entry name ("admin" for the generated token, "anonymous" with auth off)
    role: str  # admin, tenant or scrape
    queues: list[str]  # a tenant's queues (the first takes jobs without a queue); empty for the others
    auth: bool  # false: --no-auth, everyone is this anonymous admin


class Problem(_Out):
    loc: list[str | int]
    msg: str
    fix: str = ""


class ErrorOut(_Out):
    detail: str | list[Problem]


# ---------------------------------------------------------------------- builders
def merged_slices(cluster: GPUCluster, p: Placement) -> tuple[list[str], list[tuple[str, str, list[int], int]]]:
    """The placement's racks (sorted names) and, per node and share size, (node, rack, GPUs, milli per GPU):
    a GPU appears once per share of it the job holds (a job of many GPU shares holds several slices of one
    node)."""
    merged: dict[tuple[int, int], list[int]] = {}
    for a in p.allocs:
        merged.setdefault((a.node, a.milli), []).extend(a.gpus)
    nodes, racks = cluster.nodes, cluster.racks
    out = [(nodes[n].name, racks[nodes[n].rack].name, sorted(gpus), milli) for (n, milli), gpus in merged.items()]
    return sorted({rack for _, rack, _, _ in out}), out


def placement_out(cluster: GPUCluster, p: Placement) -> PlacementOut:
    racks, slices = merged_slices(cluster, p)
    nodes = [NodeSlice(node=n, rack=r, gpus=gpus, milli_per_gpu=milli) for n, r, gpus, milli in slices]
    return PlacementOut(racks=racks, nodes=nodes, gpus=p.gpu_milli / MILLI_PER_GPU)


def job_out(
    cluster: GPUCluster,
    row: JobRow,
    *,
    why: Status | None = None,
    now: float | None = None,
    earlier: tuple[int, list[JobRow]] | None = None,
) -> JobOut:
    """``why``: the live reason of a pending job (else the stored one is shown); its time, if it has one, is
    said as a clock time of the service clock, in UTC, and from ``now`` ("from 14:05 UTC, in 2 h 10 min").
    ``earlier``: the count and latest rows of the name's earlier runs (``Store.earlier_runs``)."""
    reason, message = shown_reason(row, why, now)
    return JobOut(
        name=row.name,
        queue=row.queue,
        kind=row.kind,
        gpus=row.gpus,
        priority=row.priority,
        status=row.status,
        reason=reason,
        message=message,
        submitted=row.submitted,
        started=row.started,
        ended=row.ended,
        exit_code=row.exit_code,
        restarts=row.restarts,
        placement=placement_out(cluster, row.placement) if row.placement is not None else None,
        spec=row.doc,
        run=row.seq,
        earlier_run_count=earlier[0] if earlier is not None else None,
        earlier_runs=[
            RunOut(run=r.seq, status=r.status, reason=r.reason, submitted=r.submitted, ended=r.ended)
            for r in earlier[1]
        ]
        if earlier is not None
        else None,
    )


def shown_reason(row: JobRow, why: Status | None, now: float | None) -> tuple[str, str]:
    """A row's reason and message as the API shows them: a pending job's live reason (``why``) when it has
    one, its time said as a clock time from ``now``; else the stored ones."""
    return shown_reason_of(row.status, row.reason, row.message, why, now)


def shown_reason_of(status: str, reason: str, message: str, why: Status | None, now: float | None) -> tuple[str, str]:
    """:func:`shown_reason` of a row's stored status, reason and message."""
    if why is None or status != JobPhase.PENDING:
        return reason, message
    return why.reason.value, why.text((lambda at: f"from {say_time(at, now)}") if now is not None else None)


def clock_time(at: float, now: float) -> str:
    """A time of the service clock (Unix seconds) as a UTC clock time: ``14:05 UTC`` on ``now``'s UTC day,
    ``2026-12-01 14:05 UTC`` on another; a time no calendar holds as seconds."""
    try:
        t = datetime.fromtimestamp(at, tz=UTC)
        day = datetime.fromtimestamp(now, tz=UTC).date()
    except (OverflowError, OSError, ValueError):
        return f"{at:.0f} s"
    return t.strftime("%H:%M UTC" if t.date() == day else "%Y-%m-%d %H:%M UTC")


def say_time(at: float, now: float | None) -> str:
    """``14:05 UTC, in 2 h 10 min`` (or ``..., 5 min ago``): the clock time and how far it is from ``now``."""
    return clock_time(at, at if now is None else now) + ("" if now is None else f", {relative(at, now)}")


def event_out(e: EventRow) -> EventOut:
    return EventOut(time=e.time, type=e.type, reason=e.reason, message=e.message)


Visible = Callable[[str], bool]  # may the caller see this job's name? (a tenant: only its own queues' jobs)


def everyone(_name: str) -> bool:
    return True


def visible_to(live: LiveCluster, who: Principal) -> Visible:
    """The jobs ``who`` may see by name: all for an admin; a tenant's own queues' jobs otherwise. Others'
    GPUs still show as used (capacity is not a secret), without the job's name."""
    if who.is_admin:
        return everyone
    return lambda name: (spec := live.specs.get(name)) is not None and who.can_use(spec.queue)


def _node(live: LiveCluster, n: int, *, grid: bool, visible: Visible = everyone) -> NodeDetail | NodeOut:
    c = live.cluster
    st = live.state
    node = c.nodes[n]
    failed = node.gpus if st.node_failed[n] else len(st.gpu_failed[n])  # a cordoned node's GPUs are not failed
    free = sum(st.gpu_free[n][g] for g in range(node.gpus) if g not in st.gpu_failed[n] and not st.node_failed[n])
    allocated = (node.gpus - failed) - free / MILLI_PER_GPU
    held = sorted(st.node_jobs[n])
    jobs = [j for j in held if visible(j)]
    base: dict[str, Any] = {
        "name": node.name,
        "rack": c.racks[node.rack].name,
        "region": c.regions[node.region].name,
        "gpu_model": node.gpu_model,
        "gpus": node.gpus,
        "allocated": max(allocated, 0.0),
        "failed": failed,
        "jobs": jobs,
        **live.hold_fields(n),
    }
    if not grid:
        return NodeOut(**base)
    owner: dict[int, str] = {}
    for j in jobs:  # only visible jobs name their GPUs; the others' show as used, job None
        for a in st.running[j].placement.allocs:
            if a.node == n:
                for g in a.gpus:
                    owner.setdefault(g, j)
    cells = [
        GpuOut(
            index=g,
            job=owner.get(g),
            used_milli=MILLI_PER_GPU - st.gpu_free[n][g],
            failed=st.node_failed[n] or g in st.gpu_failed[n],
        )
        for g in range(node.gpus)
    ]
    return NodeDetail(**base, gpu_grid=cells)


def node_out(live: LiveCluster, n: int, visible: Visible = everyone) -> NodeOut:
    return _node(live, n, grid=False, visible=visible)


def node_detail(live: LiveCluster, n: int, visible: Visible = everyone) -> NodeDetail:
    out = _node(live, n, grid=True, visible=visible)
    assert isinstance(out, NodeDetail)
    return out


def rack_out(live: LiveCluster, r: int, visible: Visible = everyone) -> RackOut:
    c = live.cluster
    rack = c.racks[r]
    st = live.state
    failed = sum(c.nodes[n].gpus if st.node_failed[n] else len(st.gpu_failed[n]) for n in rack.nodes)
    free_milli = sum(
        sum(st.gpu_free[n][g] for g in range(c.nodes[n].gpus) if g not in st.gpu_failed[n])
        for n in rack.nodes
        if not st.node_failed[n]
    )
    return RackOut(
        name=rack.name,
        region=c.regions[rack.region].name,
        gpu_model=rack.gpu_model,
        gpus=rack.gpus,
        allocated=max(rack.gpus - failed - free_milli / MILLI_PER_GPU, 0.0),
        free=st.rack_whole[r],
        failed=failed,
        jobs=sorted(j for j in st.rack_jobs[r] if visible(j)),
    )


def rack_detail(live: LiveCluster, r: int, visible: Visible = everyone) -> RackDetail:
    base = rack_out(live, r, visible)
    nodes = [node_detail(live, n, visible) for n in live.cluster.racks[r].nodes]
    return RackDetail(**base.model_dump(), nodes=nodes)


def queues_out(live: LiveCluster, counts: dict[str, dict[str, int]]) -> QueueList:
    """``counts``: per queue, jobs per status from the store (the live cluster knows only active ones)."""
    waiting: dict[str, float] = {}
    for spec in live.pending:
        waiting[spec.queue] = waiting.get(spec.queue, 0.0) + spec.unit.gpu_demand_milli * spec.required_units
    names = sorted(set(counts) | set(waiting) | set(live.state.queue_usage))
    items = []
    for q in names:
        usage = live.state.queue_usage.get(q)
        items.append(
            QueueOut(
                name=q,
                pending=counts.get(q, {}).get("pending", 0),
                running=counts.get(q, {}).get("running", 0),
                gpus_allocated=(usage.gpu_milli / MILLI_PER_GPU) if usage else 0.0,
                gpus_waiting=waiting.get(q, 0.0) / MILLI_PER_GPU,
            )
        )
    return QueueList(items=items)


def kpis_out(live: LiveCluster, now: float) -> KpisOut:
    k, kpi = live.counters, live.kpi
    by = live.bytes_moved(now)
    moved = by.total
    c = live.cluster
    return KpisOut(
        now=now,
        gpus=c.total_gpus,
        gpus_allocated=live.state.used_milli / MILLI_PER_GPU,
        gpus_failed=live.state.failed_gpus_count,
        allocation_ratio=kpi.allocated_gpu_s / kpi.available_gpu_s if kpi.available_gpu_s else 0.0,
        idle_rate=kpi.idle_waiting_gpu_s / kpi.available_while_waiting_gpu_s
        if kpi.available_while_waiting_gpu_s
        else 0.0,
        intra_rack_traffic_share=by.nvlink / moved if moved else None,
        traffic_bytes={"nvlink": by.nvlink, "rdma": by.rdma, "backbone": by.backbone},
        completed=k.completed,
        failed=k.failed,
        preemption_victims=k.preemption_victims,
        cost_per_hour=c.total_gpus * c.pricing.per_gpu_hour,
        currency=c.pricing.currency,
    )
