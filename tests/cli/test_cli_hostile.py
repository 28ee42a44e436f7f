"""Hostile text and hostile files: whatever a server, a job's log line or a spec file holds, the CLI prints
nothing a terminal would act on (ANSI/OSC escapes, CR, BS, bidi overrides, surrogates), and a YAML file can
neither expand without bound (aliases) nor nest without bound."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
import yaml
from rich.console import Console
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for
from tests.test_loaders import ALIAS_BOMBS, laughs
from typer.testing import CliRunner

from rackscale.cli import client as client_module
from rackscale.cli import output as output_module
from rackscale.cli.app import app
from rackscale.cli.client import table
from rackscale.cli.output import OutputFormat, emit, printable

runner = CliRunner()

# What no output line may hold raw (newlines aside): written out here, independent of the implementation.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
TITLE = "\x1b]0;pwned\x07"  # OSC 0: sets the terminal's title
CLEAR = "\x1b[2J"  # erases the screen
HOSTILE = f"{TITLE}{CLEAR}boom\rFAKE OK\x08\x08\u202eevil\x9b31m"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2Jboom\\x0dFAKE OK\\x08\\x08\\u202eevil\\x9b31m"


def strings(doc: Any) -> Iterator[str]:
    """Every string in a parsed JSON/YAML document."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings(v)


