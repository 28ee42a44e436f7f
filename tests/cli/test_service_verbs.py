"""The client verbs (submit, get, describe, cancel, top) against the real service on a loopback port."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for
from typer.testing import CliRunner

from rackscale.cli import get as get_module
from rackscale.cli.app import app
from rackscale.cli.client import DEFAULT_SERVER, age, resolve
from rackscale.cli.runtime import write_token
from rackscale.service.app import ServiceConfig

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LONG = 10**7  # durationEstimateSeconds of a job that outlives the test (about 3 h of wall time at speed 1000)
ADMIN_TOKEN = "admin-token-0123456789abcdef"
TENANT_TOKEN = "tenant-a-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The verbs must not read the developer's own server, token or config file."""
    for var in ("RACKSCALE_SERVER", "RACKSCALE_TOKEN", "RACKSCALE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # so ~/.config/rackscale/config.yaml is absent


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LiveService]:
    """2 NVL72 racks (144 GPUs), the default auth, the clock 1000x the wall clock. As `rackscale serve` does,
    the generated admin token is left in this user's runtime dir, where the verbs find it on their own."""
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        assert live.admin_token is not None
        write_token(int(live.url.rsplit(":", 1)[1]), live.admin_token)
        yield live


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LiveService]:
    """The same service with bearer tokens: an admin, and tenant team-a on queue team-a only."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {"name": "ops", "role": "admin", "token": ADMIN_TOKEN},
                    {"name": "team-a", "role": "tenant", "queues": ["team-a"], "token": TENANT_TOKEN},
                ]
            }
        )
    )
    cfg = ServiceConfig(
        data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01, tokens_file=tokens
    )
    with serve_in_thread(cfg) as live:
        yield live


def rs(live: LiveService | str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run ``rackscale ARGS --server URL``: (exit code, stdout, stderr). Never a traceback."""
    url = live if isinstance(live, str) else live.url
    result = runner.invoke(app, [*args, "--server", url], input=stdin)
    assert "Traceback" not in result.output, result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def job_doc(name: str, gpus: int = 8, duration: float = LONG, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "training", "gpus": gpus, "durationEstimateSeconds": duration, **extra}


def write_jobs(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def admin_client(live: LiveService) -> Any:
    """An admin's client: the generated token of `service`, the token file's admin of `secured`."""
    return live.client(live.admin_token or ADMIN_TOKEN)


def job(live: LiveService, name: str) -> dict[str, Any]:
    with admin_client(live) as c:
        got: dict[str, Any] = c.get(f"/v1/jobs/{name}").json()
        return got


def wait_status(live: LiveService, name: str, *statuses: str) -> dict[str, Any]:
    wait_for(lambda: job(live, name)["status"] in statuses, what=f"{name} to be {'/'.join(statuses)}")
    return job(live, name)


def submit_api(live: LiveService, *docs: dict[str, Any]) -> None:
    with admin_client(live) as c:
        for d in docs:
            assert c.post("/v1/jobs", json=d).status_code == 201


# ----------------------------------------------------------------------------------------- submit + get
def test_submitted_jobs_show_up_in_get_in_every_format(service: LiveService, tmp_path: Path) -> None:
    f = write_jobs(tmp_path / "jobs.yaml", job_doc("train-1"), job_doc("train-2", gpus=4, queue="research"))
    code, out, err = rs(service, "submit", "-f", str(f))
    assert code == 0, err
    assert out.splitlines() == ["job/train-1 submitted (queue default)", "job/train-2 submitted (queue research)"]

    code, out, _ = rs(service, "get", "jobs", "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert [j["name"] for j in listed["items"]] == ["train-1", "train-2"]
    assert listed["items"][1]["spec"]["queue"] == "research"  # the document as written reached the server

    code, out, _ = rs(service, "get", "job", "train-2", "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(out)["name"] == "train-2"

    wait_status(service, "train-1", "running")
    code, out, _ = rs(service, "get", "jobs")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "QUEUE", "KIND", "GPUS", "STATUS", "AGE", "RACKS"]
    first = rows[0].split()
    assert first[:5] == ["train-1", "default", "training", "8", "running"]
    assert first[6].startswith("r00")

    code, out, _ = rs(service, "get", "jobs", "-o", "wide")
    assert {"PRIORITY", "NODES", "REASON"} <= set(out.splitlines()[0].split())
    assert "Scheduled" in out


def test_submit_reads_stdin_and_prints_the_server_objects(service: LiveService) -> None:
    text = yaml.safe_dump([job_doc("from-stdin", gpus=2)])
    code, out, _ = rs(service, "submit", "-f", "-", "-o", "json", stdin=text)
    assert code == 0
    got = json.loads(out)
    assert got["name"] == "from-stdin" and got["status"] == "pending" and got["gpus"] == 2


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        pytest.param(["--queue", "research"], ["b"], id="queue"),
        pytest.param(["--status", "cancelled"], ["c"], id="status"),
        pytest.param(["--status", "pending,running"], ["a", "b"], id="two-statuses"),
        pytest.param(["--kind", "batch"], [], id="kind-none"),
    ],
)
def test_get_jobs_filters(service: LiveService, filters: list[str], expected: list[str]) -> None:
    submit_api(service, job_doc("a"), job_doc("b", queue="research"), job_doc("c"))
    assert rs(service, "cancel", "c")[0] == 0
    code, out, _ = rs(service, "get", "jobs", *filters, "-o", "json")
    assert code == 0
    assert [j["name"] for j in json.loads(out)["items"]] == expected


