"""The local backend's health (backends/local_health.py): an operator's health command, run for real as small
shell scripts (healthy, node failed, one GPU failed, a hang, a flood, garbage), and NVML against a stand-in
``pynvml`` module (no GPU here). The run through the Runner, the SQLite store and the local backend (a job
requeued by a failed node, then placed again once the node recovers) is in test_local_health_runner.py."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest
from tests.service.conftest import wait_for

from rackscale.backends.local import LocalBackendError, health_sources
from rackscale.backends.local_health import MAX_OUTPUT_BYTES, HealthCommand, NvmlHealth, judge
from rackscale.host.parts import NodeHealth, NodeState

NODE = "n0"
TIMEOUT = 15.0


def script(tmp_path: Path, body: str, name: str = "check.sh") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def finished(check: HealthCommand, *, now: float = 0.0) -> list[NodeHealth]:
    """Read until one run has finished (bounded)."""
    runs = check.runs
    got: list[NodeHealth] = []

    def done() -> bool:
        got[:] = check.read(now)
        return check.runs > runs

    wait_for(done, timeout=TIMEOUT, what="the health command to finish")
    return got


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ("exit 0", []),
        ("echo ok; echo 'gpu 1: ignored when healthy'; exit 0", []),
        (
            "echo 'fan 3 failed' >&2; echo second line; exit 2",
            [NodeHealth(node=NODE, state=NodeState.DOWN, reason="health command: fan 3 failed")],
        ),
        ("exit 1", [NodeHealth(node=NODE, state=NodeState.DOWN, reason="health command: exit 1")]),
        (
            "echo 'checked 4 GPUs'; echo 'GPU 1: XID 79 (fallen off the bus)'; echo 'gpu 3: ECC DBE'; exit 1",
            [
                NodeHealth(node=NODE, failed_gpus=(1,), reason="health command: XID 79 (fallen off the bus)"),
                NodeHealth(node=NODE, failed_gpus=(3,), reason="health command: ECC DBE"),
            ],
        ),
        (
            "echo 'gpu 9: no such GPU here'; exit 1",
            [NodeHealth(node=NODE, state=NodeState.DOWN, reason="health command: gpu 9: no such GPU here")],
        ),
        (
            r"printf '\033[31m\001bad\377\n'; exit 3",
            [NodeHealth(node=NODE, state=NodeState.DOWN, reason="health command: ?[31m?bad\ufffd")],
        ),
    ],
    ids=["healthy", "healthy-gpu-lines-ignored", "node-failed", "no-output", "two-gpus", "gpu-out-of-range", "garbage"],
)
def test_the_commands_exit_and_output_decide(tmp_path: Path, body: str, want: list[NodeHealth]) -> None:
    check = HealthCommand([script(tmp_path, body)], node=NODE, gpus=4, interval_s=0)
    assert finished(check) == want


def test_a_hanging_command_is_killed_with_what_it_started_and_fails_the_node(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    check = HealthCommand(
        [script(tmp_path, f"sleep 60 & echo $! > {pid_file}; echo probing; wait")],
        node=NODE,
        gpus=4,
        interval_s=3600,  # one run only: a second would write its own child's pid over the first's
        timeout_s=0.5,
    )
    t0 = time.monotonic()
    assert check.read(0.0) == []  # started: never waited on
    assert time.monotonic() - t0 < 0.5
    [h] = finished(check)
    assert h.state is NodeState.DOWN and h.reason == "health command: timed out after 0.5s (killed); probing"
    child = int(wait_for(lambda: pid_file.read_text().strip(), timeout=TIMEOUT))
    wait_for(lambda: not Path(f"/proc/{child}").exists() or "Z" in _state(child), timeout=TIMEOUT, what="kill")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"


def test_a_flood_is_cut_at_the_cap_and_fails_the_node(tmp_path: Path) -> None:
    check = HealthCommand([script(tmp_path, "yes flood")], node=NODE, gpus=4, interval_s=0, timeout_s=30)
    [h] = finished(check)
    assert h.state is NodeState.DOWN
    assert h.reason == f"health command: killed: printed more than {MAX_OUTPUT_BYTES} bytes; flood"


def test_it_runs_at_most_every_interval_and_answers_the_last_result_meanwhile(tmp_path: Path) -> None:
    count = tmp_path / "count"
    check = HealthCommand([script(tmp_path, f"echo x >> {count}; exit 1")], node=NODE, gpus=4, interval_s=10)
    [h] = finished(check, now=0.0)
    for now in (1.0, 5.0, 9.9):  # not due: the last verdict, no new run
        assert check.read(now) == [h]
    assert count.read_text().count("x") == 1
    finished(check, now=10.0)
    assert count.read_text().count("x") == 2


def test_the_serve_options_are_checked(tmp_path: Path) -> None:
    ok = script(tmp_path, "exit 0")
    [nvml, cmd] = health_sources({"health_command": f"{ok} --quick", "health_interval_s": 5}, node=NODE, gpus=(0,))
    assert isinstance(nvml, NvmlHealth) and isinstance(cmd, HealthCommand) and cmd.argv == [ok, "--quick"]
    assert health_sources({"nvml_health": False}, node=NODE, gpus=(0,)) == []
    with pytest.raises(LocalBackendError, match="not an executable"):
        health_sources({"health_command": str(tmp_path / "missing")}, node=NODE, gpus=(0,))
    with pytest.raises(LocalBackendError, match="empty"):
        health_sources({"health_command": "  "}, node=NODE, gpus=(0,))
    with pytest.raises(LocalBackendError, match="--health-interval"):
        health_sources({"health_interval_s": -1}, node=NODE, gpus=(0,))


def test_judge_is_the_verdict_of_a_note_even_on_exit_0() -> None:
    [h] = judge(NODE, 4, 0, b"gpu 1: x\n", note="timed out after 1s (killed)")
    assert h.state is NodeState.DOWN and h.reason == "health command: timed out after 1s (killed); gpu 1: x"


# ---------------------------------------------------------------------- NVML (a stand-in pynvml)
class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(gpus: dict[int, dict[str, object]]) -> types.ModuleType:
    """pynvml's names over scripted GPUs: per physical index ``ecc`` (uncorrectable volatile count),
    ``rows`` (nvmlDeviceGetRemappedRows' 4-tuple, or an error code), ``retired`` (pending, or an error code),
    ``lost`` (the handle call fails with GPU_IS_LOST)."""
    m = types.ModuleType("pynvml")
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0  # type: ignore[attr-defined]
    m.calls = []  # type: ignore[attr-defined]
    m.nvmlInit = lambda: m.calls.append("init")  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: m.calls.append("shutdown")  # type: ignore[attr-defined]

    def answer(value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 3:
            raise FakeNVMLError(value)
        return value

    def handle(i: int) -> int:
        if gpus[i].get("lost"):
            raise FakeNVMLError(15)
        return i

    def ecc(h: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)  # uncorrectable, volatile
        return int(gpus[h].get("ecc", 0))  # type: ignore[call-overload]

    m.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    m.nvmlDeviceGetTotalEccErrors = ecc  # type: ignore[attr-defined]
    m.nvmlDeviceGetRemappedRows = lambda h: answer(gpus[h].get("rows", (0, 0, 0, 0)))  # type: ignore[attr-defined]
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: answer(gpus[h].get("retired", 3))  # type: ignore[attr-defined]
    return m


def test_nvml_fails_lost_ecc_and_pending_remap_gpus_and_recovers_them_after_a_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Physical GPUs 4..8 in slots 0..4 (``--gpus 4,5,6,7,8``); retired pages unsupported (A100 and newer)."""
    gpus: dict[int, dict[str, object]] = {
        4: {},
        5: {"ecc": 2},
        6: {"lost": True},
        7: {"rows": (1, 1, 1, 0)},
        8: {"rows": 3, "retired": 1},  # an older GPU: no row remapping, a page retirement pending
    }
    fake = fake_nvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = NvmlHealth(node=NODE, gpus=(4, 5, 6, 7, 8), interval_s=5)
    assert nvml.read(0.0) == [
        NodeHealth(node=NODE, failed_gpus=(1,), reason="NVML GPU 5: 2 uncorrectable ECC error(s) since its last reset"),
        NodeHealth(node=NODE, failed_gpus=(2,), reason="NVML GPU 6: GPU lost (fallen off the bus)"),
        NodeHealth(node=NODE, failed_gpus=(3,), reason="NVML GPU 7: row remap pending (needs a reset)"),
        NodeHealth(node=NODE, failed_gpus=(4,), reason="NVML GPU 8: page retirement pending (needs a reset)"),
    ]
    for g in (5, 6, 7, 8):
        gpus[g] = {}  # reset: the volatile counters and the pending states clear
    assert len(nvml.read(4.0)) == 4  # not due yet: the last read
    assert nvml.read(5.0) == []
    nvml.close()
    assert fake.calls == ["init", "shutdown"]  # type: ignore[attr-defined]


def test_nvml_is_off_without_pynvml_or_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert NvmlHealth(node=NODE, gpus=(0,)).read(0.0) == []
    fake = fake_nvml({0: {"ecc": 1}})

    def no_driver() -> None:
        raise FakeNVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    fake.nvmlInit = no_driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    off = NvmlHealth(node=NODE, gpus=(0,), interval_s=0)
    assert off.read(0.0) == [] and off.read(1.0) == []


def test_an_unexpected_nvml_error_goes_to_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: {"rows": 999}}))  # NVML_ERROR_UNKNOWN
    with pytest.raises(FakeNVMLError):
        NvmlHealth(node=NODE, gpus=(0,)).read(0.0)
