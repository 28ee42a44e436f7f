"""The service benchmark's server: ``rackscale serve`` in a subprocess on loopback (:class:`ServerProcess`,
which ``kill9`` and ``restart`` keep on its data directory), and :func:`http_json`, the standard-library
client its checks use (not the load's: that is :mod:`~rackscale.bench.service_load`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """``rackscale serve`` in a subprocess on loopback; ``kill9`` and ``restart`` keep the data dir."""

    data_dir: Path
    port: int
    speed: float = 100.0
    racks: int = 4
    durability: str = "normal"
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'rackscale.db'}"

    def start(self, *, ready_timeout: float = READY_TIMEOUT_S) -> None:
        cmd = [
            sys.executable,
            "-c",
            "from rackscale.cli.app import main; main()",
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--speed",
            f"{self.speed:g}",
            "--racks",
            str(self.racks),
            "--durability",
            self.durability,
            *self.extra,
        ]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready(ready_timeout)

    @property
    def token(self) -> str:
        """The admin token the server generated (the default auth, which the load goes through)."""
        path = self.data_dir / "admin.token"
        return path.read_text().strip() if path.exists() else ""  # none with --no-auth or --tokens

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"rackscale serve exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        _TOKEN[0] = self.token  # the checks' requests carry it too
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rackscale serve not ready after {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-n:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server process has used so far (Linux; None elsewhere)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


_TOKEN: list[str] = [""]  # the running server's admin token, once it is ready


def http_json(url: str, method: str = "GET", body: object = None, timeout: float = 30.0) -> tuple[int, Any]:
    """One request with the standard library (for checks, not for load), with the server's token."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if _TOKEN[0]:
        headers["Authorization"] = f"Bearer {_TOKEN[0]}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    ctype_json = raw[:1] in (b"{", b"[")
    return status, json.loads(raw) if ctype_json else raw.decode(errors="replace")