def test_get_jobs_shows_one_page_unless_all(service: LiveService, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(get_module, "PAGE", 2)
    submit_api(service, *(job_doc(f"j{i}", gpus=1) for i in range(5)))
    code, out, _ = rs(service, "get", "jobs", "-o", "json")
    first = json.loads(out)
    assert code == 0 and [j["name"] for j in first["items"]] == ["j0", "j1"] and first["nextAfter"] is not None
    code, out, _ = rs(service, "get", "jobs", "--all", "-o", "json")
    every = json.loads(out)
    assert [j["name"] for j in every["items"]] == [f"j{i}" for i in range(5)] and every["nextAfter"] is None
    code, out, err = rs(service, "get", "jobs")
    assert len(out.splitlines()) == 3 and "--all" in err


@pytest.mark.parametrize(
    ("words", "header"),
    [
        pytest.param(["job"], "STATUS", id="job"),
        pytest.param(["jobs"], "STATUS", id="jobs"),
        pytest.param(["node"], "ALLOCATED", id="node"),
        pytest.param(["no"], "ALLOCATED", id="no"),
        pytest.param(["no", "r001-n17"], "ALLOCATED", id="one-node"),
        pytest.param(["rack"], "FREE", id="rack"),
        pytest.param(["racks", "r001"], "FREE", id="one-rack"),
        pytest.param(["queue"], "GPUS-WAITING", id="queue"),
        pytest.param(["q", "default"], "GPUS-WAITING", id="one-queue"),
    ],
)
def test_get_accepts_kubectl_aliases(service: LiveService, words: list[str], header: str) -> None:
    submit_api(service, job_doc("x"))
    code, out, err = rs(service, "get", *words)
    assert code == 0, err
    assert header in out.splitlines()[0]
    if len(words) == 2:
        assert len(out.splitlines()) == 2 and words[1] in out


def test_get_nodes_and_racks_parse_back_from_yaml(service: LiveService) -> None:
    code, out, _ = rs(service, "get", "nodes", "-o", "yaml")
    nodes = yaml.safe_load(out)["items"]
    assert code == 0 and len(nodes) == 36 and {n["rack"] for n in nodes} == {"r000", "r001"}
    code, out, _ = rs(service, "get", "rack", "r000", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["gpus"] == 72


@pytest.mark.parametrize(
    ("args", "says", "exit_code"),
    [
        pytest.param(["get", "pods"], "unknown resource type 'pods'", 2, id="unknown-type"),
        pytest.param(["get", "job", "nope"], "no job named 'nope'", 1, id="unknown-job"),
        pytest.param(["get", "rack", "r999"], "no rack named 'r999'", 1, id="unknown-rack"),
        pytest.param(["get", "queue", "nope"], "no queue named 'nope'", 1, id="unknown-queue"),
        pytest.param(["get", "jobs", "--status", "done"], "unknown status 'done'", 2, id="bad-status"),
        pytest.param(["get", "racks", "--queue", "x"], "apply to jobs only", 2, id="queue-on-racks"),
        pytest.param(["describe", "node", "r000-n00"], "unknown resource type", 2, id="describe-node"),
        pytest.param(["top", "queues"], "unknown resource type", 2, id="top-queues"),
    ],
)
def test_bad_requests_are_one_clear_line(service: LiveService, args: list[str], says: str, exit_code: int) -> None:
    code, out, err = rs(service, *args)
    assert code == exit_code
    assert says in err and out == ""


# ----------------------------------------------------------------------------------------- submit errors
@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("name: a\nkind: training\ngpus: -1\n", "jobs.yaml:3: gpus: must be >= 0", id="negative-gpus"),
        pytest.param("name: a\nkind: training\ngpus: 8\n---\nname: b\nkind: nope\n", "jobs.yaml:6", id="second-doc"),
        pytest.param("name: a\n  kind: [\n", "jobs.yaml:2: invalid YAML", id="bad-yaml"),
        pytest.param("name: a\nkind: training\ngpus: 8\nbogus: 1\n", "jobs.yaml:4: bogus", id="unknown-field"),
    ],
)
def test_a_bad_spec_file_names_file_and_line_and_submits_nothing(
    service: LiveService, tmp_path: Path, text: str, says: str
) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(text)
    good = write_jobs(tmp_path / "good.yaml", job_doc("fine"))
    code, out, err = rs(service, "submit", "-f", str(good), "-f", str(f))
    assert code == 2
    assert says in err.replace("\n", " ")
    assert "nothing was submitted" in err and out == ""
    with service.client() as c:
        assert c.get("/v1/jobs").json()["items"] == []


