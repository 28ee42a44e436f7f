"""``rackscale describe job`` of a job on a node drained with a grace: its events say when it will be
stopped (a NOTICE), while its status stays ``running (Scheduled)``; an uncordon says the drain is off.
The real service (2 NVL72 racks, clock 1000x) on a loopback port, the verbs through the CLI app."""

from __future__ import annotations

import re

import pytest
from tests.cli.test_service_verbs import (  # noqa: F401  (_no_user_config, service: the fixtures)
    _no_user_config,
    admin_client,
    job_doc,
    rs,
    service,
    submit_api,
    wait_status,
)
from tests.service.conftest import LiveService, wait_for

from rackscale.cli import describe


def events_of(out: str) -> list[list[str]]:
    lines = out.splitlines()
    return [line.split(None, 3) for line in lines[lines.index("Events:") + 2 :]]  # TYPE REASON AGE MESSAGE


def test_describe_shows_the_drains_notice_and_its_end(service: LiveService) -> None:  # noqa: F811
    submit_api(service, job_doc("train-1", gpus=4))
    [node] = [s["node"] for s in wait_status(service, "train-1", "running")["placement"]["nodes"]]
    with admin_client(service) as c:
        r = c.post(f"/v1/nodes/{node}/drain", json={"reason": "firmware", "grace": "1d"})
        assert r.status_code == 200, r.text

    def described() -> str:
        code, out, _ = rs(service, "describe", "job", "train-1")
        assert code == 0
        return out

    out = str(wait_for(lambda: (o := described()) and "notice" in o and o, what="the notice"))
    assert "Status:       running (Scheduled)" in out.splitlines()  # the row is untouched
    rows = events_of(out)
    assert [row[:2] for row in rows] == [["submitted", "Submitted"], ["scheduled", "Scheduled"], ["notice", "Draining"]]
    # The notice counts from when the runner tells it (host/drains.py: the deadline less its step's time): at
    # 1000x, each wall-second of a loaded machine's delay is 17 min of the service's clock ("in 23 h 52 min").
    left = r"(1 d|23 h \d+ min)"
    said = rf"draining node {re.escape(node)} \(firmware\): stopped and requeued in {left} unless it ends first"
    told = re.fullmatch(said, rows[-1][3])
    assert told is not None, rows[-1][3]

    with admin_client(service) as c:
        assert c.post(f"/v1/nodes/{node}/uncordon").status_code == 200
    out = str(wait_for(lambda: (o := described()) and "DrainCalledOff" in o and o, what="the called-off notice"))
    assert events_of(out)[-1][3] == f"the drain of node {node} was called off: it goes on"


def _job_doc(status: str, started: float | None, ended: float | None) -> dict[str, object]:
    return {
        "name": "j",
        "queue": "default",
        "kind": "training",
        "priority": 0,
        "gpus": 4.0,
        "status": status,
        "reason": "",
        "message": "",
        "submitted": 0.0,
        "started": started,
        "ended": ended,
        "restarts": 1 if status == "pending" else 0,
    }


@pytest.mark.parametrize(
    ("status", "started", "ended", "shown", "absent"),
    [
        pytest.param(
            "running", 100.0, None, ["Started:", "Running for:  15m"], ["Ran for", "Last started"], id="running"
        ),
        pytest.param("completed", 100.0, 700.0, ["Started:", "Ran for:      10m"], ["Running for"], id="ended"),
        pytest.param("pending", None, None, ["Started:      -"], ["Running for", "Ran for"], id="never-started"),
        # Preempted and waiting again: its last run's start stays, but it is not running (it said
        # "Running for: 15m" of a job that waited in the queue).
        pytest.param("pending", 100.0, None, ["Last started:"], ["Running for", "Ran for"], id="preempted-waiting"),
    ],
)
def test_describe_says_how_long_a_job_runs_only_while_it_runs(
    status: str,
    started: float | None,
    ended: float | None,
    shown: list[str],
    absent: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    describe._job(_job_doc(status, started, ended), [], 1000.0)
    out = capsys.readouterr().out
    for text in shown:
        assert text in out
    for text in absent:
        assert text not in out
