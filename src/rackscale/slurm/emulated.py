"""A throwaway Slurm cluster of emulated nodes on 127.0.0.1, built from a rackscale cluster: one slurmctld and
one ``slurmd -N <node>`` per node, fake GPUs as character devices (``mknod ... c 1 3``, aliases of
/dev/null), munge started if it is not running, ``topology/tree`` written by ``tree_conf`` (``topology/block``
by ``block_conf`` for the Slurm 24.11 in a chroot of :mod:`rackscale.slurm.block`).

Needs root (mknod, slurmd) and Slurm 22.05+ (``apt-get install slurm-wlm``). Used by the tests and by
``rackscale slurm compare``. Shutdown order matters: cancel jobs, stop the slurmds (they ignore SIGTERM while
the controller is down), then slurmctld.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.model.topology import GPUCluster
from rackscale.slurm.commands import INSTALL_HINT, Slurm, SlurmError
from rackscale.slurm.hostlist import compress
from rackscale.slurm.topology import topology_conf

BINARIES = ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo", "munged")
DAEMON_PATHS = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def missing_binaries() -> list[str]:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(DAEMON_PATHS)
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _which(b: str) -> str:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(DAEMON_PATHS)
    found = shutil.which(b, path=path)
    if found is None:
        raise SlurmError(f"{b} not found: {INSTALL_HINT}")
    return found


def _free_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _daemon(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class EmulatedSlurm:
    cluster: GPUCluster
    root: Path
    conf: Path
    slurm: Slurm
    munge_pid: int | None = None  # set when this cluster started munged (stop() ends it then)
    log: list[str] = field(default_factory=list)

    def pids(self) -> tuple[list[int], int | None]:
        def read(p: Path) -> int | None:
            try:
                return int(p.read_text().strip())
            except (OSError, ValueError):
                return None

        slurmds = [pid for p in sorted(self.root.glob("slurmd-*.pid")) if (pid := read(p)) is not None]
        return slurmds, read(self.root / "slurmctld.pid")

    def cancel_all(self) -> None:
        with contextlib.suppress(SlurmError):
            ids = list(self.slurm.jobs())
            self.slurm.scancel(ids)

    def stop(self) -> None:
        """Cancel every job, stop the slurmds, then slurmctld (SIGKILL after 10 s), then munged if this
        cluster started it."""
        self.cancel_all()
        slurmds, ctld = self.pids()
        groups = [slurmds, [ctld] if ctld else [], [self.munge_pid] if self.munge_pid else []]
        for group in groups:
            for pid in group:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while any(_alive(p) for p in group) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in group:
                if _alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def write_config(
    cluster: GPUCluster,
    root: Path,
    *,
    cpus: int = 8,
    memory_mib: int = 4000,
    topology: str = "tree",
    seen_as: str | None = None,
) -> Path:
    """slurm.conf, gres.conf and topology.conf (``tree`` or ``block``: :func:`topology_conf`) in ``root``.
    ``seen_as``: the folder's path as the daemons see it (inside a chroot), written into the files."""
    at = seen_as or str(root)
    for d in ("state", "spool", "log", "fakedev"):
        (root / d).mkdir(parents=True, exist_ok=True)
    gpn = max(n.gpus for n in cluster.nodes)
    for i in range(gpn):
        dev = root / "fakedev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # S_IFCHR, aliases /dev/null
    ctld_port, *node_ports = _free_ports(1 + len(cluster.nodes))
    lines = [
        f"ClusterName=rs{os.getpid() % 100000}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={at}/state",
        f"SlurmdSpoolDir={at}/spool/%n",
        f"SlurmctldPidFile={at}/slurmctld.pid",
        f"SlurmdPidFile={at}/slurmd-%n.pid",
        f"SlurmctldLogFile={at}/log/slurmctld.log",
        f"SlurmdLogFile={at}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_min_interval=100000",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        f"TopologyPlugin=topology/{topology}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "InactiveLimit=0",
        "KillWait=2",
        "MinJobAge=300",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
    ]
    for node, port in zip(cluster.nodes, node_ports, strict=True):
        rack = cluster.racks[node.rack]
        region = cluster.regions[node.region].name
        lines.append(
            f"NodeName={node.name} NodeHostname={node.name} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
            f"RealMemory={memory_mib} Gres=gpu:{node.gpus} Features={rack.name},{region} State=UNKNOWN"
        )
    all_nodes = compress(n.name for n in cluster.nodes)
    lines.append(f"PartitionName=gpu Nodes={all_nodes} Default=YES MaxTime=INFINITE State=UP")
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    gres = [f"NodeName={n.name} Name=gpu File={at}/fakedev/nvidia[0-{n.gpus - 1}]" for n in cluster.nodes if n.gpus > 0]
    (root / "gres.conf").write_text("\n".join(gres) + "\n")
    (root / "topology.conf").write_text(topology_conf(cluster, topology))
    if topology == "block":
        with conf.open("a") as f:  # up from 10 s: one host emulating 72 nodes answers slowly when it is busy
            f.write("MessageTimeout=30\n")
        # Slurm >= 23.x wants a cgroup plugin, and this host mounts cgroup v1 only: no job containment then.
        (root / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    return conf


def _start_munge() -> int | None:
    """Start munged if none serves this host's socket; its pid (None: one was running already). A munged
    process alone is not enough: one in a chroot (the Slurm 24.11 root of ``slurm.block``) serves its own
    /run, and 22.05's daemons would then fail to authenticate ("Zero Bytes were transmitted")."""
    sock = Path("/run/munge/munge.socket.2")
    if _answers(sock):
        return None
    run_dir = sock.parent
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o755)  # munged wants its socket's folder searchable by all; a umask of 077 would deny it
    shutil.chown(run_dir, "munge", "munge")
    # --force: a socket left by a munged that died (a crashed run) would otherwise make the new one refuse to start
    _daemon(["runuser", "-u", "munge", "--", _which("munged"), "--force"], dict(os.environ))
    for pidfile in (Path("/run/munge/munged.pid"), Path("/var/run/munge/munged.pid")):
        with contextlib.suppress(OSError, ValueError):
            return int(pidfile.read_text().strip())
    return None


