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


class PostgresServer:
    """A PostgreSQL server under ``root`` on a fixed port: :meth:`stop` and :meth:`start` again (a restart of
    the database under running services keeps its data, its port and so its URL)."""

    def __init__(self, root: Path) -> None:
        self.data, self.run, self.log = root / "pgdata", root / "pgrun", root / "postgres.log"
        self.run.mkdir(parents=True)
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(self.run, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        subprocess.run(
            [*self.as_user, _bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )
        self.port = free_port()  # the engines tests' helper
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:  # the server keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    *self.as_user,
                    _bin("postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.run),
                    "-c",
                    "fsync=off",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 30
        while True:
            # A session, not just a TCP connect: the server listens before it accepts sessions ("the database
            # system is starting up"), which made the first test after start-up fail now and then.
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=1
                ):
                    return
            except (OSError, psycopg.OperationalError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"PostgreSQL did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)

    def _processes(self) -> list[int]:
        """The postmaster and its children (the sessions, the checkpointer, ...)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
        return [postmaster, *(int(c) for c in children)]

    def freeze(self) -> None:
        """SIGSTOP every process of the server: connections stay open and nothing answers (a hung or
        partitioned database); :meth:`thaw` goes on."""
        for pid in self._processes():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self._processes():
            os.kill(pid, signal.SIGCONT)
        if self.as_user and self.proc is not None:  # runuser stops itself when its child stops (as su does)
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Fast shutdown (its sessions are ended): SIGINT to the postmaster itself, by the PID it wrote. As root
        ``proc`` is `runuser`, which does not pass the signal on (each module using the server then waited
        20 s before the kill)."""
        if self.proc is None:
            return
        try:
            os.kill(int((self.data / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        except (OSError, ValueError, IndexError):
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@contextmanager
def postgres_server(root: Path) -> Iterator[str]:
    """Start PostgreSQL under ``root``; yield a SQLAlchemy URL (psycopg driver) for its `postgres` DB."""
    server = PostgresServer(root)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


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
