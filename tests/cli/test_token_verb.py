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
        # The service's token file refuses these: the entry printed would have stopped `serve --tokens` at start.
        pytest.param(["x", "-q", "a", "--max-priority", "1000000000000"], "--max-priority", id="priority-over-int32"),
        pytest.param(["x", "-q", "a", "--max-priority", "-2147483649"], "--max-priority", id="priority-under-int32"),
        pytest.param(["x", "-q", "a", "--priority-class", ""], "not a valid priority class", id="empty-class"),
        pytest.param(["x", "-q", "a", "--priority-class", "hi\x1b[31m"], "not a valid priority class", id="ansi-class"),
    ],
)
def test_bad_options_are_one_clear_line(args: list[str], needle: str) -> None:
    got = runner.invoke(app, ["token", *args])
    assert got.exit_code == 2 and needle in " ".join(got.output.split()), got.output


def test_the_widest_priorities_it_prints_load(tmp_path: Path) -> None:
    for bound in ("2147483647", "-2147483648"):
        made = runner.invoke(app, ["token", "t", "--queue", "a", "--max-priority", bound])
        assert made.exit_code == 0, made.output
        (tmp_path / "tokens.yaml").write_text("tokens:\n" + made.stdout)
        who = TokenTable.load(tmp_path / "tokens.yaml").lookup(made.stderr.strip().splitlines()[-1])
        assert who is not None and who.max_priority == int(bound)