def _answers(sock: Path) -> bool:
    """Whether a munged listens on ``sock``: a socket file alone may be stale, and a munged process alone may
    be a chroot's (serving its own /run)."""
    if not sock.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def start(cluster: GPUCluster, root: Path | None = None, *, ready_timeout_s: float = 60.0) -> EmulatedSlurm:
    """Start the cluster and wait (bounded) until every node is idle. Raises SlurmError with the log's tail."""
    missing = missing_binaries()
    if missing:
        raise SlurmError(f"missing {', '.join(missing)}: {INSTALL_HINT}")
    if os.geteuid() != 0:
        raise SlurmError("an emulated Slurm cluster needs root (mknod for fake GPUs, slurmd)")
    root = root or Path(tempfile.mkdtemp(prefix="rs-slurm-"))  # short: slurmd's step sockets live under it
    conf = write_config(cluster, root)
    emu = EmulatedSlurm(cluster, root, conf, Slurm(conf))
    emu.munge_pid = _start_munge()
    env = emu.slurm.env()
    try:
        _daemon([_which("slurmctld"), "-f", str(conf)], env)
        for node in cluster.nodes:
            (root / "spool" / node.name).mkdir(parents=True, exist_ok=True)
            _daemon([_which("slurmd"), "-f", str(conf), "-N", node.name], env)
        wait_idle(emu, ready_timeout_s)
        return emu
    except BaseException:
        emu.stop()
        raise


def wait_idle(emu: EmulatedSlurm, timeout_s: float) -> None:
    """Until every node of ``emu`` is idle (bounded): SlurmError with the controller log's tail."""
    deadline = time.monotonic() + timeout_s
    want = str(len(emu.cluster.nodes))
    while True:
        _, ctld = emu.pids()
        if ctld is not None and not _alive(ctld):
            raise SlurmError("slurmctld died: " + _tail(emu.root / "log" / "slurmctld.log"))
        try:
            seen = emu.slurm.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], check=False).stdout.strip()
        except SlurmError as e:  # a controller still starting on a busy host can hold sinfo past its timeout
            seen = f"({e})"
        if seen == want:
            return
        if time.monotonic() > deadline:
            raise SlurmError(
                f"not all {want} nodes idle after {timeout_s:g}s (sinfo: {seen!r}): "
                + _tail(emu.root / "log" / "slurmctld.log")
            )
        time.sleep(0.2)


def _tail(path: Path, n: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no {path})"


@contextlib.contextmanager
def running(cluster: GPUCluster, root: Path | None = None) -> Iterator[EmulatedSlurm]:
    """Start, yield, stop; a folder this made (``root`` None) is removed afterwards."""
    emu = start(cluster, root)
    try:
        yield emu
    finally:
        emu.stop()
        if root is None:
            shutil.rmtree(emu.root, ignore_errors=True)
