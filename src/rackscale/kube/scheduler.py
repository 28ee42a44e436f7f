"""rackscale as a Kubernetes secondary scheduler: list + watch nodes and pods, place gangs, bind, report.

One loop thread owns the caches and schedules; one watcher thread per resource (nodes, pods) lists, then
watches from the list's resourceVersion (with bookmarks), and hands events to the loop through a queue. A
410 Gone (an ERROR event with code 410, or an HTTP 410) makes the watcher list again; the loop replaces that
cache wholesale.

Each cycle rebuilds a :class:`ClusterState` from the cache: the cluster model (rebuilt only when the nodes'
topology changes), then every bound, live pod's requests (whoever scheduled it), then rackscale's own pods
that it bound but whose bind the watch has not shown yet (the "assumed" pods, as kube-scheduler keeps them).
Only the leader (see :mod:`rackscale.kube.leader`) schedules; every instance keeps its caches warm.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from rackscale.kube.api import KubeApiError, call_json, call_raw
from rackscale.kube.cluster import LabelKeys, build_cluster, node_available, topology_signature
from rackscale.kube.leader import LeaderElector, micro_time
from rackscale.kube.pods import Gang, gang_spec, gangs, is_terminated, node_name, pod_key, pod_request
from rackscale.model.placement import NodeAlloc, Placement
from rackscale.model.state import ClusterState
from rackscale.model.topology import GPUCluster, NodeDecl
from rackscale.model.workload import JobSpec, batch
from rackscale.scheduler import PendingQueue, ResourceScheduler

log = logging.getLogger("rackscale.kube")

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class KubeSchedulerConfig:
    scheduler_name: str = "rackscale"
    labels: LabelKeys = field(default_factory=LabelKeys)
    policy: str = "rackscale"
    leader_elect: bool = True
    lease_name: str = ""  # default: the scheduler name
    lease_namespace: str = "kube-system"
    identity: str = ""  # default: hostname_uuid
    lease_duration_s: float = 15.0
    renew_interval_s: float = 2.0
    watch_timeout_s: int = 300  # server-side timeout of one watch request; the watcher then re-watches
    retry_interval_s: float = 30.0  # re-run a cycle this often even when nothing changed (pending pods)
    report_interval_s: float = 60.0  # repeat an unchanged FailedScheduling event at most this often
    assume_ttl_s: float = 60.0  # forget a bind the watch has not confirmed after this long
    backoff_s: float = 1.0  # after a failed list/watch request


@dataclass(slots=True)
class Stats:
    cycles: int = 0
    binds: int = 0
    bind_errors: int = 0
    lists: dict[str, int] = field(default_factory=lambda: {"nodes": 0, "pods": 0})
    gone: dict[str, int] = field(default_factory=lambda: {"nodes": 0, "pods": 0})
    bookmarks: dict[str, int] = field(default_factory=lambda: {"nodes": 0, "pods": 0})


class _Watcher:
    """List, then watch from the list's resourceVersion; on 410 list again. Runs in its own thread."""

    def __init__(self, owner: KubeScheduler, kind: str, list_fn: Callable[..., Any]) -> None:
        self.owner, self.kind, self.list_fn = owner, kind, list_fn
        self.resource_version: str | None = None  # the latest seen (events and bookmarks)
        self._resp: Any = None
        self.thread = threading.Thread(target=self.run, name=f"rackscale-watch-{kind}", daemon=True)

    def run(self) -> None:
        o = self.owner
        while not o.stopping.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
            except KubeApiError as e:
                if e.status == 410:
                    self._gone()
                else:
                    log.warning("%s watch: %s", self.kind, e)
                    o.stopping.wait(o.config.backoff_s)
            except Exception as e:  # network errors of every flavour (urllib3, socket): retry after a pause
                if o.stopping.is_set():
                    break
                log.warning("%s watch: %s: %s", self.kind, type(e).__name__, e)
                o.stopping.wait(o.config.backoff_s)

    def stop(self) -> None:
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()  # urllib3 >= 2.3: unblocks a read in progress

    def _gone(self) -> None:
        self.owner.stats.gone[self.kind] += 1
        log.info("%s watch: resourceVersion %s expired (410); listing again", self.kind, self.resource_version)
        self.resource_version = None

    def _list(self) -> None:
        body = call_json(self.list_fn)
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.owner.stats.lists[self.kind] += 1
        self.owner.events.put(("reset", self.kind, body.get("items") or []))
        self.resource_version = rv or None

    def _watch(self) -> None:
        o = self.owner
        resp = call_raw(
            self.list_fn,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=o.config.watch_timeout_s,
            _request_timeout=(10, o.config.watch_timeout_s + 30),
        )
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                if o.stopping.is_set():
                    return
                if not line:
                    continue
                ev = json.loads(line)
                typ, obj = ev.get("type"), ev.get("object") or {}
                if typ == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        self._gone()
                        return
                    raise KubeApiError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if typ == "BOOKMARK":
                    o.stats.bookmarks[self.kind] += 1
                else:
                    o.events.put(("event", self.kind, (typ, obj)))
                if rv:
                    self.resource_version = str(rv)
        finally:
            self._resp = None
            resp.release_conn()


