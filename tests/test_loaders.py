"""Reading specs from files and text: layouts, the example files, and errors that name file and line."""

from __future__ import annotations

import json
import os
import re
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale import pipes
from rackscale.loaders import (
    SpecError,
    load_any,
    load_cluster,
    load_jobs,
    parse_cluster_text,
    parse_jobs_text,
)
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobKind, JobSpec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SEED_TEXT = """\
apiVersion: nvidia.com/v1
kind: GpuCluster
metadata:
  name: high-perf-cluster
spec:
  gpuType: A100
  gpuCount: 72
  nvlink: enabled
  rdma: enabled
"""


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_seed_example_is_the_seed_resource_verbatim() -> None:
    assert (EXAMPLES / "seed-gpucluster.yaml").read_text() == SEED_TEXT


# ------------------------------------------------------------------------------------------ examples
@pytest.mark.parametrize(
    ("file", "name", "gpus", "regions", "racks", "models"),
    [
        ("seed-gpucluster.yaml", "high-perf-cluster", 72, 1, 1, ("A100",)),
        ("cluster-nvl72.yaml", "nvl72-2x4", 576, 2, 8, ("GB200",)),
        ("cluster-hetero.yaml", "hetero", 240, 2, 14, ("A100", "GB200", "H100")),
    ],
    ids=["seed", "nvl72", "hetero"],
)
def test_example_clusters(file: str, name: str, gpus: int, regions: int, racks: int, models: tuple[str, ...]) -> None:
    c = load_cluster(EXAMPLES / file)
    assert (c.name, c.total_gpus, len(c.regions), len(c.racks), c.gpu_models) == (name, gpus, regions, racks, models)
    assert load_any(EXAMPLES / file) == c


@pytest.mark.parametrize(
    ("file", "kind", "units", "gpu_demand_milli", "priority"),
    [
        ("train-72.yaml", JobKind.TRAINING, 18, 72_000, 1_000_000),
        ("inference.yaml", JobKind.INFERENCE, 8, 8_000, 10_000),
        ("batch-shared.yaml", JobKind.BATCH, 16, 8_000, -1000),
    ],
    ids=["train-72", "inference", "batch-shared"],
)
def test_example_jobs(file: str, kind: JobKind, units: int, gpu_demand_milli: int, priority: int) -> None:
    [job] = load_jobs(EXAMPLES / file)
    assert (job.kind, job.units, job.gpu_demand_milli, job.priority) == (kind, units, gpu_demand_milli, priority)
    assert load_any(EXAMPLES / file) == [job]


def test_example_details() -> None:
    [train] = load_jobs(EXAMPLES / "train-72.yaml")
    assert train.comm.bytes_per_step == 2e10  # YAML 1.1 would read `2.0e10` as a string
    [serve] = load_jobs(EXAMPLES / "inference.yaml")
    assert (serve.min_units, serve.max_units, serve.unit.gpus) == (2, 16, 1)
    [shared] = load_jobs(EXAMPLES / "batch-shared.yaml")
    assert (shared.unit.gpus, shared.unit.gpu_milli) == (0, 500)


# ------------------------------------------------------------------------------------------ layouts
JOB_A = {"name": "a", "kind": "training", "gpus": 8}
JOB_B = {"apiVersion": "rackscale.io/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"kind": "batch"}}


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (yaml.safe_dump(JOB_A), ["a"]),
        (yaml.safe_dump_all([JOB_A, JOB_B]), ["a", "b"]),
        ("---\n" + yaml.safe_dump_all([JOB_A, None, JOB_B]) + "---\n", ["a", "b"]),
        (yaml.safe_dump([JOB_A, JOB_B]), ["a", "b"]),
        (yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [JOB_A, JOB_B]}), ["a", "b"]),
        (json.dumps(JOB_A), ["a"]),
        (json.dumps([JOB_A, JOB_B], indent="\t"), ["a", "b"]),
        ("", []),
        ("# nothing here\n", []),
        ("{name: a, kind: training, gpus: 8}", ["a"]),  # YAML flow style, not JSON
    ],
    ids=["one", "stream", "stream-empty-docs", "list", "k8s-List", "json", "json-tabs", "empty", "comment", "flow"],
)
def test_job_layouts(text: str, names: list[str]) -> None:
    assert [j.name for j in parse_jobs_text(text)] == names


