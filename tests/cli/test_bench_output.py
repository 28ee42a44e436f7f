"""``-o json|yaml|table`` and ``--json`` on every ``rackscale bench`` verb and on ``rackscale slurm compare``.

The rule of every verb: ``-o json`` is the JSON document (``--json`` stays its synonym, byte for byte), ``-o yaml``
the same document as YAML, ``-o table`` (the default) the table; ``--json`` beside another ``-o`` and an unknown
``-o`` are one error line (exit 2) before anything runs.

A benchmark's document holds timings, so two runs never print the same one: each verb's output is compared on a
fixed document that a fake of its benchmark function returns. Where the benchmark is cheap (placement, simulate,
predict, perf) that document is one real tiny run's, captured once per module, and a real tiny ``-o yaml`` run
is checked too; the service benchmark (a server and its clients), ``perf-peer`` (aiconfigurator's 850 MB venv)
and ``slurm compare`` (a running Slurm, as root) are only ever faked, on made-up documents of their shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from tests.cli.test_bench_hostile import invoke, one_error_line


def same(a: Any, b: Any) -> bool:
    """Equal documents, NaN included (NaN != NaN as a float): compared as Python writes them in JSON."""
    return json.dumps(a, allow_nan=True) == json.dumps(b, allow_nan=True)


def as_read_back(doc: Any) -> Any:
    """What a document reads back as from JSON (a tuple a list, every key a string)."""
    return json.loads(json.dumps(doc))


# ------------------------------------------------------------------------------------------ fixed documents
def _philly_csv(path: Path) -> Path:
    """A Philly-shaped trace of 60 jobs in 3 virtual clusters: enough history for the predictors to answer."""
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(60):
        gpus = (1, 2, 4)[i % 3]
        duration = 60.0 * (1 + (i * 7) % 13)
        lines.append(f"2017-10-09 {i // 60:02d}:{i % 60:02d}:00,{duration},{gpus},{duration * gpus},vc{i % 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real tiny run of each cheap benchmark, through the CLI's ``--json`` (a few seconds each)."""
    philly = _philly_csv(tmp_path_factory.mktemp("philly") / "philly.csv")
    runs = {
        "placement": ["placement", "--gpus", "720", "--decisions", "50", "--pending", "20", "--policy", "rackscale"],
        "simulate": ["simulate", "--scenario", "synthetic", "--seeds", "1"],
        "predict": ["predict", "--philly", str(philly)],
        "perf": ["perf", "--repeat", "1"],
    }
    docs: dict[str, Any] = {}
    for name, args in runs.items():
        code, out, err = invoke("bench", *args, "--json")
        assert code == 0, err
        docs[name] = json.loads(out)
    return docs


# The made-up documents of the verbs never run here, each with a NaN where the real one can hold one (a
# cycle mean of no cycles, a step the peer could not time): YAML must keep it a number, as JSON does.
SERVICE_DOC: dict[str, Any] = {
    "params": {
        "jobs": 50,
        "concurrency": 2,
        "workers": 1,
        "durability": "normal",
        "racks": 1,
        "speed": 100.0,
        "rate": 0.0,
    },
    "accepted": 50,
    "submissions_per_s": 275.6,
    "latency_ms": {"p50": 6.2, "p99": 11.0, "max": 11.0},
    "non_2xx": {},
    "no_reply": 0,
    "wall_s": 0.181,
    "cpu_s": {"server": 0.16, "clients": 0.2},
    "scheduled_during_load": 7.0,
    "finished_during_load": 0.0,
    "cycles_during_load": {"count": 0.0, "mean_ms": math.nan, "over_50ms": 0.0},
    "jobs_by_status": {"pending": 43, "running": 7, "completed": 0},
    "crash": None,
    "ok": True,
    "verdict": {"ok": True, "store_problems": [], "allocation_problems": []},
}

SCALE_DOC: dict[str, Any] = {
    "params": {"racks": 2, "backlog": 10, "rate": 1000.0},
    "ready_s": 1.5,
    "fill": {"cluster": {"pending": 10, "running": 14}},
    "load": {
        "submissions_per_s": 998.0,
        "latency_ms": {"p50": 2.0, "p99": 9.5, "max": 12.0},
        "non_2xx": {},
        "no_reply": 0,
    },
    "churn": {"scheduled": 3, "finished": 1},
    "cycles": {"count": 0, "mean_ms": math.nan, "p99_le_s": 0.05, "over_1s": 0},
    "list_page_ms": {"limit": 500, "p50": 3.0, "p99": 7.0},
    "metrics_scrape_ms": {"p50": 10.0, "max": 20.0, "bytes": 12345},
    "page": None,
    "server_rss_idle_mb": {"rss": 120.0},
    "server_rss_end_mb": {"peak": 150.0},
    "verdict": {"store_problems": [], "allocation_problems": []},
    "ok": True,
}

PEER_AIC = {"tok_s_gpu": 1234.5, "tok_s_user": 56.7, "step_s": math.nan}
PEER_OURS = {"tok_s_gpu": 1200.0, "tok_s_user": 55.0, "step_s": 0.0175, "dominant": "hbm-weights"}


