"""The fake API server's watch stream: chunked JSON lines, bookmarks, and the 410 of an expired version.

A mixin of the fake's request handler (tests/kube/fake_apiserver.py), kept apart so each file reads in one
sitting; see that module's docstring for what the watch implements.
"""

from __future__ import annotations

import copy
import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from tests.kube.fake_kinds import API_VERSION, KINDS, Change, status

if TYPE_CHECKING:
    from tests.kube.fake_apiserver import FakeAPIServer

Obj = dict[str, Any]


class WatchStream(BaseHTTPRequestHandler):
    fake: FakeAPIServer

    def _chunk(self, obj: Obj) -> None:
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, resource: str, ns: str | None, q: dict[str, list[str]]) -> None:
        fake = self.fake
        timeout = float(q.get("timeoutSeconds", ["30"])[0])
        bookmarks = q.get("allowWatchBookmarks", ["false"])[0] == "true"
        since = q.get("resourceVersion", [""])[0]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def mine(c: Change) -> bool:
            return c.kind == resource and (ns is None or c.obj["metadata"].get("namespace") == ns)

        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + fake.bookmark_interval
        try:
            with fake.cond:
                expired_gen = fake._expire_watches
                if since in ("", "0"):
                    pos = fake.store.rv
                    initial = [
                        copy.deepcopy(o)
                        for o in fake.store.objects[resource].values()
                        if ns is None or o["metadata"].get("namespace") == ns
                    ]
                elif int(since) < fake.store.compacted:
                    initial = None
                    pos = -1
                else:
                    pos, initial = int(since), []
            if initial is None:
                self._gone(since)
                return
            for o in initial:
                self._chunk({"type": "ADDED", "object": o})
            while True:
                with fake.cond:
                    batch = [c for c in fake.store.history if c.rv > pos and mine(c)]
                    if not batch:
                        now = time.monotonic()
                        wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                        if wait > 0 and not fake._closing and fake._expire_watches == expired_gen:
                            fake.cond.wait(wait)
                        batch = [c for c in fake.store.history if c.rv > pos and mine(c)]
                    gone = fake._expire_watches != expired_gen
                    closing = fake._closing
                    current = fake.store.rv
                if gone:
                    self._gone(str(pos))
                    return
                for c in batch:
                    self._chunk({"type": c.type, "object": c.obj})
                    pos = c.rv
                now = time.monotonic()
                if closing or now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    kind = KINDS[resource]
                    self._chunk(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind,
                                "apiVersion": API_VERSION[resource],
                                "metadata": {"resourceVersion": str(current)},
                            },
                        }
                    )
                    pos = max(pos, current)
                    next_bookmark = now + fake.bookmark_interval
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _gone(self, since: str) -> None:
        with self.fake.cond:
            rv = self.fake.store.compacted
        self._chunk({"type": "ERROR", "object": status(410, "Expired", f"too old resource version: {since} ({rv})")})
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
