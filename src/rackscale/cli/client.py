"""What the client verbs (submit, get, describe, cancel, top) share: where the server is, the bearer token,
an HTTP client for the REST API (``/v1``), HTTP errors as one clear line, and kubectl-style plain tables.

The server is ``--server URL``, else ``$RACKSCALE_SERVER``, else ``server:`` in the config file
(``$RACKSCALE_CONFIG``, default ``~/.config/rackscale/config.yaml``), else http://127.0.0.1:8080.
The token is read from ``--token-file PATH``, else ``$RACKSCALE_TOKEN``, else ``token:`` in the config file.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from rackscale.cli.output import err_console, fail, printable
from rackscale.model.errors import RackscaleError

if TYPE_CHECKING:
    import httpx

DEFAULT_SERVER = "http://127.0.0.1:8080"
DEFAULT_CONFIG = "~/.config/rackscale/config.yaml"
TIMEOUT_S = 15.0

# Exit codes: 1 the server said no (or cannot be reached), 2 bad input here (usage, a spec file).
EXIT_SERVER, EXIT_USAGE = 1, 2

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        "-s",
        metavar="URL",
        help="rackscale server. Default: $RACKSCALE_SERVER, the config file's server:, or http://127.0.0.1:8080.",
        show_default=False,
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        metavar="PATH",
        help="File holding the bearer token. Default: $RACKSCALE_TOKEN, or the config file's token:.",
        show_default=False,
    ),
]


def die(message: str, code: int = EXIT_SERVER) -> NoReturn:
    """End the command with ``error: message``: styled by ``fail`` on a terminal; plain and never wrapped
    when stderr is a pipe or a log (a ``file:line: field: ...`` line must stay one line for grep).
    The message may carry the server's words: its terminal controls are shown as escapes (``printable``)."""
    text = printable(message, multiline=True)
    if err_console.is_terminal:
        fail(text, code=code)  # as text: job paths and lists hold brackets, not markup
    sys.stderr.write(f"error: {text}\n")
    raise typer.Exit(code)


def warn(message: str) -> None:
    """A line on stderr, as it is (no markup, no wrapping), its terminal controls shown as escapes."""
    sys.stderr.write(printable(message, multiline=True) + "\n")


# ----------------------------------------------------------------------------------------- configuration
@dataclass(frozen=True, slots=True)
class Target:
    server: str  # base URL without a trailing slash
    token: str | None


def _config() -> tuple[dict[str, Any], str]:
    """The config file's mapping (empty when there is none) and its path."""
    explicit = os.environ.get("RACKSCALE_CONFIG")
    path = Path(explicit or DEFAULT_CONFIG).expanduser()
    if not path.exists():
        if explicit:
            die(f"RACKSCALE_CONFIG names {path}, which does not exist (unset it or create the file)", EXIT_USAGE)
        return {}, str(path)
    from rackscale.loaders import SpecError, read_text, safe_load_bounded

    try:  # bounded: a config file is read by every verb, so it gets the spec files' limits (size, aliases)
        doc = safe_load_bounded(read_text(path), source=str(path))
    except SpecError as e:
        die(f"the config file cannot be used: {e}", EXIT_USAGE)
    if doc is None:
        return {}, str(path)
    if not isinstance(doc, dict):
        die(f"{path}: the config file must be a mapping, e.g. 'server: http://host:8080' and 'token: ...'", EXIT_USAGE)
    return doc, str(path)


