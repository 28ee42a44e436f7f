"""A real Slurm 24.11 with ``topology/block`` (one block per NVLink rack, as NVL72 clusters run it) on this
host, built from a rackscale cluster: the same emulated nodes as :mod:`rackscale.slurm.emulated`, but run
inside a Debian 13 root, since Debian 12 ships Slurm 22.05, which has no block plugin.

- :func:`build_root` makes the root once with ``debootstrap --variant=minbase trixie`` from the mirror apt
  already uses here, and installs ``munge slurmctld slurmd slurm-client`` in it (20 s to 4 min, ~400 MB).
  A root that has them (one made by ``shared/engines/slurm-block-up.sh`` too) is reused as it is.
- :func:`start` mounts ``/proc``, ``/dev``, ``/sys`` and a tmpfs ``/run`` in the root (the ones missing),
  writes slurm.conf, gres.conf, ``topology.conf`` (:func:`~rackscale.slurm.topology.block_conf`: rackscale's
  own generator, so it is tested against a live 24.11) and ``cgroup.conf`` (``CgroupPlugin=disabled``:
  slurmd 24.11 refuses to start on this host's cgroup v1 otherwise, so jobs are not contained) in a fresh
  ``ROOT/rs-XXXX`` folder, starts munged in the root if its socket is missing, then slurmctld and one
  ``slurmd -N <node>`` per node through ``chroot``. Several clusters can share one root (own folder, ports).
- :meth:`BlockSlurm.stop` ends what it started (jobs, slurmds, slurmctld, munged if it started it), then the
  job steps still running from its slurm.conf, unmounts what it mounted unless another cluster still runs
  in the root, and removes its folder. :func:`remove_root` deletes a root only when nothing is mounted in it.

Needs root (debootstrap, mount, chroot, mknod). The Slurm tools run as ``chroot ROOT sbatch ...``
(:meth:`rackscale.slurm.commands.Slurm.in_root`); paths handed to Slurm must be inside the root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.model.topology import GPUCluster
from rackscale.slurm.commands import Slurm, SlurmError
from rackscale.slurm.emulated import EmulatedSlurm, _alive, _answers, _daemon, _tail, wait_idle, write_config

SUITE = "trixie"  # Debian 13: Slurm 24.11.5
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
NEEDED = ("usr/sbin/slurmctld", "usr/sbin/slurmd", "usr/sbin/munged", "usr/bin/sbatch", "usr/bin/scontrol")
MOUNTS = ("proc", "dev", "sys", "run")  # bind mounts of the host's, and a tmpfs on run (munge's socket)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILD_TIMEOUT_S = 900.0


def is_built(root: Path) -> bool:
    return all((root / p).exists() for p in NEEDED)


def missing(root: Path) -> list[str]:
    """What this machine lacks to build ``root`` (if not built yet) and run Slurm in it; empty: nothing."""
    out = [] if os.geteuid() == 0 else ["root (debootstrap, mount and chroot need uid 0)"]
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    tools = ["chroot", "mount", "umount"] + ([] if is_built(root) else ["debootstrap"])
    out += [f"{t} (apt-get install {t})" for t in tools if shutil.which(t, path=path) is None]
    return out


def apt_mirror() -> str:
    """The Debian mirror apt uses on this host (deb822 sources first, then sources.list)."""
    with contextlib.suppress(OSError):
        for line in Path("/etc/apt/sources.list.d/debian.sources").read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1:]:
                return line.split()[1]
    with contextlib.suppress(OSError):
        for line in Path("/etc/apt/sources.list").read_text().splitlines():
            if line.startswith("deb ") and len(line.split()) > 1:
                return line.split()[1]
    return DEFAULT_MIRROR


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root`` (from /proc/self/mountinfo; ``\\040`` is a space there)."""
    base = root.resolve()
    out: list[Path] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = Path(line.split()[4].replace("\\040", " "))
            if point == base or base in point.parents:
                out.append(point)
    return out


def mount_all(root: Path) -> list[str]:
    """Mount what the root lacks of :data:`MOUNTS`; the names this call mounted (to undo only those)."""
    done: list[str] = []
    mounted = set(mounts_under(root))
    for name in MOUNTS:
        target = root.resolve() / name
        if target in mounted:
            continue
        target.mkdir(exist_ok=True)
        argv = ["mount", "-t", "tmpfs", "tmpfs", str(target)] if name == "run" else ["mount", "--bind", f"/{name}"]
        if name != "run":
            argv.append(str(target))
        _run(argv, 30)
        done.append(name)
    return done