def raw(text: str) -> list[str]:
    """The characters of ``text`` that should have been escaped, as U+XXXX (empty when clean)."""
    return sorted({f"U+{ord(c):04X}" for c in RAW.findall(text)})


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("RACKSCALE_SERVER", "RACKSCALE_TOKEN", "RACKSCALE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def rs(*args: str, server: str | None = None) -> tuple[int, str, str]:
    """``rackscale ARGS [--server URL]``: (exit code, stdout, stderr); never a traceback."""
    result = runner.invoke(app, [*args, *(["--server", server] if server else [])])
    assert "Traceback" not in result.output, result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# ----------------------------------------------------------------------------------------- printable()
@pytest.mark.parametrize(
    ("text", "one_line", "lines"),
    [
        pytest.param("\x1b[2J", "\\x1b[2J", "\\x1b[2J", id="esc-csi"),
        pytest.param(TITLE, "\\x1b]0;pwned\\x07", "\\x1b]0;pwned\\x07", id="osc-title"),
        pytest.param("ok\rFAKE", "ok\\x0dFAKE", "ok\\x0dFAKE", id="carriage-return"),
        pytest.param("abc\x08\x08", "abc\\x08\\x08", "abc\\x08\\x08", id="backspace"),
        pytest.param("a\x00b", "a\\x00b", "a\\x00b", id="nul"),
        pytest.param("a\x07", "a\\x07", "a\\x07", id="bell"),
        pytest.param("\x7f", "\\x7f", "\\x7f", id="del"),
        pytest.param("\x9b2J\x85", "\\x9b2J\\x85", "\\x9b2J\\x85", id="c1-csi-and-nel"),
        pytest.param("abc\u202edcba", "abc\\u202edcba", "abc\\u202edcba", id="bidi-override"),
        pytest.param("\u202a\u202b", "\\u202a\\u202b", "\\u202a\\u202b", id="bidi-embeddings"),
        pytest.param("\u202c\u202d", "\\u202c\\u202d", "\\u202c\\u202d", id="bidi-pop-and-ltr-override"),
        pytest.param("\u2066x\u2067", "\\u2066x\\u2067", "\\u2066x\\u2067", id="isolates"),
        pytest.param("\u2068x\u2069", "\\u2068x\\u2069", "\\u2068x\\u2069", id="isolate-pop"),
        pytest.param("\u061c\u200e\u200f", "\\u061c\\u200e\\u200f", "\\u061c\\u200e\\u200f", id="direction-marks"),
        pytest.param("a\u2028b\u2029", "a\\u2028b\\u2029", "a\\u2028b\\u2029", id="line-separators"),
        pytest.param("x\ud800y\udfff", "x\\ud800y\\udfff", "x\\ud800y\\udfff", id="lone-surrogates"),
        pytest.param("a\tb", "a\\x09b", "a\tb", id="tab"),
        pytest.param("a\nb\n", "a\\x0ab\\x0a", "a\nb\n", id="newline"),
        pytest.param("é ü ß 中文 日本語 ✓ 🙂", "é ü ß 中文 日本語 ✓ 🙂", "é ü ß 中文 日本語 ✓ 🙂", id="plain-unicode"),
        pytest.param("C:\\x1b [b]x[/] :smile:", "C:\\x1b [b]x[/] :smile:", "C:\\x1b [b]x[/] :smile:", id="plain-ascii"),
        pytest.param("", "", "", id="empty"),
    ],
)  # fmt: skip
def test_printable_shows_terminal_controls_as_escapes(text: str, one_line: str, lines: str) -> None:
    assert printable(text) == one_line
    assert printable(text, multiline=True) == lines
    assert raw(printable(text)) == []
    assert printable(printable(text)) == printable(text)  # applying it twice changes nothing


# ----------------------------------------------------------------------------------------- output paths
HOSTILE_ROW = {"name": f"job{HOSTILE}", "reason": f"[bold red]x[/] {HOSTILE}", "n": 1.5, "none": None}


@pytest.mark.parametrize("fmt", [OutputFormat.json, OutputFormat.yaml], ids=["json", "yaml"])
def test_json_and_yaml_escape_and_read_back_the_same(fmt: OutputFormat, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"items": [{**HOSTILE_ROW, "s": "x\ud800", "é": "中文"}]}
    emit(data, fmt)
    out = capsys.readouterr().out
    assert raw(out) == [], out
    assert (json.loads(out) if fmt is OutputFormat.json else yaml.safe_load(out)) == data


def test_rich_tables_show_cells_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    emit([HOSTILE_ROW], OutputFormat.table, title=f"t{TITLE}")
    out = capsys.readouterr().out
    assert raw(out) == [], out
    assert "[bold red]x[/]" in out  # not markup
    assert "\\x1b]0;pwned" in out


def test_plain_tables_escape_every_cell_and_stay_aligned() -> None:
    buf = io.StringIO()
    table(["NAME", "MESSAGE"], [[f"a{HOSTILE}", "tab\there\nnext"], ["b", "ok"]], out=buf)
    out = buf.getvalue()
    assert raw(out) == [], out
    lines = out.splitlines()
    assert len(lines) == 3 and lines[1].startswith("a" + SHOWN) and "tab\\x09here\\x0anext" in lines[1]
    assert lines[0].index("MESSAGE") == lines[1].index("tab") == lines[2].index("ok")


def test_die_and_warn_escape_on_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    client_module.warn(f"warning: {HOSTILE}\nsecond line")
    with pytest.raises(typer.Exit):
        client_module.die(f"the server says {HOSTILE} [red]x[/]")
    err = capsys.readouterr().err
    assert raw(err) == [], err
    assert err.splitlines() == [f"warning: {SHOWN}", "second line", f"error: the server says {SHOWN} [red]x[/]"]


def test_die_escapes_on_a_terminal_too(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    terminal = Console(file=buf, force_terminal=True, width=300)
    monkeypatch.setattr(client_module, "err_console", terminal)
    monkeypatch.setattr(output_module, "err_console", terminal)
    with pytest.raises(typer.Exit):
        client_module.die(f"no job named {HOSTILE} [bold]x[/bold] :smile:")
    out = buf.getvalue()
    for bad in (TITLE, CLEAR, "\r", "\x08", "\u202e", "\x9b"):
        assert bad not in out
    assert SHOWN in out and "[bold]x[/bold] :smile:" in out  # no markup, no emoji code, no stray backslash


# ----------------------------------------------------------------------------------------- describe
def hostile_job(name: str = "evil") -> dict[str, Any]:
    h = HOSTILE + "\ud800"
    return {
        "name": name,
        "queue": f"q{h}",
        "kind": "training",
        "priority": 0,
        "gpus": 8,
        "status": "failed",
        "reason": f"Failed{h}",
        "message": f"exit 3: last log line: {h}",
        "submitted": 100.0,
        "started": 110.0,
        "ended": 120.0,
        "exitCode": 3,
        "restarts": 0,
        "placement": {
            "racks": [f"r{h}"],
            "gpus": 8,
            "nodes": [{"node": f"n{h}", "rack": f"r{h}", "gpus": [0, 1, 2, 3], "milliPerGpu": 1000}],
        },
        "spec": {"name": name, "kind": "training", "gpus": 8, "env": {"X": h}, "command": ["/bin/sh", "-c", h]},
    }


def hostile_events() -> list[dict[str, Any]]:
    return [
        {"type": "submitted", "reason": "Submitted", "time": 100.0, "message": "queued"},
        {"type": "failed", "reason": f"Failed{HOSTILE}", "time": 120.0, "message": f"boom {HOSTILE}\ud800"},
    ]


def hostile_rack() -> dict[str, Any]:
    return {
        "name": f"r{HOSTILE}",
        "region": f"g{HOSTILE}",
        "gpuModel": f"m{HOSTILE}",
        "gpus": 4,
        "allocated": 4,
        "free": 0,
        "failed": 0,
        "jobs": [f"j{HOSTILE}"],
        "nodes": [
            {
                "name": f"n{HOSTILE}",
                "rack": f"r{HOSTILE}",
                "region": f"g{HOSTILE}",
                "gpuModel": f"m{HOSTILE}",
                "gpus": 4,
                "allocated": 4,
                "failed": 0,
                "gpuGrid": [{"usedMilli": 1000}] * 4,
                "jobs": [f"j{HOSTILE}"],
            }
        ],
    }


def test_describe_escapes_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    from rackscale.cli import describe

    describe._job(hostile_job(), hostile_events(), 200.0)
    describe._rack(hostile_rack())
    out = capsys.readouterr().out
    assert raw(out) == [], out
    assert f"Status:       failed (Failed{SHOWN}\\ud800)" in out.splitlines()
    assert f"Message:      exit 3: last log line: {SHOWN}\\ud800" in out.splitlines()
    assert "\\e]0;pwned\\a" in out  # the spec, as YAML escapes it


# ----------------------------------------------------------------------------------------- a hostile server
class Canned(BaseHTTPRequestHandler):
    """Answers from ``ROUTES``: (method, path) -> (status, body text); JSON escapes let it send surrogates."""

    ROUTES: ClassVar[dict[tuple[str, str], tuple[int, str]]] = {}

    def _answer(self) -> None:
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = self.ROUTES.get((self.command, self.path.split("?")[0]), (404, '{"detail": "no route"}'))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if body.startswith("<") else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hostile_server() -> Iterator[str]:
    def j(v: Any) -> str:
        return json.dumps(v, ensure_ascii=True)  # a lone surrogate travels as "\ud800"

    node = hostile_rack()["nodes"][0]
    Canned.ROUTES = {
        ("GET", "/v1/cluster"): (200, j({"now": 200.0})),
        ("GET", "/v1/jobs"): (200, j({"items": [hostile_job()], "nextAfter": None})),
        ("GET", "/v1/jobs/evil"): (200, j(hostile_job())),
        ("GET", "/v1/jobs/evil/events"): (200, j({"items": hostile_events()})),
        ("GET", "/v1/jobs/missing"): (404, j({"detail": f"no job named {HOSTILE}\ud800"})),
        ("GET", "/v1/racks"): (200, j({"items": [hostile_rack()]})),
        ("GET", "/v1/racks/r0"): (200, j(hostile_rack())),
        ("GET", "/v1/nodes"): (200, j({"items": [node]})),
        ("GET", "/v1/queues"): (200, j({"items": [{"name": f"q{HOSTILE}", "pending": 1, "running": 0,
                                                   "gpusAllocated": 0, "gpusWaiting": 8}]})),
        ("DELETE", "/v1/jobs/evil"): (200, j({**hostile_job(), "status": f"failed{HOSTILE}"})),
        ("DELETE", "/v1/jobs/gone"): (500, f"<html>{HOSTILE}</html>"),
        ("POST", "/v1/jobs"): (422, j({"detail": [{"loc": ["body", f"k{HOSTILE}"], "msg": HOSTILE, "fix": HOSTILE}]})),
    }  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["get", "jobs"], 0, id="get-jobs"),
        pytest.param(["get", "jobs", "-o", "wide"], 0, id="get-jobs-wide"),
        pytest.param(["get", "job", "evil", "-o", "json"], 0, id="get-job-json"),
        pytest.param(["get", "job", "evil", "-o", "yaml"], 0, id="get-job-yaml"),
        pytest.param(["get", "nodes", "-o", "wide"], 0, id="get-nodes-wide"),
        pytest.param(["get", "racks", "-o", "wide"], 0, id="get-racks-wide"),
        pytest.param(["get", "queues"], 0, id="get-queues"),
        pytest.param(["describe", "job", "evil"], 0, id="describe-job"),
        pytest.param(["describe", "job", "evil", "-o", "yaml"], 0, id="describe-job-yaml"),
        pytest.param(["describe", "rack", "r0"], 0, id="describe-rack"),
        pytest.param(["top", "racks"], 0, id="top-racks"),
        pytest.param(["top", "nodes"], 0, id="top-nodes"),
        pytest.param(["cancel", "evil"], 1, id="cancel"),
        pytest.param(["cancel", "gone"], 1, id="cancel-server-error"),
        pytest.param(["describe", "job", "missing"], 1, id="error-detail"),
    ],
)
def test_no_verb_prints_the_servers_terminal_controls(hostile_server: str, args: list[str], code: int) -> None:
    got, out, err = rs(*args, server=hostile_server)
    assert got == code, (out, err)
    assert raw(out) == [] and raw(err) == [], (out, err)
    shown = out + err
    if "-o" in args and args[-1] in ("json", "yaml"):
        doc = json.loads(out) if args[-1] == "json" else yaml.safe_load(out)
        assert any(HOSTILE in s for s in strings(doc))  # the values themselves, read back intact
    else:
        assert SHOWN in shown, shown


