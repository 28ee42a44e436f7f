"""Properties of every profile on random clusters and random job mixes, over several cycles.

A world is a cluster of 1-2 regions x 1-3 racks x 1-4 nodes x 1-8 GPUs (in half of them the racks
alternate between two GPU models), e.g. 2 x 2 x 2 x 4 with two models::

    region-0
    ├── g0-r000 (GB200): n00 [xx..] n01 [~...]
    └── g0-r001 (H100):  n00 [....] n01 [#...]
    region-1
    ├── g1-r000 (GB200): n00 [xxxx] n01 [....]
    └── g1-r001 (H100):  n00 [####] n01 [x...]

and a few cycles; each cycle submits jobs (training gangs, inference services, batch tasks, some
fractional, with priorities, policies, queues, GPU models and topology constraints), then

    schedule -> (roll back a transaction of the decisions) -> apply -> end some jobs -> fail/recover

checking after each step what must always hold, for every profile:

- no GPU, CPU or memory is ever oversubscribed and every index agrees with a recount
  (``check_all_invariants``);
- ``schedule()`` leaves the state exactly as it was, and so does a rolled-back :class:`Transaction`;
- gangs are all or nothing: a placed training or batch job holds all its units (``total_gpus`` whole
  GPUs, or all its shares); an inference job at least ``min_replicas``;
- required levels hold (a required rack: one rack, or each replica inside one; a required region: one
  region), a worker never spans nodes, GPU models are honoured, backfilled jobs avoid reserved racks;
- only strictly lower-priority, preemptible jobs are preempted, and never for a ``Never`` preemptor.

The examples are derandomized (the same on every run) and not "explained", to keep the file fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from builders import ClusterBuilder, check_all_invariants, racks_of, snapshot
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rackscale.model import (
    MILLI_PER_GPU,
    ClusterState,
    JobSpec,
    Level,
    PreemptionPolicy,
    Resources,
    TopologyConstraint,
    Transaction,
    batch,
    inference,
    training,
)
from rackscale.model.workload import JobKind
from rackscale.scheduler import Decisions, QueueConfig, ResourceScheduler, apply_decisions
from rackscale.scheduler.pending import whole_demand

PROFILES = ["rackscale", "first-fit", "best-fit", "random", "slurm-tree"]
MODELS = ("GB200", "H100")
TOPOLOGIES = [
    TopologyConstraint(),
    TopologyConstraint(preferred=None),
    TopologyConstraint(required=Level.RACK),
    TopologyConstraint(required=Level.REGION),
    TopologyConstraint(required=Level.REGION, preferred=None),
]


@dataclass(frozen=True)
class Cycle:
    jobs: tuple[JobSpec, ...]
    end: frozenset[int]  # indexes into the sorted running jobs: these finish after the cycle
    fault: tuple[str, int, int] | None  # (op, node, gpu) with node/gpu taken modulo the cluster
    restart: bool  # restart the jobs a fault hit now, or leave them on the broken hardware for a while


@dataclass(frozen=True)
class World:
    builder: ClusterBuilder
    queues: dict[str, QueueConfig]
    cycles: tuple[Cycle, ...]


@st.composite
def job_specs(draw: st.DrawFn, name: str, submit: float) -> JobSpec:
    kind = draw(st.sampled_from(["training", "training", "inference", "batch"]))
    kw: dict[str, object] = {
        "priority": draw(st.sampled_from([0, 0, 1, 5, 10])),
        "preemption_policy": draw(
            st.sampled_from([PreemptionPolicy.PREEMPT_LOWER_PRIORITY] * 3 + [PreemptionPolicy.NEVER])
        ),
        "preemptible": draw(st.sampled_from([True, True, True, False])),
        "queue": draw(st.sampled_from(["a", "b"])),
        "duration_estimate_s": draw(st.sampled_from([None, None, 10.0, 25.0, 200.0])),
        "checkpoint_interval_s": draw(st.sampled_from([None, 15.0])),
        "submit_time": submit,
    }
    gpu_models = draw(st.sampled_from([None, None, None, frozenset({"GB200"}), frozenset({"H100"}), frozenset({"X"})]))
    cpu = draw(st.sampled_from([0, 0, 0, 8_000]))
    milli = draw(st.sampled_from([0, 0, 0, 250, 500, 700]))
    if kind == "training":
        w = draw(st.integers(1, 4))
        spec = training(
            name,
            w * draw(st.integers(1, 6)),
            gpus_per_worker=w,
            topology=draw(st.sampled_from(TOPOLOGIES)),
            gpu_models=gpu_models,
            cpu_milli=cpu,
            **kw,
        )
        if milli:  # a fractional gang: all shares or none
            spec = replace(spec, unit=Resources(gpus=0, gpu_milli=milli, cpu_milli=cpu, gpu_models=gpu_models))
        elif draw(st.sampled_from([False, False, True])):  # elastic: any worker count from min to max
            units = spec.units
            spec = replace(spec, min_units=draw(st.integers(1, units)), max_units=draw(st.integers(units, 2 * units)))
        return spec
    if kind == "inference":
        replicas = draw(st.integers(1, 4))
        return inference(
            name,
            replicas,
            gpus_per_replica=draw(st.integers(1, 6)),
            gpu_milli=milli,
            min_replicas=draw(st.integers(0, replicas)),
            gpu_models=gpu_models,
            cpu_milli=cpu,
            **kw,
        )
    return batch(
        name,
        gpus=draw(st.integers(1, 2)),
        gpu_milli=milli,
        tasks=draw(st.integers(1, 6)),
        gpu_models=gpu_models,
        cpu_milli=cpu,
        **kw,
    )


@st.composite
def worlds(draw: st.DrawFn) -> World:
    builder = (
        ClusterBuilder()
        .regions(draw(st.integers(1, 2)))
        .racks(draw(st.integers(1, 3)))
        .nodes_per_rack(draw(st.integers(1, 4)))
        .gpus_per_node(draw(st.integers(1, 8)))
        .gpu_models(*(MODELS if draw(st.booleans()) else MODELS[:1]))
        .node_resources(cpu_milli=32_000, memory_mib=65_536)
    )
    quota = draw(st.sampled_from([None, 4.0, 10.0]))
    queues = {
        "a": QueueConfig(name="a", weight=draw(st.sampled_from([1.0, 2.0]))),
        "b": QueueConfig(name="b", quota_gpus=quota),
    }
    cycles = []
    n = 0
    for c in range(draw(st.integers(2, 4))):
        k = draw(st.integers(0, 6))
        jobs = tuple(draw(job_specs(f"j{n + i}", submit=10.0 * c)) for i in range(k))
        n += k
        end = frozenset(draw(st.sets(st.integers(0, 11), max_size=4)))
        fault = draw(
            st.one_of(
                st.none(),
                st.tuples(
                    st.sampled_from(["fail_node", "recover_node", "fail_gpu", "recover_gpu"]),
                    st.integers(0, 23),
                    st.integers(0, 7),
                ),
            )
        )
        cycles.append(Cycle(jobs, end, fault, draw(st.booleans())))
    return World(builder, queues, tuple(cycles))


# ---------------------------------------------------------------------- what must hold


def check_decisions(state: ClusterState, d: Decisions, jobs: list[JobSpec]) -> None:
    """Before applying: preemptions are legal and every job is accounted for once."""
    by_name = {j.name: j for j in jobs}
    for p in d.preemptions:
        victim = state.running[p.victim].spec
        preemptor = by_name[p.preemptor]
        assert victim.priority < preemptor.priority, f"{p.victim} preempted by an equal or lower priority"
        assert victim.preemptible, f"{p.victim} is not preemptible"
        assert preemptor.preemption_policy is not PreemptionPolicy.NEVER, f"{p.preemptor} has policy Never"
    victims = {p.victim for p in d.preemptions}
    for z in d.resized:  # elastic gangs resized: running, not also preempted, whole workers within their sizes
        rj = state.running[z.spec.name]
        assert z.spec.name not in victims, f"{z.spec.name} both resized and preempted"
        assert z.spec.is_elastic and rj.spec.preemptible
        assert (z.spec.min_units or z.spec.units) <= z.placement.units <= z.spec.elastic_max_units
        assert z.placement.whole_gpus == z.placement.units * z.spec.unit.gpus, f"{z.spec.name}: a worker split"
        assert z.units_before == rj.placement.units
    names = [p.spec.name for p in d.placed] + [p.spec.name for p in d.pending]
    assert len(set(names)) == len(names) and set(names) <= set(by_name), "no job is decided twice"
    assert len(names) + d.not_examined == len(by_name), "every pending job is placed, pending or not examined"


def check_placed(state: ClusterState, d: Decisions) -> None:
    """After applying: gangs complete, constraints held, reservations respected."""
    c = state.cluster
    for p in d.placed:
        spec, rj = p.spec, state.running[p.spec.name]
        unit = spec.unit
        if spec.is_elastic:
            # an elastic gang: whole workers, at least its minimum, at most what it asked for on a start
            lo = spec.min_units or spec.units
            assert lo <= rj.placement.units <= spec.units, f"elastic gang {spec.name} outside its sizes"
            assert rj.placement.whole_gpus == rj.placement.units * unit.gpus
        elif spec.kind is not JobKind.INFERENCE:
            assert rj.placement.units == spec.units, f"gang {spec.name} placed partly"
            assert rj.placement.gpu_milli == spec.gpu_demand_milli, f"gang {spec.name} holds the wrong amount"
            if unit.gpus:
                assert rj.placement.whole_gpus == spec.total_gpus
                assert all(a.milli == MILLI_PER_GPU for a in rj.placement.allocs)
        else:
            assert spec.required_units <= rj.placement.units <= spec.units
            assert rj.placement.gpu_milli == unit.gpu_demand_milli * rj.placement.units
        racks = racks_of(state, rj.placement)
        gpu_nodes = [a.node for a in rj.placement.allocs if a.gpus]
        if unit.gpu_models:
            assert all(c.nodes[n].gpu_model in unit.gpu_models for n in gpu_nodes), f"{spec.name}: wrong model"
        if spec.topology.required is Level.RACK:
            if spec.kind is JobKind.INFERENCE:
                per_rack: dict[int, int] = {}
                for a in rj.placement.allocs:
                    per_rack[c.nodes[a.node].rack] = per_rack.get(c.nodes[a.node].rack, 0) + a.whole_gpus
                if unit.gpus:
                    assert all(v % unit.gpus == 0 for v in per_rack.values()), f"{spec.name}: a replica split"
            else:
                assert len(racks) == 1, f"{spec.name} (required rack) spans racks {racks}"
        if spec.topology.required is Level.REGION:
            regions = {c.racks[r].region for r in racks}
            assert len(regions) == 1, f"{spec.name} (required region) spans regions {sorted(regions)}"
        if unit.gpus and unit.gpus <= state.max_node_gpus:
            per_node: dict[int, int] = {}
            for a in rj.placement.allocs:
                per_node[a.node] = per_node.get(a.node, 0) + a.whole_gpus
            assert all(v % unit.gpus == 0 for v in per_node.values()), f"{spec.name}: a worker spans nodes"
        if p.backfilled and not p.placement.opportunistic and d.reservation is not None:  # (a loan may: loans.py)
            assert not set(racks_of(state, p.placement)) & d.reservation.racks, f"{spec.name} delays the reservation"


def rollback_decisions(state: ClusterState, d: Decisions, now: float) -> None:
    """Applying the decisions inside a transaction and rolling it back leaves the state as it was."""
    before = snapshot(state)
    tx = Transaction(state)
    for v in sorted({p.victim for p in d.preemptions}):
        tx.release(v)
    for z in d.resized:
        old = tx.release(z.spec.name)
        tx.allocate(z.spec, z.placement, now=old.started_at, expected_end=old.expected_end)
    for p in d.placed:
        if p.scale_up:
            tx.extend(p.spec.name, p.placement.allocs, p.placement.units)
        else:
            tx.allocate(p.spec, p.placement, now=now, expected_end=p.expected_end)
    check_all_invariants(state)
    tx.rollback()
    check_all_invariants(state)
    assert snapshot(state) == before, "a rolled-back transaction changed the state"


def run_world(profile: str, world: World) -> None:
    state = world.builder.build()
    scheduler = ResourceScheduler(profile=profile, queues=world.queues, seed=7)
    pending: dict[str, JobSpec] = {}
    now = 0.0
    for cycle in world.cycles:
        for j in cycle.jobs:
            pending[j.name] = j
        jobs = list(pending.values())

        before = snapshot(state)
        d = scheduler.schedule(state, jobs, now)
        assert snapshot(state) == before, "schedule() changed the state"
        check_decisions(state, d, jobs)
        rollback_decisions(state, d, now)

        victims = {p.victim: state.running[p.victim].spec for p in d.preemptions}
        apply_decisions(state, d, now=now)
        check_all_invariants(state)
        check_placed(state, d)
        for z in d.resized:
            assert state.running[z.spec.name].placement == z.placement
        if d.not_examined:
            # the cycle stopped early only because nothing more could fit: fewer GPUs free than any
            # unexamined job needs (and all of them need whole GPUs)
            decided = {p.spec.name for p in d.placed} | {p.spec.name for p in d.pending}
            rest = [j for j in jobs if j.name not in decided]
            assert all(j.unit.gpus > 0 for j in rest)
            assert state.free_whole_gpus < min(whole_demand(j) for j in rest)

        for p in d.placed:
            rj = state.running[p.spec.name]
            if rj.placement.units >= p.spec.units:
                pending.pop(p.spec.name, None)  # an inference job short of replicas stays to scale up
        pending.update(victims)  # preempted jobs are requeued

        running = sorted(state.running)
        for i in sorted(cycle.end):
            if i < len(running):
                state.release(running[i])
                pending.pop(running[i], None)
        if cycle.fault is not None:
            op, node, gpu = cycle.fault
            node %= len(state.cluster.nodes)
            gpu %= state.cluster.nodes[node].gpus
            holders = {j for j, rj in state.running.items() if any(a.node == node for a in rj.placement.allocs)}
            if op == "fail_node":
                hit = state.fail_node(node)
                assert hit == holders
            elif op == "fail_gpu":
                hit = state.fail_gpu(node, gpu)
                assert hit <= holders
            else:
                hit = set()
                getattr(state, op)(*((node,) if op == "recover_node" else (node, gpu)))
            for j in hit if cycle.restart else ():  # restart now, or leave it on broken hardware until it ends
                pending[j] = state.release(j).spec
        check_all_invariants(state)
        now += 10.0


@pytest.mark.parametrize("profile", PROFILES)
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),  # no explain phase: it is slow
)
@given(world=worlds())
def test_every_profile_keeps_the_invariants_over_random_cycles(profile: str, world: World) -> None:
    run_world(profile, world)
