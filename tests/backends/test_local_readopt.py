"""A replica that led, stood by and leads again in the same process (docs/high-availability.md): its local
backend is adopted a second time, with what it started in its first term still in memory. The second
``adopt`` must do what a new process's does: each job watched once, an end while it stood by reported once,
what the store does not call running stopped (and not reported), a start that failed reported once."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.backends.test_local import (
    NO_COMMAND,
    WAIT_FOR_GO,
    _is_our_wrapper,
    data,
    gone,
    job,
    local,
    on,
    py,
    record,
    until,
)

from rackscale.backends.base import Exit

__all__ = ["data"]  # the fixture


# Ignores SIGTERM: a stop of it lasts the grace, then SIGKILL.
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen('ready', 'w').close()\ntime.sleep(60)"
)


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]  # the job's command in the first term
    in_store: bool  # the store says it runs when the replica leads again
    ends: bool  # it ends while the replica stands by (no poll)
    exits: list[Exit]  # what the second adopt and the polls after it report, all together
    runs: bool  # still watched after the second adopt
    stopped: bool = False  # stopped in the first term (it ignores SIGTERM: its grace is still on)


CASES = {
    "still-running": Case((*py(WAIT_FOR_GO), "3"), True, False, [], True),
    "ended-while-standby": Case(py("pass"), True, True, [Exit("j", True, 0, "exit code 0")], False),
    "not-running-in-the-store": Case((*py(WAIT_FOR_GO), "3"), False, False, [], False),
    "start-failed-not-polled": Case((), True, False, [Exit("j", False, None, NO_COMMAND)], False),
    "stopping-when-demoted": Case(py(STUBBORN), False, False, [], False, stopped=True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_second_adopt_in_the_same_process_acts_as_a_new_process_would(data: Path, case: Case) -> None:
    b = local(data, [0, 1], grace_s=1.0)
    assert b.adopt({}, 0.0) == []  # first term
    spec = job("j", *case.command)
    b.start(spec, on("j", 0), now=0.0)
    pid = b._runs["j"].pid if "j" in b._runs else None
    if pid is not None and not case.ends:  # an exec just made has no cmdline for an instant: a replica's
        until(lambda: _is_our_wrapper(pid, b.exit_path("j")), what="j's wrapper")  # terms are seconds apart
    if case.ends:
        until(lambda: b.exit_path("j").exists(), what="j to end")
    if case.stopped:
        until(lambda: (b.work_dir / "j" / "ready").exists(), what="j to be ready")
        b.stop("j", now=0.5)
    # Demoted (no poll, no close), then leads again: the store's view.
    running = {"j": record(spec, on("j", 0))} if case.in_store else {}
    exits = b.adopt(running, 1.0)
    assert b.running() == (frozenset({"j"}) if case.runs else frozenset())
    assert len(b._stopping) <= 1  # each stop once (a quick one may be over already)
    if case.stopped:  # still in its grace: the second adopt does not stop it again
        assert len(b._stopping) == 1
    deadline = time.monotonic() + 1.5  # long enough for a stray's SIGTERM to end it and its end to be seen
    while time.monotonic() < deadline or b._stopping:
        exits += b.poll(2.0)
        time.sleep(0.05)
        assert time.monotonic() < deadline + 10, "the stop did not finish"
    assert exits == case.exits
    if pid is not None:
        assert gone(pid) != case.runs
    if case.runs:
        (b.work_dir / "j" / "go").touch()
        got: list[Exit] = []
        until(lambda: got.extend(b.poll(3.0)) or got, what="j to exit")
        time.sleep(0.3)
        got += b.poll(4.0)
        assert got == [Exit("j", False, 3, "exit code 3")]  # once
    b.poll(5.0)
    assert sorted(p.name for p in (data / "run").iterdir()) == []
