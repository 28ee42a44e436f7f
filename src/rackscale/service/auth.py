"""Bearer tokens from a YAML file; roles ``admin`` (everything) and ``tenant`` (its own queues only).

tokens:
  - name: ops
    role: admin
    token: "a-long-random-string"        # or tokenSha256: the hex SHA-256 of the token
  - name: team-a
    role: tenant
    queues: [team-a, team-a-batch]        # the first is where a job without a queue goes
    tokenSha256: "9f86d0..."
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Literal["admin", "tenant"]
    queues: tuple[str, ...] = ()

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def can_use(self, queue: str) -> bool:
        return self.is_admin or queue in self.queues

    @property
    def default_queue(self) -> str:
        return self.queues[0] if self.queues else "default"


# Without a token file (loopback only) every caller is this.
ANONYMOUS = Principal("anonymous", "admin")


class _TokenDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1)
    role: Literal["admin", "tenant"]
    queues: list[str] = Field(default_factory=list)
    token: str | None = Field(None, min_length=16)
    token_sha256: str | None = Field(None, alias="tokenSha256", pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _check(self) -> _TokenDoc:
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError("give exactly one of token and tokenSha256")
        if self.role == "tenant" and not self.queues:
            raise ValueError("a tenant needs queues: [its-queue, ...]")
        return self


class _FileDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[_TokenDoc] = Field(min_length=1)


class TokenFileError(ValueError):
    pass


class TokenTable:
    def __init__(self, entries: dict[str, Principal]) -> None:
        self._by_digest = entries  # sha256 hex of the token -> who holds it

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except OSError as e:
            raise TokenFileError(f"{path}: cannot read the token file ({e.strerror})") from e
        except yaml.YAMLError as e:
            raise TokenFileError(f"{path}: not valid YAML ({e})") from e
        try:
            parsed = _FileDoc.model_validate(doc)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise TokenFileError(
                f"{path}: {where}: {first['msg']} (fix: each entry needs name, role admin|tenant, token or "
                "tokenSha256, and queues for a tenant)"
            ) from e
        entries: dict[str, Principal] = {}
        for t in parsed.tokens:
            digest = t.token_sha256 or hashlib.sha256((t.token or "").encode()).hexdigest()
            if digest in entries:
                raise TokenFileError(f"{path}: token of {t.name!r} is also given to {entries[digest].name!r}")
            entries[digest] = Principal(t.name, t.role, tuple(t.queues))
        return cls(entries)

    def lookup(self, token: str) -> Principal | None:
        # Keyed by the digest, so the lookup's timing says nothing about the secret itself.
        return self._by_digest.get(hashlib.sha256(token.encode()).hexdigest())

    def __len__(self) -> int:
        return len(self._by_digest)
