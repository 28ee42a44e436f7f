"""Fluent builders and small helpers for the scheduler tests (in the style of Kueue's ``testing`` package).

A cluster is described as regions > racks > nodes > GPUs and then filled with running jobs::

    state = (
        ClusterBuilder()
        .racks(2).nodes_per_rack(2).gpus_per_node(4)
        .with_running("a", gpus=6, rack=0)
        .build()
    )

gives (``render(state)``)::

    region-0
    ├── r000: n00 [xxxx] n01 [xx..]
    └── r001: n00 [....] n01 [....]

Symbols: ``x`` a GPU held whole, ``~`` a GPU partly held by shared (fractional) slices, ``.`` a free GPU,
``#`` a failed GPU or a GPU of a node that is down. Racks are numbered globally (region by region); a
running job is placed on the listed rack's nodes in index order, on the first whole-free GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rackscale.model import (
    MILLI_PER_GPU,
    ClusterState,
    GPUCluster,
    JobSpec,
    NodeAlloc,
    NodeDecl,
    Placement,
    batch,
    training,
)
from rackscale.scheduler import Decisions, Placed, Profile, ResourceScheduler, apply_decisions

NodeRef = tuple[int, int]  # (rack, node inside the rack)


@dataclass
class _Running:
    spec: JobSpec
    on: list[tuple[NodeRef, int, int]]  # (node, whole GPUs or shared slices, milli)
    started_at: float
    expected_end: float | None
    checkpointed_at: float | None


@dataclass
class ClusterBuilder:
    _regions: int = 1
    _racks: int = 2
    _nodes_per_rack: int = 2
    _gpus_per_node: int = 4
    _models: tuple[str, ...] = ("GB200",)
    _cpu_milli: int = 144_000
    _memory_mib: int = 1_048_576
    _running: list[_Running] = field(default_factory=list)
    _failed_nodes: list[NodeRef] = field(default_factory=list)
    _failed_gpus: list[tuple[NodeRef, int]] = field(default_factory=list)

    # ------------------------------------------------------------------ shape
    def regions(self, n: int) -> ClusterBuilder:
        self._regions = n
        return self

    def racks(self, n: int) -> ClusterBuilder:
        """Racks per region."""
        self._racks = n
        return self

    def nodes_per_rack(self, n: int) -> ClusterBuilder:
        self._nodes_per_rack = n
        return self

    def gpus_per_node(self, n: int) -> ClusterBuilder:
        self._gpus_per_node = n
        return self

    def gpu_models(self, *models: str) -> ClusterBuilder:
        """GPU models assigned to racks round-robin (rack ``i`` gets ``models[i % len(models)]``)."""
        self._models = models
        return self

    def node_resources(self, *, cpu_milli: int, memory_mib: int) -> ClusterBuilder:
        self._cpu_milli = cpu_milli
        self._memory_mib = memory_mib
        return self

    # ------------------------------------------------------------------ contents
    def with_running(
        self,
        name: str,
        *,
        gpus: int = 0,
        rack: int | None = None,
        on: Mapping[NodeRef, int] | None = None,
        milli: int = MILLI_PER_GPU,
        spec: JobSpec | None = None,
        priority: int = 0,
        preemptible: bool = True,
        movable: bool = True,
        queue: str = "default",
        started_at: float = 0.0,
        expected_end: float | None = None,
        checkpointed_at: float | None = None,
        checkpoint_interval_s: float | None = None,
    ) -> ClusterBuilder:
        """A running job: ``gpus`` whole GPUs filling ``rack``'s nodes in order, or ``on={(rack, node): k}``
        (``k`` whole GPUs, or ``k`` shared slices of ``milli`` each when ``milli < 1000``)."""
        if on is None:
            if rack is None:
                raise ValueError("give rack= or on=")
            on = self._fill(rack, gpus)
        slots = [(ref, k, milli) for ref, k in on.items()]
        total = sum(k for _, k, _ in slots)
        if spec is None:
            if milli < MILLI_PER_GPU:
                spec = batch(
                    name,
                    gpu_milli=milli,
                    tasks=total,
                    priority=priority,
                    preemptible=preemptible,
                    movable=movable,
                    queue=queue,
                    checkpoint_interval_s=checkpoint_interval_s,
                )
            else:
                spec = training(
                    name,
                    total,
                    priority=priority,
                    preemptible=preemptible,
                    movable=movable,
                    queue=queue,
                    checkpoint_interval_s=checkpoint_interval_s,
                )
        self._running.append(_Running(spec, slots, started_at, expected_end, checkpointed_at))
        return self

    def _fill(self, rack: int, gpus: int) -> dict[NodeRef, int]:
        out: dict[NodeRef, int] = {}
        left = gpus
        for n in range(self._nodes_per_rack):
            k = min(left, self._gpus_per_node)
            if k:
                out[(rack, n)] = k
                left -= k
        if left:
            raise ValueError(f"rack {rack} has no room for {gpus} GPUs")
        return out

    def with_failed_node(self, rack: int, node: int) -> ClusterBuilder:
        self._failed_nodes.append((rack, node))
        return self

    def with_failed_gpu(self, rack: int, node: int, gpu: int) -> ClusterBuilder:
        self._failed_gpus.append(((rack, node), gpu))
        return self

    # ------------------------------------------------------------------ build
    def cluster(self) -> GPUCluster:
        decls = []
        rack_no = 0
        for g in range(self._regions):
            for r in range(self._racks):
                rack_name = f"g{g}-r{r:03d}" if self._regions > 1 else f"r{r:03d}"
                model = self._models[rack_no % len(self._models)]
                rack_no += 1
                for n in range(self._nodes_per_rack):
                    decls.append(
                        NodeDecl(
                            name=f"{rack_name}-n{n:02d}",
                            rack=rack_name,
                            region=f"region-{g}",
                            gpus=self._gpus_per_node,
                            gpu_model=model,
                            cpu_milli=self._cpu_milli,
                            memory_mib=self._memory_mib,
                        )
                    )
        return GPUCluster.from_nodes(decls, name="test")

    def build(self) -> ClusterState:
        state = ClusterState(self.cluster())
        for job in self._running:
            allocs = []
            unit = job.spec.unit
            for ref, k, milli in job.on:
                n = node_index(state, *ref)
                if milli >= MILLI_PER_GPU:
                    units = k // max(unit.gpus, 1)  # CPU and memory come with each unit of the spec
                    allocs.append(
                        NodeAlloc(
                            n, state.whole_free_gpus(n, k), milli, unit.cpu_milli * units, unit.memory_mib * units
                        )
                    )
                else:
                    free = [g for g in range(len(state.gpu_free[n])) if state.usable_free(n, g) >= milli * k]
                    allocs.extend(NodeAlloc(n, (free[0],), milli, unit.cpu_milli, unit.memory_mib) for _ in range(k))
            units = job.spec.units
            if job.spec.is_elastic:  # an elastic gang runs on as many workers as its GPUs make
                units = sum(a.whole_gpus for a in allocs) // max(unit.gpus, 1)
            state.allocate(
                job.spec,
                Placement(job.spec.name, tuple(allocs), units),
                now=job.started_at,
                expected_end=job.expected_end,
                checkpointed_at=job.checkpointed_at,
            )
        for ref, g in self._failed_gpus:
            state.fail_gpu(node_index(state, *ref), g)
        for ref in self._failed_nodes:
            state.fail_node(node_index(state, *ref))
        state.check_invariants()
        return state


# ---------------------------------------------------------------------- helpers


def node_index(state: ClusterState, rack: int, node: int) -> int:
    return state.cluster.racks[rack].nodes[node]


def render(state: ClusterState) -> str:
    """The state as the ASCII tree used in the tests' comments (see the module docstring)."""
    c = state.cluster
    lines: list[str] = []
    for region in c.regions:
        lines.append(region.name)
        for i, r in enumerate(region.racks):
            rack = c.racks[r]
            cells = []
            for pos, n in enumerate(rack.nodes):
                gpus = "".join(_cell(state, n, g) for g in range(c.nodes[n].gpus))
                cells.append(f"n{pos:02d} [{gpus}]")
            branch = "└──" if i == len(region.racks) - 1 else "├──"
            lines.append(f"{branch} {rack.name}: {' '.join(cells)}")
    return "\n".join(lines)


