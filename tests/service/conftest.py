"""Fixtures: the real service (FastAPI app, SQLite store, runner thread) on a loopback port, in-process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from rackscale.model.topology import GPUCluster
from rackscale.service.app import Service, ServiceConfig, build_service
from rackscale.service.http import server_config


class _Admin:
    """The default of ``client(token=...)``: the service's generated admin token (None with --no-auth)."""


ADMIN = _Admin()


@dataclass
class LiveService:
    url: str
    svc: Service
    data_dir: Path

    @property
    def admin_token(self) -> str | None:
        return self.svc.admin_token

    def client(self, token: str | _Admin | None = ADMIN) -> httpx.Client:
        """A client with ``token`` (default: the generated admin token; None: no Authorization header)."""
        if isinstance(token, _Admin):
            token = self.svc.admin_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


def wait_for(pred: Callable[[], object], *, timeout: float = 10.0, what: str = "condition") -> object:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@contextmanager
def serve_in_thread(config: ServiceConfig) -> Iterator[LiveService]:
    svc = build_service(config)
    server = uvicorn.Server(server_config(svc.app, host="127.0.0.1", port=0, lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=15, what="uvicorn to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield LiveService(f"http://127.0.0.1:{port}", svc, config.data_dir)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        svc.close()


def small_cluster(racks: int = 2) -> GPUCluster:
    """``racks`` NVL72 racks in one region (72 GPUs each: 18 nodes x 4)."""
    return GPUCluster.uniform(name=f"test-x{racks}", racks_per_region=racks)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LiveService]:
    """The service on 2 NVL72 racks, the default auth (a generated admin token, which ``client()`` sends),
    the clock 1000x the wall clock (a 1 h job takes 3.6 s)."""
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        yield live


class HandClock:
    """The service clock, moved by the test (``clock.t = ...``)."""

    speed = 1.0

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t
