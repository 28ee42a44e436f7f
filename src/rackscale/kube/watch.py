"""List + watch one resource (nodes, pods, PodDisruptionBudgets) and hand what it sees to the scheduler's loop
through a queue.

The watcher owns no cache: it puts ``("reset", kind, items)`` after a list and ``("event", kind, (type,
object))`` per watch event, and the loop thread applies them. A 410 Gone (an ERROR event with code 410, or
an HTTP 410) makes it list again; the loop then replaces that cache wholesale.

An ``optional`` resource (PodDisruptionBudgets: the scheduler works without them) that the API server will not
serve (403: no RBAC for it; 404: no such API) is read as none: its cache is emptied once, with one warning, and
the list is asked again every ``unreadable_retry_s`` (a later RBAC grant is taken up without a restart).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from rackscale.kube.api import KubeApiError, call_json, call_raw
from rackscale.kube.config import PDBS, KubeSchedulerConfig, Stats

log = logging.getLogger("rackscale.kube")

Item = tuple[str, str, Any]  # ("reset", kind, items) or ("event", kind, (type, object))


class Watcher:
    """List, then watch from the list's resourceVersion; on 410 list again. Runs in its own thread."""

    def __init__(
        self,
        *,
        kind: str,
        list_fn: Callable[..., Any],
        sink: queue.Queue[Item],
        stopping: threading.Event,
        stats: Stats,
        config: KubeSchedulerConfig,
        optional: bool = False,
    ) -> None:
        self.kind, self.list_fn, self.sink = kind, list_fn, sink
        self.stopping, self.stats, self.config = stopping, stats, config
        self.optional = optional
        self.unreadable = False  # an optional resource the API server refused (read as none meanwhile)
        self.resource_version: str | None = None  # the latest seen (events and bookmarks)
        self._resp: Any = None
        self.thread = threading.Thread(target=self.run, name=f"rackscale-watch-{kind}", daemon=True)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
            except KubeApiError as e:
                if e.status == 410:
                    self._gone()
                elif self.optional and e.status in (403, 404):
                    self._refused(e)
                else:
                    log.warning("%s watch: %s", self.kind, e)
                    self.stopping.wait(self.config.backoff_s)
            except Exception as e:  # network errors of every flavour (urllib3, socket): retry after a pause
                if self.stopping.is_set():
                    break
                log.warning("%s watch: %s: %s", self.kind, type(e).__name__, e)
                self.stopping.wait(self.config.backoff_s)

    def stop(self) -> None:
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()  # urllib3 >= 2.3: unblocks a read in progress

    def _gone(self) -> None:
        self.stats.gone[self.kind] += 1
        log.info("%s watch: resourceVersion %s expired (410); listing again", self.kind, self.resource_version)
        self.resource_version = None

    def _refused(self, e: KubeApiError) -> None:
        """An optional resource the API server does not serve us: none, until a list succeeds."""
        if not self.unreadable:
            self.unreadable = True
            log.warning(
                "%s: %s; read as none (rackscale works without them, docs/kubernetes.md), asked again every %.0f s",
                self.kind,
                e,
                self.config.unreadable_retry_s,
            )
            self.sink.put(("reset", self.kind, []))
        self.resource_version = None
        self.stopping.wait(self.config.unreadable_retry_s)

    def _list(self) -> None:
        body = call_json(self.list_fn)
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if self.unreadable:
            self.unreadable = False
            log.info("%s: readable now", self.kind)
        self.stats.lists[self.kind] += 1
        self.sink.put(("reset", self.kind, body.get("items") or []))
        self.resource_version = rv or None

    def _watch(self) -> None:
        timeout = self.config.watch_timeout_s
        resp = call_raw(
            self.list_fn,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _request_timeout=(10, timeout + 30),
        )
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                if self.stopping.is_set():
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
                    self.stats.bookmarks[self.kind] += 1
                else:
                    self.sink.put(("event", self.kind, (typ, obj)))
                if rv:
                    self.resource_version = str(rv)
        finally:
            self._resp = None
            resp.release_conn()


def watchers(
    api: client.ApiClient,
    *,
    sink: queue.Queue[Item],
    stopping: threading.Event,
    stats: Stats,
    config: KubeSchedulerConfig,
) -> dict[str, Watcher]:
    """One watcher per resource the scheduler caches: nodes, pods, and PodDisruptionBudgets where it may preempt
    (optional: without RBAC for them it preempts as without budgets, docs/kubernetes.md)."""
    core = client.CoreV1Api(api)
    lists: dict[str, Callable[..., Any]] = {"nodes": core.list_node, "pods": core.list_pod_for_all_namespaces}
    if config.preemption:
        lists[PDBS] = client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces
    return {
        kind: Watcher(
            kind=kind, list_fn=fn, sink=sink, stopping=stopping, stats=stats, config=config, optional=kind == PDBS
        )
        for kind, fn in lists.items()
    }