def _compare_results() -> list[Any]:
    from rackscale.bench.slurm_compare import RunResult

    return [
        RunResult(label="slurm --switches=1", jobs=4, started=4, one_rack=3, mean_wait_s=1.5, makespan_s=20.0),
        RunResult(label="rackscale", jobs=4, started=4, one_rack=4, mean_wait_s=1.25, makespan_s=18.5, mean_jct_s=9.0),
    ]


# ------------------------------------------------------------------------------------------ the verbs
@dataclass(frozen=True)
class Verb:
    """A verb's command line, how to fake its benchmark (returning the fixed document; counting calls), that
    document as the JSON output should read, and a string its table (only) shows."""

    id: str
    args: tuple[str, ...]
    fake: Callable[[pytest.MonkeyPatch, dict[str, Any], list[int]], Any]
    in_table: str
    cheap: bool = False  # its fixed document is a real run's (the ``real`` fixture)


def _returning(doc: Any, calls: list[int]) -> Callable[..., Any]:
    def fake(*_args: Any, **_kwargs: Any) -> Any:
        calls.append(1)
        return deepcopy(doc)

    return fake


Fake = Callable[[pytest.MonkeyPatch, dict[str, Any], list[int]], Any]


def _real_run(target: str, key: str) -> Fake:
    """A fake of the benchmark function at ``target`` (dotted) returning the real tiny run's ``key``."""

    def fake(mp: pytest.MonkeyPatch, real: dict[str, Any], calls: list[int]) -> Any:
        mp.setattr(target, _returning(real[key], calls))
        return real[key]

    return fake


def _made_up(target: str, doc: Any) -> Fake:
    """A fake of the benchmark function at ``target`` returning ``doc``, a made-up document of its shape."""

    def fake(mp: pytest.MonkeyPatch, _real: dict[str, Any], calls: list[int]) -> Any:
        mp.setattr(target, _returning(doc, calls))
        return doc

    return fake


_fake_placement = _real_run("rackscale.cli.bench.run_benchmark", "placement")
_fake_simulate = _real_run("rackscale.bench.simulate.run_simulation_benchmark", "simulate")
_fake_predict = _real_run("rackscale.bench.predict.run_predict_benchmark", "predict")
_fake_perf = _real_run("rackscale.cli.bench_perf.perf_report", "perf")


def _fake_perf_peer(mp: pytest.MonkeyPatch, _real: dict[str, Any], calls: list[int]) -> Any:
    from rackscale.bench import perf_peer, perf_peer_ours

    mp.setattr(perf_peer, "run_peer", _returning(PEER_AIC, calls))
    mp.setattr(perf_peer_ours, "ours", _returning(PEER_OURS, []))
    rows = [{"config": c.key, "aiconfigurator": PEER_AIC, "rackscale": PEER_OURS} for c in perf_peer.PEER_CONFIGS]
    return {"aiconfigurator_version": perf_peer.AIC_VERSION, "rows": rows}


_fake_service = _made_up("rackscale.bench.service.run_service_benchmark", SERVICE_DOC)
_fake_service_scale = _made_up("rackscale.bench.service_scale.run_scale_benchmark", SCALE_DOC)


def _fake_slurm_compare(mp: pytest.MonkeyPatch, _real: dict[str, Any], calls: list[int]) -> Any:
    from rackscale.bench import slurm_compare
    from rackscale.slurm import emulated

    @contextmanager
    def running(*_args: Any, **_kwargs: Any) -> Iterator[Any]:
        yield SimpleNamespace(slurm=None)  # no Slurm: the comparison itself is faked

    mp.setattr(emulated, "running", running)
    mp.setattr(slurm_compare, "compare", _returning(_compare_results(), calls))
    return [r.row() for r in _compare_results()]


VERBS = [
    Verb("bench placement", ("bench", "placement", "--gpus", "720"), _fake_placement, "Placement benchmark", True),
    Verb("bench simulate", ("bench", "simulate", "--scenario", "synthetic"), _fake_simulate, "scenario / policy", True),
    Verb("bench predict", ("bench", "predict"), _fake_predict, "Philly jobs", True),
    Verb("bench perf", ("bench", "perf", "--repeat", "1"), _fake_perf, "published figures", True),
    Verb("bench perf-peer", ("bench", "perf-peer"), _fake_perf_peer, "rackscale vs aiconfigurator"),
    Verb("bench service", ("bench", "service", "--jobs", "50"), _fake_service, "Service load"),
    Verb(
        "bench service --backlog",
        ("bench", "service", "--backlog", "10", "--page-loads", "0"),
        _fake_service_scale,
        "Service at scale",
    ),
    Verb("slurm compare", ("slurm", "compare", "--jobs", "4"), _fake_slurm_compare, "inside one rack"),
]
IDS = [v.id for v in VERBS]


@pytest.fixture
def verb_doc(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Verb, Any, list[int]]]:
    verb: Verb = request.param
    # Only the cheap verbs need the real runs: the others' tests do not wait for them.
    docs = request.getfixturevalue("real") if verb.cheap else {}
    calls: list[int] = []
    doc = verb.fake(monkeypatch, docs, calls)
    yield verb, as_read_back(doc), calls


