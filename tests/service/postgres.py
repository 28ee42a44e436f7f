"""A real PostgreSQL server for tests: initdb in a temp dir, listening on 127.0.0.1 only, stopped by PID.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` system user (the Debian
package creates it). The binaries come from Debian's `postgresql` package (see .ci/run).

The fixtures :func:`pg_url` (one server per module) and :func:`pg_store` (a store on it, emptied per test)
are the ones the PostgreSQL test modules share: import them there (``from tests.service.postgres import
pg_store, pg_url``); a module-scoped fixture imported into a module starts its own server for that module.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.deploy.engines import free_port

from rackscale.service.store import Store

INSTALL_HINT = "install Debian's postgresql package (apt-get install postgresql) and psycopg[binary]"

try:
    import psycopg  # the dev extras install it (rackscale[postgres])
except ImportError as e:  # a collection error that says what to install, not a bare ModuleNotFoundError
    raise ImportError(f"psycopg is missing: {INSTALL_HINT}") from e


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise AssertionError(f"PostgreSQL's {name} is missing: {INSTALL_HINT}")
    return found[-1]


@contextmanager
def postgres_server(root: Path) -> Iterator[str]:
    """Start PostgreSQL under ``root``; yield a SQLAlchemy URL (psycopg driver) for its `postgres` DB."""
    data, run = root / "pgdata", root / "pgrun"
    run.mkdir(parents=True)
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(run, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_user, _bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    port = free_port()  # the engines tests' helper
    log = root / "postgres.log"
    proc = subprocess.Popen(
        [
            *as_user,
            _bin("postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
            "-k",
            str(run),
            "-c",
            "fsync=off",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115 - the server owns it until it stops
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            # A session, not just a TCP connect: the server listens before it accepts sessions ("the database
            # system is starting up"), which made the first test after start-up fail now and then.
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=1
                ):
                    break
            except (OSError, psycopg.OperationalError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"PostgreSQL did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        # Fast shutdown: SIGINT to the postmaster itself, by the PID it wrote. As root ``proc`` is `runuser`,
        # which does not pass the signal on (each module using the server then waited 20 s before the kill).
        try:
            os.kill(int((data / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        except (OSError, ValueError, IndexError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A PostgreSQL server for the module: the URL of its `postgres` database."""
    # Not under pytest's tmp dir: as root, the server runs as `postgres`, which cannot enter root's 0700 dirs.
    root = Path(tempfile.mkdtemp(prefix="rackscale-pg-"))
    try:
        with postgres_server(root) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A store on the module's server, every table emptied first (the server is shared by the module)."""
    store = Store(pg_url)
    with store.engine.begin() as c:
        c.exec_driver_sql("TRUNCATE jobs, events, meta, leader_lease RESTART IDENTITY")
    yield store
    store.close()
