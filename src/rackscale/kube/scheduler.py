"""rackscale as a Kubernetes secondary scheduler: list + watch nodes and pods, place gangs, bind, report.

One loop thread owns the caches and schedules; one watcher thread per resource (nodes, pods, see
:mod:`rackscale.kube.watch`) lists, then watches, and hands events to the loop through a queue.

Each cycle rebuilds a :class:`ClusterState` from the cache (:mod:`rackscale.kube.snapshot`): the cluster
model (rebuilt only when the nodes' topology changes), then every bound, live pod's requests (whoever
scheduled it), then rackscale's own pods that it bound but whose bind the watch has not shown yet (the
"assumed" pods, as kube-scheduler keeps them) and those it deleted to undo a failed gang bind but the watch
still shows. The ready gangs (:mod:`rackscale.kube.planning`) are placed by rackscale's scheduler and bound
all or none (:mod:`rackscale.kube.binding`); :mod:`rackscale.kube.report` tells the pods. Running gangs that a
waiting gang needs the room of are stopped by :mod:`rackscale.kube.preemption`; with ``--las-preemption`` the
service each gang had in its earlier runs is recorded at its stop and fed to the core each cycle
(:mod:`rackscale.kube.attained`, a ConfigMap read again by every new leader).
Only the leader (see :mod:`rackscale.kube.leader`) schedules; every instance keeps its caches warm.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client

from rackscale.host.scaling import ScalingSchedule
from rackscale.kube.attained import ServiceRecord, record_key
from rackscale.kube.binding import GangBinder
from rackscale.kube.budgets import BudgetBook, pdb_key
from rackscale.kube.cluster import build_cluster, topology_signature
from rackscale.kube.config import PDBS, KubeSchedulerConfig, Stats
from rackscale.kube.leader import LeaderElector
from rackscale.kube.ledger import Ledger
from rackscale.kube.mechanisms import WHY_OFF, carried_out, kube_profile, refusal
from rackscale.kube.observed import AttemptResult, GpuUse, Waiting, gpu_use, waiting
from rackscale.kube.planning import Plan, plan
from rackscale.kube.pods import Gang, comes_back_to_finish, gangs, node_name, pod_key, pod_request
from rackscale.kube.preemption import (
    EvictionBook,
    Evictor,
    carry_out,
    core_time,
    grace_s,
    may_preempt,
    started_wall,
    victim_job,
)
from rackscale.kube.report import Reporter
from rackscale.kube.schedules import DeploymentScaler
from rackscale.kube.snapshot import (
    Snapshot,
    build_snapshot,
    cluster_index,
    node_key,
    reserve_nominated,
    with_node,
)
from rackscale.kube.traffic import running_gang
from rackscale.kube.undo import UndoBook
from rackscale.kube.watch import Item, watchers
from rackscale.model.state import ClusterState
from rackscale.model.topology import MILLI_PER_GPU, GPUCluster, NodeDecl
from rackscale.model.workload import JobSpec
from rackscale.scheduler import PendingQueue, ResourceScheduler
from rackscale.scheduler.decisions import Decisions, Preemption, PreemptionCause
from rackscale.scheduler.framework import NO_SERVICE, AttainedService
from rackscale.scheduler.las import LasVictims

__all__ = ["KubeScheduler", "KubeSchedulerConfig", "Stats", "cluster_index"]

log = logging.getLogger("rackscale.kube")

# With no gang waiting, a cycle (run on a change of the caches) rebuilds the allocation for the GPU series at
# most this often: a cluster whose pods change many times a second need not pay a snapshot for each.
USE_EVERY_S = 1.0

Obj = dict[str, Any]


class KubeScheduler:
    """The secondary scheduler. :meth:`start` runs it in threads; :meth:`stop` ends them."""

    def __init__(
        self,
        api: client.ApiClient,
        config: KubeSchedulerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        schedules: Sequence[ScalingSchedule] = (),
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.config = cfg = config or KubeSchedulerConfig()
        self.core = client.CoreV1Api(api)
        self.clock = clock
        self.identity = cfg.identity or f"{_hostname()}_{uuid.uuid4().hex[:8]}"
        self.elector: LeaderElector | None = (
            LeaderElector(
                api,
                name=cfg.lease_name or cfg.scheduler_name,
                namespace=cfg.lease_namespace,
                identity=self.identity,
                lease_duration_s=cfg.lease_duration_s,
                clock=clock,
            )
            if cfg.leader_elect
            else None
        )
        # The profile without the mechanisms that resize or move running pods (kube.mechanisms).
        profile, self.disabled = kube_profile(cfg.policy, preemption=cfg.preemption, las=cfg.las_preemption)
        for m in self.disabled:
            log.info("profile %r: %s is off under Kubernetes: %s (docs/kubernetes.md)", cfg.policy, m, WHY_OFF[m])
        self.sched = ResourceScheduler(profile=profile)
        # --las-preemption: equal priorities may stop each other (least attained service), the gangs' earlier
        # service recorded in a ConfigMap (kube.attained); None: no record is read or written.
        self.las = profile.victims == LasVictims.name
        self.record: ServiceRecord | None = None
        if self.las:
            self.record = ServiceRecord(
                self.core,
                name=cfg.record_name or f"{cfg.lease_name or cfg.scheduler_name}-attained-service",
                namespace=cfg.record_namespace or cfg.lease_namespace,
                ttl_s=cfg.record_ttl_s,
                max_entries=cfg.record_max_entries,
            )
            log.info(
                "profile %r: least-attained-service preemption is on (--las-preemption): a waiting gang may stop a "
                "running gang of the same priority that has had more GPU time; the gangs' earlier service is kept in "
                "%s (docs/kubernetes.md)",
                cfg.policy,
                self.record.where,
            )
        elif cfg.las_preemption:
            log.warning(
                "--las-preemption changes nothing: profile %r%s has no least-attained-service preemption",
                cfg.policy,
                "" if cfg.preemption else " with --no-preemption",
            )
        self._causes = carried_out(las=self.las)
        self._present: set[str] = set()  # the record keys of the gangs the last cycle saw (kube.attained)
        self.binder = GangBinder(self.core)
        self.reporter = Reporter(
            self.core,
            component=cfg.scheduler_name,
            identity=self.identity,
            clock=clock,
            report_interval_s=cfg.report_interval_s,
        )
        self.evictor = Evictor(self.core, self.reporter)
        self.evictions = EvictionBook()  # per waiting gang, the pods deleted for it (kube.preemption)
        self.wall = wall
        self.stopping = threading.Event()
        self.events: queue.Queue[Item] = queue.Queue()
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        # PodDisruptionBudgets, read only where a preemption may happen (kube.budgets): watched as the nodes and
        # pods are, so that a cycle that preempts finds them at hand (kube-scheduler keeps an informer too).
        self.pdbs: dict[str, Obj] = {}
        self.budget_book = BudgetBook()
        self.synced = {"nodes": False, "pods": False} | ({PDBS: False} if cfg.preemption else {})
        self.assumed: dict[str, tuple[str, float]] = {}  # pod key -> (node, when bound): committed gangs only
        self.undo = UndoBook(ttl_s=cfg.assume_ttl_s, clock=clock)  # pods bound by a failed gang attempt
        self.stats = Stats()
        if self.las:
            self.stats.victims[PreemptionCause.ATTAINED_SERVICE] = 0  # its series from the start
        # The last cycle's pending gangs, for a metrics scrape: replaced whole (never changed) by the loop
        # thread, so a scrape from another thread reads one cycle's view, without a lock on the caches.
        self.waiting = Waiting()
        # The GPUs as the last snapshot showed them (and the idle rate's GPU-seconds): replaced whole, as
        # ``waiting``; None until the first cycle as leader.
        self.use: GpuUse | None = None
        self.ledger = Ledger(
            binder=self.binder,
            reporter=self.reporter,
            stats=self.stats,
            undo=self.undo,
            assumed=self.assumed,
            clock=clock,
        )
        self.renewing = True  # tests switch it off to play a leader that hangs
        self._first_seen: dict[str, float] = {}
        self._cluster: GPUCluster | None = None
        self._signature: tuple[NodeDecl, ...] | None = None
        self._dirty = True
        self._last_cycle = float("-inf")
        self._t0 = clock()
        self.watchers = watchers(api, sink=self.events, stopping=self.stopping, stats=self.stats, config=cfg)
        self._thread: threading.Thread | None = None
        # Deployment schedules (--schedule): fired by the leader on the wall clock (rackscale.kube.schedules).
        self.scaler = DeploymentScaler(api, schedules, component=cfg.scheduler_name, wall=wall) if schedules else None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KubeScheduler:
        for w in self.watchers.values():
            w.thread.start()
        self._thread = threading.Thread(target=self.run, name="rackscale-kube-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True, timeout: float = 5.0) -> None:
        self.stopping.set()
        for w in self.watchers.values():
            w.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        for w in self.watchers.values():
            if w.thread.is_alive():
                w.thread.join(timeout)
        if release and self.elector is not None:
            self.elector.release()

    def elapsed(self) -> float:
        """Seconds on the scheduler's clock since it started (the clock of ``use``)."""
        return self.clock() - self._t0

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader if self.elector is not None else True

    def run(self) -> None:
        """The loop: keep the lease, drain the watch events, schedule when something changed."""
        next_renew = self.clock()
        while not self.stopping.is_set():
            now = self.clock()
            if self.elector is not None and self.renewing and now >= next_renew:
                was = self.elector.is_leader
                if self.elector.tick() and not was:
                    self._dirty = True  # a new leader looks at everything
                    if self.record is not None:
                        self.record.forget()  # ... reads the attained service another leader recorded
                    self.use = None  # ... and counts GPU-seconds from now (a counter reset, as after a restart)
                    if self.scaler is not None:
                        self.scaler.reset()  # ... and applies the steps in force
                next_renew = now + self.config.renew_interval_s
            self._drain(timeout=0.05)
            if self.scaler is not None and self.is_leader:
                self.scaler.tick()
            now = self.clock()
            if (
                self.is_leader
                and all(self.synced.values())
                and (self._dirty or now - self._last_cycle >= self.config.retry_interval_s)
            ):
                try:
                    self.cycle()
                except Exception:
                    self.stats.cycle_errors += 1
                    log.exception("scheduling cycle failed")
                    self._last_cycle = self.clock()

    # ------------------------------------------------------------------ the caches
    def _drain(self, timeout: float) -> None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._apply(*item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return

    def _apply(self, what: str, kind: str, payload: Any) -> None:
        cache = {"nodes": self.nodes, "pods": self.pods, PDBS: self.pdbs}[kind]
        key_of = {"nodes": node_key, "pods": pod_key, PDBS: pdb_key}[kind]
        if kind == PDBS:
            self.budget_book.changed()
        if what == "reset":
            cache.clear()
            for o in payload:
                cache[key_of(o)] = o
            self.synced[kind] = True
            self._dirty = True
            if kind == "pods":
                for key in list(self.assumed):
                    self._confirm(key)
                self.undo.confirm_all(self.pods)
            return
        typ, obj = payload
        key = key_of(obj)
        if typ == "DELETED":
            cache.pop(key, None)
        else:
            cache[key] = obj
        if kind == "pods":
            self._confirm(key)
            self.undo.confirm(key, self.pods.get(key))
        if kind != PDBS:  # a budget never makes a gang placeable: it only orders the victims of the next cycle
            self._dirty = True

    def _confirm(self, key: str) -> None:
        """The watch shows a pod we bound as bound (or gone): stop assuming."""
        if key in self.assumed:
            pod = self.pods.get(key)
            if pod is None or node_name(pod) is not None:
                del self.assumed[key]

    def _where(self, key: str, pod: Mapping[str, Any]) -> str | None:
        """The node ``pod`` holds: its nodeName, else a bind or an undo the watch has not shown yet."""
        n = node_name(pod)
        if n is not None:
            return n
        a = self.assumed.get(key)
        if a is not None and self.clock() - a[1] < self.config.assume_ttl_s:
            return a[0]
        return self.undo.node_of(key, pod)

    # ------------------------------------------------------------------ the cycle
    def cluster_model(self) -> GPUCluster | None:
        sig = topology_signature(self.nodes.values(), self.config.labels)
        if sig != self._signature:
            self._signature = sig
            self._cluster = build_cluster(sig, self.config.labels) if sig else None
            if self._cluster is not None:
                log.info(
                    "topology: %d node(s), %d rack(s), %d region(s), %d GPU(s)",
                    len(self._cluster.nodes),
                    len(self._cluster.racks),
                    len(self._cluster.regions),
                    self._cluster.total_gpus,
                )
        return self._cluster

    def build_state(self, cluster: GPUCluster) -> ClusterState:
        """The allocation as the cache shows it: every live pod bound to a node holds its requests there."""
        return self.snapshot(cluster).state

    def snapshot(self, cluster: GPUCluster, *, owed: Iterable[tuple[str, Iterable[tuple[str, int]]]] = ()) -> Snapshot:
        """:meth:`build_state`, with rackscale's running gangs as the jobs a preemption may stop (and their pods),
        and the room ``owed`` to gangs waiting for their victims kept from every other job."""
        sched = self.config.scheduler_name

        def victim(key: str, pod: Mapping[str, Any]) -> str | None:
            return None if self.undo.undoing(key, pod) else victim_job(pod, scheduler=sched)

        def gang(key: str, pod: Mapping[str, Any]) -> str | None:
            return None if self.undo.undoing(key, pod) else running_gang(pod, scheduler=sched)

        snap = build_snapshot(
            cluster,
            nodes=self.nodes,
            pods=self.pods,
            where=self._where,
            labels=self.config.labels,
            victim_job=victim if self.config.preemption else lambda key, pod: None,
            started=core_time(started_wall, wall_now=self.wall(), core_now=self.clock() - self._t0),
            gang_of=gang,
            # A deleted pod gets SIGTERM and its grace period: taken as saving its work then, unless it has none, or
            # unless its work does not come back to finish (a service's replica, a bare pod: comes_back_to_finish),
            # which least attained service, reading "saves nothing", then never stops for an equal.
            saves=(lambda pod: grace_s(pod) > 0 and comes_back_to_finish(pod)) if self.las else (lambda pod: False),
        )
        for job, nominated in owed:
            reserve_nominated(snap.state, job, nominated)
        return snap

    def cycle(self) -> int:
        """One scheduling cycle over the cache. Returns the number of pods bound."""
        began = time.perf_counter()
        self._dirty = False
        now = self.clock()
        self._last_cycle = now
        self.stats.cycles += 1
        for key, (_, when) in list(self.assumed.items()):
            if now - when >= self.config.assume_ttl_s:
                del self.assumed[key]
        self.undo.expire()
        self.ledger.retry_undo()
        if self.record is not None and not self.record.loaded:
            self.record.load()  # at start, as a new leader, after a failed read (the records in memory serve meanwhile)
        visible = (
            (p if k not in self.assumed else with_node(p, self.assumed[k][0]))
            for k, p in self.pods.items()
            if not self.undo.undoing(k, p)  # bound by a failed attempt: going away, a member of nothing
        )
        pending = gangs(visible, self.config.scheduler_name)
        if not pending:
            self.waiting = Waiting()
            # At once after cycles with gangs waiting (the idle rate must stop counting their wait), else at most
            # every USE_EVERY_S.
            last = self.use
            if last is None or last.waiting or now - self._t0 - last.at >= USE_EVERY_S:
                cluster = self.cluster_model()
                if cluster is not None:
                    self._publish_use(self.snapshot(cluster), now, waiting=False)
            return 0  # not timed: an idle cycle's microseconds would drown the histogram of real ones
        bound: set[str] = set()  # the gangs this cycle bound: no longer waiting
        try:
            return self._place(pending, now, bound)
        finally:
            if self.record is not None:
                self.record.flush(now=self.wall(), present=self._present)  # the cycle's stops (never raises)
            # Binds included (API round trips), as kube-scheduler's scheduling_attempt_duration_seconds.
            self.stats.cycle_seconds.observe(time.perf_counter() - began)
            # Published after the cycle's attempts are counted: a scrape sees both of the same cycle.
            self.waiting = waiting(g for g in pending if g.job not in bound)

    def _publish_use(self, snap: Snapshot, now: float, *, waiting: bool) -> None:
        self.use = gpu_use(snap.state, at=now - self._t0, waiting=waiting, before=self.use, gangs=snap.gangs)

    def _attempt(self, result: AttemptResult, n: int = 1) -> None:
        self.stats.attempts[result] += n

    def _place(self, pending: list[Gang], now: float, bound_jobs: set[str]) -> int:
        cluster = self.cluster_model()
        if cluster is None:
            for g in pending:
                self.reporter.unschedulable(g.pending, "no nodes")
            self._attempt(AttemptResult.UNSCHEDULABLE, len(pending))
            return 0
        live = {g.job for g in pending}
        self.evictions.prune(pending=live)
        gpus_of = self._gpus_of
        for job in self.evictions.adopt(pending, self.pods, now=now, gpus_of=gpus_of):
            log.info("%s waits for the pods a preemption deleted for it before (read back from the API)", job)
        waits = self.evictions.held(self.pods, now=now)
        snap = self.snapshot(cluster, owed=self.evictions.owed(waits))
        attained = self._attained(pending, snap, now)
        self._publish_use(snap, now, waiting=True)
        for job in list(self._first_seen):
            if job not in live:
                del self._first_seen[job]
        submitted = {g.job: self._first_seen.setdefault(g.job, now) - self._t0 for g in pending}
        p = plan(
            pending,
            gpu_resource=self.config.labels.gpu_resource,
            max_node_gpus=max(n.gpus for n in cluster.nodes),
            submitted=submitted,
            held=self.undo.held() | waits,
        )
        for g, why in p.rejected:
            self.reporter.unschedulable(g.pending, why)
        self._attempt(AttemptResult.UNSCHEDULABLE, len(p.rejected))
        bound = 0
        ready = [j for j in self.evictions.ready(self.pods) if j in p.jobs]
        if ready:
            # The gangs whose victims are gone take the room they made first, on their own: in the cycle with
            # everyone, a job first by fair share or age could take it (a recreated mover of equal priority).
            first = PendingQueue(self._may_preempt(p.jobs[j][1], never=True) for j in ready)
            d0 = self.sched.schedule(snap.state, first, now - self._t0, attained=attained)
            for placed in d0.placed:
                g, spec = p.jobs[placed.spec.name]
                n = self.ledger.bind_gang(cluster, g, spec, placed.placement)
                self._attempt(AttemptResult.SCHEDULED if n else AttemptResult.ERROR)
                if n:
                    bound_jobs.add(g.job)
                bound += n
            tried = {x.spec.name for x in d0.placed}  # bound, or its bind failed: not tried twice in one cycle
            for j in ready:
                self.evictions.forget(j)  # placed, or it waits (and may preempt) as any gang from now on
                if j in tried:
                    del p.jobs[j]
            if bound:
                snap = self.snapshot(cluster, owed=self.evictions.owed(waits))  # with what was just bound
                attained = self._attained(pending, snap, now)
        if not p.jobs:
            return bound
        queue = PendingQueue((self._may_preempt(s) for _, s in p.jobs.values()), elastic=self.sched.profile.elastic)
        # The PodDisruptionBudgets over the gangs a preemption may stop (their pods matched only if the cycle
        # looks for victims among them: kube.budgets).
        budgets = self.budget_book.budgets(self.pdbs, snap.holders) if self.config.preemption else None
        d = self.sched.schedule(snap.state, queue, now - self._t0, attained=attained, budgets=budgets)
        why_not = refusal(d, preemption=self.config.preemption, holders=snap.holders, causes=self._causes)
        if why_not is not None:
            # Not bound either: a placement may count on GPUs that the stop or the shrink was to free.
            self.stats.refused_cycles += 1
            self._attempt(AttemptResult.ERROR, len(d.placed))  # decided, not carried out
            self._attempt(AttemptResult.UNSCHEDULABLE, len(d.pending))
            log.error("not carrying out this cycle's decisions: %s, which rackscale does not do to pods", why_not)
            return bound
        # A cycle that preempts binds nothing where its victims ran: they hold their GPUs until they are gone.
        held, preemptors = self._preempt(d, p, snap, cluster) if d.preemptions else (set(), set())
        seen: set[str] = set()
        for placed in d.placed:
            if placed.moved:
                continue  # a gang consolidation moves: its controller recreates its pods, placed on a later cycle
            seen.add(placed.spec.name)
            if placed.spec.name in preemptors:
                self._attempt(AttemptResult.UNSCHEDULABLE)  # as kube-scheduler counts an attempt that preempted
                continue
            if any(cluster.nodes[a.node].name in held for a in placed.placement.allocs):
                self._dirty = True  # placed on GPUs the victims may still hold: looked at again next cycle
                continue
            g, spec = p.jobs[placed.spec.name]
            n = self.ledger.bind_gang(cluster, g, spec, placed.placement)
            self._attempt(AttemptResult.SCHEDULED if n else AttemptResult.ERROR)  # a gang binds whole or not
            if n:
                bound_jobs.add(g.job)
            bound += n
        for w in d.pending:
            seen.add(w.spec.name)
            g, _ = p.jobs[w.spec.name]
            why = f"{w.status.reason.value}: {w.status.message}"
            if n_victims := self.evictions.waiting_for(g.job, self.pods):
                why = f"waiting for {n_victims} pod(s) stopped for it to terminate ({why})"
            self.reporter.unschedulable(g.pending, why)
        self._attempt(AttemptResult.UNSCHEDULABLE, len(d.pending))
        if d.not_examined_status is not None:
            st = d.not_examined_status
            for name, (g, _) in p.jobs.items():
                if name not in seen:
                    self.reporter.unschedulable(g.pending, f"{st.reason.value}: {st.message}")
        return bound

    def _attained(self, pending: Sequence[Gang], snap: Snapshot, now: float) -> Mapping[str, AttainedService]:
        """The gangs' service in their earlier runs, for the core (with --las-preemption; else none)."""
        rec = self.record
        if rec is None:
            return NO_SERVICE
        running = {job: rj.started_at for job in snap.holders if (rj := snap.state.running.get(job)) is not None}
        out, self._present = rec.for_cycle(
            pending=[g.job for g in pending], running=running, wall_now=self.wall(), core_now=now - self._t0
        )
        return out

    def _record_stop(self, s: Preemption, snap: Snapshot) -> None:
        """Record the service of a gang the cycle stopped (any cause), for its next run and the next leader."""
        key = record_key(s.victim)
        rj = snap.state.running.get(s.victim)
        if self.record is None or key is None or rj is None:
            return  # (a lone pod: its controller recreates it under another name)
        starts = [w for v in snap.holders.get(s.victim, ()) if (w := started_wall(v.pod)) is not None]
        gpus = rj.placement.gpu_milli / MILLI_PER_GPU
        self.record.record(key, started=min(starts) if starts else None, stopped=self.wall(), gpus=gpus)

    def _gpus_of(self, pod: Mapping[str, Any]) -> int:
        try:
            return pod_request(pod, self.config.labels.gpu_resource).gpus
        except ValueError:
            return 0

    def _may_preempt(self, spec: JobSpec, *, never: bool = False) -> JobSpec:
        """``spec``, kept from preempting while pods deleted for it are still there (it would stop more for the
        same room), when preemption is off, or with ``never``."""
        allowed = not never and self.config.preemption and not self.evictions.waiting_for(spec.name, self.pods)
        return may_preempt(spec, allowed=allowed)

    def _preempt(self, d: Decisions, p: Plan, snap: Snapshot, cluster: GPUCluster) -> tuple[set[str], set[str]]:
        """Carry out the cycle's stops (:func:`rackscale.kube.preemption.carry_out`); look again soon."""
        self._dirty = True
        return carry_out(
            d,
            p.jobs,
            snap.holders,
            cluster,
            evictor=self.evictor,
            book=self.evictions,
            stats=self.stats,
            component=self.config.scheduler_name,
            now=self.clock(),
            stopped=lambda s: self._record_stop(s, snap),
        )


def _hostname() -> str:
    import socket

    return socket.gethostname()