def test_priority_classes_reach_file_loading(tmp_path: Path) -> None:
    f = tmp_path / "j.yaml"
    f.write_text(yaml.safe_dump({**JOB_A, "priorityClassName": "gold"}))
    assert load_jobs(f, priority_classes={"gold": 7})[0].priority == 7
    with pytest.raises(SpecError, match="unknown priority class 'gold'"):
        load_jobs(f)


def test_cluster_from_json_text() -> None:
    doc = yaml.safe_load(SEED_TEXT)
    assert parse_cluster_text(json.dumps(doc, indent=2)) == parse_cluster_text(SEED_TEXT)


# ------------------------------------------------------------------------------------------ errors
CLUSTER_BAD = """
apiVersion: rackscale.io/v1
kind: Cluster
metadata:
  name: c
spec:
  regions: 2
  tiers:
    rdma:
      bandwidthGbps: -100
  pools:
    - name: a
      gpuType: H100
"""
JOBS_BAD = """
name: ok
kind: batch
---
apiVersion: rackscale.io/v1
kind: Job
metadata:
  name: bad
spec:
  kind: training
  gpus: 12
  gpusPerWorker: 8
---
name: ok
kind: batch
"""
# (parser, text, lines of str(SpecError) expected, in order, each as a prefix)
BIG_INT = "1" * 5000
BIG_INT_SAYS = "an integer of 5,000 digits, more than the 4,300 Python reads"
TEXT_ERRORS = [
    (parse_cluster_text, "kind: Cluster\n  bad: [", ["f.yaml:2: invalid YAML: mapping values are not allowed"]),
    (parse_cluster_text, CLUSTER_BAD, [
        "f.yaml:11: spec.pools[0].racks: required field is missing",
        "f.yaml:9: spec.tiers.rdma.bandwidthGbps: must be > 0, got -100",
    ]),
    (parse_cluster_text, SEED_TEXT.replace("72", "70"), ["f.yaml:7: spec.gpuCount: 70 GPUs do not fill whole nodes"]),
    (parse_cluster_text, SEED_TEXT.replace("  rdma", "  rdmaa"), ["f.yaml:9: spec.rdmaa: unknown field"]),
    (parse_cluster_text, SEED_TEXT.replace("  name: high-perf-cluster\n", ""), ["f.yaml:3: metadata: must be"]),
    (parse_cluster_text, "", ["f.yaml: no cluster document found"]),
    (parse_cluster_text, SEED_TEXT + "---\n" + SEED_TEXT, ["f.yaml:11: expected one cluster document, found 2"]),
    (parse_cluster_text, '{"kind": "Cluster",\n "spec": {]}', ["f.yaml:2: invalid JSON: Expecting property name"]),
    (parse_cluster_text, "- 1\n- 2\n", ["f.yaml:1: expected a cluster document (key: value pairs), got list"]),
    (parse_jobs_text, JOBS_BAD, [
        "f.yaml:10: [1].spec.gpus: 12 is not a positive multiple of gpusPerWorker (8)",
        "f.yaml:13: [2].name: job name 'ok' is already used by [0]",
    ]),
    (parse_jobs_text, "kind: List\nitems: {}\n", ["f.yaml:2: items: must be a list of jobs"]),
    (parse_jobs_text, "kind: List\nextra: 1\nitems: [{name: a, kind: batch, gpuMilli: 0}]\n", [
        "f.yaml:2: extra: unknown field",
        "f.yaml:3: items[0].gpuMilli: must be >= 1",
    ]),
    (parse_jobs_text, "- 3\n- {name: a, kind: batch}\n", ["f.yaml:1: [0]: expected a job document"]),
    (parse_jobs_text, "name: x\nsubmitTime: 2024-13-01\n", ["f.yaml:2: invalid YAML: month must be in 1..12"]),
    # Past Python's int digit limit (4,300): the refusal came without a line (and from JSON as a traceback).
    (parse_jobs_text, f"name: x\nkind: training\ngpus: {BIG_INT}\n", [f"f.yaml:3: {BIG_INT_SAYS}"]),
    (parse_jobs_text, f'{{"name": "x",\n "kind": "training",\n "gpus": {BIG_INT}}}', [f"f.yaml:3: {BIG_INT_SAYS}"]),
    (parse_jobs_text, f"- {{name: a, kind: batch}}\n- {{name: b, kind: batch, tasks: -{BIG_INT}}}\n", [
        f"f.yaml:2: {BIG_INT_SAYS}",
    ]),
    (parse_cluster_text, SEED_TEXT.replace("gpuCount: 72", f"gpuCount: {BIG_INT}"), [f"f.yaml:7: {BIG_INT_SAYS}"]),
    (parse_jobs_text, "name: x\nkind: batch\nsubmitTime: 2024-01-01\n", ["f.yaml:3: submitTime: must be a number"]),
    (parse_jobs_text, "a: !!python/object:os.system ls\n", ["f.yaml:1: invalid YAML: could not determine"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("parse", "text", "lines"),
    TEXT_ERRORS,
    ids=[
        "yaml-syntax", "cluster-fields", "seed-count", "seed-typo", "seed-metadata-null", "cluster-empty",
        "cluster-two-docs", "json-syntax", "cluster-list", "jobs-stream", "list-items", "list-extra",
        "jobs-scalar-item", "bad-date", "int-past-digit-limit", "json-int-past-digit-limit",
        "int-past-digit-limit-in-a-list", "seed-count-past-digit-limit", "date-as-time", "python-tag",
    ],
)  # fmt: skip
def test_errors_name_file_line_and_path(parse: Any, text: str, lines: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        parse(dedent(text) if text.startswith("\n") else text, source="f.yaml")
    got = str(info.value).splitlines()
    assert len(got) == len(lines), str(info.value)
    for line, prefix in zip(got, lines, strict=True):
        assert line.startswith(prefix), f"{line!r} does not start with {prefix!r}"
        assert "(fix: " in line


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "missing.yaml", "missing.yaml: file not found"),
        (lambda d: d, "cannot read"),
        (lambda d: (d / "bin.yaml").write_bytes(b"kind: \xff\xfe") and d / "bin.yaml", "bin.yaml: not UTF-8 text"),
    ],
    ids=["missing", "directory", "not-utf8"],
)
def test_file_errors(tmp_path: Path, setup: Any, message: str) -> None:
    path = setup(tmp_path)
    for load in (load_cluster, load_jobs, load_any):
        with pytest.raises(SpecError, match=message) as info:
            load(path)
        assert str(path) in str(info.value)