def _cell(state: ClusterState, n: int, g: int) -> str:
    if state.node_down[n] or g in state.gpu_failed[n]:
        return "#"
    free = state.gpu_free[n][g]
    if free == MILLI_PER_GPU:
        return "."
    return "x" if free == 0 and _held_whole(state, n, g) else "~"


def _held_whole(state: ClusterState, n: int, g: int) -> bool:
    return any(
        a.node == n and g in a.gpus and a.milli == MILLI_PER_GPU
        for j in state.node_jobs[n]
        for a in state.running[j].placement.allocs
    )


def diagram(text: str) -> str:
    """A diagram written in a test, without its common indentation and blank edge lines."""
    import textwrap

    return textwrap.dedent(text).strip("\n")


def snapshot(state: ClusterState) -> dict[str, object]:
    """Everything a scheduling cycle or a rolled-back transaction must leave exactly as it was."""
    return state.snapshot()


# ---------------------------------------------------------------------- decisions


def run_cycle(
    state: ClusterState,
    jobs: Iterable[JobSpec],
    *,
    now: float = 0.0,
    profile: Profile | str = "rackscale",
    **kw: object,
) -> Decisions:
    """One cycle: schedule (checking it leaves the state alone), apply, check the invariants."""
    before = snapshot(state)
    d = ResourceScheduler(profile=profile, **kw).schedule(state, list(jobs), now)  # type: ignore[arg-type]
    assert snapshot(state) == before, "schedule() changed the state"
    apply_decisions(state, d, now=now)
    check_all_invariants(state)
    return d