def normalize_server(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url:
        die("the server URL is empty (e.g. --server http://127.0.0.1:8080)", EXIT_USAGE)
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")):
        die(f"the server URL must start with http:// or https:// (got {url!r})", EXIT_USAGE)
    return url


def resolve(server: str | None, token_file: Path | None) -> Target:
    """Where to send requests and with which token (see the module doc for the order)."""
    cfg: dict[str, Any] | None = None
    cfg_path = ""

    def config() -> dict[str, Any]:
        nonlocal cfg, cfg_path
        if cfg is None:
            cfg, cfg_path = _config()
        return cfg

    url = server or os.environ.get("RACKSCALE_SERVER") or None
    if url is None:
        value = config().get("server")
        if value is not None and not isinstance(value, str):
            die(f"{cfg_path}: server: must be a URL string", EXIT_USAGE)
        url = value or DEFAULT_SERVER
    token: str | None
    if token_file is not None:
        try:
            token = token_file.expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            die(f"--token-file {token_file}: cannot read it ({getattr(e, 'strerror', None) or e})", EXIT_USAGE)
        if not token:
            die(f"--token-file {token_file}: the file is empty (put the token on its first line)", EXIT_USAGE)
    else:
        token = os.environ.get("RACKSCALE_TOKEN") or None
        if token is None:
            value = config().get("token")
            if value is not None and not isinstance(value, str):
                die(f"{cfg_path}: token: must be a string", EXIT_USAGE)
            token = value or None
    server_url = normalize_server(url)
    if token is None:  # last: the token a loopback `rackscale serve` generated for this user
        from rackscale.cli.runtime import token_for

        token = token_for(server_url)
    return Target(server_url, token.strip() if token else None)


# ----------------------------------------------------------------------------------------- HTTP
class ApiFailure(RackscaleError):
    """The server answered with an error status; ``message`` is its detail, ready to show."""

    def __init__(self, status: int, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def _loc(parts: Sequence[Any]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int) or (isinstance(p, str) and p.isdigit()):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def problems_text(detail: Any) -> str:
    """A 422's ``detail`` (a list of {loc, msg, fix}) as lines ``field: message (fix: ...)``."""
    if not isinstance(detail, list):
        return str(detail)
    lines = []
    for p in detail:
        if not isinstance(p, Mapping):
            lines.append(str(p))
            continue
        loc = list(p.get("loc") or [])
        if loc and loc[0] == "body":
            loc = loc[1:]
        where = _loc(loc)
        text = f"{where}: {p.get('msg', 'invalid')}" if where else str(p.get("msg", "invalid"))
        if p.get("fix"):
            text += f" (fix: {p['fix']})"
        lines.append(text)
    return "\n".join(lines)


def _failure(resp: httpx.Response) -> ApiFailure:
    try:
        body = resp.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = resp.text.strip()[:300] or resp.reason_phrase
    text = problems_text(detail)
    if resp.status_code == 401:
        text += " (give a token with --token-file PATH or $RACKSCALE_TOKEN)"
    elif resp.status_code >= 500 and resp.status_code != 503:
        text = f"server error {resp.status_code}: {text}"
    return ApiFailure(resp.status_code, text, detail)


class Api:
    """A thin client of the REST API. Methods return the decoded JSON, or raise :class:`ApiFailure`;
    a server that cannot be reached ends the command with a message naming it."""

    def __init__(self, target: Target, *, timeout: float = TIMEOUT_S) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - httpx comes with the service extra
            die(f"the client verbs need httpx ({e.name} is missing): pip install 'rackscale[service]'", EXIT_USAGE)
        self.target = target
        headers = {"Accept": "application/json", "User-Agent": "rackscale-cli"}
        if target.token:
            headers["Authorization"] = f"Bearer {target.token}"
        self._httpx = httpx
        self._client = httpx.Client(base_url=target.server, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        httpx = self._httpx
        server = self.target.server
        try:
            resp = self._client.request(method, path, **kwargs)
        except httpx.ConnectError as e:
            why = "connection refused" if "refused" in str(e).lower() else (str(e) or "cannot connect")
            die(
                f"cannot reach the rackscale server at {server} ({why}). Start one with `rackscale serve`, "
                "or point to yours with --server URL (or $RACKSCALE_SERVER)"
            )
        except httpx.TimeoutException:
            die(
                f"the rackscale server at {server} did not answer within {self._client.timeout.read or TIMEOUT_S:g} s "
                "(is it the right address? see --server)"
            )
        except httpx.HTTPError as e:
            die(f"request to {server} failed: {type(e).__name__}: {e}")
        if resp.status_code >= 400:
            raise _failure(resp)
        try:
            return resp.json()
        except ValueError:
            die(f"{server}{path} did not answer with JSON (is {server} a rackscale server?)")

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=clean)

    def post(self, path: str, body: Any) -> Any:
        import json

        return self.request(
            "POST", path, content=json.dumps(body, default=str), headers={"Content-Type": "application/json"}
        )

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def now(self) -> float:
        """The service clock (for ages); the local clock if the server does not say."""
        try:
            value = self.get("/v1/cluster").get("now")
        except ApiFailure:
            return time.time()
        return float(value) if isinstance(value, int | float) else time.time()


@contextmanager
def connect(server: str | None, token_file: Path | None) -> Iterator[Api]:
    """An :class:`Api` for the resolved server; an :class:`ApiFailure` that escapes ends the command."""
    api = Api(resolve(server, token_file))
    try:
        yield api
    except ApiFailure as e:
        die(e.message)
    finally:
        api.close()


def quote_path(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


# ----------------------------------------------------------------------------------------- rendering
def age(seconds: float | None) -> str:
    """A duration the way kubectl prints ages: 42s, 3m12s, 25m, 4h20m, 30h, 3d4h, 12d."""
    if seconds is None or math.isnan(seconds):
        return "-"
    s = max(int(seconds), 0)
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if s < 600:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def num(v: Any) -> str:
    """GPU counts: whole numbers without a fraction, shares with up to 3 decimals."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.3f}".rstrip("0")
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "", out: Any = None) -> None:
    """Plain columns, left-aligned, three spaces apart (kubectl's layout: never wrapped or boxed). A cell's
    terminal controls, tabs and newlines are shown as escapes (cells come from the server: ``printable``)."""
    cells = [
        [printable(str(h)) for h in headers],
        *[["-" if c is None or c == "" else printable(str(c)) for c in r] for r in rows],
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    stream = out or sys.stdout
    for r in cells:
        line = "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        stream.write(indent + line + "\n")


def util_bar(used: float, total: float, width: int = 10) -> str:
    frac = used / total if total else 0.0
    filled = min(width, round(frac * width))
    return "[" + "#" * filled + "." * (width - filled) + f"] {frac * 100:3.0f}%"


# ----------------------------------------------------------------------------------------- resources
ALIASES = {
    "job": "jobs",
    "jobs": "jobs",
    "j": "jobs",
    "node": "nodes",
    "nodes": "nodes",
    "no": "nodes",
    "rack": "racks",
    "racks": "racks",
    "r": "racks",
    "queue": "queues",
    "queues": "queues",
    "q": "queues",
}


def resource(word: str, allowed: Sequence[str]) -> str:
    """``job``/``jobs``/``j``, ``node``/``nodes``/``no``, ``rack``/``racks``/``r``, ``queue``/``queues``/``q``."""
    kind = ALIASES.get(word.strip().lower())
    if kind is None or kind not in allowed:
        die(f"unknown resource type {word!r}; use one of: {', '.join(allowed)}", EXIT_USAGE)
    return kind