def test_submit_shows_a_hostile_rejection_as_text(hostile_server: str, tmp_path: Path) -> None:
    f = tmp_path / "j.yaml"
    f.write_text("name: a\nkind: training\ngpus: 8\n")
    code, out, err = rs("submit", "-f", str(f), server=hostile_server)
    assert code == 1 and out == ""
    assert raw(err) == [], err
    assert f"k{SHOWN}: {SHOWN} (fix: {SHOWN})" in err


# ----------------------------------------------------------------------------------------- a hostile job log
@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    from rackscale.service.app import ServiceConfig

    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as svc:
        yield svc


def test_a_failed_jobs_hostile_log_line_reaches_the_terminal_escaped(
    live: LiveService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason a failed job carries can be its last log line: written into the store as the runner would."""
    from rackscale.service.live import FAILED, Change

    token = getattr(live.svc, "admin_token", None)  # the generated admin token where auth is on by default
    if token:
        monkeypatch.setenv("RACKSCALE_TOKEN", token)
    runner_ = live.svc.ctx.runner
    with runner_.lock:  # the runner waits: the job is still pending when it fails
        with live.client() as c:
            doc = {"name": "evil", "kind": "training", "gpus": 8, "durationEstimateSeconds": 10**7}
            assert c.post("/v1/jobs", json=doc).status_code == 201
        rejected = live.svc.ctx.store.apply(
            [Change("evil", FAILED, time.time(), "Failed", f"exit 3: {HOSTILE}", exit_code=3)]
        )
        assert rejected == set()
    with live.client() as c:
        wait_for(lambda: c.get("/v1/jobs/evil").json()["status"] == "failed", what="the job to fail")
        message = c.get("/v1/jobs/evil").json()["message"]
    shown = printable(message)  # whatever the service passes on, the CLI shows it escaped
    for args in (["describe", "job", "evil"], ["get", "jobs", "-o", "wide"], ["get", "jobs"]):
        code, out, err = rs(*args, server=live.url)
        assert code == 0, err
        assert raw(out) == [], out
    code, out, _ = rs("describe", "job", "evil", server=live.url)
    assert f"Message:      {shown}" in out.splitlines()
    assert shown in out.split("Events:", 1)[1]  # the failed event carries it too
    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        code, out, _ = rs("describe", "job", "evil", "-o", fmt, server=live.url)
        assert code == 0 and raw(out) == []
        assert load(out)["job"]["message"] == message


# ----------------------------------------------------------------------------------------- hostile files
def test_validate_shows_a_hostile_key_as_text(tmp_path: Path) -> None:
    f = tmp_path / "j.yaml"
    f.write_text('name: a\nkind: training\ngpus: 8\n"\\e]0;pwned\\a[bold]x[/]\\u202e": 1\n')
    for args in (["validate", str(f)], ["submit", "-f", str(f)], ["schedule", "-f", str(f)]):
        code, out, err = rs(*args)
        assert code == 2, (out, err)
        assert raw(out + err) == [], out + err
        assert "\\x1b]0;pwned\\x07[bold]x[/]\\u202e: unknown field" in (out + err).replace("\n", "")


@pytest.mark.parametrize("name", ["lists-9x9", "mappings-9x9", "wide-2000-aliases-of-1000", "in-a-job-metadata-labels"])
@pytest.mark.parametrize(
    "verb",
    [
        pytest.param(["validate"], id="validate"),
        pytest.param(["submit", "-f"], id="submit"),
        pytest.param(["schedule", "-f"], id="schedule"),
        pytest.param(["simulate", "--racks", "1", "--jobs"], id="simulate-jobs"),
        pytest.param(["simulate", "--cluster"], id="simulate-cluster"),
    ],
)
def test_alias_bombs_are_refused_by_every_verb_that_reads_yaml(tmp_path: Path, verb: list[str], name: str) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(ALIAS_BOMBS[name])
    t0 = time.perf_counter()
    code, out, err = rs(*verb, str(f))
    assert code == 2, (out, err)
    text = (out + err).replace("\n", " ")
    assert "bomb.yaml:" in text and "expands to more than 1,000,000 values through aliases" in text, text
    assert time.perf_counter() - t0 < 30  # it once took 39 s and 3 GB; the error itself is the real check


def test_deep_nesting_is_refused_by_validate(tmp_path: Path) -> None:
    f = tmp_path / "deep.yaml"
    f.write_text("a: " + "[" * 100 + "]" * 100 + "\n")
    code, out, err = rs("validate", str(f))
    assert code == 2
    # Whitespace-normalised: where a console wraps the line depends on its width and on the tmp path's length.
    said = " ".join((out + err).split())
    assert "deep.yaml:1: the document nests lists and mappings more than 64 levels deep" in said


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param(laughs(), "expands to more than 1,000,000 values through aliases", id="alias-bomb"),
        pytest.param("server: [" * 70 + "]" * 70, "more than 64 levels deep", id="deep"),
        pytest.param("server: [\n", "invalid YAML", id="syntax"),
    ],
)
def test_a_hostile_config_file_is_refused_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, says: str
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    monkeypatch.setenv("RACKSCALE_CONFIG", str(cfg))
    code, out, err = rs("get", "jobs")
    assert code == 2 and out == ""
    assert "the config file cannot be used" in err and str(cfg) in err and says in err.replace("\n", " ")
