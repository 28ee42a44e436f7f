"""Start and stop the real monitoring engines (Debian ``prometheus``, ``prometheus-alertmanager``) for tests.

Everything listens on 127.0.0.1, lives under the caller's temp dir, is polled for readiness with a bound,
and is stopped by the PID this module started. A missing binary FAILS the test with the package to install
(the tests are the only check of the deploy/ files, so they must not be skipped silently).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

# binary -> the Debian package that provides it
PACKAGES = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
}


def require(binary: str) -> str:
    """The binary's path, or fail the test saying which Debian package to install."""
    path = shutil.which(binary)
    if path is None:
        package = PACKAGES.get(binary, binary)
        pytest.fail(
            f"`{binary}` is not installed: install the Debian package `{package}` "
            f"(apt-get install {package}); .ci/run installs it for CI",
            pytrace=False,
        )
    return path


def free_port() -> int:
    """A loopback port that was free a moment ago (the engines take their port on the command line)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Engine:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop this engine by its PID: SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)


def _start(name: str, argv: list[str], url: str, workdir: Path, *, timeout: float) -> Engine:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    engine = Engine(name, proc, url, log)
    try:
        _wait_ready(engine, timeout=timeout)
    except BaseException:
        engine.stop()
        raise
    return engine


def _wait_ready(engine: Engine, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        if engine.proc.poll() is not None:
            raise AssertionError(
                f"{engine.name} exited with {engine.proc.returncode} before it was ready:\n{engine.log_tail()}"
            )
        try:
            r = httpx.get(f"{engine.url}/-/ready", timeout=1.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = repr(e)
        if time.monotonic() > deadline:
            raise AssertionError(f"{engine.name} not ready after {timeout}s ({last}):\n{engine.log_tail()}")
        time.sleep(0.05)


def start_prometheus(config: Path, workdir: Path, *, timeout: float = 20.0) -> Engine:
    """Prometheus on a free loopback port, TSDB under ``workdir``, alerts re-sent every second."""
    binary = require("prometheus")
    port = free_port()
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--rules.alert.resend-delay=1s",
        "--log.level=warn",
    ]
    return _start("prometheus", argv, f"http://127.0.0.1:{port}", workdir, timeout=timeout)


def start_alertmanager(config: Path, workdir: Path, *, timeout: float = 20.0) -> Engine:
    """Alertmanager on a free loopback port, clustering off, its state under ``workdir``."""
    binary = require("prometheus-alertmanager")
    port = free_port()
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # empty: no gossip port, no peers
        "--log.level=warn",
    ]
    return _start("alertmanager", argv, f"http://127.0.0.1:{port}", workdir, timeout=timeout)


@dataclass
class Webhook:
    """What an Alertmanager webhook receiver got: one decoded JSON payload per POST."""

    url: str
    payloads: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alerts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a for p in self.payloads for a in p.get("alerts", [])]


@contextmanager
def webhook_receiver() -> Iterator[Webhook]:
    """A tiny HTTP server on 127.0.0.1 (a free port) that records the alert payloads POSTed to it."""
    hook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                payload = json.loads(body)
            except ValueError:
                payload = {"invalid": body.decode(errors="replace")}
            with hook.lock:
                hook.payloads.append(payload)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/alerts"
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
