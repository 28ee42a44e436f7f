"""Putting the service together: store, live cluster, backend, runner, metrics and the FastAPI app."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request

from rackscale.backends.base import Backend
from rackscale.model.errors import RackscaleError
from rackscale.model.topology import GPUCluster
from rackscale.service.api import DEFAULT_MAX_BODY, ServiceContext, create_app
from rackscale.service.auth import TokenTable, generated_admin_token
from rackscale.service.clock import ServiceClock
from rackscale.service.guard import allowed_hosts, is_loopback
from rackscale.service.leader import Elector, HighAvailability, LeaderCollector, LeaseTiming, Role
from rackscale.service.live import LiveCluster
from rackscale.service.load_signal import LiveAutoscaler, PrometheusSource
from rackscale.service.metrics import Metrics
from rackscale.service.runner import Runner
from rackscale.service.storage_task import StorageCollector, StorageTask, StorageTaskConfig
from rackscale.service.store import Store

log = logging.getLogger("rackscale.service")

# A backend factory: given the cluster the service was started with (None: the backend finds its own),
# return the backend and the cluster it drives.
BackendFactory = Callable[[GPUCluster | None], tuple[Backend, GPUCluster]]


class ServiceConfigError(RackscaleError, ValueError):
    pass


@dataclass(slots=True)
class ServiceConfig:
    data_dir: Path
    cluster: GPUCluster | None = None
    backend: str = "sim"
    backend_options: dict[str, object] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8080
    speed: float = 1.0
    tokens_file: Path | None = None
    db_url: str | None = None  # default: SQLite in data_dir
    durability: str = "normal"  # SQLite synchronous: normal (survives a process crash) or full (fsync per commit)
    policy: str = "rackscale"
    max_body_bytes: int = DEFAULT_MAX_BODY
    interval_s: float = 0.05
    max_busy: float = 0.5  # the most of the wall clock the runner's steps take (Runner.max_busy)
    # Without tokens_file: a random admin token is generated (kept 0600 in data_dir) unless no_auth.
    no_auth: bool = False
    allowed_hosts: tuple[str, ...] = ()  # Host header values accepted besides loopback names and `host`
    docs: bool = False  # /docs and /redoc (their scripts come from a CDN)
    init_store: bool = False  # replace an empty or corrupt store instead of refusing to start
    prometheus_url: str | None = None  # where services' autoscale.query is read (None: they hold their size)
    storage: StorageTaskConfig | None = None  # the periodic storage lifecycle (docs/storage.md)
    # High availability (docs/high-availability.md): replicas on one PostgreSQL, one leading at a time.
    ha: bool = False
    replica_id: str | None = None  # default: the host name (a StatefulSet's pod name)
    lease_seconds: float = 5.0


@dataclass(slots=True)
class Service:
    config: ServiceConfig
    app: FastAPI
    ctx: ServiceContext
    recovered: dict[str, int]
    admin_token: str | None = None  # the generated one (no token file, auth on); None otherwise
    storage_task: StorageTask | None = None
    ha: HighAvailability | None = None

    def close(self) -> None:
        if self.storage_task is not None:
            self.storage_task.stop()
        if self.ha is not None:
            self.ha.stop()  # releases the lease: a standby takes over at its next try
        self.ctx.runner.stop()
        self.ctx.store.close()


def tune_process() -> None:
    """Process-wide settings for a service process (called by `rackscale serve`, not by the library).

    Measured with `rackscale bench service --rate 1000` (docs/benchmarks.md, "Service load and crash"):
    - GIL switch interval 1 ms instead of 5 ms: the store's writer thread gives up the GIL around every
      SQLite call and, with the event loop busy, waited up to 5 ms to get it back each time; batches of a
      few rows took 40-50 ms.
    - Garbage collection: the objects alive after start-up (the cluster model, recovered jobs) are frozen
      out of collections, and gen-0 runs every 50,000 allocations instead of 700: full collections of the
      growing queue took 60-120 ms each and stalled every request in flight.
    """
    import gc
    import sys

    sys.setswitchinterval(0.001)
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def make_backend(config: ServiceConfig) -> tuple[Backend, GPUCluster]:
    if config.backend == "sim":
        from rackscale.backends.sim import SimBackend

        cluster = config.cluster or GPUCluster.uniform(name="nvl72-x4", racks_per_region=4)
        return SimBackend(cluster), cluster
    if config.backend == "local":
        from rackscale.backends.local import LocalBackendError, make_local_backend

        try:
            return make_local_backend(config.data_dir, config.cluster, config.backend_options)
        except LocalBackendError as e:
            raise ServiceConfigError(str(e)) from e
    if config.backend == "slurm":
        from rackscale.backends.slurm import SlurmBackendError, make_slurm_backend

        try:
            return make_slurm_backend(config.data_dir, config.cluster, config.backend_options)
        except SlurmBackendError as e:
            raise ServiceConfigError(str(e)) from e
    raise ServiceConfigError(f"unknown backend {config.backend!r} (use sim, local or slurm)")


def open_store(url: str, *, synchronous: str, init: bool = False, idle_in_transaction_s: float | None = None) -> Store:
    """The store, or a ServiceConfigError that says what is wrong with it (never a driver traceback). A SQLite
    file that is empty, truncated, corrupt or not a database is refused, or with ``init`` kept aside as
    FILE.broken-<UTC time> for a new store; a database that is not rackscale's is refused either way."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from rackscale.service.store import BrokenStore, check_store_file

    shown = url.split("@")[-1] if "@" in url else url  # no password in messages
    try:
        moved = check_store_file(url, replace=init)
    except BrokenStore as e:
        raise ServiceConfigError(str(e)) from e
    except OSError as e:
        raise ServiceConfigError(f"cannot move the broken store at {shown} aside: {e} (fix: move it by hand)") from e
    if moved is not None:
        log.warning("%s", moved)
    try:
        return Store(url, synchronous=synchronous, idle_in_transaction_s=idle_in_transaction_s)
    except ModuleNotFoundError as e:
        raise ServiceConfigError(
            f"the database driver {e.name!r} for {shown} is not installed (PostgreSQL: pip install "
            "'rackscale[postgres]')"
        ) from e
    except ArgumentError as e:
        raise ServiceConfigError(f"--db-url is not a database URL SQLAlchemy knows: {e}") from e
    except SQLAlchemyError as e:
        reason = str(getattr(e, "orig", e)).strip().splitlines()[0]
        hint = (
            "the file is not a rackscale store: point --data-dir elsewhere, or move the file away"
            if "not a database" in reason
            else "check that the database server runs and the URL, user and database are right"
            if not url.startswith("sqlite")
            else "check the data directory's permissions and free space"
        )
        raise ServiceConfigError(f"cannot open the store at {shown}: {reason} (fix: {hint})") from e