# ------------------------------------------------------------------------------------------ properties
json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
# Pieces of YAML syntax (and two characters YAML refuses) to splice into otherwise valid text.
yaml_bits = st.sampled_from([*":-[]{}#&*!|>'\"%@`,?\t\n ", "---\n", "kind: ", "spec:\n  ", "\xff", "\x00"])


@st.composite
def yamlish(draw: st.DrawFn) -> str:
    """YAML text: a valid spec with random edits, a dump of random data, or random characters."""
    base = draw(st.sampled_from([SEED_TEXT, yaml.safe_dump(JOB_A), yaml.safe_dump_all([JOB_A, JOB_B])]))
    base = draw(st.sampled_from([base, yaml.safe_dump(draw(json_like)), ""]))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(base)))
        cut = draw(st.integers(0, 3))
        base = base[:at] + draw(st.lists(yaml_bits, max_size=3).map("".join) | st.text(max_size=3)) + base[at + cut :]
    return base


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yamlish())
def test_any_text_gives_a_value_or_a_spec_error(text: str) -> None:
    try:
        assert isinstance(parse_cluster_text(text), GPUCluster)
    except SpecError as err:
        assert err.problems and err.source == "<string>"
    try:
        jobs = parse_jobs_text(text)
        assert all(isinstance(j, JobSpec) for j in jobs)
    except SpecError as err:
        assert err.problems and err.source == "<string>"


# ------------------------------------------------------------------------------------------ bounds
def laughs(width: int = 9, levels: int = 9, *, style: str = "list", indent: str = "") -> str:
    """A "billion laughs": each anchor holds ``width`` aliases of the one before (``width**levels`` values)."""

    def collection(items: list[str]) -> str:
        if style == "map":
            return "{" + ", ".join(f"k{i}: {v}" for i, v in enumerate(items)) + "}"
        if style == "mixed":
            return "[" + ", ".join(f"{{k: {v}}}" for v in items) + "]"
        return "[" + ", ".join(items) + "]"

    lines = [f"l0: &l0 {collection(['lol'] * width)}"]
    lines += [f"l{i}: &l{i} {collection([f'*l{i - 1}'] * width)}" for i in range(1, levels)]
    return "".join(f"{indent}{line}\n" for line in lines)


