"""`rackscale serve` refuses bad set-ups with one clear line (never a traceback), before listening."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app


def not_a_database(tmp: Path) -> list[str]:
    (tmp / "d").mkdir()
    (tmp / "d" / "rackscale.db").write_text("garbage, not SQLite")
    return ["--data-dir", str(tmp / "d")]


def tokens(tmp: Path, text: str) -> list[str]:
    (tmp / "t.yaml").write_text(text)
    return ["--data-dir", str(tmp / "d"), "--tokens", str(tmp / "t.yaml")]


CASES = [
    pytest.param(not_a_database, "not a rackscale store", id="not-a-database"),
    pytest.param(lambda t: ["--data-dir", "/proc/rackscale-nope"], "cannot create the data directory", id="data-dir"),
    pytest.param(lambda t: ["--data-dir", str(t), "--db-url", "nonsense"], "not a database URL", id="bad-url"),
    pytest.param(lambda t: ["--data-dir", str(t), "--db-url", "mysql://a@b/c"], "rackscale[postgres]", id="driver"),
    pytest.param(
        lambda t: ["--data-dir", str(t), "--host", "0.0.0.0"], "without a token file", id="open-without-tokens"
    ),
    pytest.param(
        lambda t: [*tokens(t, "tokens: [{name: a, role: admin, token: aaaaaaaaaaaaaaaaaaaa}]"), "--no-auth"],
        "contradict",
        id="no-auth-and-tokens",
    ),
    pytest.param(
        lambda t: tokens(t, "tokens: [{name: p, role: scrape, queues: [a], token: aaaaaaaaaaaaaaaaaaaa}]"),
        "for tenants only",
        id="scrape-token-with-queues",
    ),
    pytest.param(lambda t: tokens(t, "tokens: ["), "not valid YAML", id="token-yaml"),
    pytest.param(lambda t: ["--data-dir", str(t), "--backend", "k8s"], "unknown backend", id="backend"),
    pytest.param(lambda t: ["--data-dir", str(t), "--backend", "local"], "--gpus", id="local-without-gpus"),
    pytest.param(lambda t: ["--data-dir", str(t), "--durability", "maybe"], "normal or full", id="durability"),
    pytest.param(lambda t: ["--data-dir", str(t), "--gpus", "0,x", "--backend", "local"], "comma-separated", id="gpus"),
    pytest.param(
        lambda t: ["--data-dir", str(t), "--prometheus-url", "file:///etc/passwd"],
        "http:// or https://",
        id="prom-file",
    ),
    pytest.param(lambda t: ["--data-dir", str(t), "--prometheus-url", "http://"], "with a host", id="prom-no-host"),
    pytest.param(
        lambda t: ["--data-dir", str(t), "--prometheus-url", "http://a\x1b[31m"], "http:// or https://", id="prom-ctl"
    ),
]


@pytest.mark.parametrize(("args", "needle"), CASES)
def test_bad_setups_fail_with_one_clear_line(tmp_path: Path, args: object, needle: str) -> None:
    assert callable(args)
    result = CliRunner().invoke(app, ["serve", "--port", "0", *args(tmp_path)])
    out = result.output
    assert result.exit_code == 2, out
    assert needle in " ".join(out.split()), out
    assert "Traceback" not in out