def refuse_orphans(store: Store, backend: Backend) -> None:
    """Never adopt-and-stop on a new store: a store created at this start (or holding no job) while the
    backend still runs jobs it started for an earlier store is a lost or replaced store, not a fresh cluster.
    (With --init the caller skips this, and ``adopt`` stops them.)"""
    from rackscale.backends.base import orphans

    if not store.is_new():
        return
    left = orphans(backend)
    if left:
        shown = ", ".join(left[:3]) + (", ..." if len(left) > 3 else "")
        raise ServiceConfigError(
            f"the store in {store.location} is new but the {backend.name} backend still runs {len(left)} job(s) "
            f"from an earlier store ({shown}): restore the store, or pass --init to stop them"
        )


def build_service(config: ServiceConfig, *, start: bool = True) -> Service:
    """Everything but the HTTP server. Raises ServiceConfigError with a message a user can act on."""
    if not 0.0 < config.max_busy <= 1.0:
        raise ServiceConfigError(f"--cycle-max-busy must be in (0, 1], not {config.max_busy} (1: steps back to back)")
    tokens = TokenTable.load(config.tokens_file) if config.tokens_file is not None else None
    if tokens is None and not is_loopback(config.host):
        raise ServiceConfigError(
            f"refusing to listen on {config.host} without a token file: give --tokens FILE (see "
            "docs/security.md), or bind to 127.0.0.1"
        )
    if tokens is not None and config.no_auth:
        raise ServiceConfigError("--no-auth and --tokens contradict each other: give one of them")
    if config.durability not in ("normal", "full"):
        raise ServiceConfigError(f"--durability must be normal or full (got {config.durability!r})")
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ServiceConfigError(
            f"cannot create the data directory {config.data_dir}: {e.strerror} "
            "(fix: pass --data-dir with a writable path)"
        ) from e
    url = config.db_url or f"sqlite:///{config.data_dir / 'rackscale.db'}"
    # Replicas: a frozen leader's open transaction must not hold the lease row for longer than half a lease.
    replicas = config.ha or config.replica_id is not None
    store = open_store(
        url,
        synchronous=config.durability.upper(),
        init=config.init_store,
        idle_in_transaction_s=config.lease_seconds / 2 if replicas else None,
    )
    backend, cluster = make_backend(config)
    if not config.init_store:
        try:
            refuse_orphans(store, backend)
        except ServiceConfigError:
            backend.close()
            store.close()
            raise
    clock = ServiceClock(speed=config.speed, resume_from=store.latest_time())
    live = LiveCluster(cluster, policy=config.policy)
    metrics = Metrics()
    autoscaler = LiveAutoscaler(source=PrometheusSource(config.prometheus_url)) if config.prometheus_url else None
    runner = Runner(
        live,
        store,
        backend,
        clock,
        observer=metrics,
        interval_s=config.interval_s,
        autoscaler=autoscaler,
        max_busy=config.max_busy,
    )
    metrics.attach(runner)
    storage_task = StorageTask(config.storage) if config.storage is not None else None
    if storage_task is not None:
        metrics.registry.register(StorageCollector(storage_task))
    try:
        ha = _high_availability(config, store, runner, cluster)
    except ServiceConfigError:
        backend.close()
        store.close()
        raise
    if ha is not None:
        metrics.registry.register(LeaderCollector(ha))
    recovered = runner.recover() if ha is None else {}  # a replica recovers when it takes the lease
    admin_token: str | None = None
    if tokens is None and not config.no_auth:
        # Safe by default: no request may change anything without this token (Jupyter's way).
        admin_token, _ = generated_admin_token(config.data_dir)
        tokens = TokenTable.single_admin(admin_token)
    ctx = ServiceContext(
        store=store,
        runner=runner,
        backend=backend.name,
        tokens=tokens,
        max_body_bytes=config.max_body_bytes,
        metrics=metrics,
        allowed_hosts=allowed_hosts(config.host, config.allowed_hosts),
        docs=config.docs,
    )
    app = create_app(ctx)
    _mount_leader(app, ctx, ha)
    if start:
        if ha is not None:
            ha.start()
        else:
            runner.start()
        if storage_task is not None:
            storage_task.start()
    return Service(config, app, ctx, recovered, admin_token, storage_task, ha)