def placed(d: Decisions, name: str) -> Placed:
    for p in d.placed:
        if p.spec.name == name:
            return p
    raise AssertionError(f"{name!r} was not placed; pending: {[(p.spec.name, p.status) for p in d.pending]}")


def placed_names(d: Decisions) -> list[str]:
    return [p.spec.name for p in d.placed]


def racks_of(state: ClusterState, placement: Placement) -> list[int]:
    return sorted({state.cluster.nodes[a.node].rack for a in placement.allocs})


def nodes_of(placement: Placement) -> list[int]:
    return sorted({a.node for a in placement.allocs})


def gpus_by_rack(state: ClusterState, placement: Placement) -> dict[int, int]:
    out: dict[int, int] = {}
    for a in placement.allocs:
        r = state.cluster.nodes[a.node].rack
        out[r] = out.get(r, 0) + a.whole_gpus
    return out


def check_all_invariants(state: ClusterState) -> None:
    """``state.check_invariants()`` plus what it does not recompute: the shared-GPU index, per-model
    totals, the job indexes and each queue's usage."""
    state.check_invariants()
    c = state.cluster
    for n, node in enumerate(c.nodes):
        shared = not state.node_down[n] and any(
            0 < state.gpu_free[n][g] < MILLI_PER_GPU for g in range(node.gpus) if g not in state.gpu_failed[n]
        )
        assert state.node_shared[n] == shared, f"node_shared out of sync on {node.name}"
        assert (n in state.shared_nodes[node.gpu_model]) == shared, f"shared_nodes out of sync on {node.name}"
    for m in c.gpu_models:
        want = sum(state.rack_whole[r.index] for r in c.racks if r.gpu_model == m)
        assert state.model_free_whole[m] == want, f"model_free_whole out of sync for {m}"
    assert state.used_milli == sum(rj.placement.gpu_milli for rj in state.running.values()), "used_milli"
    node_jobs: list[set[str]] = [set() for _ in c.nodes]
    rack_jobs: list[set[str]] = [set() for _ in c.racks]
    usage: dict[str, tuple[int, int, int, int]] = {}
    for name, rj in state.running.items():
        for a in rj.placement.allocs:
            node_jobs[a.node].add(name)
            rack_jobs[c.nodes[a.node].rack].add(name)
        assert rj.racks == tuple(sorted({c.nodes[a.node].rack for a in rj.placement.allocs})), f"racks of {name}"
        g, cpu, mem, jobs = usage.get(rj.spec.queue, (0, 0, 0, 0))
        usage[rj.spec.queue] = (
            g + rj.placement.gpu_milli,
            cpu + sum(a.cpu_milli for a in rj.placement.allocs),
            mem + sum(a.memory_mib for a in rj.placement.allocs),
            jobs + 1,
        )
    assert state.node_jobs == node_jobs, "node_jobs out of sync"
    assert state.rack_jobs == rack_jobs, "rack_jobs out of sync"
    got = {q: (u.gpu_milli, u.cpu_milli, u.memory_mib, u.jobs) for q, u in state.queue_usage.items()}
    assert {q: v for q, v in got.items() if v != (0, 0, 0, 0)} == usage, "queue_usage out of sync"