class KubeScheduler:
    """The secondary scheduler. :meth:`start` runs it in threads; :meth:`stop` ends them."""

    def __init__(
        self,
        api: client.ApiClient,
        config: KubeSchedulerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
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
        self.sched = ResourceScheduler(profile=cfg.policy)
        self.stopping = threading.Event()
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.synced = {"nodes": False, "pods": False}
        self.assumed: dict[str, tuple[str, float]] = {}  # pod key -> (node, when bound)
        self.stats = Stats()
        self.renewing = True  # tests switch it off to play a leader that hangs
        self._first_seen: dict[str, float] = {}
        self._reported: dict[str, tuple[str, float]] = {}  # pod uid -> (message, when)
        self._cluster: GPUCluster | None = None
        self._signature: tuple[NodeDecl, ...] | None = None
        self._dirty = True
        self._last_cycle = float("-inf")
        self._t0 = clock()
        self.watchers = {
            "nodes": _Watcher(self, "nodes", self.core.list_node),
            "pods": _Watcher(self, "pods", self.core.list_pod_for_all_namespaces),
        }
        self._thread: threading.Thread | None = None

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
                next_renew = now + self.config.renew_interval_s
            self._drain(timeout=0.05)
            now = self.clock()
            if (
                self.is_leader
                and all(self.synced.values())
                and (self._dirty or now - self._last_cycle >= self.config.retry_interval_s)
            ):
                try:
                    self.cycle()
                except Exception:
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
        cache = self.nodes if kind == "nodes" else self.pods
        key_of = _node_key if kind == "nodes" else pod_key
        if what == "reset":
            cache.clear()
            for o in payload:
                cache[key_of(o)] = o
            self.synced[kind] = True
            self._dirty = True
            if kind == "pods":
                self._confirm_all()
            return
        typ, obj = payload
        key = key_of(obj)
        if typ == "DELETED":
            cache.pop(key, None)
        else:
            cache[key] = obj
        if kind == "pods":
            self._confirm(key)
        self._dirty = True

    def _confirm(self, key: str) -> None:
        """The watch shows a pod we bound as bound (or gone): stop assuming."""
        if key in self.assumed:
            pod = self.pods.get(key)
            if pod is None or node_name(pod) is not None:
                del self.assumed[key]

    def _confirm_all(self) -> None:
        for key in list(self.assumed):
            self._confirm(key)

    def _bound_node(self, key: str, pod: Obj) -> str | None:
        n = node_name(pod)
        if n is not None:
            return n
        a = self.assumed.get(key)
        if a is not None and self.clock() - a[1] < self.config.assume_ttl_s:
            return a[0]
        return None

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
        state = ClusterState(cluster)
        index = {n.name: n.index for n in cluster.nodes}
        gres = self.config.labels.gpu_resource
        for key, pod in self.pods.items():
            where = self._bound_node(key, pod)
            if where is None or is_terminated(pod) or where not in index:
                continue
            n = index[where]
            req = pod_request(pod, gres)
            g = min(req.gpus, state.node_whole[n])  # another scheduler may have over-committed the node
            cpu, mem = min(req.cpu_milli, state.cpu_free[n]), min(req.memory_mib, state.mem_free[n])
            if g == 0 and cpu == 0 and mem == 0:
                continue
            alloc = NodeAlloc(n, state.whole_free_gpus(n, g) if g else (), cpu_milli=cpu, memory_mib=mem)
            spec = batch(f"bound:{key}", gpus=g, cpu_milli=cpu, memory_mib=mem, preemptible=False)
            state.allocate(spec, Placement(spec.name, (alloc,), 1), now=0.0, health=False)
        for node in self.nodes.values():
            if not node_available(node):
                state.fail_node(index[_node_key(node)])
        return state

    def cycle(self) -> int:
        """One scheduling cycle over the cache. Returns the number of pods bound."""
        self._dirty = False
        now = self.clock()
        self._last_cycle = now
        self.stats.cycles += 1
        for key, (_, when) in list(self.assumed.items()):
            if now - when >= self.config.assume_ttl_s:
                del self.assumed[key]
        pending = gangs(
            ((p if k not in self.assumed else _with_node(p, self.assumed[k][0])) for k, p in self.pods.items()),
            self.config.scheduler_name,
        )
        if not pending:
            return 0
        cluster = self.cluster_model()
        if cluster is None:
            for g in pending:
                self._unschedulable(g, "no nodes")
            return 0
        state = self.build_state(cluster)
        live = {g.job for g in pending}
        for job in list(self._first_seen):
            if job not in live:
                del self._first_seen[job]
        specs: dict[str, tuple[Gang, JobSpec]] = {}
        max_node = max(n.gpus for n in cluster.nodes)
        for g in pending:
            first = self._first_seen.setdefault(g.job, now)
            if not g.ready:
                self._unschedulable(
                    g, f"pod group {g.group!r}: {g.bound + len(g.pending)} of {g.min_member} members exist (min-member)"
                )
                continue
            spec = gang_spec(g, self.config.labels.gpu_resource, submit_time=first - self._t0)
            if isinstance(spec, str):
                self._unschedulable(g, spec)
                continue
            if spec.unit.gpus > max_node:
                self._unschedulable(g, f"each pod asks for {spec.unit.gpus} GPUs; the largest node has {max_node}")
                continue
            specs[spec.name] = (g, spec)
        if not specs:
            return 0
        d = self.sched.schedule(state, PendingQueue(s for _, s in specs.values()), now - self._t0)
        bound = 0
        for p in d.placed:
            g, spec = specs[p.spec.name]
            bound += self._bind_gang(cluster, g, spec, p.placement)
        seen = {p.spec.name for p in d.placed}
        for w in d.pending:
            seen.add(w.spec.name)
            g, _ = specs[w.spec.name]
            self._unschedulable(g, f"{w.status.reason.value}: {w.status.message}")
        if d.not_examined_status is not None:
            st = d.not_examined_status
            for name, (g, _) in specs.items():
                if name not in seen:
                    self._unschedulable(g, f"{st.reason.value}: {st.message}")
        return bound

    def _bind_gang(self, cluster: GPUCluster, g: Gang, spec: JobSpec, placement: Placement) -> int:
        """Bind the gang's pods to the placement's nodes, one pod per unit."""
        per_unit = spec.unit.gpus
        targets: list[str] = []
        for a in placement.allocs:
            units = len(a.gpus) // per_unit if per_unit else 1
            targets.extend([cluster.nodes[a.node].name] * units)
        if len(targets) != len(g.pending):
            log.error("placement of %s has %d unit(s) for %d pod(s); not binding", g.job, len(targets), len(g.pending))
            return 0
        done = 0
        for pod, node in zip(g.pending, targets, strict=True):
            md = pod["metadata"]
            ns, name = md.get("namespace", "default"), md["name"]
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": md.get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            try:
                # _preload_content=False (inside call_json): the client cannot read the Status the server answers.
                call_json(self.core.create_namespaced_pod_binding, name, ns, body)
            except (KubeApiError, OSError) as e:
                self.stats.bind_errors += 1
                log.warning("binding %s/%s to %s: %s", ns, name, node, e)
                self._event(pod, "Warning", "FailedScheduling", f"binding to {node} failed: {e}")
                continue
            key = f"{ns}/{name}"
            self.assumed[key] = (node, self.clock())
            self._reported.pop(str(md.get("uid")), None)
            self.stats.binds += 1
            done += 1
            rack = cluster.racks[cluster.nodes[cluster_index(cluster, node)].rack].name
            self._event(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node} (rack {rack})")
        return done

    # ------------------------------------------------------------------ reporting
    def _unschedulable(self, g: Gang, message: str) -> None:
        now = self.clock()
        for pod in g.pending:
            uid = str(pod["metadata"].get("uid") or pod_key(pod))
            last = self._reported.get(uid)
            if last is not None and last[0] == message and now - last[1] < self.config.report_interval_s:
                continue
            if last is not None and now - last[1] < min(5.0, self.config.report_interval_s):
                continue  # the message moves (counts, times): do not write on every cycle
            self._reported[uid] = (message, now)
            self._event(pod, "Warning", "FailedScheduling", message)
            self._condition(pod, message)

    def _condition(self, pod: Mapping[str, Any], message: str) -> None:
        md = pod["metadata"]
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": micro_time(datetime.now(UTC)).split(".")[0] + "Z",
                    }
                ]
            }
        }
        try:
            call_json(
                self.core.patch_namespaced_pod_status,
                md["name"],
                md.get("namespace", "default"),
                patch,
                _content_type="application/strategic-merge-patch+json",
            )
        except (KubeApiError, OSError) as e:
            log.warning("patching the status of %s: %s", pod_key(pod), e)

    def _event(self, pod: Mapping[str, Any], typ: str, reason: str, message: str) -> None:
        md = pod["metadata"]
        ns = md.get("namespace", "default")
        ts = micro_time(datetime.now(UTC)).split(".")[0] + "Z"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md["name"],
                "namespace": ns,
                "uid": md.get("uid"),
                "resourceVersion": md.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": typ,
            "source": {"component": self.config.scheduler_name},
            "reportingComponent": self.config.scheduler_name,
            "reportingInstance": self.identity,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            call_json(self.core.create_namespaced_event, ns, body)
        except (KubeApiError, OSError) as e:
            log.warning("event for %s: %s", pod_key(pod), e)


def cluster_index(cluster: GPUCluster, node: str) -> int:
    for n in cluster.nodes:
        if n.name == node:
            return n.index
    raise KeyError(node)


def _node_key(node: Obj) -> str:
    return str(node["metadata"]["name"])


def _with_node(pod: Obj, node: str) -> Obj:
    out = dict(pod)
    out["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
    return out


def _hostname() -> str:
    import socket

    return socket.gethostname()