def unmount(root: Path, names: list[str]) -> list[str]:
    """Unmount ``names`` in reverse order (a step may hold one for a moment: a few tries); what stayed."""
    left: list[str] = []
    for name in reversed(names):
        target = root.resolve() / name
        for _ in range(25):
            if target not in mounts_under(root):
                break
            if subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode != 0:
                time.sleep(0.2)
        else:
            left.append(name)
    return left


def _run(argv: list[str], timeout_s: float, log: Path | None = None) -> None:
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"{' '.join(argv[:3])} timed out after {timeout_s:g}s") from e
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = [x for x in (proc.stderr or proc.stdout).strip().splitlines() if not x.startswith("W:")][-4:]
        where = f" (log: {log})" if log is not None else ""
        raise SlurmError(f"{' '.join(argv[:3])} failed (exit {proc.returncode}){where}: {' | '.join(lines)}")


def build_root(root: Path, *, mirror: str | None = None) -> float:
    """Make ``root`` a Debian 13 root with Slurm 24.11 (once): the seconds it took, 0.0 when already built.
    debootstrap's log goes to ``<root>.debootstrap.log`` beside it."""
    if is_built(root):
        return 0.0
    why = missing(root)
    if why:
        raise SlurmError("cannot build a Slurm 24.11 root: missing " + ", ".join(why))
    t0 = time.monotonic()
    url = mirror or apt_mirror()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # a 0700 folder (mkdtemp's) as / keeps apt's and munge's own users out: dpkg fails
    if not (root / "usr/bin/apt-get").exists():
        log = root.parent / f"{root.name}.debootstrap.log"
        _run(["debootstrap", "--variant=minbase", SUITE, str(root), url], BUILD_TIMEOUT_S, log)
    (root / "etc/apt/sources.list").write_text(f"deb {url} {SUITE} main\n")
    mounted = mount_all(root)
    try:
        install = (
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
            + " ".join(PACKAGES)
        )
        _run(["chroot", str(root), "bash", "-c", install], BUILD_TIMEOUT_S, root.parent / f"{root.name}.apt.log")
    finally:
        unmount(root, mounted)
    return time.monotonic() - t0