ALIAS_BOMBS = {
    "lists-9x9": laughs(),
    "mappings-9x9": laughs(style="map"),
    "lists-of-mappings": laughs(style="mixed"),
    "deep-and-narrow-2x30": laughs(2, 30),
    "wide-2000-aliases-of-1000": "a: &a [" + ", ".join(["x"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 2000) + "]\n",
    "in-a-job-metadata-labels": "apiVersion: rackscale.io/v1\nkind: Job\nmetadata:\n  name: lol\n  labels:\n"
    + laughs(indent="    ")
    + "spec: {kind: training, gpus: 8}\n",
    "second-document": yaml.safe_dump(JOB_A) + "---\n" + laughs(),
    "json-looking-yaml": "[" + laughs(style="map").replace("\n", ", ").rstrip(", ") + "]",
}
EXPANDS = "the YAML expands to more than 1,000,000 values through aliases (&anchor / *alias)"
DEEP = "the document nests lists and mappings more than 64 levels deep"


@pytest.mark.parametrize("text", list(ALIAS_BOMBS.values()), ids=list(ALIAS_BOMBS))
def test_alias_bombs_are_refused_before_they_expand(text: str) -> None:
    """9**9 values from a few hundred bytes once took 3 GB and 39 s; now one walk of the nodes refuses it."""
    for parse in (parse_jobs_text, parse_cluster_text):
        with pytest.raises(SpecError) as info:
            parse(text, source="bomb.yaml")
        (problem,) = info.value.problems
        assert problem.message == EXPANDS, str(info.value)
        assert problem.line is not None and "(fix: " in str(info.value)
        assert str(info.value).startswith(f"bomb.yaml:{problem.line}: ")


def test_the_alias_bound_line_is_the_document_that_expands() -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs_text(ALIAS_BOMBS["second-document"], source="j.yaml")
    assert info.value.problems[0].line == 5  # JOB_A takes 3 lines, then `---`


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("defaults: &d {kind: training, gpus: 8}\njobs:\n" + "  - *d\n" * 50, id="few"),
        pytest.param("a: &a [" + ", ".join(["x"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 900) + "]\n", id="900k"),
    ],
)
def test_aliases_within_the_bound_still_load(text: str) -> None:
    from rackscale.loaders import documents

    assert documents(text, "ok.yaml")


