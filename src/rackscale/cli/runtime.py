"""Where ``rackscale serve`` leaves its generated admin token for the client verbs on the same machine.

A service started without ``--tokens`` generates an admin token (kept in its data dir). So that
``rackscale get jobs`` works without copying it by hand, ``serve`` also writes it to a file of the user's
own, readable by that user only: ``$RACKSCALE_RUNTIME_DIR`` or ``~/.local/state/rackscale``, named after the
port (``loopback-8080.token``). The client verbs read it last, only for a loopback server on that port
(a token given by flag, environment or config file wins). Jupyter keeps its runtime files the same way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_RUNTIME_DIR = "~/.local/state/rackscale"


def runtime_dir() -> Path:
    return Path(os.environ.get("RACKSCALE_RUNTIME_DIR") or DEFAULT_RUNTIME_DIR).expanduser()


def token_path(port: int) -> Path:
    return runtime_dir() / f"loopback-{port}.token"


def write_token(port: int, token: str) -> Path:
    """Write ``token`` for the loopback service on ``port`` (0600 in a 0700 directory)."""
    path = token_path(port)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return path


def remove_token(port: int, token: str) -> None:
    """Remove the file if it still holds ``token`` (another service may have taken the port since)."""
    path = token_path(port)
    with contextlib.suppress(OSError):
        if path.read_text(encoding="ascii").strip() == token:
            path.unlink()


def token_for(server: str) -> str | None:
    """The generated token of a loopback ``server`` URL, if its service left one for this user."""
    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None
    try:
        token = token_path(port).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None


__all__ = ["remove_token", "runtime_dir", "token_for", "token_path", "write_token"]