parametrize_verbs = pytest.mark.parametrize("verb_doc", VERBS, ids=IDS, indirect=True)


# ------------------------------------------------------------------------------------------ the tests
@parametrize_verbs
def test_o_json_is_the_document_and_json_is_its_synonym(verb_doc: tuple[Verb, Any, list[int]]) -> None:
    verb, doc, _ = verb_doc
    code, out, err = invoke(*verb.args, "-o", "json")
    assert code == 0, err
    assert same(json.loads(out), doc)
    code, legacy, err = invoke(*verb.args, "--json")
    assert code == 0, err
    assert legacy == out  # --json prints what it always has, byte for byte
    code, both, err = invoke(*verb.args, "--json", "-o", "json")  # the two agree: no error
    assert code == 0 and both == out, err


@parametrize_verbs
def test_o_yaml_is_the_same_document(verb_doc: tuple[Verb, Any, list[int]]) -> None:
    verb, doc, _ = verb_doc
    code, out, err = invoke(*verb.args, "-o", "yaml")
    assert code == 0, err
    assert "!!" not in out  # plain YAML: no Python (or any other) tag
    assert same(yaml.safe_load(out), doc)


@parametrize_verbs
def test_o_table_is_the_table_and_the_default(verb_doc: tuple[Verb, Any, list[int]]) -> None:
    verb, _, _ = verb_doc
    code, out, err = invoke(*verb.args, "-o", "table")
    assert code == 0, err
    assert verb.in_table in out
    assert not out.lstrip().startswith(("{", "[")), out
    code, default, err = invoke(*verb.args)
    assert code == 0, err
    assert verb.in_table in default


@parametrize_verbs
@pytest.mark.parametrize("other", ["yaml", "table"])
def test_json_beside_another_output_is_refused_before_the_run(
    verb_doc: tuple[Verb, Any, list[int]], other: str
) -> None:
    verb, _, calls = verb_doc
    code, out, err = invoke(*verb.args, "--json", "-o", other)
    assert code == 2 and out == ""
    assert f"--json means -o json, and -o {other} was given too: give one of them" in one_error_line(err)
    assert calls == []  # nothing measured (nor any server, venv or Slurm started) for a refused command line


@parametrize_verbs
def test_an_unknown_output_is_refused_naming_the_choices(verb_doc: tuple[Verb, Any, list[int]]) -> None:
    verb, _, calls = verb_doc
    code, out, err = invoke(*verb.args, "-o", "xml")
    assert code == 2 and out == ""
    assert "--output: 'xml' is not one of 'table', 'json', 'yaml'" in one_error_line(err)
    assert calls == []


# ------------------------------------------------------------------------------------------ non-finite floats
def test_a_non_finite_float_stays_a_number_in_yaml(real: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """perf's real document holds an infinite conditioning (a published read off its curve): JSON writes
    ``Infinity`` (as it always has), YAML ``.inf``, and both read back as the float; NaN likewise. And YAML is
    of the document the JSON reads back as: a tuple a list, an int key a string."""
    from rackscale.cli.output import OutputFormat, emit_document

    assert any(row["conditioning"] == math.inf for row in real["perf"]["serving"])
    doc = {"inf": math.inf, "minus_inf": -math.inf, "nan": math.nan, "pair": (1, 2), "by_size": {720: 1.5}}
    emit_document(doc, OutputFormat.json)
    as_json = capsys.readouterr().out
    assert '"inf": Infinity' in as_json and '"nan": NaN' in as_json
    emit_document(doc, OutputFormat.yaml)
    text = capsys.readouterr().out
    assert same(yaml.safe_load(text), json.loads(as_json))
    assert "inf: .inf" in text and "minus_inf: -.inf" in text and "nan: .nan" in text
    back = yaml.safe_load(text)
    assert back["inf"] == math.inf and back["minus_inf"] == -math.inf and math.isnan(back["nan"])
    assert back["pair"] == [1, 2] and back["by_size"] == {"720": 1.5}  # as the JSON reads back


# ------------------------------------------------------------------------------------------ real tiny runs
def _shape(doc: Any) -> Any:
    """The keys of a document, nested, without its values (a run's timings differ from another's)."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(v) for v in doc[:1]]
    return None


REAL = [
    ("placement", ["placement", "--gpus", "720", "--decisions", "50", "--pending", "20", "--policy", "rackscale"]),
    ("perf", ["perf", "--repeat", "1"]),
]


@pytest.mark.parametrize(("name", "args"), REAL, ids=[n for n, _ in REAL])
def test_a_real_tiny_run_prints_yaml_of_the_json_document(real: dict[str, Any], name: str, args: list[str]) -> None:
    """No fake: the benchmark runs (tiny), and its YAML has the keys the real ``--json`` run printed."""
    code, out, err = invoke("bench", *args, "-o", "yaml")
    assert code == 0, err
    assert _shape(yaml.safe_load(out)) == _shape(real[name])
