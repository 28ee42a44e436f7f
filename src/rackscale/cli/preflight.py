"""``rackscale preflight``: is this host ready for the deployment plan? Checks with pass/warn/fail/skip."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from rackscale.cli.client import EXIT_USAGE, die
from rackscale.cli.output import OutputFormat, emit, printable
from rackscale.preflight.checks import Check, CheckName, Status  # light: dataclasses and enums

COLUMNS = ("check", "name", "status", "found", "required", "fix")

MAX_COMMAND_TIMEOUT_S = 3600.0  # an external command (nvidia-smi, ip, ibstat) that takes longer is hung


def preflight(
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.table,
    check: Annotated[
        list[str] | None,
        typer.Option(
            "--check",
            "-c",
            help="Run only this check (repeatable): kernel, driver, runtime, kubernetes, "
            "topology, rdma, sysctl, subnets, firewall, storage, iops, spec.",
            show_default=False,
        ),
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Write the plan's sysctl values to /etc/sysctl.d/90-rackscale.conf (printed).")
    ] = False,
    cluster_spec: Annotated[
        Path | None,
        typer.Option(
            "--cluster-spec",
            help="Compare the host with this cluster spec (as `simulate --cluster`).",
            show_default=False,
        ),
    ] = None,
    subnet: Annotated[
        list[str] | None,
        typer.Option(
            "--subnet",
            help="ROLE=CIDR, repeatable (default compute=10.0.0.0/16, storage=10.1.0.0/16, "
            "management=10.2.0.0/16); a role given replaces its default.",
            show_default=False,
        ),
    ] = None,
    storage_path: Annotated[
        str | None,
        typer.Option(
            "--storage-path",
            help="The mount of the high-speed-storage class (default: any NVMe mount).",
            show_default=False,
        ),
    ] = None,
    iops_probe: Annotated[
        Path | None,
        typer.Option(
            "--iops-probe",
            help="Opt-in: measure 4 KiB random IOPS with a temp file in this directory.",
            show_default=False,
        ),
    ] = None,
    iops_seconds: Annotated[
        float,
        typer.Option("--iops-seconds", help="How long the IOPS probe reads and writes (half each).", min=0.2, max=60),
    ] = 3.0,
    iops_size: Annotated[int, typer.Option("--iops-size", help="The probe's file, MiB.", min=1, max=16384)] = 256,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds each external command may take (at most an hour: inf would let a hung one hang preflight).",
            min=0.1,
            max=MAX_COMMAND_TIMEOUT_S,
        ),
    ] = 10.0,
    root: Annotated[
        Path | None,
        typer.Option("--root", hidden=True, help="A fixture tree standing for / (commands from ROOT/commands.json)."),
    ] = None,
) -> None:
    """Check that this host is ready for the deployment plan: kernel, driver, container runtime and
    Kubernetes versions, GPU topology (NVLink islands, GPU-NIC affinity, the node labels), RDMA ports and
    module options, sysctl values, subnets, firewall, the high-speed-storage mount, and (opt-in) IOPS.

    Examples:

      rackscale preflight                                  # every check, as a table
      rackscale preflight -o json > preflight.json         # for a script or a ticket
      rackscale preflight --check topology --check rdma    # only those
      sudo rackscale preflight --check sysctl --fix        # write /etc/sysctl.d/90-rackscale.conf
      rackscale preflight --cluster-spec examples/cluster-nvl72.yaml
      rackscale preflight --subnet compute=192.168.0.0/20 --storage-path /mnt/fast
      rackscale preflight --iops-probe /mnt/fast --iops-seconds 5

    A check without its tool or hardware (no GPU, no nvidia-smi, no RDMA device) says skip, not fail.
    Exit codes: 0 all pass/skip; 1 warnings only; 2 a failure, or bad usage. docs/preflight.md lists
    what each check reads, what it requires, and its fix.
    """
    from rackscale.preflight import Options, run_checks
    from rackscale.preflight.checks import DEFAULT_SUBNETS
    from rackscale.preflight.gpu import gather, labels
    from rackscale.preflight.host_facts import fixture_probe, real_probe
    from rackscale.preflight.network import parse_subnets
    from rackscale.preflight.report import document, exit_code

    only = _names(check or [])
    try:
        given = {k: str(v) for k, v in parse_subnets(subnet or []).items()}
    except ValueError as err:
        die(str(err), EXIT_USAGE)
    if iops_probe is not None and not iops_probe.is_dir():
        die(f"--iops-probe {str(iops_probe)!r}: not a directory", EXIT_USAGE)
    if root is not None and not root.is_dir():
        die(f"--root {str(root)!r}: not a directory", EXIT_USAGE)
    try:
        probe = fixture_probe(root) if root is not None else real_probe(timeout_s=timeout)
    except (OSError, ValueError) as err:
        die(f"--root: {err}", EXIT_USAGE)
    if cluster_spec is not None:
        probe.cache["spec"] = _load_spec(cluster_spec)
    opts = Options(
        subnets={**DEFAULT_SUBNETS, **given},
        storage_path=storage_path,
        iops_path=iops_probe,
        iops_seconds=iops_seconds,
        iops_size_mib=iops_size,
        cluster_spec=cluster_spec,
    )
    checks = run_checks(probe, opts, only)
    wrote = _fix(probe.root, checks) if fix else None
    facts = gather(probe) if only is None or CheckName.topology in only or CheckName.spec in only else None
    node_labels = labels(facts) if facts is not None else {}
    host = socket.gethostname() if root is None else f"{root} (fixture)"
    if output is OutputFormat.table:
        emit([c.row() for c in checks], output, columns=COLUMNS, title=f"preflight: {host}")
        if node_labels:
            pairs = " ".join(f"{k}={v}" for k, v in node_labels.items())
            print(printable(f"labels: kubectl label node {socket.gethostname()} {pairs} --overwrite"))
    else:
        emit(document(checks, labels=node_labels, host=host, wrote=wrote), output)
    raise typer.Exit(exit_code(checks))


def _names(given: list[str]) -> set[CheckName] | None:
    if not given:
        return None
    choices = [e.value for e in CheckName]
    bad = [g for g in given if g not in choices]
    if bad:
        die(f"--check {bad[0]!r}: unknown check; choose from {', '.join(choices)}", EXIT_USAGE)
    return {CheckName(g) for g in given}


def _load_spec(path: Path) -> object:
    from rackscale.model.spec_errors import SpecError
    from rackscale.preflight.spec_compare import expectation

    try:
        return expectation(path)
    except SpecError as err:
        die(str(err), EXIT_USAGE)


def _fix(root: Path, checks: list[Check]) -> str | None:
    """--fix: write the sysctl file when a sysctl check did not pass; say what was written, on stderr."""
    from rackscale.preflight.sysctl import FIX_FILE, write_fix

    if not any(c.check is CheckName.sysctl and c.status is Status.FAIL for c in checks):
        sys.stderr.write("--fix: the sysctl values already match the plan (or were not checked); nothing written\n")
        return None
    try:
        path, text = write_fix(root)
    except OSError as err:
        die(f"--fix: cannot write {FIX_FILE}: {err.strerror or err} (run as root)", EXIT_USAGE)
    sys.stderr.write(f"--fix: wrote {path}:\n{text}--fix: apply now with `sysctl --system`\n")
    return str(path)
