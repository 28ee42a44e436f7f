"""`rackscale serve` as a user starts it: a real process on a loopback port, with the default auth.

Without --tokens it generates an admin token, prints the page's URL with the token in the fragment, keeps
the token 0600 in the data dir and in this user's runtime dir, where the client verbs find it; nobody
without it can change anything. The runtime file goes when the service stops.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tests.deploy.engines import free_port
from tests.service.conftest import wait_for


def test_serve_generates_a_token_the_page_and_the_verbs_use(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "RACKSCALE_RUNTIME_DIR": str(tmp_path / "runtime")}
    for var in ("RACKSCALE_TOKEN", "RACKSCALE_SERVER", "RACKSCALE_CONFIG"):
        env.pop(var, None)
    rs = [sys.executable, "-m", "rackscale.cli.app"]
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*rs, "serve", "--port", str(port), "--data-dir", str(data), "--speed", "1000"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        lines: list[str] = []
        assert proc.stderr is not None
        while not any("#token=" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "serve ended early:\n" + "".join(lines)
            lines.append(line)
        token = re.search(r"/#token=(\S+)", "".join(lines))
        assert token is not None
        wait_for(lambda: _answers(url), timeout=20, what="the service to listen")
        runtime = tmp_path / "runtime" / f"loopback-{port}.token"
        for path in (runtime, data / "admin.token"):
            assert path.read_text().strip() == token[1] and path.stat().st_mode & 0o777 == 0o600, path
        assert (data / "rackscale.db").stat().st_mode & 0o077 == 0  # the umask: the store is the service's own

        assert httpx.post(f"{url}/v1/jobs", json={"name": "x", "kind": "batch"}).status_code == 401
        job = tmp_path / "job.yaml"
        job.write_text("name: train-1\nkind: training\ngpus: 8\n")
        for verb in (["submit", "-f", str(job)], ["get", "jobs"]):  # no token given: found in the runtime dir
            done = subprocess.run([*rs, *verb, "--server", url], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        assert "train-1" in done.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 5
    while runtime.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runtime.exists()  # the token of a stopped service is not left lying around
    assert (data / "admin.token").exists()  # but the service keeps it for its next start


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