def test_a_document_with_more_values_than_the_bound_but_no_aliases_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound counts values *gained* through aliases, not the document's own. A bound of 10,000 (not the
    real 1,000,000: pure-Python YAML takes half a minute on a million values) against 13,200 values."""
    from rackscale import loaders

    monkeypatch.setattr(loaders, "MAX_ALIAS_VALUES", 10_000)
    text = yaml.safe_dump({"items": [{"v": list(range(10))} for _ in range(1_200)]})
    assert loaders.documents(text, "ok.yaml")
    with pytest.raises(SpecError, match="10,000 values through aliases"):  # the lowered bound is the one in force
        loaders.documents("a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * 101) + "]\n", "x.yaml")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("[" * 65 + "]" * 65, 1, id="flow-lists-65"),
        pytest.param("{a: " * 65 + "1" + "}" * 65, 1, id="flow-mappings-65"),
        pytest.param("".join("  " * i + f"k{i}:\n" for i in range(70)) + "  " * 70 + "v\n", 65, id="block-70"),
        pytest.param("- " * 80 + "x\n", 1, id="block-sequence-80"),
        pytest.param("[" * 5000 + "]" * 5000, 1, id="json-5000"),
        pytest.param("a: " + "[" * 5000 + "]" * 5000, 1, id="yaml-5000"),
        pytest.param("a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n", 2, id="via-alias"),
    ],
)
def test_deep_nesting_is_a_clear_error(text: str, line: int | None) -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs_text(text, source="deep.yaml")
    (problem,) = info.value.problems
    assert problem.message == DEEP and problem.line == line, str(info.value)
    assert problem.fix == "flatten the document"


def test_64_levels_are_still_read() -> None:
    from rackscale.loaders import documents

    ((data, _node),) = documents("[" * 64 + "]" * 64, "ok.yaml")
    assert isinstance(data, list)


@pytest.mark.parametrize(
    "text", ["a: &a [1, *a]\n", "a: &a {b: [1, {c: *a}]}\n", "&a [*a]"], ids=["list", "nested-map", "root"]
)
def test_an_alias_inside_its_own_anchor_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="refers to a list or mapping that holds it") as info:
        parse_jobs_text(text, source="loop.yaml")
    assert info.value.problems[0].line == 1


def test_a_text_over_64_mib_is_refused_naming_its_size(tmp_path: Path) -> None:
    from rackscale.loaders import MAX_TEXT_CHARS

    text = "#" * (MAX_TEXT_CHARS + 2**20)
    with pytest.raises(SpecError, match=r"the text is 65 MiB, more than the 64 MiB a spec or config file may hold"):
        parse_jobs_text(text, source="big.yaml")
    f = tmp_path / "big.yaml"
    f.write_text(text)
    for load in (load_jobs, load_cluster, load_any):
        with pytest.raises(SpecError, match=r"big.yaml: the text is 65 MiB, more than the 64 MiB"):
            load(f)


def test_a_device_without_a_size_is_read_only_up_to_the_limit() -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(SpecError, match=r"/dev/zero: the text is more than 64 MiB"):
        load_jobs("/dev/zero")


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "pipe.yaml")
    return d / "pipe.yaml"


def _loop(d: Path) -> Path:
    (d / "loop.yaml").symlink_to(d / "loop.yaml")
    return d / "loop.yaml"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_fifo, "pipe.yaml: a named pipe (FIFO) that nothing wrote to in 0.2 s"),
        (_loop, "loop.yaml: cannot read: Too many levels of symbolic links"),
    ],
    ids=["fifo-without-writer", "symlink-loop"],
)
def test_a_path_that_never_gives_text_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: Any, message: str
) -> None:
    """A FIFO nobody writes to hung the open (and with it `apply -f`, `preflight --cluster-spec`, ...)."""
    monkeypatch.setattr(pipes, "FIFO_WAIT_S", 0.2)
    path = setup(tmp_path)
    for load in (load_cluster, load_jobs, load_any):
        got: list[BaseException] = []
        reader = threading.Thread(target=_catch, args=(load, path, got), daemon=True)
        reader.start()
        reader.join(5)  # a daemon thread: a hang fails the test instead of the run
        assert not reader.is_alive(), f"{load.__name__} hangs on {path}"
        assert len(got) == 1 and isinstance(got[0], SpecError) and message in str(got[0]), got


def _catch(load: Any, path: Path, into: list[BaseException]) -> None:
    try:
        load(path)
    except BaseException as e:  # the test checks which
        into.append(e)


def test_a_pipe_whose_writer_comes_is_read(tmp_path: Path) -> None:
    """`--cluster <(cmd)` and a FIFO whose writer starts a moment later still work."""
    path = _fifo(tmp_path)

    def write() -> None:
        time.sleep(0.3)
        path.write_text("name: train-1\nkind: training\ngpus: 8\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        (job,) = load_jobs(path)
    finally:
        writer.join()
    assert job.name == "train-1"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("server: http://x:8080\ntoken: abc\n", {"server": "http://x:8080", "token": "abc"}),
        ("", None),
        ("~\n", None),
        ("token: 123e45\n", {"token": "123e45"}),  # yaml.safe_load's YAML 1.1: a string, as before
        ("a: &a [1, 2]\nb: *a\n", {"a": [1, 2], "b": [1, 2]}),
    ],
    ids=["mapping", "empty", "null", "yaml-1.1-exponent", "small-alias"],
)
def test_safe_load_bounded_reads_like_safe_load(text: str, value: Any) -> None:
    from rackscale.loaders import safe_load_bounded

    assert safe_load_bounded(text, "cfg.yaml") == value == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (laughs(), EXPANDS),
        ("[" * 65 + "]" * 65, DEEP),
        ("a: [\n", "invalid YAML"),
        ("a: 1\n---\nb: 2\n", "expected a single document"),
        ("a: 1\nb: " + "9" * 5000 + "\n", f"tokens.yaml:2: {BIG_INT_SAYS}"),
    ],
    ids=["alias-bomb", "deep", "syntax", "two-documents", "int-past-digit-limit"],
)
def test_safe_load_bounded_refuses_with_a_spec_error(text: str, says: str) -> None:
    from rackscale.loaders import safe_load_bounded

    with pytest.raises(SpecError, match=re.escape(says)) as info:
        safe_load_bounded(text, "tokens.yaml")
    assert str(info.value).startswith("tokens.yaml")
