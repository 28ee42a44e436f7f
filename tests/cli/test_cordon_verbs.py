"""``rackscale cordon|drain|uncordon node|rack NAME`` against the real service, and ``get nodes`` STATUS."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.service.conftest import LiveService, serve_in_thread, small_cluster, wait_for
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.service.app import ServiceConfig

runner = CliRunner()


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveService]:
    for var in ("RACKSCALE_SERVER", "RACKSCALE_TOKEN", "RACKSCALE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = ServiceConfig(data_dir=tmp_path / "data", cluster=small_cluster(), speed=1000.0, interval_s=0.01)
    with serve_in_thread(cfg) as live:
        assert live.admin_token is not None
        monkeypatch.setenv("RACKSCALE_TOKEN", live.admin_token)
        monkeypatch.setenv("RACKSCALE_SERVER", live.url)
        yield live


def status_of(node: str) -> str:
    out = runner.invoke(app, ["get", "nodes", "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    items = doc["items"] if isinstance(doc, dict) else doc
    return next(n.get("mode") or "schedulable" for n in items if n["name"] == node)


def test_cordon_drain_uncordon_round_trip(service: LiveService) -> None:
    out = runner.invoke(app, ["cordon", "node", "r000-n00", "--reason", "watch"])
    assert out.exit_code == 0, out.output
    assert "node/r000-n00 cordoned (1 node(s))" in out.output and "watch" in out.output
    wait_for(lambda: status_of("r000-n00") == "cordoned", what="cordoned")
    table = runner.invoke(app, ["get", "nodes"])
    assert "STATUS" in table.output and "cordoned" in table.output
    out = runner.invoke(app, ["drain", "rack", "r001", "--grace", "10m", "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["verb"] == "drain" and len(doc["items"]) == 18 and doc["items"][0]["mode"] == "draining"
    wait_for(lambda: status_of("r001-n00") == "drained", what="an empty node drained at once")
    out = runner.invoke(app, ["uncordon", "rack", "r001"])
    assert out.exit_code == 0 and "uncordoned" in out.output
    wait_for(lambda: status_of("r001-n00") == "schedulable", what="uncordoned")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["drain", "node", "r000-n00", "--grace", "soon"], 2, "--grace"),
        (["cordon", "node", "nope"], 1, "no node named 'nope'"),
        (["uncordon", "rack", "nope"], 1, "no rack named 'nope'"),
        (["cordon", "shelf", "r000"], 2, ""),
    ],
    ids=["bad-grace", "unknown-node", "unknown-rack", "bad-target"],
)
def test_bad_input(service: LiveService, args: list[str], code: int, says: str) -> None:
    out = runner.invoke(app, args)
    assert out.exit_code == code, out.output
    assert says in out.output