def release_root(root: Path) -> list[Path]:
    """End every process whose root is ``root`` (munged, a slurmd or job step a stop left) and unmount all
    that is mounted below it, deepest first; what still stays mounted. For tearing a root down when no
    cluster of its own runs there any more: a stop keeps what another cluster in the root may use."""
    base = root.resolve()
    pids = [int(d.name) for d in Path("/proc").glob("[0-9]*") if int(d.name) != os.getpid()]
    for pid in pids:
        if _in_root(pid, base):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while any(_in_root(pid, base) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for point in sorted(mounts_under(base), key=lambda p: len(p.parts), reverse=True):
        if point == base:
            continue
        for _ in range(10):
            if point not in mounts_under(base):
                break
            if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
                time.sleep(0.2)
    return mounts_under(base)


def remove_root(root: Path) -> None:
    """Delete ``root``; refused (SlurmError) while anything is mounted in it: a recursive delete would go
    through a bind mount into the host's /dev."""
    held = mounts_under(root)
    if held:
        raise SlurmError(f"not removing {root}: still mounted there: {', '.join(map(str, held))}")
    shutil.rmtree(root, ignore_errors=True)
    for side in (f"{root.name}.debootstrap.log", f"{root.name}.apt.log"):
        with contextlib.suppress(OSError):
            (root.parent / side).unlink()


_MUNGE = """set -e
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
runuser -u munge -- /usr/sbin/munged --force </dev/null >/dev/null 2>&1
"""


def _start_munge(root: Path) -> int | None:
    """munged inside the root unless one answers on its socket: its pid (None: one was running already). A
    socket file alone may be a dead munged's (a run tmpfs a stop could not unmount): then --force over it."""
    if _answers(root / "run/munge/munge.socket.2"):
        return None
    _run(["chroot", str(root), "bash", "-c", _MUNGE], 30)
    with contextlib.suppress(OSError, ValueError):
        return int((root / "run/munge/munged.pid").read_text().strip())
    return None


def _in_root(pid: int, root: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/root")) == root
    except OSError:
        return False


def _uses(pid: int, folder: Path) -> bool:
    """Whether ``pid`` works in ``folder`` (its cwd or an open file there: a job step keeps its slurmd's log
    open and runs in its folder; its environment does not name the slurm.conf)."""
    base = str(folder)
    links = [Path(f"/proc/{pid}/cwd")]
    with contextlib.suppress(OSError):
        links += list(Path(f"/proc/{pid}/fd").iterdir())
    for link in links:
        with contextlib.suppress(OSError):
            target = os.readlink(link).removesuffix(" (deleted)")
            if target == base or target.startswith(base + "/"):
                return True
    return False


@dataclass
class BlockSlurm(EmulatedSlurm):
    """An :class:`EmulatedSlurm` whose daemons run in ``chroot`` (``root`` is its folder inside it)."""

    chroot: Path = field(default_factory=Path)
    mounted: list[str] = field(default_factory=list)  # what start() mounted (stop() undoes it)
    seen_conf: str = ""  # slurm.conf as the daemons see it

    def others_running(self) -> bool:
        """Whether another cluster's slurmctld still runs in the same root (then mounts and munged stay)."""
        for pidfile in self.chroot.glob("*/slurmctld.pid"):
            if pidfile.parent.resolve() == self.root.resolve():
                continue
            with contextlib.suppress(OSError, ValueError):
                if _alive(int(pidfile.read_text().strip())):
                    return True
        return False

    def stop(self) -> None:
        shared = self.others_running()
        if shared:
            self.munge_pid = None  # the other cluster authenticates through it
        super().stop()
        root = self.chroot.resolve()
        # A job step outliving its slurmd (ours: it works in our folder) would hold the mounts.
        folder = self.root.resolve()
        for d in Path("/proc").glob("[0-9]*"):
            pid = int(d.name)
            if pid != os.getpid() and _in_root(pid, root) and _uses(pid, folder):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not shared:
            self.mounted = unmount(self.chroot, self.mounted)
            if self.mounted:  # something of the root's own still holds them (munged of an earlier start)
                still = set(release_root(self.chroot))
                self.mounted = [m for m in self.mounted if root / m in still]
        shutil.rmtree(self.root, ignore_errors=True)


def start(cluster: GPUCluster, chroot: Path, *, ready_timeout_s: float | None = None) -> BlockSlurm:
    """Start ``cluster`` in the (built) root ``chroot`` and wait, bounded (30 s + 0.5 s a node), until every
    node is idle. Raises SlurmError with the controller log's tail; what it started is stopped then."""
    why = missing(chroot)
    if why or not is_built(chroot):
        raise SlurmError(f"cannot run Slurm in {chroot}: " + (", ".join(why) or "not built (build_root first)"))
    chroot = chroot.resolve()
    mounted = mount_all(chroot)
    folder = Path(tempfile.mkdtemp(prefix="rs-", dir=chroot))  # short: slurmd's step sockets live under it
    folder.chmod(0o755)
    seen = "/" + folder.name
    write_config(cluster, folder, topology="block", seen_as=seen)
    conf = f"{seen}/slurm.conf"
    # Generous: 72 slurmd and a controller on a busy 2-core host can be slow to answer (MessageTimeout=30).
    slurm = Slurm.in_root(chroot, conf, timeout_s=60.0)
    emu = BlockSlurm(cluster, folder, folder / "slurm.conf", slurm, chroot=chroot, mounted=mounted)
    emu.seen_conf = conf
    try:
        emu.munge_pid = _start_munge(chroot)
        env = emu.slurm.env()
        _daemon(["chroot", str(chroot), "/usr/sbin/slurmctld", "-f", conf], env)
        for node in cluster.nodes:
            (folder / "spool" / node.name).mkdir(parents=True, exist_ok=True)
            _daemon(["chroot", str(chroot), "/usr/sbin/slurmd", "-f", conf, "-N", node.name], env)
        wait_idle(emu, ready_timeout_s if ready_timeout_s is not None else 30.0 + 0.5 * len(cluster.nodes))
        return emu
    except BaseException as e:
        tail = _tail(folder / "log" / "slurmctld.log")
        emu.stop()
        if isinstance(e, subprocess.CalledProcessError):
            raise SlurmError(f"a Slurm daemon did not start in {chroot}: {tail}") from e
        raise


@contextlib.contextmanager
def running(cluster: GPUCluster, chroot: Path) -> Iterator[BlockSlurm]:
    """Build the root if needed, start, yield, stop (the root stays, for the next run)."""
    build_root(chroot)
    emu = start(cluster, chroot)
    try:
        yield emu
    finally:
        emu.stop()