def _high_availability(
    config: ServiceConfig, store: Store, runner: Runner, cluster: GPUCluster
) -> HighAvailability | None:
    """The election of a replica (``--ha`` or ``--replica-id``), None for a single service."""
    from rackscale.service.store.lease import supports_lease

    if not config.ha and config.replica_id is None:
        return None
    if not supports_lease(store.engine):
        raise ServiceConfigError(
            "--ha needs a PostgreSQL store (--db-url postgresql+psycopg://...): a SQLite store has one writer, "
            "so one replica (docs/high-availability.md)"
        )
    if not 1.0 <= config.lease_seconds <= 600.0:
        raise ServiceConfigError(f"--lease-seconds must be between 1 and 600 (got {config.lease_seconds})")
    import socket

    # An explicit id is taken as given: an empty one is refused (it once became the host name silently, so
    # two replicas on one host given an empty variable shared an id). Printable, without blanks at its ends:
    # the id is in every log line about the election, and a newline in it forged such lines.
    replica = socket.gethostname() if config.replica_id is None else config.replica_id
    if not 1 <= len(replica) <= 253 or not replica.isprintable() or replica != replica.strip():
        raise ServiceConfigError(
            f"--replica-id must be 1 to 253 printable characters, without blanks at either end (got {replica[:80]!r}): "
            "give each replica its own, e.g. the pod name"
        )
    timing = LeaseTiming(lease_s=config.lease_seconds, renew_s=max(0.2, config.lease_seconds / 5))
    elector = Elector(store.engine, replica=replica, timing=timing)
    return HighAvailability(
        store=store,
        runner=runner,
        elector=elector,
        speed=config.speed,
        new_live=lambda: LiveCluster(cluster, policy=config.policy),
    )


def _mount_leader(app: FastAPI, ctx: ServiceContext, ha: HighAvailability | None) -> None:
    """``GET /v1/leader``: this replica's role, who leads and at which generation (a single service: itself)."""
    from rackscale.service.context import authenticate  # (Request: at module level, for FastAPI's annotations)

    @app.get("/v1/leader", include_in_schema=False)
    async def leader(request: Request) -> dict[str, object]:
        authenticate(ctx, request.headers.get("authorization"))
        if ha is None:
            return {"replica": None, "role": Role.LEADER.value, "holder": None, "generation": None}
        return ha.status()