def test_a_missing_spec_file_is_a_clear_error(service: LiveService, tmp_path: Path) -> None:
    code, _, err = rs(service, "submit", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml: file not found" in err


def test_server_side_rejections_show_field_message_and_fix(service: LiveService, tmp_path: Path) -> None:
    # The name rule is one definition (rackscale.model.text): the local loader refuses what the server would,
    # before anything is sent.
    bad = write_jobs(tmp_path / "bad.yaml", job_doc("ok-0"), job_doc("Bad_Name"))
    code, out, err = rs(service, "submit", "-f", str(bad))
    assert code == 2 and out == ""
    assert "[1].name: is not a valid name, got 'Bad_Name' (fix: use 1-253 lowercase" in err.replace("\n", " ")
    # What only the server knows: the name is taken (one file may not repeat a name; two can).
    f = write_jobs(tmp_path / "jobs.yaml", job_doc("ok-1"), job_doc("ok-2"))
    again = write_jobs(tmp_path / "again.yaml", job_doc("ok-1"))
    code, out, err = rs(service, "submit", "-f", str(f), "-f", str(again))
    assert code == 1
    assert out.splitlines() == ["job/ok-1 submitted (queue default)", "job/ok-2 submitted (queue default)"]
    assert "job/ok-1 rejected (409)" in err and "is pending: cancel it first, or pick another name" in err.replace(
        "\n", " "
    ).replace("is running", "is pending")
    assert "1 of 3 job(s) were not submitted" in err


# ----------------------------------------------------------------------------------------- describe
def test_describe_shows_placement_and_events_once_scheduled(service: LiveService) -> None:
    submit_api(service, job_doc("train-1", priority=5))
    running = wait_status(service, "train-1", "running")
    rack = running["placement"]["racks"][0]
    code, out, _ = rs(service, "describe", "job", "train-1")
    assert code == 0
    lines = out.splitlines()
    assert "Status:       running (Scheduled)" in lines
    assert "Priority:     5" in lines
    assert f"  Racks:      {rack}" in lines
    node = running["placement"]["nodes"][0]["node"]
    assert any(line.split()[:2] == [node, rack] for line in lines)  # the nodes table
    events = lines[lines.index("Events:") + 1 :]
    assert events[0].split() == ["TYPE", "REASON", "AGE", "MESSAGE"]
    assert [e.split()[1] for e in events[1:]] == ["Submitted", "Scheduled"]
    assert "Why pending" not in out


def test_describe_says_why_a_job_is_pending_on_a_full_cluster(service: LiveService) -> None:
    submit_api(service, job_doc("fill-0", gpus=72), job_doc("fill-1", gpus=72))
    wait_status(service, "fill-0", "running")
    wait_status(service, "fill-1", "running")
    submit_api(service, job_doc("waiting", gpus=8))
    wait_for(lambda: job(service, "waiting")["reason"] not in ("", "Queued"), what="a pending reason")
    code, out, _ = rs(service, "describe", "job", "waiting")
    assert code == 0
    why = out.split("Why pending:\n", 1)[1].splitlines()
    reason = why[0].removeprefix("  Reason:").strip()
    assert reason in {"InsufficientGPUs", "WaitingForReservation", "Unschedulable"}, why
    assert why[1].startswith("  Message:") and len(why[1].removeprefix("  Message:").strip()) > 10
    assert "Placement:    <none>" in out


def test_describe_says_when_a_reservation_starts_as_a_clock_time(service: LiveService) -> None:
    day = 86400  # the racks free up in a day of the service clock
    submit_api(service, job_doc("fill-0", gpus=72, duration=day), job_doc("fill-1", gpus=72, duration=day))
    wait_status(service, "fill-0", "running")
    wait_status(service, "fill-1", "running")
    submit_api(service, job_doc("big", gpus=72, topology={"required": "rack"}))
    wait_for(lambda: job(service, "big")["reason"] == "WaitingForReservation", what="a reservation")
    code, out, _ = rs(service, "describe", "job", "big")
    assert code == 0
    why = " ".join(out.split("Why pending:\n", 1)[1].split("Spec:")[0].split())  # the message, unwrapped
    assert "Reason: WaitingForReservation" in why
    assert re.search(r"rack\(s\) r00[01] are reserved for it from (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC, in ", why), why
    assert "t=" not in why and "[" not in why


def test_describe_shows_the_latest_run_and_counts_the_earlier_ones(service: LiveService) -> None:
    submit_api(service, job_doc("again"))
    wait_status(service, "again", "running")
    assert rs(service, "cancel", "again")[0] == 0
    code, out, _ = rs(service, "describe", "job", "again")
    assert code == 0 and "Earlier runs" not in out
    submit_api(service, job_doc("again", gpus=16))  # the name is free again: a new run
    wait_status(service, "again", "running")
    code, out, _ = rs(service, "describe", "job", "again")
    assert code == 0
    lines = out.splitlines()
    assert "Status:       running (Scheduled)" in lines and "GPUs:         16" in lines
    earlier = next(line for line in lines if line.startswith("Earlier runs:"))
    assert earlier.startswith("Earlier runs: 1, the last cancelled ") and "get jobs lists every run" in earlier
    events = lines[lines.index("Events:") + 1 :]
    assert [e.split()[1] for e in events[1:]] == ["Submitted", "Scheduled"]  # this run's: no Cancelled
    code, out, _ = rs(service, "get", "jobs", "-o", "wide")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [(r[0], r[4]) for r in rows] == [("again", "cancelled"), ("again", "running")]
    header = out.splitlines()[0].split()
    assert "RUN" in header and rows[0][header.index("RUN")] < rows[1][header.index("RUN")]


def test_describe_merges_the_shares_a_job_holds_on_one_node(service: LiveService) -> None:
    submit_api(
        service, {"name": "shared", "kind": "batch", "tasks": 4, "gpuMilli": 500, "durationEstimateSeconds": LONG}
    )
    running = wait_status(service, "shared", "running")
    # The API merges a node's slices: one entry per node, a GPU listed once per share it holds of it.
    slices = running["placement"]["nodes"]
    assert len(slices) == len({n["node"] for n in slices})
    assert sum(len(n["gpus"]) * n["milliPerGpu"] for n in slices) == 2000
    code, out, _ = rs(service, "describe", "job", "shared")
    assert code == 0
    lines = out.splitlines()
    start = lines.index("    NODE       RACK   GPU IDS   GPUS")
    rows = [line.split() for line in lines[start + 1 : lines.index("Spec:")]]
    assert sum(float(r[3]) for r in rows) == 2.0  # 4 tasks x half a GPU
    assert len(rows) == len({r[0] for r in rows})


def test_kubernetes_style_documents_are_accepted(service: LiveService) -> None:
    code, out, err = rs(service, "submit", "-f", str(EXAMPLES / "train-72.yaml"))
    assert code == 0, err
    assert out.strip() == "job/llm-pretrain-72 submitted (queue research)"


def test_an_impossible_job_fails_with_its_reason(service: LiveService, tmp_path: Path) -> None:
    f = write_jobs(tmp_path / "big.yaml", job_doc("huge", gpus=1000))
    assert rs(service, "submit", "-f", str(f))[0] == 0
    wait_status(service, "huge", "failed")
    code, out, _ = rs(service, "describe", "job", "huge")
    assert code == 0
    assert "Status:       failed (LargerThanConstraintAllows)" in out
    assert "needs 1000 GPUs but the cluster has 144" in out
    code, out, _ = rs(service, "describe", "job", "huge", "-o", "yaml")
    doc = yaml.safe_load(out)
    assert doc["job"]["status"] == "failed" and [e["type"] for e in doc["events"]] == ["submitted", "failed"]


def test_describe_rack_shows_its_nodes_and_gpu_grid(service: LiveService) -> None:
    submit_api(service, job_doc("train-1", gpus=8))
    rack = wait_status(service, "train-1", "running")["placement"]["racks"][0]
    code, out, _ = rs(service, "describe", "rack", rack)
    assert code == 0
    assert "Allocated:    8" in out and "Jobs:         train-1" in out
    assert out.count("####") == 2  # two nodes of 4 GPUs fully used
    code, out, _ = rs(service, "describe", "rack", rack, "-o", "json")
    assert len(json.loads(out)["nodes"]) == 18


# ----------------------------------------------------------------------------------------- cancel
def test_cancel_moves_jobs_to_cancelled_and_reports_ended_ones(service: LiveService) -> None:
    submit_api(service, job_doc("long"), job_doc("short", duration=1))
    wait_status(service, "long", "running")
    wait_status(service, "short", "completed")
    code, out, err = rs(service, "cancel", "long", "short", "ghost")
    assert code == 1  # like scancel on a finished job: an ended job had nothing to cancel
    assert out.splitlines() == ["job/long cancelled"]
    assert "job/short had already ended (completed" in err
    assert "job/ghost: no job named 'ghost'" in err
    assert job(service, "long")["status"] == "cancelled"
    code, out, _ = rs(service, "get", "job", "long", "-o", "json")
    assert json.loads(out)["status"] == "cancelled"
    submit_api(service, job_doc("pending-one", gpus=1000))  # impossible, but pending until the next cycle
    code, out, _ = rs(service, "cancel", "pending-one", "long", "--ignore-ended", "-o", "yaml")
    assert code == 0  # --ignore-ended: for clean-up scripts, like kubectl's --ignore-not-found
    assert [j["name"] for j in yaml.safe_load(out)["items"]] == ["pending-one", "long"]


@pytest.mark.parametrize(
    ("names", "code", "says"),
    [
        (["ghost\nok"], 1, "job/ghost\\x0aok: no job named"),  # a second line was forged
        (["ghost\x1b[2J"], 1, "job/ghost\\x1b[2J: no job named"),
        ([""], 2, "NAME is empty"),  # was the server's bare 404
        (["long", ""], 2, "NAME is empty"),  # refused before anything is cancelled
    ],
    ids=["newline-name", "ansi-name", "empty-name", "empty-beside-a-real-one"],
)
def test_cancel_of_a_hostile_name_is_one_line(service: LiveService, names: list[str], code: int, says: str) -> None:
    submit_api(service, job_doc("long"))
    wait_status(service, "long", "running")
    got, out, err = rs(service, "cancel", *names)
    assert got == code and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert job(service, "long")["status"] == "running"


# ----------------------------------------------------------------------------------------- top
def test_top_racks_shows_allocation_per_rack(service: LiveService) -> None:
    submit_api(service, job_doc("big", gpus=36))
    busy = wait_status(service, "big", "running")["placement"]["racks"][0]
    idle = ({"r000", "r001"} - {busy}).pop()
    code, out, _ = rs(service, "top", "racks")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].split() == ["NAME", "REGION", "GPUS", "ALLOCATED", "FREE", "FAILED", "UTIL%"]
    assert rows[busy].split()[2:5] == ["72", "36", "36"] and "[#####.....]  50%" in rows[busy]
    assert rows[idle].split()[2:5] == ["72", "0", "72"] and "0%" in rows[idle]
    assert rows["TOTAL"].split()[2:4] == ["144", "36"]

    code, out, _ = rs(service, "top", "racks", "--sort", "util", "-o", "yaml")
    items = yaml.safe_load(out)["items"]
    assert [r["name"] for r in items] == [busy, idle] and items[0]["util"] == 0.5 and items[0]["jobs"] == ["big"]


