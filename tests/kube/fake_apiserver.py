"""An in-process fake of the few Kubernetes API server endpoints the rackscale secondary scheduler uses.

It speaks HTTP/JSON on 127.0.0.1 so the *real* ``kubernetes`` Python client can talk to it, and keeps
nodes, pods, events, leases, Deployments and ConfigMaps in memory under one global resourceVersion counter,
as etcd would.

What it implements (and how far):

- ``GET`` lists of nodes, pods (all namespaces or one), events, leases and PodDisruptionBudgets (policy/v1:
  what the test writes through :meth:`FakeAPIServer.put`, status included: no disruption controller computes
  ``status.disruptionsAllowed``), with ``metadata.resourceVersion``.
- ``GET ?watch=1``: a chunked stream of JSON lines (ADDED / MODIFIED / DELETED). With a ``resourceVersion``
  it replays the changes after it; without one (or ``0``) it starts with a synthetic ADDED per object.
  ``allowWatchBookmarks=true`` adds a BOOKMARK every :attr:`FakeAPIServer.bookmark_interval` seconds.
  ``timeoutSeconds`` ends the stream. A resourceVersion older than the compaction point
  (:meth:`FakeAPIServer.compact`) gets one ERROR event with a 410 ``Expired`` Status, as the real server sends.
- ``POST .../pods/{name}/binding`` and ``POST .../bindings``: sets ``spec.nodeName`` and the
  ``PodScheduled=True`` condition, answers 201 with a ``v1.Status`` (not a Binding: that is what the real
  server does, and what trips the Python client's deserialiser). A pod already bound gets 409, and so does a
  Binding whose ``metadata.uid`` is not the pod's (the real server's UID precondition).
- ``PATCH .../pods/{name}/status``: strategic merge patch (``status.conditions`` merged by ``type``, other
  fields merged as maps) and JSON merge patch (RFC 7386). JSON Patch is answered 415.
- ``GET``/``PATCH`` ``apis/apps/v1/.../deployments/{name}/scale`` (JSON merge patch of ``spec.replicas``;
  another patch type gets 415): the Deployment's replicas, set at once (no controller, no ReplicaSets).
- ``POST`` nodes, pods, events; ``DELETE`` pods (a ``DeleteOptions`` body's ``preconditions.uid`` that is not
  the pod's gets 409, as on the real server). A DELETE removes the pod at once, unless
  :attr:`FakeAPIServer.graceful_deletes` is set: then, as for a pod a kubelet runs, it sets
  ``metadata.deletionTimestamp`` and ``deletionGracePeriodSeconds`` (the body's ``gracePeriodSeconds``, else the
  pod's ``terminationGracePeriodSeconds``, else 30) and the pod stays until the test removes it (the back door
  :meth:`FakeAPIServer.delete`: its kubelet saw the containers stop). ``GET``/``POST``/``PUT``/``DELETE`` leases
  (coordination.k8s.io/v1), with optimistic concurrency: a ``PUT`` whose ``metadata.resourceVersion`` is not
  the stored one gets 409 Conflict; a ``POST`` of an existing name gets 409 AlreadyExists. ``GET``/``POST``/``PUT``
  ConfigMaps in a namespace, the same way (a ``PUT`` without a resourceVersion is refused too, where the real
  server would update unconditionally: rackscale always sends one), and 422 for one whose ``data`` is over the
  real server's 1 MiB.

Faults (:mod:`tests.kube.faults`, :meth:`FakeAPIServer.inject`): the next matching requests fail with a
given status, or meet a change made just before they are served (the pod bound by someone else, deleted).

What it does NOT implement: authentication and authorisation, admission (no defaulting, no validation of
object schemas beyond what is read here), label and field selectors, pagination (``limit``/``continue``),
server-side apply, JSON Patch, protobuf, ``resourceVersionMatch``, watch-list (``sendInitialEvents``),
generation / observedGeneration, finalisers, grace periods that run out by themselves, kubelets
(pods never run: their phase stays whatever the test sets), the node lifecycle controller, and any API
group not listed above (404).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.kube.fake_kinds import API_VERSION, KINDS, NAMESPACED, Change, status
from tests.kube.fake_watch import WatchStream
from tests.kube.faults import Fault

Obj = dict[str, Any]


@dataclass
class Store:
    objects: dict[str, dict[str, Obj]] = field(default_factory=lambda: {k: {} for k in KINDS})
    history: list[Change] = field(default_factory=list)
    rv: int = 100
    compacted: int = 0


class HTTPError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class FakeAPIServer:
    """Start with :meth:`start`; ``host`` is the URL to give ``kubernetes.client.Configuration``."""

    def __init__(self) -> None:
        self.store = Store()
        self.cond = threading.Condition()
        self.bookmark_interval = 0.2
        self.binds: list[tuple[str, str]] = []  # (namespace/pod, node) for every accepted bind
        self.bind_conflicts = 0
        self.deletes: list[str] = []  # namespace/pod for every pod deleted through the API (not the back door)
        self.delete_bodies: list[Obj] = []  # the DeleteOptions of each, in the same order
        self.graceful_deletes = False  # a DELETE only marks the pod (see the module's docstring)
        self.scales: list[tuple[str, int]] = []  # (namespace/deployment, replicas) for every accepted scale PATCH
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.faults: list[Fault] = []
        self._expire_watches = 0  # bumped by compact(expire_watches=True): open watches end with a 410
        self._closing = False
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeAPIServer:
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    @property
    def host(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        with self.cond:
            self._closing = True
            self.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    # ------------------------------------------------------------------ test controls
    def compact(self, *, expire_watches: bool = False) -> int:
        """Forget the history up to now: watches from an older resourceVersion get 410 Gone.
        ``expire_watches`` also ends the open watches with a 410 ERROR event."""
        with self.cond:
            self.store.compacted = self.store.rv
            self.store.history = []
            if expire_watches:
                self._expire_watches += 1
            self.cond.notify_all()
            return self.store.rv

    @property
    def resource_version(self) -> int:
        with self.cond:
            return self.store.rv

    def get(self, kind: str, key: str) -> Obj | None:
        with self.cond:
            o = self.store.objects[kind].get(key)
            return copy.deepcopy(o) if o is not None else None

    def items(self, kind: str) -> list[Obj]:
        with self.cond:
            return [copy.deepcopy(o) for o in self.store.objects[kind].values()]

    def put(self, kind: str, obj: Obj) -> Obj:
        """Create or replace an object (no checks): the tests' back door, as a controller would write."""
        with self.cond:
            return self._write(kind, obj, create_ok=True)

    def delete(self, kind: str, key: str) -> None:
        with self.cond:
            self._delete(kind, key)

    def inject(self, *faults: Fault) -> None:
        """Fail (or disturb) the next requests that match: see :mod:`tests.kube.faults`."""
        with self.cond:
            self.faults.extend(faults)

    def _fault_for(self, method: str, path: str, body: Obj) -> Fault | None:
        with self.cond:
            for f in self.faults:
                if not f.spent and f.method == method and f.path == path:
                    f.hits += 1
                    if f.before is not None:
                        f.before(self, body)
                    return f
            return None

    def bump(self) -> int:
        """Advance the global resourceVersion with a write to an object nobody watches (an Event)."""
        self.put("events", {"metadata": {"name": f"bump-{uuid.uuid4().hex[:8]}", "namespace": "default"}})
        return self.resource_version

    # ------------------------------------------------------------------ internals (hold self.cond)
    @staticmethod
    def key_of(kind: str, obj: Obj) -> str:
        md = obj["metadata"]
        return f"{md.get('namespace', 'default')}/{md['name']}" if NAMESPACED[kind] else str(md["name"])

    def _write(self, kind: str, obj: Obj, *, create_ok: bool) -> Obj:
        obj = copy.deepcopy(obj)
        md = obj.setdefault("metadata", {})
        if NAMESPACED[kind]:
            md.setdefault("namespace", "default")
        key = self.key_of(kind, obj)
        old = self.store.objects[kind].get(key)
        if old is None and not create_ok:
            raise HTTPError(404, "NotFound", f'{kind} "{md["name"]}" not found')
        obj.setdefault("kind", KINDS[kind])
        obj.setdefault("apiVersion", API_VERSION[kind])
        md["uid"] = old["metadata"]["uid"] if old is not None else md.get("uid") or str(uuid.uuid4())
        md.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.store.rv += 1
        md["resourceVersion"] = str(self.store.rv)
        self.store.objects[kind][key] = obj
        self.store.history.append(
            Change(self.store.rv, kind, "ADDED" if old is None else "MODIFIED", copy.deepcopy(obj))
        )
        self.cond.notify_all()
        return copy.deepcopy(obj)

    def _delete(self, kind: str, key: str) -> Obj:
        old = self.store.objects[kind].pop(key, None)
        if old is None:
            raise HTTPError(404, "NotFound", f'{kind} "{key}" not found')
        self.store.rv += 1
        old["metadata"]["resourceVersion"] = str(self.store.rv)
        self.store.history.append(Change(self.store.rv, kind, "DELETED", copy.deepcopy(old)))
        self.cond.notify_all()
        return old

    def _bind(self, ns: str, name: str, body: Obj) -> Obj:
        key = f"{ns}/{name}"
        pod = self.store.objects["pods"].get(key)
        if pod is None:
            raise HTTPError(404, "NotFound", f'pods "{name}" not found')
        target = (body.get("target") or {}).get("name")
        if not target:
            raise HTTPError(422, "Invalid", "Binding.target.name: Required value")
        want = (body.get("metadata") or {}).get("uid")
        if want and want != pod["metadata"]["uid"]:
            self.bind_conflicts += 1
            raise HTTPError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{name}": Precondition failed: UID in precondition: '
                f"{want}, UID in object meta: {pod['metadata']['uid']}",
            )
        if pod.get("spec", {}).get("nodeName"):
            self.bind_conflicts += 1
            raise HTTPError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} '
                f'is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        pod = copy.deepcopy(pod)
        pod.setdefault("spec", {})["nodeName"] = target
        conds = [c for c in pod.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
        pod["status"]["conditions"] = conds
        self._write("pods", pod, create_ok=False)
        self.binds.append((key, target))
        return status(201, "", "", st="Success")

    def _patch_status(self, ns: str, name: str, body: Obj, content_type: str) -> Obj:
        key = f"{ns}/{name}"
        pod = self.store.objects["pods"].get(key)
        if pod is None:
            raise HTTPError(404, "NotFound", f'pods "{name}" not found')
        pod = copy.deepcopy(pod)
        if "strategic-merge-patch" in content_type:
            patch = copy.deepcopy(body.get("status", {}))
            conds = patch.pop("conditions", None)
            pod["status"] = _merge(pod.get("status", {}), patch)
            if conds is not None:
                have = pod["status"].setdefault("conditions", [])
                for c in conds:
                    for i, h in enumerate(have):
                        if h.get("type") == c.get("type"):
                            have[i] = _merge(h, c)
                            break
                    else:
                        have.append(c)
        elif "merge-patch" in content_type:
            pod["status"] = _merge(pod.get("status", {}), body.get("status", {}))
        else:
            raise HTTPError(415, "UnsupportedMediaType", f"the fake does not implement {content_type}")
        return self._write("pods", pod, create_ok=False)

    def _delete_pod(self, key: str, body: Obj) -> Obj:
        pod = self.store.objects["pods"].get(key)
        want = (body.get("preconditions") or {}).get("uid")
        if pod is not None and want and want != pod["metadata"]["uid"]:
            raise HTTPError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{pod["metadata"]["name"]}": Precondition failed: '
                f"UID in precondition: {want}, UID in object meta: {pod['metadata']['uid']}",
            )
        if pod is not None and self.graceful_deletes:
            if pod["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(pod)  # already going: a second DELETE changes nothing
            pod = copy.deepcopy(pod)
            grace = body.get("gracePeriodSeconds", (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            out = self._write("pods", pod, create_ok=False)
        else:
            out = self._delete("pods", key)
        self.deletes.append(key)
        self.delete_bodies.append(copy.deepcopy(body))
        return out

    def _scale(self, key: str, patch: Obj | None, content_type: str) -> Obj:
        """GET or PATCH (JSON merge patch only) ``deployments/NAME/scale``: an autoscaling/v1 Scale whose
        ``spec.replicas`` is the Deployment's (no controller here: ``status.replicas`` follows at once)."""
        dep = self.store.objects["deployments"].get(key)
        if dep is None:
            raise HTTPError(404, "NotFound", f'deployments.apps "{key.split("/")[-1]}" not found')
        if patch is not None:
            if "merge-patch" not in content_type or "strategic" in content_type:
                raise HTTPError(415, "UnsupportedMediaType", f"the fake scales with merge-patch only: {content_type}")
            replicas = (patch.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise HTTPError(422, "Invalid", f"Scale.spec.replicas: Invalid value: {replicas!r}")
            dep = copy.deepcopy(dep)
            dep.setdefault("spec", {})["replicas"] = replicas
            dep.setdefault("status", {})["replicas"] = replicas
            dep = self._write("deployments", dep, create_ok=False)
            self.scales.append((key, replicas))
        md = dep["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in md},
            "spec": {"replicas": dep.get("spec", {}).get("replicas", 1)},
            "status": {"replicas": dep.get("status", {}).get("replicas", 0)},
        }

    def _put_checked(self, kind: str, ns: str, name: str, body: Obj) -> Obj:
        """``PUT`` of a lease or a ConfigMap: 409 unless it carries the stored resourceVersion."""
        what = {"leases": "leases.coordination.k8s.io", "configmaps": "configmaps"}[kind]
        key = f"{ns}/{name}"
        old = self.store.objects[kind].get(key)
        if old is None:
            raise HTTPError(404, "NotFound", f'{what} "{name}" not found')
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want != old["metadata"]["resourceVersion"]:
            raise HTTPError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {what} "{name}": '
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        _check_size(kind, body)
        body = copy.deepcopy(body)
        body.setdefault("metadata", {}).update(name=name, namespace=ns)
        return self._write(kind, body, create_ok=False)


CONFIGMAP_MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data


def _check_size(kind: str, body: Obj) -> None:
    if kind == "configmaps":
        data = body.get("data") or {}
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in data.items())
        if size > CONFIGMAP_MAX_BYTES:
            raise HTTPError(422, "Invalid", f"ConfigMap data: Too long: must have at most {CONFIGMAP_MAX_BYTES} bytes")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class _Handler(WatchStream, BaseHTTPRequestHandler):
    fake: FakeAPIServer
    protocol_version = "HTTP/1.1"
    _read_body: Obj | None = None

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # ------------------------------------------------------------------ plumbing
    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Obj:
        """The request's JSON body, read once (a fault reads it before the handler does)."""
        cached = self._read_body
        if cached is None:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b"{}"
            cached = self._read_body = json.loads(raw or b"{}")
        return cached

    def _route(self) -> tuple[str, str | None, str | None, str | None, dict[str, list[str]]]:
        """(resource, namespace, name, subresource, query) of the request path."""
        u = urlparse(self.path)
        q = parse_qs(u.query)
        parts = [p for p in u.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:3] in (["apis", "coordination.k8s.io", "v1"], ["apis", "apps", "v1"], ["apis", "policy", "v1"]):
            rest = parts[3:]
        else:
            raise HTTPError(404, "NotFound", f"the fake serves no {u.path}")
        ns = None
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise HTTPError(404, "NotFound", f"the fake serves no {u.path}")
        resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        if resource not in KINDS and resource != "bindings":
            raise HTTPError(404, "NotFound", f"the fake serves no {resource}")
        return resource, ns, name, sub, q

    def _handle(self, method: str) -> None:
        self.fake.requests.append((method, self.path))
        self._read_body = None  # one handler serves every request of a kept-alive connection
        try:
            # Read the body off the connection first: a fault may answer without serving the request, and the
            # client sends its next request on the same connection.
            fault = self.fake._fault_for(method, urlparse(self.path).path, self._body())
            if fault is not None and fault.status is not None:
                raise HTTPError(fault.status, fault.reason, fault.message)
            resource, ns, name, sub, q = self._route()
            fake = self.fake
            if method == "GET" and name is None:
                if q.get("watch", ["0"])[0] in ("1", "true"):
                    self._watch(resource, ns, q)
                    return
                with fake.cond:
                    items = [
                        copy.deepcopy(o)
                        for o in fake.store.objects[resource].values()
                        if ns is None or o["metadata"].get("namespace") == ns
                    ]
                    rv = fake.store.rv
                self._send(
                    200,
                    {
                        "kind": KINDS[resource] + "List",
                        "apiVersion": API_VERSION[resource],
                        "metadata": {"resourceVersion": str(rv)},
                        "items": items,
                    },
                )
                return
            key = f"{ns}/{name}" if NAMESPACED.get(resource) else str(name)
            with fake.cond:
                if resource == "deployments" and sub == "scale" and method in ("GET", "PATCH"):
                    ct = self.headers.get("Content-Type", "")
                    self._send(200, fake._scale(key, self._body() if method == "PATCH" else None, ct))
                elif method == "GET":
                    o = fake.store.objects[resource].get(key)
                    if o is None:
                        raise HTTPError(404, "NotFound", f'{resource} "{name}" not found')
                    self._send(200, copy.deepcopy(o))
                elif method == "POST" and (sub == "binding" or resource == "bindings"):
                    body = self._body()
                    pod = name if sub == "binding" else (body.get("metadata") or {}).get("name")
                    self._send(201, fake._bind(ns or "default", str(pod), body))
                elif method == "POST" and name is None:
                    body = self._body()
                    md = body.setdefault("metadata", {})
                    if NAMESPACED[resource]:
                        md["namespace"] = ns or md.get("namespace") or "default"
                    if fake.key_of(resource, body) in fake.store.objects[resource]:
                        raise HTTPError(409, "AlreadyExists", f'{resource} "{md.get("name")}" already exists')
                    _check_size(resource, body)
                    self._send(201, fake._write(resource, body, create_ok=True))
                elif method == "PATCH" and resource == "pods" and sub == "status":
                    ct = self.headers.get("Content-Type", "")
                    self._send(200, fake._patch_status(str(ns), str(name), self._body(), ct))
                elif method == "PUT" and resource in ("leases", "configmaps") and sub is None:
                    self._send(200, fake._put_checked(resource, str(ns), str(name), self._body()))
                elif method == "DELETE" and resource == "pods" and sub is None:
                    self._send(200, fake._delete_pod(key, self._body()))
                elif method == "DELETE" and resource == "leases" and sub is None:
                    self._send(200, fake._delete(resource, key))
                else:
                    raise HTTPError(405, "MethodNotAllowed", f"the fake does not implement {method} {self.path}")
        except HTTPError as e:
            self._send(e.code, status(e.code, e.reason, e.message))

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")
