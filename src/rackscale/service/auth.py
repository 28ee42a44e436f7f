"""Bearer tokens from a YAML file; roles ``admin`` (everything), ``tenant`` (its own queues only) and
``scrape`` (``/metrics`` only, for Prometheus' ``authorization`` setting).

tokens:
  - name: ops
    role: admin
    tokenSha256: "9f86d0..."             # the hex SHA-256 of the token (preferred), or token: "..."
  - name: team-a
    role: tenant
    queues: [team-a, team-a-batch]        # the first is where a job without a queue goes
    maxPriority: 100                      # highest priority its jobs may ask for (default 0)
    priorityClasses: [default, low-priority, team-a-high]   # classes it may name (default: these two)
    tokenSha256: "60303a..."
  - name: prometheus
    role: scrape
    tokenSha256: "2c26b4..."

Without a token file, ``rackscale serve`` generates one admin token (:func:`generated_admin_token`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rackscale.model.errors import RackscaleError

Role = Literal["admin", "tenant", "scrape"]
# What a tenant may ask for when its entry says nothing (a Kubernetes ResourceQuota scoped to PriorityClass
# does the same): the default priority and below, and only these classes.
TENANT_MAX_PRIORITY = 0
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # a job's priority (and so a maxPriority): Kubernetes' int32
TENANT_PRIORITY_CLASSES = ("default", "low-priority")


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role
    queues: tuple[str, ...] = ()
    max_priority: int | None = None  # None: no ceiling (admin)
    priority_classes: tuple[str, ...] | None = None  # None: any class (admin)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def may_scrape(self) -> bool:
        return self.role in ("admin", "scrape")

    def can_use(self, queue: str) -> bool:
        return self.is_admin or (self.role == "tenant" and queue in self.queues)

    @property
    def default_queue(self) -> str:
        return self.queues[0] if self.queues else "default"

    def priority_refusal(self, *, priority: int, priority_class: str | None) -> str | None:
        """Why this caller may not submit a job of this priority (None: it may)."""
        classes = self.priority_classes
        if priority_class is not None and classes is not None and priority_class not in classes:
            return (
                f"token {self.name!r} may not use priorityClassName {priority_class!r} (allowed: "
                f"{', '.join(classes) or 'none'}; an admin grants more with priorityClasses in the token file)"
            )
        if self.max_priority is not None and priority > self.max_priority:
            return (
                f"token {self.name!r} may not use priority {priority} (its ceiling is {self.max_priority}; an "
                "admin raises it with maxPriority in the token file)"
            )
        return None


# Without a token file and with --no-auth (loopback only) every caller is this.
ANONYMOUS = Principal("anonymous", "admin")


class _TokenDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    role: Role
    queues: list[str] = Field(default_factory=list)
    token: str | None = Field(None, min_length=16)
    token_sha256: str | None = Field(None, alias="tokenSha256", pattern=r"^[0-9a-f]{64}$")
    max_priority: int | None = Field(None, alias="maxPriority", ge=PRIORITY_MIN, le=PRIORITY_MAX)
    priority_classes: list[str] | None = Field(None, alias="priorityClasses")

    @model_validator(mode="after")
    def _check(self) -> _TokenDoc:
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError("give exactly one of token and tokenSha256")
        if self.role == "tenant" and not self.queues:
            raise ValueError("a tenant needs queues: [its-queue, ...]")
        if self.role != "tenant" and (self.queues or self.max_priority is not None or self.priority_classes):
            raise ValueError("queues, maxPriority and priorityClasses are for tenants only")
        return self

    def principal(self) -> Principal:
        if self.role != "tenant":
            return Principal(self.name, self.role)
        return Principal(
            self.name,
            "tenant",
            tuple(self.queues),
            max_priority=TENANT_MAX_PRIORITY if self.max_priority is None else self.max_priority,
            priority_classes=tuple(TENANT_PRIORITY_CLASSES if self.priority_classes is None else self.priority_classes),
        )


class _FileDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[_TokenDoc] = Field(min_length=1)


class TokenFileError(RackscaleError, ValueError):
    pass


class TokenTable:
    def __init__(self, entries: dict[str, Principal], warnings: tuple[str, ...] = ()) -> None:
        self._by_digest = entries  # sha256 hex of the token -> who holds it
        self.warnings = warnings  # for the operator at start-up (e.g. plaintext tokens others can read)

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        from rackscale.loaders import SpecError, safe_load_bounded

        try:
            doc = safe_load_bounded(Path(path).read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError) as e:
            raise TokenFileError(f"{path}: cannot read the token file ({getattr(e, 'strerror', None) or e})") from e
        except SpecError as e:
            raise TokenFileError(f"not valid YAML: {e}") from e
        try:
            parsed = _FileDoc.model_validate(doc)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise TokenFileError(
                f"{path}: {where}: {first['msg']} (fix: each entry needs name, role admin|tenant|scrape, token or "
                "tokenSha256, and queues for a tenant)"
            ) from e
        entries: dict[str, Principal] = {}
        for t in parsed.tokens:
            digest = t.token_sha256 or hashlib.sha256((t.token or "").encode()).hexdigest()
            if digest in entries:
                raise TokenFileError(f"{path}: token of {t.name!r} is also given to {entries[digest].name!r}")
            entries[digest] = t.principal()
        plain = [t.name for t in parsed.tokens if t.token is not None]
        warnings: list[str] = []
        try:
            mode = Path(path).stat().st_mode & 0o777
        except OSError:
            mode = 0
        if plain and mode & 0o077:
            warnings.append(
                f"{path} holds plaintext tokens ({', '.join(plain[:3])}{'...' if len(plain) > 3 else ''}) and is "
                f"readable by others (mode {mode:o}): chmod 600 it, or store tokenSha256 digests instead "
                "(docs/security.md)"
            )
        return cls(entries, tuple(warnings))

    @classmethod
    def single_admin(cls, token: str, name: str = "admin") -> TokenTable:
        return cls({hashlib.sha256(token.encode()).hexdigest(): Principal(name, "admin")})

    def lookup(self, token: str) -> Principal | None:
        # Keyed by the digest, so the lookup's timing says nothing about the secret itself.
        return self._by_digest.get(hashlib.sha256(token.encode()).hexdigest())

    def __len__(self) -> int:
        return len(self._by_digest)


ADMIN_TOKEN_FILE = "admin.token"


def generated_admin_token(data_dir: Path) -> tuple[str, Path]:
    """The admin token of a service started without a token file: read from ``data_dir/admin.token`` when
    a previous start made one (so clients keep working across restarts), else made now (256 random bits)
    and written there, readable by the service user only. Returns the token and the file."""
    path = data_dir / ADMIN_TOKEN_FILE
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        token = ""
    except (OSError, UnicodeDecodeError) as e:
        raise TokenFileError(f"{path}: cannot read the generated admin token ({e}); remove the file") from e
    if len(token) >= 32:
        os.chmod(path, 0o600)
        return token, path
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return token, path