# ----------------------------------------------------------------------------------------- server and auth
def test_a_server_that_is_down_gets_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        url = f"http://127.0.0.1:{port}"
        for args in (["get", "jobs"], ["top", "racks"], ["cancel", "x"], ["describe", "job", "x"]):
            code, out, err = rs(url, *args)
            assert code == 1 and out == ""
            assert f"cannot reach the rackscale server at {url}" in err.replace("\n", " ")
            assert "rackscale serve" in err and "--server" in err


def test_without_a_token_the_secured_server_says_401_cleanly(secured: LiveService, tmp_path: Path) -> None:
    code, out, err = rs(secured, "get", "jobs")
    assert code == 1 and out == ""
    assert "missing bearer token" in err and "--token-file" in err

    f = write_jobs(tmp_path / "jobs.yaml", job_doc("a"), job_doc("b"))
    code, out, err = rs(secured, "submit", "-f", str(f))
    assert code == 1 and out == ""
    assert err.count("missing bearer token") == 1  # said once, not once per job

    token_file = tmp_path / "token"
    token_file.write_text("wrong-token-0123456789\n")
    code, _, err = rs(secured, "get", "jobs", "--token-file", str(token_file))
    assert code == 1 and "unknown token" in err


def test_tokens_from_file_env_or_config_reach_the_server(
    secured: LiveService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TENANT_TOKEN + "\n")
    f = write_jobs(tmp_path / "jobs.yaml", job_doc("mine"))
    code, out, err = rs(secured, "submit", "-f", str(f), "--token-file", str(token_file))
    assert code == 0, err
    assert out.strip() == "job/mine submitted (queue team-a)"  # the tenant's default queue

    f2 = write_jobs(tmp_path / "other.yaml", job_doc("theirs", queue="team-b"))
    code, out, err = rs(secured, "submit", "-f", str(f2), "--token-file", str(token_file))
    assert code == 1 and "may not submit to queue 'team-b'" in err

    monkeypatch.setenv("RACKSCALE_TOKEN", ADMIN_TOKEN)
    code, out, _ = rs(secured, "get", "jobs", "-o", "json")
    assert code == 0 and [j["name"] for j in json.loads(out)["items"]] == ["mine"]
    monkeypatch.delenv("RACKSCALE_TOKEN")

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"server": secured.url, "token": ADMIN_TOKEN}))
    monkeypatch.setenv("RACKSCALE_CONFIG", str(config))
    result = runner.invoke(app, ["get", "queues", "-o", "json"])  # no --server: the config file says
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["items"][0]["name"] == "team-a"


