"""`rackscale token`: the entry it prints holds only a digest, and the token it shows works with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli.app import app
from rackscale.service.auth import TokenTable

runner = CliRunner()


def test_the_printed_entry_loads_and_accepts_only_the_shown_token(tmp_path: Path) -> None:
    made = runner.invoke(app, ["token", "team-a", "--queue", "team-a", "--max-priority", "100"])
    assert made.exit_code == 0, made.output
    secret = made.stderr.strip().splitlines()[-1]
    assert secret not in made.stdout and "tokenSha256" in made.stdout
    scrape = runner.invoke(app, ["token", "prometheus", "--role", "scrape"])
    path = tmp_path / "tokens.yaml"
    path.write_text("tokens:\n" + made.stdout + scrape.stdout)
    path.chmod(0o644)  # digests only: nothing to warn about
    table = TokenTable.load(path)
    who = table.lookup(secret)
    assert who is not None and who.queues == ("team-a",) and who.max_priority == 100
    assert table.lookup(secret + "x") is None and table.warnings == ()
    assert table.lookup(scrape.stderr.strip().splitlines()[-1]).role == "scrape"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["x", "--role", "root"], "--role must be one of", id="bad-role"),
        pytest.param(["x"], "at least one --queue", id="tenant-without-queue"),
        pytest.param(["x", "--role", "scrape", "--queue", "a"], "for --role tenant only", id="scrape-with-queue"),
        pytest.param(["x", "--queue", "Team A"], "not a valid queue name", id="bad-queue"),
        pytest.param(["ops\nrole: admin"], "is not a token name", id="name-with-newline"),
    ],
)
def test_bad_options_are_one_clear_line(args: list[str], needle: str) -> None:
    got = runner.invoke(app, ["token", *args])
    assert got.exit_code == 2 and needle in " ".join(got.output.split()), got.output
