"""Plugins read the cluster state through a read-only ``StateView``, and the typing has teeth.

Only the cycle's transaction may change the state (a rollback must undo every change), so the plugin
Protocols of ``rackscale.scheduler.framework`` take a :class:`StateView`: its fields are ``Sequence`` /
``Mapping`` / ``AbstractSet`` properties and it has no mutating method. Checked three ways:

- mypy --strict rejects every kind of write a plugin could attempt, line by line, and accepts the same
  plugin reading (so the failure is the writes', not the set-up's);
- no plugin module imports the mutable ``ClusterState`` or ``Transaction`` (only the cycle's own modules);
- every plugin Protocol's ``state`` parameter is a ``StateView``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from rackscale.model.view import StateView
from rackscale.scheduler import framework

ROOT = Path(__file__).resolve().parents[2]
SCHEDULER = ROOT / "src" / "rackscale" / "scheduler"

# The modules that run the cycle: they hold the transaction (or, for ``decisions``/``cycles``, apply a
# cycle's decisions / hand the live state to ``schedule``). Every other scheduler module is plugin code.
CYCLE_MODULES = {"scheduler.py", "cycle.py", "actions.py", "gang.py", "admission.py", "waiting.py", "decisions.py"}
CYCLE_MODULES |= {"cycles.py", "__init__.py"}
MUTATING_MODULES = {"rackscale.model.state", "rackscale.model.transaction", "rackscale.model.capacity"}
MUTATING_NAMES = {"ClusterState", "Transaction", "CapacityState"}

HEADER = """\
from __future__ import annotations

from rackscale.model.placement import NodeAlloc
from rackscale.model.view import StateView
from rackscale.model.workload import JobSpec
from rackscale.scheduler.framework import CycleContext, Placer
from rackscale.scheduler.placement.request import GroupRequest
from rackscale.scheduler.status import SUCCESS, Status
"""

# Each line marked ``# write`` must be an error; nothing else may be.
WRITING_PLUGIN = HEADER + textwrap.dedent(
    """
    from rackscale.model.state import ClusterState


    class WritingFilter:
        name = "writes"
        static = False

        def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status:
            state.gpu_free[0][0] = 0  # write
            state.node_whole[0] -= 1  # write
            state.cpu_free.append(1)  # write
            state.running.pop(job.name)  # write
            state.queue_usage["q"].gpu_milli += 1  # write
            state.gpu_failed[0].add(1)  # write
            state.rack_node_index[0].move(1, 0, 1)  # write
            state.rack_index_all["GB200"].buckets[0].discard(1)  # write
            state.used_milli = 0  # write
            state.release(job.name)  # write
            state.fail_node(0)  # write
            return SUCCESS


    class PlacerThatWantsTheMutableState:
        name = "greedy"

        def place(self, state: ClusterState, req: GroupRequest) -> list[NodeAlloc] | None:
            return None


    placer: Placer = PlacerThatWantsTheMutableState()  # write
    """
)

READING_PLUGIN = HEADER + textwrap.dedent(
    """
    class ReadingFilter:
        name = "reads"
        static = False

        def filter(self, job: JobSpec, state: StateView, ctx: CycleContext) -> Status:
            free = state.gpu_free[0][0] + state.node_whole[0] + len(state.cpu_free) + len(state.running)
            usage = state.queue_usage.get("q")
            free += (usage.gpu_milli if usage is not None else 0) + len(state.gpu_failed[0])
            free += sum(state.rack_node_index[0].ascending(1)) + len(state.rack_index_all["GB200"].buckets[0])
            free += state.used_milli + state.free_whole_gpus + len(list(state.ends_in_order()))
            return SUCCESS if free >= 0 else SUCCESS


    class ReadingPlacer:
        name = "reads"

        def place(self, state: StateView, req: GroupRequest) -> list[NodeAlloc] | None:
            return None


    placer: Placer = ReadingPlacer()
    """
)


def _mypy(tmp_path: Path, source: str) -> tuple[int, set[int], str]:
    """mypy --strict over one plugin module: its exit status, the lines it flags, its output."""
    plugin = tmp_path / "plugin_under_test.py"
    plugin.write_text(source)
    exe = Path(sys.executable).with_name("mypy")
    if not exe.exists():
        pytest.fail("mypy is not installed: pip install -e '.[dev]'")
    argv = [str(exe), "--strict", "--follow-imports=silent", "--cache-dir", str(ROOT / ".mypy_cache"), str(plugin)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    flagged = {int(m.group(1)) for m in re.finditer(r"plugin_under_test\.py:(\d+): error", done.stdout)}
    return done.returncode, flagged, done.stdout + done.stderr


def test_mypy_rejects_every_write_a_plugin_attempts(tmp_path: Path) -> None:
    marked = {i for i, line in enumerate(WRITING_PLUGIN.splitlines(), 1) if line.endswith("# write")}
    assert len(marked) == 12
    rc, flagged, out = _mypy(tmp_path, WRITING_PLUGIN)
    assert rc == 1, out
    assert flagged == marked, f"missed writes on lines {sorted(marked - flagged)}, or stray errors:\n{out}"


def test_mypy_accepts_the_same_plugin_when_it_only_reads(tmp_path: Path) -> None:
    rc, flagged, out = _mypy(tmp_path, READING_PLUGIN)
    assert (rc, flagged) == (0, set()), out


def _plugin_modules() -> list[Path]:
    return sorted(p for p in SCHEDULER.rglob("*.py") if p.relative_to(SCHEDULER).as_posix() not in CYCLE_MODULES)


def test_there_are_plugin_modules_to_check() -> None:
    names = {p.relative_to(SCHEDULER).as_posix() for p in _plugin_modules()}
    assert {"filters.py", "preemption.py", "queue_order.py", "placement/topology_pack.py"} <= names


@pytest.mark.parametrize("path", _plugin_modules(), ids=lambda p: p.relative_to(SCHEDULER).as_posix())
def test_no_plugin_module_imports_the_mutating_api(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name in MUTATING_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in MUTATING_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif node.module.startswith("rackscale"):
                found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in MUTATING_NAMES]
    assert not found, f"{path.name} may only read the state, through StateView:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("protocol", "method"),
    [
        (framework.QueueSort, "order"),
        (framework.Filter, "filter"),
        (framework.Placer, "place"),
        (framework.VictimChooser, "choose"),
    ],
)
def test_every_plugin_protocol_hands_plugins_a_state_view(protocol: type, method: str) -> None:
    hints = typing.get_type_hints(getattr(protocol, method))
    assert hints["state"] is StateView
