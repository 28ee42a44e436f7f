"""A small real model server for the LoadGen tests: a numpy MLP (256 -> 512 -> 512 -> 10, ReLU, softmax)
with fixed random weights, served over HTTP on 127.0.0.1 (stdlib ``ThreadingHTTPServer``, port 0).

- ``POST /predict`` ``{"inputs": [numbers...]}`` -> ``{"outputs": [10 probabilities]}``: the vector is
  resized to 256 numbers and run as a batch of ``rows`` perturbed copies (so one request is a real
  computation of a millisecond or so, not a sleep).
- ``POST /v1/completions`` ``{model, prompt, max_tokens}`` -> an OpenAI text completion: the prompt's bytes
  are the input; each of ``max_tokens`` tokens is the arg-max class of one forward pass, as a word.

``fail_every=N`` answers every Nth request with HTTP 500 (a failing server); ``GET /stats`` gives the
counts of requests served and failed, for the tests to compare with what the client counted.

:func:`serving` runs it in its own process (``python -m tests.loadgen.model_server``), as a real model
server runs: its handler threads then share no GIL with LoadGen's and the client's threads, and BLAS is held
to one thread (``OPENBLAS_NUM_THREADS=1``), because several BLAS threads per matmul on a small shared CPU
wait for each other far longer than a small matmul takes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import numpy as np

WORDS = ("rack", "gpu", "nvlink", "switch", "node", "queue", "gang", "slice", "fabric", "domain")
IN, HIDDEN, OUT = 256, 512, 10


class Mlp:
    def __init__(self, *, seed: int = 0, rows: int = 16) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = rng.standard_normal((IN, HIDDEN)).astype(np.float32) / np.sqrt(IN)
        self.w2 = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / np.sqrt(HIDDEN)
        self.w3 = rng.standard_normal((HIDDEN, OUT)).astype(np.float32) / np.sqrt(HIDDEN)
        self.noise = rng.standard_normal((rows, IN)).astype(np.float32) * 0.01
        # One forward pass at a time, as one accelerator runs one batch at a time: concurrent matmuls of
        # many handler threads would each start BLAS threads and thrash a small CPU.
        self._lock = threading.Lock()

    def forward(self, x: np.ndarray) -> np.ndarray:
        batch = np.resize(x.astype(np.float32), IN)[None, :] + self.noise
        with self._lock:
            h = np.maximum(batch @ self.w1, 0.0)
            h = np.maximum(h @ self.w2, 0.0)
            logits = (h @ self.w3).mean(axis=0)
        e = np.exp(logits - logits.max())
        return e / e.sum()


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, fail_every: int = 0, rows: int = 16) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model = Mlp(rows=rows)
        self.fail_every = fail_every
        self.lock = threading.Lock()
        self.requests = 0
        self.failed = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def should_fail(self) -> bool:
        with self.lock:
            self.requests += 1
            fail = self.fail_every > 0 and self.requests % self.fail_every == 0
            self.failed += fail
            return fail


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connections
    # Headers and body go out in two writes: with Nagle's algorithm the body then waits for the client's
    # delayed ACK (40 ms on Linux), which would be most of each request's latency.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would flood the test output."""

    def do_GET(self) -> None:
        if self.path != "/stats":
            return self._send(404, {"error": f"no route {self.path}"})
        with self.server.lock:
            return self._send(200, {"requests": self.server.requests, "failed": self.server.failed})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return self._send(400, {"error": "body is not JSON"})
        if self.server.should_fail():
            return self._send(500, {"error": "injected failure"})
        if self.path == "/predict":
            if not isinstance(body, dict) or not isinstance(body.get("inputs"), list) or not body["inputs"]:
                return self._send(400, {"error": "want {'inputs': [numbers]}"})
            try:
                x = np.asarray(body["inputs"], dtype=np.float32).ravel()
            except (TypeError, ValueError):
                return self._send(400, {"error": "inputs must be numbers"})
            return self._send(200, {"outputs": self.server.model.forward(x).round(6).tolist()})
        if self.path == "/v1/completions":
            if not isinstance(body, dict) or not isinstance(body.get("prompt"), str) or not body.get("model"):
                return self._send(400, {"error": "want {model, prompt, max_tokens}"})
            tokens = max(1, min(int(body.get("max_tokens") or 16), 64))
            x = np.frombuffer(body["prompt"].encode()[:IN].ljust(IN, b" "), dtype=np.uint8) / 255.0
            words = []
            for t in range(tokens):
                p = self.server.model.forward(np.roll(x, t))
                words.append(WORDS[int(p.argmax())])
            text = " " + " ".join(words)
            usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": tokens}
            return self._send(
                200,
                {
                    "id": "cmpl-test",
                    "object": "text_completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": usage,
                },
            )
        return self._send(404, {"error": f"no route {self.path}"})

    def _send(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """The server process, seen from the tests."""

    base_url: str

    def stats(self) -> dict[str, int]:
        with urlopen(self.base_url + "/stats", timeout=5) as r:
            return dict(json.load(r))


@contextmanager
def serving(*, fail_every: int = 0, rows: int = 16) -> Iterator[Served]:
    """A server process on a free port of 127.0.0.1, stopped on exit."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "tests.loadgen.model_server", "--fail-every", str(fail_every), "--rows", str(rows)]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the model server did not start (said {line!r}, exit {proc.poll()})")
        yield Served(base_url=f"http://127.0.0.1:{int(line.split()[1])}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    server = ModelServer(fail_every=args.fail_every, rows=args.rows)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