@pytest.mark.parametrize(
    ("flag", "env", "config", "expected"),
    [
        pytest.param("http://flag:1", "http://env:2", {"server": "http://cfg:3"}, "http://flag:1", id="flag-wins"),
        pytest.param(None, "http://env:2/", {"server": "http://cfg:3"}, "http://env:2", id="env-next"),
        pytest.param(None, None, {"server": "cfg:3"}, "http://cfg:3", id="config-next"),
        pytest.param(None, None, None, DEFAULT_SERVER, id="default"),
    ],
)
def test_server_resolution_order(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: str | None,
    env: str | None,
    config: dict[str, str] | None,
    expected: str,
) -> None:
    if env:
        monkeypatch.setenv("RACKSCALE_SERVER", env)
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({**config, "token": "from-config"}))
        monkeypatch.setenv("RACKSCALE_CONFIG", str(path))
    target = resolve(flag, None)
    assert target.server == expected
    assert target.token == ("from-config" if config else None)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(5, "5s"), (150, "2m30s"), (1500, "25m"), (4 * 3600 + 60 * 20, "4h20m"), (30 * 3600, "30h"), (12 * 86400, "12d")],
)
def test_ages_read_like_kubectl(seconds: float, shown: str) -> None:
    assert age(seconds) == shown


@pytest.mark.parametrize("verb", ["submit", "get", "describe", "cancel", "top"])
def test_every_verb_help_teaches_with_examples(verb: str) -> None:
    result = runner.invoke(app, [verb, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    assert "Examples:" in result.stdout and f"rackscale {verb} " in result.stdout
    assert "--server" in result.stdout
