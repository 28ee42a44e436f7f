"""A tiny Prometheus exporter for tests: serves, per path, exposition text the test sets and changes while
Prometheus scrapes it, shaped like the real exporters' (dcgm-exporter, node_exporter, blackbox_exporter).

Counters are served as ``rate x seconds since the exporter started``, so ``rate()`` over them is the rate set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# dcgm-exporter's labels on a GPU series: NVIDIA/dcgm-exporter README.md shows `gpu` and `UUID` (plus
# `container`, `namespace`, `pod` on Kubernetes); its expositions add `device`, `modelName`, `Hostname`.
DCGM_HELP = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"


def dcgm_gpu_util(host: str, percents: list[float]) -> str:
    """dcgm-exporter's DCGM_FI_DEV_GPU_UTIL (a gauge in percent, etc/default-counters.csv), one per GPU."""
    lines = [
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{host}-{i}",device="nvidia{i}",'
        f'modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"}} {p}'
        for i, p in enumerate(percents)
    ]
    return DCGM_HELP + "\n".join(lines) + "\n"


def probe(duration_s: float) -> str:
    """What blackbox_exporter's /probe answers: the probe's duration and whether it succeeded."""
    return (
        "# HELP probe_duration_seconds Returns how long the probe took to complete in seconds\n"
        "# TYPE probe_duration_seconds gauge\n"
        f"probe_duration_seconds {duration_s}\n"
        "# HELP probe_success Displays whether or not the probe was a success\n"
        "# TYPE probe_success gauge\n"
        "probe_success 1\n"
    )


@dataclass
class Exporter:
    """``bodies[path]`` is served at ``path`` (404 elsewhere); ``disk_rates[path]`` adds node_exporter-shaped
    disk counters there, growing at the given reads/s and writes/s."""

    url: str
    bodies: dict[str, str] = field(default_factory=dict)
    disk_rates: dict[str, tuple[float, float]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, path: str, body: str) -> None:
        with self.lock:
            self.bodies[path] = body

    def body(self, path: str) -> str | None:
        with self.lock:
            text = self.bodies.get(path)
            rates = self.disk_rates.get(path)
        if rates is None:
            return text
        elapsed = time.monotonic() - self.started
        reads, writes = rates
        disk = (
            "# HELP node_disk_reads_completed_total The total number of reads completed successfully.\n"
            "# TYPE node_disk_reads_completed_total counter\n"
            f'node_disk_reads_completed_total{{device="nvme0n1"}} {reads * elapsed}\n'
            "# HELP node_disk_writes_completed_total The total number of writes completed successfully.\n"
            "# TYPE node_disk_writes_completed_total counter\n"
            f'node_disk_writes_completed_total{{device="nvme0n1"}} {writes * elapsed}\n'
        )
        return (text or "") + disk


@contextmanager
def fake_exporter() -> Iterator[Exporter]:
    """The exporter on 127.0.0.1 (a free port), stopped on exit."""
    exporter = Exporter(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            text = exporter.body(self.path.split("?", 1)[0])
            payload = (text or "").encode()
            self.send_response(200 if text is not None else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="exporter", daemon=True)
    thread.start()
    exporter.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield exporter
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
