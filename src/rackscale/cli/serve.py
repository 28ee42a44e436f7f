"""``rackscale serve``: the service (REST API, store, metrics, web page) on the simulated cluster or a backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackscale.cli.common import resolve_cluster
from rackscale.cli.output import err_console, fail

SERVICE_EXTRA = "pip install 'rackscale[service]'"


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
    racks: Annotated[int | None, typer.Option(help="Racks of the default NVL72 cluster.")] = None,
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
    policy: Annotated[str, typer.Option(help="Scheduler profile (see `rackscale schedule --help`).")] = "rackscale",
    gpus: Annotated[
        str | None, typer.Option(help="local backend: GPU indexes to use, e.g. 0,1,2,3 (default: NVML discovery).")
    ] = None,
    slurm_conf: Annotated[
        Path | None, typer.Option("--slurm-conf", help="slurm backend: the slurm.conf to use (default: $SLURM_CONF).")
    ] = None,
    stop_grace: Annotated[
        float, typer.Option("--stop-grace", help="local backend: seconds from SIGTERM to SIGKILL on cancel.", min=0)
    ] = 10.0,
) -> None:
    """Run rackscale as a service: REST API under /v1, /metrics, the web page at /, state in --data-dir.

    Examples:

      rackscale serve                                   # simulated 4-rack NVL72 cluster, http://127.0.0.1:8080
      rackscale serve --speed 60 --racks 16             # a minute of cluster time per second
      rackscale serve --backend local --gpus 0,1        # run jobs' commands on this machine's GPUs 0 and 1
      rackscale serve --host 0.0.0.0 --tokens tokens.yaml
    """
    try:
        import uvicorn

        from rackscale.service.app import ServiceConfig, ServiceConfigError, build_service, tune_process
        from rackscale.service.auth import TokenFileError
    except ImportError as e:
        fail(f"the service needs extra packages ({e.name} is missing): {SERVICE_EXTRA}")
    cl = resolve_cluster(cluster, racks) if (cluster is not None or racks is not None or backend == "sim") else None
    options: dict[str, object] = {"stop_grace_s": stop_grace}
    if slurm_conf is not None:
        options["slurm_conf"] = str(slurm_conf)
    if gpus is not None:
        try:
            options["gpus"] = [int(g) for g in gpus.split(",") if g.strip()]
        except ValueError:
            fail(f"--gpus takes comma-separated GPU indexes, e.g. 0,1,2,3 (got {gpus!r})")
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
    )
    try:
        svc = build_service(config)
    except (ServiceConfigError, TokenFileError) as e:
        fail(str(e))
    if tokens is None:
        err_console.print(
            "[bold yellow]WARNING: auth is OFF[/] (no --tokens file): anyone who can reach "
            f"{host}:{port} can submit and cancel jobs. Listening on loopback only.",
            highlight=False,
        )
    r = svc.recovered
    err_console.print(
        f"rackscale serving {svc.ctx.runner.live.cluster.name} ({svc.ctx.runner.live.cluster.total_gpus} GPUs, "
        f"backend {svc.ctx.backend}) on http://{host}:{port}  data: {data_dir}  "
        f"recovered {r['running']} running, {r['pending']} pending",
        highlight=False,
    )
    tune_process()
    try:
        uvicorn.run(svc.app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        svc.close()
