"""``rackscale serve``: the service (REST API, store, metrics, web page) on the simulated cluster or a backend."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from rackscale.cli.common import POLICY_HELP, RACKS_HELP, check_policy, resolve_cluster, with_profiles
from rackscale.cli.output import err_console, fail, printable

SERVICE_EXTRA = "pip install 'rackscale[service]'"


@with_profiles
def serve(
    port: Annotated[int, typer.Option(help="TCP port to listen on.", min=0, max=65535)] = 8080,
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but loopback needs --tokens (auth).")
    ] = "127.0.0.1",
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="Where the SQLite store (and local-backend logs) live.")
    ] = Path("./rackscale-data"),
    backend: Annotated[
        str,
        typer.Option(
            help="sim: the simulated cluster (default); local: run each job's command here; slurm: sbatch each "
            "placement to a running Slurm (its nodes are imported unless --cluster is given; docs/slurm.md)."
        ),
    ] = "sim",
    cluster: Annotated[
        Path | None, typer.Option("--cluster", "-c", help="Cluster spec (YAML/JSON). Default: 4 NVL72 racks.")
    ] = None,
    racks: Annotated[int | None, typer.Option(help=RACKS_HELP)] = None,
    speed: Annotated[
        float, typer.Option(help="Run the service clock this many times faster than the wall clock (sim).", min=0.001)
    ] = 1.0,
    tokens: Annotated[
        Path | None, typer.Option("--tokens", help="Bearer-token file (YAML). Without it auth is off (loopback only).")
    ] = None,
    db_url: Annotated[
        str | None, typer.Option("--db-url", help="SQLAlchemy URL instead of SQLite in --data-dir (e.g. PostgreSQL).")
    ] = None,
    durability: Annotated[
        str, typer.Option(help="SQLite sync: normal (survives a crash of the service) or full (fsync every commit).")
    ] = "normal",
    policy: Annotated[str, typer.Option(help=POLICY_HELP)] = "rackscale",
    gpus: Annotated[
        str | None, typer.Option(help="local backend: GPU indexes to use, e.g. 0,1,2,3 (default: NVML discovery).")
    ] = None,
    slurm_conf: Annotated[
        Path | None, typer.Option("--slurm-conf", help="slurm backend: the slurm.conf to use (default: $SLURM_CONF).")
    ] = None,
    stop_grace: Annotated[
        float, typer.Option("--stop-grace", help="local backend: seconds from SIGTERM to SIGKILL on cancel.", min=0)
    ] = 10.0,
    run_as: Annotated[
        str | None,
        typer.Option(
            "--run-as",
            metavar="USER",
            help="local backend: the unprivileged user jobs run as (default: rackscale-job if it exists, else "
            "nobody; needs the service to run as root).",
        ),
    ] = None,
    allow_root_jobs: Annotated[
        bool, typer.Option("--allow-root-jobs", help="local backend: allow jobs to run as root (unsafe).")
    ] = False,
    max_log_bytes: Annotated[
        int,
        typer.Option(
            "--max-log-bytes",
            metavar="N",
            help="local backend: cap on each job's log; the excess is dropped.",
            min=4096,
        ),
    ] = 64 * 1024 * 1024,
    health_command: Annotated[
        str | None,
        typer.Option(
            "--health-command",
            metavar="'PATH ARGS'",
            help="local backend: the node's health check, run (no shell) every --health-interval: exit 0 is "
            "healthy; otherwise the node fails with its first output line, or only GPU N for a line 'gpu N: "
            "REASON'. Killed (and failed) after --health-timeout.",
        ),
    ] = None,
    health_interval: Annotated[
        float, typer.Option("--health-interval", help="local backend: seconds between health reads.", min=0)
    ] = 30.0,
    health_timeout: Annotated[
        float, typer.Option("--health-timeout", help="local backend: seconds a health command may run.", min=0)
    ] = 10.0,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Turn auth off (loopback only): any local process or web page may then submit commands. "
            "Without --tokens, a random admin token is generated instead.",
        ),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="Host header value to accept besides loopback names and --host (repeatable; e.g. the DNS name "
            "of a TLS proxy in front).",
        ),
    ] = None,
    docs: Annotated[
        bool, typer.Option("--docs/--no-docs", help="Serve the interactive API docs at /docs (from a CDN).")
    ] = False,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            "--prometheus-url",
            metavar="URL",
            help="Prometheus to read inference services' load from (their autoscale.query), e.g. "
            "http://127.0.0.1:9090; without it a service with a query holds its size.",
        ),
    ] = None,
    storage_lifecycle: Annotated[
        Path | None,
        typer.Option(
            "--storage-lifecycle",
            metavar="FILE",
            help="Run the storage lifecycle (the plan's storage-lifecycle ConfigMap) every --storage-every on the "
            "--tier folders (docs/storage.md).",
        ),
    ] = None,
    tier: Annotated[
        list[str] | None,
        typer.Option(
            "--tier",
            metavar="TIER=PATH",
            help="With --storage-lifecycle: hot=PATH, warm=PATH, cold=PATH (--backend local: each job gets "
            "RACKSCALE_CHECKPOINT_DIR=<hot>/checkpoints/<job>).",
        ),
    ] = None,
    storage_every: Annotated[
        str, typer.Option("--storage-every", metavar="DURATION", help="Time between lifecycle runs, e.g. 1h, 30m.")
    ] = "1h",
    storage_include: Annotated[
        list[str] | None,
        typer.Option("--storage-include", metavar="FOLDER", help="Folders managed besides checkpoints/ (repeatable)."),
    ] = None,
    ha: Annotated[
        bool,
        typer.Option(
            "--ha",
            help="Run as one replica of a highly available service on a PostgreSQL --db-url: one replica leads "
            "(the cycle, the backend), the others serve and take submissions (docs/high-availability.md).",
        ),
    ] = False,
    replica_id: Annotated[
        str | None,
        typer.Option(
            "--replica-id",
            metavar="ID",
            help="This replica's name in the election (implies --ha; default: the host name).",
        ),
    ] = None,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            help="--ha: how long a leader's lease lasts (a standby takes over this long after the leader dies).",
            min=1.0,
            max=600.0,
        ),
    ] = 5.0,
    cycle_max_busy: Annotated[
        float,
        typer.Option(
            "--cycle-max-busy",
            help="The most of the wall clock the scheduling steps may take (0-1]: after a step whose cycle took d "
            "seconds the runner rests d*(1-x)/x, so a big backlog's long cycles leave the API the rest (1: unpaced).",
            min=0.05,
            max=1.0,
        ),
    ] = 0.5,
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Start a new store when the one in --data-dir is empty or corrupt (the broken file is kept "
            "beside it); without it such a store refuses to start.",
        ),
    ] = False,
) -> None:
    """Run rackscale as a service: REST API under /v1, /metrics, the web page at /, state in --data-dir.

    Examples:

      rackscale serve                                   # simulated 4-rack NVL72 cluster, http://127.0.0.1:8080
      rackscale serve --speed 60 --racks 16             # a minute of cluster time per second
      rackscale serve --backend local --gpus 0,1        # run jobs' commands on this machine's GPUs 0 and 1
      rackscale serve --host 0.0.0.0 --tokens tokens.yaml --allowed-host sched.example.com
      rackscale serve --backend local --run-as rackscale-job --max-log-bytes 16777216
      rackscale serve --backend local --health-command '/usr/local/bin/gpu-check --quick'
      rackscale serve --prometheus-url http://127.0.0.1:9090   # services scale on their autoscale.query
      rackscale serve --db-url postgresql+psycopg://rackscale@db/rackscale --replica-id a --tokens tokens.yaml
          # one of several replicas: the first to take the lease leads (docs/high-availability.md)
      rackscale serve --storage-lifecycle storage-lifecycle.yaml --tier hot=/nvme/hot --tier warm=/ssd/warm \
          --tier cold=/hdd/cold --storage-every 1h   # checkpoints move hot -> warm -> cold by age

    Profiles (--policy):

      {profiles}

    Without --tokens a random admin token is generated: printed once as the page's URL, kept 0600 in
    --data-dir, and found by this user's client verbs (docs/security.md). --no-auth turns auth off.
    """
    try:
        import uvicorn

        from rackscale.cli.runtime import remove_token, write_token
        from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service, tune_process
        from rackscale.service.auth import ADMIN_TOKEN_FILE, TokenFileError
        from rackscale.service.http import server_config
    except ImportError as e:
        fail(f"the service needs extra packages ({e.name} is missing): {SERVICE_EXTRA}")
    check_policy(policy)  # before anything starts: one line, not the scheduler's traceback
    cl = resolve_cluster(cluster, racks) if (cluster is not None or racks is not None or backend == "sim") else None
    options: dict[str, object] = {
        "stop_grace_s": stop_grace,
        "allow_root_jobs": allow_root_jobs,
        "max_log_bytes": max_log_bytes,
        "health_interval_s": health_interval,
        "health_timeout_s": health_timeout,
    }
    if health_command is not None:
        if backend != "local":
            fail(f"--health-command is for --backend local (the {backend} backend reads its own node health)")
        options["health_command"] = health_command
    if run_as is not None:
        options["run_as"] = run_as
    if slurm_conf is not None:
        options["slurm_conf"] = str(slurm_conf)
    if gpus is not None:
        try:
            options["gpus"] = [int(g) for g in gpus.split(",") if g.strip()]
        except ValueError:
            fail(f"--gpus takes comma-separated GPU indexes, e.g. 0,1,2,3 (got {gpus!r})")
    if prometheus_url is not None and not _http_url(prometheus_url):
        fail(
            "--prometheus-url must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:9090 "
            f"(got {prometheus_url!r})"
        )
    storage = None
    if storage_lifecycle is not None:
        from rackscale.service.storage_task import task_config

        try:
            storage = task_config(
                config_file=storage_lifecycle, tiers=tier or (), every=storage_every, include=storage_include or ()
            )
        except ValueError as e:
            fail(str(e))
        if backend == "local":  # jobs write their checkpoints where the lifecycle looks: <hot>/checkpoints/<job>
            from rackscale.storage.config import Tier

            options["checkpoint_root"] = str(storage.roots[Tier.HOT])
    elif tier:
        fail("--tier is for the storage lifecycle: give --storage-lifecycle FILE too (docs/storage.md)")
    config = ServiceConfig(
        data_dir=data_dir,
        cluster=cl,
        backend=backend,
        backend_options=options,
        host=host,
        port=port,
        speed=speed,
        tokens_file=tokens,
        db_url=db_url,
        durability=durability,
        policy=policy,
        no_auth=no_auth,
        allowed_hosts=tuple(allowed_host or ()),
        docs=docs,
        init_store=init,
        prometheus_url=prometheus_url,
        storage=storage,
        ha=ha,
        replica_id=replica_id,
        lease_seconds=lease_seconds,
        max_busy=cycle_max_busy,
    )
    umask = os.umask(0o077)  # the store, the generated token and logs: readable by the service user only
    try:
        svc = build_service(config)
    except (ServiceConfigError, TokenFileError) as e:
        os.umask(umask)  # nothing is served: leave the process as it was (tests call serve in-process)
        fail(str(e))
    for warning in svc.ctx.tokens.warnings if svc.ctx.tokens is not None else ():
        err_console.print(Text.assemble(("WARNING:", "bold yellow"), " ", printable(warning)), highlight=False)
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{port}"
    if no_auth:
        err_console.print(
            "[bold yellow]WARNING: auth is OFF[/] (--no-auth): any process or web page on this machine that can "
            f"reach {host}:{port} can submit and cancel jobs. Listening on loopback only.",
            highlight=False,
        )
    r = svc.recovered
    recovered = (
        f"replica {svc.ha.elector.replica}: recovers the store when it takes the lease"
        if svc.ha is not None
        else f"recovered {r['running']} running, {r['pending']} pending"
    )
    err_console.print(
        f"rackscale serving {svc.ctx.runner.live.cluster.name} ({svc.ctx.runner.live.cluster.total_gpus} GPUs, "
        f"backend {svc.ctx.backend}) on {url}  data: {data_dir}  {recovered}",
        highlight=False,
    )
    token_file = None
    if svc.admin_token is not None:
        token_file = write_token(port, svc.admin_token)
        # The page reads the token from the URL's fragment, which the browser never sends to a server.
        err_console.print(
            f"admin token generated (kept in {data_dir / ADMIN_TOKEN_FILE}; the client verbs of this user find it "
            f"in {token_file}). Open the page at:\n    {url}/#token={svc.admin_token}",
            highlight=False,
        )
    tune_process()
    try:
        uvicorn.Server(server_config(svc.app, host=host, port=port)).run()
    finally:
        svc.close()
        if token_file is not None and svc.admin_token is not None:
            remove_token(port, svc.admin_token)


def _http_url(text: str) -> bool:
    """An http(s) URL with a host and nothing a terminal or a log would mangle."""
    from urllib.parse import urlsplit

    if len(text) > 2048 or not text.isprintable():
        return False
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
