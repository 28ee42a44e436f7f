"""Trace loaders: Philly, Alibaba openb (pods and nodes), the generic CSV/JSONL format, and load_trace.

The real traces are read from ../shared/traces (relative to the repository root), never copied here; if
they are absent, the tests that need them fail (they do not skip) and say where they were looked for.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale import pipes
from rackscale.model.spec_errors import SpecError
from rackscale.model.workload import BUILTIN_PRIORITY_CLASSES, JobKind, JobSpec, batch, inference, training
from rackscale.workloads import TraceLoad, load_alibaba_nodes, load_alibaba_pods, load_generic, load_philly, load_trace
from rackscale.workloads.philly import PHILLY_CHECKPOINT_S, philly_comm

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly.csv"
PODS = TRACES / "alibaba-openb" / "openb_pod_list_default.csv"
NODES = TRACES / "alibaba-openb" / "openb_node_list_gpu_node.csv"

# ../shared/traces/README.md
PHILLY_JOBS = 82_247
PHILLY_HISTOGRAM = {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
PHILLY_SPAN_S = 9_408_690.0  # 2017-09-04 10:30:41 .. 2017-12-22 08:02:11
LOAD_BUDGET_S = 3.0

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
GENERIC_HEADER = "name,kind,submit_time,duration,gpus,gpu_milli,cpu_milli,memory_mib,queue,priority,gpu_models"


def real(path: Path) -> Path:
    if not path.is_file():
        pytest.fail(
            f"real trace missing: {path} (expected ../shared/traces relative to the repository root, see "
            f"{TRACES / 'README.md'}); these tests check the loaders against the published counts and "
            "must not be skipped: restore the shared traces folder"
        )
    return path


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Timed:
    load: TraceLoad
    seconds: float


@functools.cache
def _load_philly() -> Timed:
    start = time.perf_counter()
    load = load_philly(PHILLY)
    return Timed(load, time.perf_counter() - start)


def philly() -> Timed:
    """The real Philly trace, loaded once (and timed) for all tests; fails the calling test if it is absent."""
    real(PHILLY)
    return _load_philly()


@functools.cache
def _load_pods() -> TraceLoad:
    return load_alibaba_pods(PODS)


def pods() -> TraceLoad:
    real(PODS)
    return _load_pods()


# ----------------------------------------------------------------------------------------- real: Philly
def test_philly_real_trace_loads_every_job() -> None:
    loaded = philly()
    jobs = loaded.load.jobs
    assert loaded.load.skipped == ()
    assert len(jobs) == PHILLY_JOBS
    assert dict(Counter(j.total_gpus for j in jobs)) == PHILLY_HISTOGRAM
    assert all(j.kind is JobKind.TRAINING and j.unit.gpus == 1 for j in jobs)
    assert [j.name for j in jobs[:2]] == ["philly-000001", "philly-000002"]
    assert jobs[-1].name == f"philly-{PHILLY_JOBS:06d}"
    assert len({j.name for j in jobs}) == PHILLY_JOBS
    times = [j.submit_time for j in jobs]
    assert times == sorted(times)
    assert times[0] == 0.0 and times[-1] == PHILLY_SPAN_S
    assert len({j.queue for j in jobs}) == 15
    assert all(j.checkpoint_interval_s == PHILLY_CHECKPOINT_S for j in jobs)
    durations = sorted(j.duration_estimate_s or 0.0 for j in jobs)
    assert durations[len(durations) // 2] == 1144.0  # the README's p50
    gpu_hours = sum((j.duration_estimate_s or 0.0) * j.total_gpus for j in jobs) / 3600
    assert gpu_hours == pytest.approx(978_078, rel=1e-4)


def test_philly_real_trace_loads_within_budget() -> None:
    loaded = philly()
    seconds = loaded.seconds
    if seconds >= LOAD_BUDGET_S:  # a busy machine: measure once more, the fastest run counts
        start = time.perf_counter()
        load_philly(PHILLY)
        seconds = min(seconds, time.perf_counter() - start)
    assert seconds < LOAD_BUDGET_S, f"loading {PHILLY_JOBS} Philly jobs took {seconds:.2f} s"


def test_philly_real_trace_scaled() -> None:
    loaded = philly()
    scaled = load_philly(real(PHILLY), gpu_scale=2.0, arrival_scale=2.0)
    assert [j.name for j in scaled.jobs] == [j.name for j in loaded.load.jobs]
    assert all(s.total_gpus == 2 * j.total_gpus for s, j in zip(scaled.jobs, loaded.load.jobs, strict=True))
    assert scaled.jobs[-1].submit_time == PHILLY_SPAN_S / 2


def test_load_trace_reads_the_real_philly_trace() -> None:
    loaded = philly()
    got = load_trace(f"philly:{real(PHILLY)}", max_jobs=100)
    assert got.jobs == loaded.load.jobs[:100]


# ----------------------------------------------------------------------------------------- real: Alibaba
def test_alibaba_real_pods() -> None:
    loaded = pods()
    jobs = loaded.jobs
    assert loaded.skipped == ()
    assert len(jobs) == 8_152
    assert sum(j.unit.is_fractional for j in jobs) == 3_078
    assert sum(j.gpu_demand_milli == 0 for j in jobs) == 1_088
    assert all(j.kind is JobKind.BATCH and j.units == 1 for j in jobs)
    assert {j.queue for j in jobs} == {"LS", "BE", "Burstable", "Guaranteed"}
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)
    assert Counter(j.unit.gpus for j in jobs if not j.unit.is_fractional) == {0: 1_088, 1: 3_911, 2: 16, 4: 15, 8: 44}
    first = jobs[0]
    assert (first.name, first.unit.cpu_milli, first.unit.memory_mib) == ("openb-pod-0000", 12_000, 16_384)
    assert first.duration_estimate_s == 12_537_496.0


def test_alibaba_real_nodes() -> None:
    cluster = load_alibaba_nodes(real(NODES))
    assert len(cluster.nodes) == 1_213
    assert cluster.total_gpus == 6_212
    assert cluster.gpu_models == ("A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32")
    assert len(cluster.racks) == 1_213 and len(cluster.regions) == 1
    assert all(r.nodes == (r.index,) and r.name == cluster.nodes[r.index].name for r in cluster.racks)
    assert {n.gpus for n in cluster.nodes} == {1, 2, 4, 8}


def test_load_trace_reads_the_real_alibaba_pods() -> None:
    loaded = pods()
    assert load_trace(f"alibaba:{real(PODS)}").jobs == loaded.jobs


# ----------------------------------------------------------------------------------------- Philly mapping
def test_philly_job_is_what_the_training_builder_gives(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-09 07:01:55,66.0,8,528.0,11cb48")
    (job,) = load_philly(path).jobs
    want = training(
        "philly-000001",
        8,
        queue="11cb48",
        comm=philly_comm(8),
        checkpoint_interval_s=1800.0,
        duration_estimate_s=66.0,
        submit_time=0.0,
    )
    assert job == want
    assert philly_comm(16).bytes_per_step > philly_comm(8).bytes_per_step > philly_comm(1).bytes_per_step


# Five jobs, file order not submit order: t = 0, 100, 100, 300, 1000 s after the first.
PHILLY_SMALL = (
    PHILLY_HEADER,
    "2017-10-09 00:01:40,10,1,10,vc-b",
    "2017-10-09 00:00:00,20,2,40,vc-a",
    "2017-10-09 00:16:40,30,3,90,vc-a",
    "2017-10-09 00:05:00,40,4,160,vc-c",
    "2017-10-09 00:01:40,50,5,250,vc-a",
)


@pytest.mark.parametrize(
    ("knobs", "names", "gpus", "submits", "queues"),
    [
        ({}, [1, 2, 3, 4, 5], [2, 1, 5, 4, 3], [0, 100, 100, 300, 1000], ["vc-a", "vc-b", "vc-a", "vc-c", "vc-a"]),
        ({"gpu_scale": 2.0}, [1, 2, 3, 4, 5], [4, 2, 10, 8, 6], [0, 100, 100, 300, 1000], None),
        ({"gpu_scale": 0.5}, [1, 2, 3, 4, 5], [1, 1, 3, 2, 2], None, None),  # half up, at least 1
        ({"arrival_scale": 2.0}, None, None, [0, 50, 50, 150, 500], None),
        ({"arrival_scale": 0.5}, None, None, [0, 200, 200, 600, 2000], None),
        ({"time_window": (100, 1000)}, [2, 3, 4], [1, 5, 4], [0, 0, 200], None),
        ({"time_window": (100, 1000), "arrival_scale": 2.0}, [2, 3, 4], None, [0, 0, 100], None),
        ({"max_jobs": 2}, [1, 2], None, [0, 100], None),
        ({"max_jobs": 0}, [], [], [], []),
        ({"time_window": (150, math.inf), "max_jobs": 1}, [4], [4], [150], ["vc-c"]),
        ({"tenant_map": {"vc-a": "research"}}, None, None, None, ["research", "vc-b", "research", "vc-c", "research"]),
    ],
    ids=[
        "plain",
        "gpu-x2",
        "gpu-x0.5",
        "arrivals-x2",
        "arrivals-x0.5",
        "window",
        "window-then-arrivals",
        "max-jobs",
        "max-jobs-0",
        "window-open-end",
        "tenant-map",
    ],
)
def test_philly_knobs(
    tmp_path: Path,
    knobs: dict[str, object],
    names: list[int] | None,
    gpus: list[int] | None,
    submits: list[float] | None,
    queues: list[str] | None,
) -> None:
    jobs = load_philly(write(tmp_path, "p.csv", *PHILLY_SMALL), **knobs).jobs  # type: ignore[arg-type]
    if names is not None:
        assert [j.name for j in jobs] == [f"philly-{n:06d}" for n in names]
    if gpus is not None:
        assert [j.total_gpus for j in jobs] == gpus
    if submits is not None:
        assert [j.submit_time for j in jobs] == submits
    if queues is not None:
        assert [j.queue for j in jobs] == queues


# ----------------------------------------------------------------------------------------- bad rows
GOOD = "2017-10-09 07:00:00,60,1,60,vc"
GOOD_POD = "p-ok,1000,1024,1,1000,,LS,Running,0,10,0"
GOOD_ROW = "ok,batch,0,10,1,,,,,,"


@pytest.mark.parametrize(
    ("header", "bad", "column", "message"),
    [
        (PHILLY_HEADER, "2017-10-09 07:01:55,-5,1,-5,vc", "duration", "negative duration"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,0,0,vc", "num_gpus", "num_gpus is 0"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,abc,1,0,vc", "duration", "not a number"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,nan,1,0,vc", "duration", "not a finite number"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1.5,0,vc", "num_gpus", "whole number"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,-2,0,vc", "num_gpus", "must be >= 0"),
        (PHILLY_HEADER, "2017-13-09 07:01:55,66,1,66,vc", "timestamp", "not a time"),
        (PHILLY_HEADER, "09/10/2017 07:01,66,1,66,vc", "timestamp", "not a time"),
        (PHILLY_HEADER, ",66,1,66,vc", "timestamp", "missing value"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1,66,", "cluster", "missing value"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1", "", "has 3 fields, the header has 5"),
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1,66,vc,extra", "", "has 6 fields"),
        (POD_HEADER, "p1,1000,1024,1,0,,LS,Running,0,10,0", "gpu_milli", "0 with num_gpu 1"),
        (POD_HEADER, "p1,1000,1024,2,500,,LS,Running,0,10,0", "gpu_milli", "500 with num_gpu 2"),
        (POD_HEADER, "p1,1000,1024,0,300,,LS,Running,0,10,0", "gpu_milli", "300 with num_gpu 0"),
        (POD_HEADER, "p1,1000,1024,1,1500,,LS,Running,0,10,0", "gpu_milli", "must be in 0..1000"),
        (POD_HEADER, "p1,1000,1024,1,1000,,LS,Running,50,10,0", "deletion_time", "negative duration"),
        (POD_HEADER, "p1,lots,1024,1,1000,,LS,Running,0,10,0", "cpu_milli", "not a number"),
        (POD_HEADER, "p-ok,1000,1024,1,1000,,LS,Running,0,10,0", "name", "already on line 2"),
        (POD_HEADER, "p1,1000,1024,1,1000,,LS,Running,,10,0", "creation_time", "missing value"),
        (GENERIC_HEADER, "j1,serving,0,10,1,,,,,,", "kind", "unknown kind 'serving'"),
        (GENERIC_HEADER, "j1,training,0,10,1,500,,,,,", "gpus", "needs whole GPUs"),
        (GENERIC_HEADER, "j1,batch,0,10,4,500,,,,,", "gpu_milli", "gpus 0 or 1"),
        (GENERIC_HEADER, "j1,inference,0,10,0,,,,,,", "gpus", "no GPU"),
        (GENERIC_HEADER, "j1,batch,0,10,0,,,,,,", "gpus", "asks for nothing"),
        (GENERIC_HEADER, "j1,batch,-1,10,1,,,,,,", "submit_time", "negative submit_time"),
        (GENERIC_HEADER, "j1,batch,0,-10,1,,,,,,", "duration", "negative duration"),
        (GENERIC_HEADER, ",batch,0,10,1,,,,,,", "name", "missing value"),
        (GENERIC_HEADER, "j1,batch,0,10,,,,,,,", "gpus", "missing value"),
        (GENERIC_HEADER, "j1,batch,0,10,1,,,,,urgent,", "priority", "not a whole number or a priority class"),
        (GENERIC_HEADER, "j1,batch,0,10,1,,,,,+-5,", "priority", "not a whole number"),
        (GENERIC_HEADER, "j1,batch,0,10,1,1000,,,,,", "gpu_milli", "must be in 0..999"),
        (GENERIC_HEADER, "ok,batch,5,10,1,,,,,,", "name", "already used on line 2"),
    ],
    ids=[
        "philly-negative-duration",
        "philly-zero-gpus",
        "philly-non-numeric",
        "philly-nan",
        "philly-fractional-gpus",
        "philly-negative-gpus",
        "philly-bad-month",
        "philly-bad-time-format",
        "philly-missing-timestamp",
        "philly-missing-cluster",
        "philly-missing-column",
        "philly-extra-column",
        "pod-zero-share",
        "pod-shared-multi-gpu",
        "pod-cpu-with-share",
        "pod-share-over-1000",
        "pod-negative-duration",
        "pod-non-numeric-cpu",
        "pod-duplicate-name",
        "pod-missing-creation",
        "generic-unknown-kind",
        "generic-training-share",
        "generic-share-of-4-gpus",
        "generic-inference-no-gpu",
        "generic-asks-nothing",
        "generic-negative-submit",
        "generic-negative-duration",
        "generic-missing-name",
        "generic-missing-gpus",
        "generic-unknown-priority-class",
        "generic-garbled-priority",
        "generic-milli-1000",
        "generic-duplicate-name",
    ],
)
def test_bad_row_is_skipped_or_rejected_with_its_line(
    tmp_path: Path, header: str, bad: str, column: str, message: str
) -> None:
    good = {PHILLY_HEADER: GOOD, POD_HEADER: GOOD_POD, GENERIC_HEADER: GOOD_ROW}[header]
    good2 = good.replace("p-ok", "p-ok2").replace("ok,", "ok2,", 1) if header != PHILLY_HEADER else good
    path = write(tmp_path, "t.csv", header, good, bad, good2)
    loader = {PHILLY_HEADER: load_philly, POD_HEADER: load_alibaba_pods, GENERIC_HEADER: load_generic}[header]

    skipped = loader(path)
    assert len(skipped.jobs) == 2
    (problem,) = skipped.skipped
    assert problem.line == 3
    assert problem.path == column
    assert message in problem.message
    (text,) = skipped.skipped_lines()
    assert text.startswith(f"{path}:3: ") and message in text

    with pytest.raises(SpecError) as err:
        loader(path, on_error="reject")
    assert err.value.problems == [problem]
    assert str(err.value).startswith(f"{path}:3: ")


def test_reject_lists_every_bad_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.csv",
        PHILLY_HEADER,
        GOOD,
        "2017-10-09 07:01:55,-5,1,-5,vc",
        GOOD,
        "2017-10-09 07:01:55,66,0,0,vc",
        "",
        "nonsense",
        "2017-10-09 07:01:55,x,y,0,",
    )
    with pytest.raises(SpecError) as err:
        load_philly(path, on_error="reject")
    lines = [(p.line, p.path) for p in err.value.problems]
    assert lines == [(3, "duration"), (5, "num_gpus"), (7, ""), (8, "duration"), (8, "num_gpus"), (8, "cluster")]
    skipped = load_philly(path)
    assert len(skipped.jobs) == 2 and len(skipped.skipped) == 6


def test_blank_lines_and_bom_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("\ufeff" + PHILLY_HEADER + "\r\n\r\n" + GOOD + "\r\n\r\n", encoding="utf-8")
    got = load_philly(path)
    assert len(got.jobs) == 1 and got.skipped == ()


def test_whitespace_and_whole_floats_are_read_by_the_slow_path(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, " 2017-10-09 07:00:00 , 60 ,8.0,480, vc ", GOOD)
    jobs = load_philly(path).jobs
    assert [(j.total_gpus, j.queue, j.duration_estimate_s, j.submit_time) for j in jobs] == [
        (8, "vc", 60.0, 0.0),
        (1, "vc", 60.0, 0.0),
    ]


# ----------------------------------------------------------------------------------------- file and header
@pytest.mark.parametrize(
    ("content", "loader", "message", "fix"),
    [
        (None, load_philly, "file not found", "check the path"),
        ("", load_philly, "empty file", "timestamp,duration,num_gpus,cluster"),
        ("timestamp,duration,gpus,cluster\n", load_philly, "lacks the column num_gpus", "header is"),
        (NODE_HEADER + "\n", load_philly, "lacks the columns timestamp, duration, num_gpus, cluster", ""),
        ("name,cpu_milli\n", load_alibaba_pods, "lacks the columns memory_mib, num_gpu", ""),
        ("name,kind,submit_time,gpus,duraton\n", load_generic, "unknown column", "did you mean 'duration'"),
        ("name,kind,gpus\n", load_generic, "lacks the column submit_time", ""),
    ],
    ids=["missing-file", "empty-file", "philly-missing-column", "wrong-format", "pods-header", "typo", "generic"],
)
def test_file_and_header_errors(tmp_path: Path, content: str | None, loader: object, message: str, fix: str) -> None:
    path = tmp_path / "trace.csv"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(SpecError) as err:
        loader(path)  # type: ignore[operator]
    (problem,) = err.value.problems
    assert message in problem.message
    assert fix in problem.fix
    assert str(err.value).startswith(str(path))


def test_a_directory_or_binary_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory"):
        load_philly(tmp_path)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_philly(binary)


@pytest.mark.parametrize("loader", [load_philly, load_alibaba_pods, load_generic], ids=["philly", "pods", "generic"])
def test_a_device_is_refused_and_a_pipe_read_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: object
) -> None:
    """/dev/zero was read until memory ran out; a pipe (``<(zcat trace.csv.gz)``) is read, bounded."""
    with pytest.raises(SpecError, match="is a device, not a file"):
        loader("/dev/zero")  # type: ignore[operator]
    monkeypatch.setattr("rackscale.workloads.trace_rows.MAX_TRACE_BYTES", 1000)
    big = tmp_path / "big.csv"
    big.write_text("timestamp,duration,num_gpus,cluster\n" + "0,1,1,a\n" * 200)
    with pytest.raises(SpecError, match="larger than"):  # a regular file: by its size, unread
        loader(big)  # type: ignore[operator]
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(big.read_text()), daemon=True)
    writer.start()
    with pytest.raises(SpecError, match="larger than"):  # a pipe: by what it gives
        loader(fifo)  # type: ignore[operator]
    writer.join(timeout=10)


def _catch(load: Any, path: Path, into: list[BaseException]) -> None:
    try:
        load(path)
    except BaseException as e:  # the test checks which
        into.append(e)


@pytest.mark.parametrize(
    "loader",
    [load_philly, load_alibaba_pods, load_alibaba_nodes, load_generic],
    ids=["philly", "pods", "nodes", "generic"],
)
def test_a_named_pipe_without_a_writer_is_refused_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: Any
) -> None:
    """A FIFO nobody writes to hung `simulate --trace` (and `pack`'s reader) for ever in open(), while the
    spec reader waited FIFO_WAIT_S and refused it: now both do."""
    monkeypatch.setattr(pipes, "FIFO_WAIT_S", 0.2)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[BaseException] = []
    reader = threading.Thread(target=_catch, args=(loader, fifo, got), daemon=True)
    started = time.monotonic()
    reader.start()
    reader.join(5)  # a daemon thread: a hang fails the test instead of the run
    assert not reader.is_alive(), f"{loader.__name__} hangs on a FIFO without a writer"
    assert time.monotonic() - started >= 0.2  # it did wait for a writer
    assert len(got) == 1 and isinstance(got[0], SpecError), got
    assert str(got[0]) == (
        f"{fifo}: a named pipe (FIFO) that nothing wrote to in 0.2 s "
        "(fix: give a regular file, or start the pipe's writer first)"
    )


@pytest.mark.parametrize("kind", ["file", "pipe"])
def test_a_small_trace_is_read_without_allocating_the_bound(tmp_path: Path, kind: str) -> None:
    """read(bound + 1) allocated the whole bound (1 GiB) up front for a two-line file."""
    import tracemalloc

    from rackscale.workloads.trace_rows import read_text

    text = "timestamp,duration,num_gpus,cluster\n0,1,1,a\n"
    path = tmp_path / "t.csv"
    if kind == "file":
        path.write_text(text)
    else:
        os.mkfifo(path)
        threading.Thread(target=lambda: path.write_text(text), daemon=True).start()
    tracemalloc.start()
    try:
        assert read_text(path, "trace")[1] == text
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


@pytest.mark.parametrize(
    ("knobs", "option"),
    [
        ({"on_error": "ignore"}, "on_error"),
        ({"gpu_scale": 0}, "gpu_scale"),
        ({"gpu_scale": math.nan}, "gpu_scale"),
        ({"arrival_scale": -1.0}, "arrival_scale"),
        ({"time_window": (5.0, 1.0)}, "time_window"),
        ({"time_window": (-1.0, 1.0)}, "time_window"),
        ({"time_window": 7}, "time_window"),
        ({"max_jobs": -1}, "max_jobs"),
    ],
    ids=["on-error", "gpu-scale-0", "gpu-scale-nan", "arrival-negative", "window-reversed", "window-negative",
         "window-not-a-pair", "max-jobs-negative"],
)  # fmt: skip
def test_bad_options_are_spec_errors(tmp_path: Path, knobs: dict[str, object], option: str) -> None:
    path = write(tmp_path, "p.csv", *PHILLY_SMALL)
    for loader in (load_philly, load_alibaba_pods, load_generic):
        with pytest.raises(SpecError) as err:
            loader(path, **knobs)  # type: ignore[arg-type]
        assert [p.path for p in err.value.problems] == [option]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.lists(st.text(alphabet="0123456789-:. ,e+naif\"'x", max_size=12), min_size=0, max_size=6).map(",".join),
        max_size=5,
    )
)
def test_any_rows_give_jobs_or_problems_never_a_traceback(tmp_path: Path, rows: list[str]) -> None:
    path = write(tmp_path, "fuzz.csv", PHILLY_HEADER, *rows)
    got = load_philly(path)
    assert all(p.line is not None for p in got.skipped)
    assert all(j.total_gpus >= 1 and (j.duration_estimate_s or 0.0) >= 0 for j in got.jobs)


# ----------------------------------------------------------------------------------------- Alibaba mapping
def test_alibaba_pod_mapping(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        POD_HEADER,
        "whole,8000,16384,4,1000,V100M16|V100M32,LS,Running,20,120,25",
        "share,6000,12288,1,460,,BE,Pending,10,,",
        "cpu,2000,4096,0,0,,Burstable,Succeeded,0,5,0",
    )
    got = load_alibaba_pods(path, tenant_map={"BE": "best-effort"}, gpu_scale=2.0)
    assert got.skipped == ()
    assert got.jobs == (
        batch("cpu", gpus=0, cpu_milli=2000, memory_mib=4096, queue="Burstable", duration_estimate_s=5.0),
        batch("share", gpu_milli=460, cpu_milli=6000, memory_mib=12288, queue="best-effort", submit_time=10.0),
        batch(
            "whole",
            gpus=8,  # 4 x gpu_scale 2; shares and CPU-only pods are not scaled
            cpu_milli=8000,
            memory_mib=16384,
            gpu_models=frozenset({"V100M16", "V100M32"}),
            queue="LS",
            duration_estimate_s=100.0,
            submit_time=20.0,
        ),
    )
    assert got.jobs[0].unit.gpus == 0 and got.jobs[0].unit.gpu_milli == 0
    windowed = load_alibaba_pods(path, time_window=(5, 100), arrival_scale=5.0)
    assert [(j.name, j.submit_time) for j in windowed.jobs] == [("share", 1.0), ("whole", 3.0)]


def test_alibaba_nodes_mapping_and_cpu_only_nodes(tmp_path: Path) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER, "n0,96000,393216,8,G2", "n1,64000,262144,0,", "n2,8000,1024,0,T4")
    cluster = load_alibaba_nodes(path)
    assert [(n.name, n.gpus, n.gpu_model, n.cpu_milli, n.memory_mib) for n in cluster.nodes] == [
        ("n0", 8, "G2", 96000, 393216),
        ("n1", 0, "", 64000, 262144),
        ("n2", 0, "", 8000, 1024),
    ]
    assert [(r.name, r.gpus, r.gpu_model) for r in cluster.racks] == [("n0", 8, "G2"), ("n1", 0, ""), ("n2", 0, "")]
    assert cluster.total_gpus == 8 and cluster.name == "alibaba-openb"
    assert [g.name for g in cluster.regions] == ["region-0"]


@pytest.mark.parametrize(
    ("rows", "problems"),
    [
        (["n0,96000,393216,8,"], [(2, "model", "missing value")]),
        (["n0,96000,393216,8,G2", "n0,1,1,1,T4"], [(3, "sn", "already on line 2")]),
        (["n0,96000,393216,x,G2", "n1,-1,1,1,T4"], [(2, "gpu", "not a number"), (3, "cpu_milli", "must be >= 0")]),
        ([], [(1, "", "no nodes")]),
    ],
    ids=["gpu-node-without-model", "duplicate-sn", "bad-numbers", "no-rows"],
)
def test_alibaba_nodes_reject_bad_rows(tmp_path: Path, rows: list[str], problems: list[tuple[int, str, str]]) -> None:
    path = write(tmp_path, "nodes.csv", NODE_HEADER, *rows)
    with pytest.raises(SpecError) as err:
        load_alibaba_nodes(path)
    got = err.value.problems
    assert [(p.line, p.path) for p in got] == [(line, col) for line, col, _ in problems]
    assert all(msg in p.message for p, (_, _, msg) in zip(got, problems, strict=True))


# ----------------------------------------------------------------------------------------- generic
def test_generic_csv_mapping(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.csv",
        GENERIC_HEADER,
        "t1,training,30,3600,16,,4000,8192,research,high-priority,GB200",
        "s1,inference,10,,4,,,,prod,1000,H100|GB200",
        "b1,batch,20,60,1,250,,,,-5,",
        "c1,batch,20,60,0,,1000,,,,",
    )
    got = load_generic(path, tenant_map={"prod": "production"})
    assert got.skipped == ()
    assert got.jobs == (
        inference(
            "s1", 1, gpus_per_replica=4, gpu_models=frozenset({"H100", "GB200"}), queue="production", priority=1000,
            submit_time=10.0,
        ),
        batch("b1", gpu_milli=250, priority=-5, submit_time=20.0, duration_estimate_s=60.0),
        batch("c1", gpus=0, cpu_milli=1000, submit_time=20.0, duration_estimate_s=60.0),
        training(
            "t1", 16, cpu_milli=4000, memory_mib=8192, gpu_models=frozenset({"GB200"}), queue="research",
            priority=BUILTIN_PRIORITY_CLASSES["high-priority"], submit_time=30.0, duration_estimate_s=3600.0,
        ),
    )  # fmt: skip
    assert load_trace(f"csv:{path}", tenant_map={"prod": "production"}) == got
    doubled = load_generic(path, gpu_scale=2.0)
    assert [j.unit.gpus * j.units for j in doubled.jobs] == [8, 0, 0, 32]  # shares and CPU tasks stay


def test_generic_jsonl_takes_generic_keys_and_yaml_job_documents(tmp_path: Path) -> None:
    lines = [
        {"name": "t1", "kind": "training", "submit_time": 5, "gpus": 8, "gpu_models": ["GB200"]},
        {"name": "svc", "kind": "inference", "replicas": 2, "gpusPerReplica": 4, "submitTime": 1, "queue": "prod"},
        {"apiVersion": "rackscale.io/v1", "kind": "Job", "metadata": {"name": "k"}, "spec": {"kind": "batch"}},
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(doc) for doc in lines) + "\n\n", encoding="utf-8")
    got = load_generic(path, tenant_map={"prod": "production"}, gpu_scale=2.0)
    assert got.skipped == ()
    by_name = {j.name: j for j in got.jobs}
    assert [j.name for j in got.jobs] == ["k", "svc", "t1"]
    assert by_name["t1"] == training("t1", 16, gpu_models=frozenset({"GB200"}), submit_time=5.0)
    assert (by_name["svc"].units, by_name["svc"].unit.gpus, by_name["svc"].queue) == (2, 8, "production")
    assert by_name["k"].kind is JobKind.BATCH
    assert load_trace(f"jsonl:{path}", tenant_map={"prod": "production"}, gpu_scale=2.0) == got


@pytest.mark.parametrize(
    ("line", "path", "message"),
    [
        ("{not json", "", "invalid JSON"),
        ("[1, 2]", "", "expected a JSON object, got list"),
        ('{"name": "a", "kind": "training", "submit_time": 0, "gpus": true}', "gpus", "not a number"),
        ('{"name": "a", "kind": "training", "gpus": 8, "submitTime": -1}', "submitTime", "must be >= 0"),
        ('{"name": "a", "kind": "training", "gpus": 8, "bogus": 1}', "bogus", "unknown field"),
    ],
    ids=["not-json", "not-an-object", "generic-bool", "yaml-form-range", "yaml-form-unknown-key"],
)
def test_generic_jsonl_bad_lines(tmp_path: Path, line: str, path: str, message: str) -> None:
    good = json.dumps({"name": "ok", "kind": "batch", "submit_time": 0, "gpus": 1})
    trace = write(tmp_path, "t.jsonl", good, line)
    got = load_generic(trace)
    assert [j.name for j in got.jobs] == ["ok"]
    (problem,) = got.skipped
    assert (problem.line, problem.path) == (2, path)
    assert message in problem.message
    with pytest.raises(SpecError, match=f"{trace}:2: "):
        load_generic(trace, on_error="reject")


def test_generic_format_is_chosen_by_suffix_or_content(tmp_path: Path) -> None:
    doc = json.dumps({"name": "a", "kind": "batch", "submit_time": 0, "gpus": 1})
    sniffed = write(tmp_path, "trace.txt", doc)
    assert [j.name for j in load_generic(sniffed).jobs] == ["a"]
    csv_txt = write(tmp_path, "trace.data", GENERIC_HEADER, GOOD_ROW)
    assert [j.name for j in load_generic(csv_txt).jobs] == ["ok"]


# ----------------------------------------------------------------------------------------- load_trace
@pytest.mark.parametrize(
    ("spec", "message", "fix"),
    [
        ("helios:trace.csv", "unknown trace format 'helios'", "philly"),
        ("phily:trace.csv", "unknown trace format", "did you mean philly:?"),
        ("trace.csv", "expected FORMAT:PATH", "alibaba"),
        ("philly:", "expected FORMAT:PATH", "jsonl"),
    ],
    ids=["unknown", "typo", "no-format", "no-path"],
)
def test_load_trace_spec_errors(spec: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as err:
        load_trace(spec)
    (problem,) = err.value.problems
    assert message in problem.message
    assert fix in problem.fix
    for fmt in ("philly", "alibaba", "csv", "jsonl"):
        assert fmt in problem.fix


def test_load_trace_passes_the_knobs(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", *PHILLY_SMALL)
    got = load_trace(f"PHILLY:{path}", gpu_scale=2.0, max_jobs=2)
    assert [j.total_gpus for j in got.jobs] == [4, 2]
    assert got.source == str(path)


def test_trace_load_is_frozen(tmp_path: Path) -> None:
    got = load_philly(write(tmp_path, "p.csv", *PHILLY_SMALL))
    assert isinstance(got.jobs, tuple) and all(isinstance(j, JobSpec) for j in got.jobs)
    with pytest.raises(AttributeError):
        got.jobs = ()  # type: ignore[misc]


def test_alibaba_five_column_pod_list_loads(tmp_path: Path) -> None:
    """gpu_spec and creation_time are optional: any model, submitted at 0 (the FGD experiment's lists)."""
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,512,1,250\np1,2000,1024,2,1000\n")
    got = load_trace(f"alibaba:{path}", on_error="reject")
    assert [(j.unit.gpu_milli, j.unit.gpus, j.unit.gpu_models, j.submit_time) for j in got.jobs] == [
        (250, 0, None, 0.0),
        (0, 2, None, 0.0),
    ]


@pytest.mark.parametrize(
    ("header", "bad", "column", "shown"),
    [
        (PHILLY_HEADER, "2017-10-09 07:01:55,66,1,66,v\x00c", "cluster", "a NUL byte"),
        (POD_HEADER, "p\x1b[31m,1000,1024,1,1000,,LS,Running,0,10,0", "name", "the control character \\x1b"),
        (POD_HEADER, "p1,1000,1024,1,1000,,L\u202eS,Running,0,10,0", "qos", "the bidirectional control \\u202e"),
        (GENERIC_HEADER, "j\x7f1,batch,0,10,1,,,,,,", "name", "the control character \\x7f"),
        (GENERIC_HEADER, "j1,batch,0,10,1,,,,q\x9b,,", "queue", "the control character \\x9b"),
    ],
    ids=["philly-nul", "pod-escape", "pod-bidi", "generic-del", "generic-c1"],
)
def test_hostile_characters_in_a_trace_are_a_bad_row(
    tmp_path: Path, header: str, bad: str, column: str, shown: str
) -> None:
    """Trace text follows the one string rule (model/text.py): no control, bidi or NUL characters reach a
    job's name or queue; the row is skipped (or the file rejected) naming the column and the character."""
    good = {PHILLY_HEADER: GOOD, POD_HEADER: GOOD_POD, GENERIC_HEADER: GOOD_ROW}[header]
    path = write(tmp_path, "t.csv", header, good, bad)
    loader = {PHILLY_HEADER: load_philly, POD_HEADER: load_alibaba_pods, GENERIC_HEADER: load_generic}[header]
    skipped = loader(path)
    assert len(skipped.jobs) == 1
    (problem,) = skipped.skipped
    assert (problem.line, problem.path) == (3, column) and shown in problem.message
    with pytest.raises(SpecError):
        loader(path, on_error="reject")
