"""``rackscale kube-scheduler``: rackscale as a Kubernetes secondary scheduler (needs the ``kube`` extra)."""

from __future__ import annotations

import logging
import math
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rackscale.cli.output import fail

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

KUBE_EXTRA = "pip install 'rackscale[kube]'"


def kube_scheduler(
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config).")
    ] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context to use.")] = None,
    scheduler_name: Annotated[
        str, typer.Option("--scheduler-name", help="Schedule the pods whose spec.schedulerName is this.")
    ] = "rackscale",
    rack_label: Annotated[str, typer.Option(help="Node label naming the NVLink domain (rack).")] = (
        "nvidia.com/gpu.clique"
    ),
    region_label: Annotated[str, typer.Option(help="Node label naming the region.")] = "topology.kubernetes.io/region",
    gpu_resource: Annotated[str, typer.Option(help="Extended resource counting GPUs.")] = "nvidia.com/gpu",
    policy: Annotated[
        str,
        typer.Option(
            help="Scheduler profile (see `rackscale schedule --help`); its loans and elastic gangs are off here, and "
            "its preemption between equal priorities unless --las-preemption (docs/kubernetes.md)."
        ),
    ] = "rackscale",
    preemption: Annotated[
        bool,
        typer.Option(
            help="Let a waiting gang delete the pods of lower-priority gangs it needs the GPUs of, each with its "
            "grace period (as kube-scheduler's preemption); --no-preemption: it waits."
        ),
    ] = True,
    las_preemption: Annotated[
        bool,
        typer.Option(
            help="Off by default. Let a waiting gang delete the pods of a running gang of the same priority that has "
            "had more GPU time (least attained service, the profile's las-victims: bounded by a minimum run and the "
            "work it loses), each with its grace period; the gangs' earlier service is kept in the ConfigMap "
            "<lease name>-attained-service of the lease namespace (docs/kubernetes.md)."
        ),
    ] = False,
    leader_elect: Annotated[bool, typer.Option(help="Elect a leader through a Lease (run several replicas).")] = True,
    lease_name: Annotated[str | None, typer.Option(help="Lease name (default: the scheduler name).")] = None,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease.")] = "kube-system",
    identity: Annotated[str | None, typer.Option(help="This replica's identity in the Lease (default: host).")] = None,
    lease_duration: Annotated[float, typer.Option(help="Seconds a Lease holds without renewal.", min=1)] = 15.0,
    renew_interval: Annotated[float, typer.Option(help="Seconds between Lease renewals.", min=0.1)] = 2.0,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Settings file (YAML: schedulerName, labels, gpuResource, leaderElection); "
            "its values replace the flags' defaults (deploy/kubernetes/scheduler-config.yaml).",
        ),
    ] = None,
    price_per_gpu_hour: Annotated[
        float | None,
        typer.Option(
            help="Price of one GPU-hour (your currency): /metrics then exports rackscale_cost_per_hour, the nodes' "
            "GPUs x this, as serve's from its cluster spec. Without it, no cost series.",
            min=0,
        ),
    ] = None,
    health_port: Annotated[
        int,
        typer.Option(help="Serve /healthz, /readyz and /metrics (Prometheus) on this port (0: off).", min=0, max=65535),
    ] = 0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every bind and cycle.")] = False,
    schedule_files: Annotated[
        list[str] | None,
        typer.Option(
            "--schedule",
            metavar="FILE",
            help="ScalingSchedule file: scale its Deployments on the wall clock (repeatable; the leader acts).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Schedule pods with spec.schedulerName=rackscale onto the NVLink domains their nodes' labels describe.

    Pods annotated rackscale.io/pod-group=NAME and rackscale.io/min-member=N are placed as one gang, all or
    nothing, in as few racks as possible. See docs/kubernetes.md.

    Examples:

      rackscale kube-scheduler --kubeconfig ~/.kube/config --scheduler-name rackscale
      rackscale kube-scheduler --rack-label example.com/nvlink-domain --no-leader-elect
      rackscale kube-scheduler --policy first-fit --no-preemption
      rackscale kube-scheduler --las-preemption
      rackscale kube-scheduler --schedule examples/schedule-training-nights.yaml
    """
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        from rackscale.cli.kube_metrics import kube_registry  # prometheus_client: the same extra
        from rackscale.kube.cluster import LabelKeys
        from rackscale.kube.scheduler import KubeScheduler, KubeSchedulerConfig
    except ImportError as e:
        fail(f"the Kubernetes scheduler needs the kubernetes and prometheus clients ({e}); install: {KUBE_EXTRA}")
    from rackscale.kube.mechanisms import kube_profile

    try:  # an unknown name ends the command here, naming the profiles
        kube_profile(policy, preemption=preemption, las=las_preemption)
    except ValueError as e:
        fail(f"--policy: {e}")
    if price_per_gpu_hour is not None and not math.isfinite(price_per_gpu_hour):
        fail(f"--price-per-gpu-hour: {price_per_gpu_hour} is not a price; give a finite number >= 0 (e.g. 2.5)")
    schedules = load_schedules(schedule_files or [])
    if config_file is not None:
        try:
            settings = load_settings(config_file)
        except ValueError as e:
            fail(str(e))
        scheduler_name = settings.get("scheduler_name", scheduler_name)
        rack_label = settings.get("rack_label", rack_label)
        region_label = settings.get("region_label", region_label)
        gpu_resource = settings.get("gpu_resource", gpu_resource)
        lease_name = settings.get("lease_name", lease_name)
        lease_namespace = settings.get("lease_namespace", lease_namespace)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = client.Configuration()
    try:
        if kubeconfig is not None:
            config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except ConfigException:
                config.load_kube_config(context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as e:
        fail(f"cannot load the Kubernetes configuration: {e}")
    sched = KubeScheduler(
        client.ApiClient(cfg),
        KubeSchedulerConfig(
            scheduler_name=scheduler_name,
            labels=LabelKeys(rack=rack_label, region=region_label, gpu_resource=gpu_resource),
            policy=policy,
            preemption=preemption,
            las_preemption=las_preemption,
            leader_elect=leader_elect,
            lease_name=lease_name or "",
            lease_namespace=lease_namespace,
            identity=identity or "",
            lease_duration_s=lease_duration,
            renew_interval_s=renew_interval,
            price_per_gpu_hour=price_per_gpu_hour,
        ),
        schedules=schedules,
    )

    def _stop(signum: int, frame: Any) -> None:
        sched.stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    sched.start()
    if health_port:
        serve_health(sched, health_port, metrics=kube_registry(sched))
    sched.stopping.wait()
    sched.stop(release=True)


def load_schedules(files: list[str]) -> list[Any]:
    """The Deployment schedules of ``--schedule`` files; a bad file, a job or another target ends the command
    (exit 2) naming the file and the fix, before anything connects."""
    from rackscale.cli.apply import read_files
    from rackscale.kube.schedules import ScheduleTargetError, deployment_of

    if not files:
        return []
    schedules, jobs = read_files(files)
    if jobs:
        fail(
            f"--schedule files hold ScalingSchedule documents only; submit the {len(jobs)} job(s) with rackscale submit"
        )
    for s in schedules:
        try:
            deployment_of(s)
        except ScheduleTargetError as e:
            fail(str(e))
    return schedules


# The sections' keys; a value here is fixed: rackscale reads that key whatever the file says, so another
# value would be ignored without a word (docs/kubernetes.md). Nodes are known by metadata.name.
SECTIONS: dict[str, dict[str, str | None]] = {
    "labels": {"rack": None, "region": None, "node": "kubernetes.io/hostname"},
    "annotations": {"podGroup": "rackscale.io/pod-group", "minMember": "rackscale.io/min-member"},
    "leaderElection": {"leaseName": None, "leaseNamespace": None},
}


def load_settings(path: Path) -> dict[str, str]:
    """The settings file's values, by option name. Raises ValueError naming the file and the bad key."""
    from rackscale.loaders import SpecError, safe_load_bounded

    try:
        doc = safe_load_bounded(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SpecError) as e:
        raise ValueError(f"{path}: cannot read the settings ({e})") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping (schedulerName, labels, gpuResource, leaderElection)")
    known = {"schedulerName", "labels", "annotations", "gpuResource", "leaderElection"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    for section, keys in SECTIONS.items():
        sub = doc.get(section)
        if sub is None:
            continue
        if not isinstance(sub, dict):
            raise ValueError(f"{path}: {section} must be a mapping (got {sub!r})")
        for key, value in sub.items():
            if key not in keys:
                raise ValueError(f"{path}: unknown key {section}.{key!r} (known: {', '.join(sorted(keys))})")
            fixed = keys[key]
            if fixed is not None and value != fixed:
                raise ValueError(
                    f"{path}: {section}.{key} is {value!r}, but rackscale reads {fixed!r} only (the key is fixed); "
                    "set it to that or remove it"
                )
    out: dict[str, str] = {}
    pairs = [
        ("scheduler_name", doc.get("schedulerName")),
        ("rack_label", (doc.get("labels") or {}).get("rack")),
        ("region_label", (doc.get("labels") or {}).get("region")),
        ("gpu_resource", doc.get("gpuResource")),
        ("lease_name", (doc.get("leaderElection") or {}).get("leaseName")),
        ("lease_namespace", (doc.get("leaderElection") or {}).get("leaseNamespace")),
    ]
    for key, value in pairs:
        if value is not None:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{path}: {key} must be a non-empty string (got {value!r})")
            out[key] = value
    return out


def serve_health(sched: Any, port: int, *, metrics: CollectorRegistry | None = None) -> Any:
    """/healthz: 200 while the scheduler runs; /readyz: 200 once its node and pod caches are synced;
    /metrics: ``metrics`` in Prometheus' text format (404 without one). One server for the probes and the
    scrape, as kube-scheduler serves both on its port (the manifest's port is named ``metrics``)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.partition("?")[0]  # a scraper may add parameters; none is read
            if path == "/metrics" and metrics is not None:
                self._send(200, generate_latest(metrics), CONTENT_TYPE_LATEST)
                return
            if path == "/healthz":
                ok = not sched.stopping.is_set()
            elif path == "/readyz":
                ok = not sched.stopping.is_set() and all(sched.synced.values())
            else:
                self.send_error(404)
                return
            self._send(200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain; charset=utf-8")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Health)
    threading.Thread(target=server.serve_forever, name="rackscale-health", daemon=True).start()
    return server
