"""How node holds lie in the store: a ``meta`` row per held node (``hold:NAME``, the value a small JSON
document; deleted once uncordoned; an empty value, as an older version wrote, reads as no hold). Written by
the nodes API (service/nodes_api.py); read back at start-up, by the API before it merges a request, and by
a highly available service's leader, which applies the holds another replica's API committed
(service/pickup.py)."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select

from rackscale.host.drains import NodeHold
from rackscale.service.store import Store, meta

PREFIX = "hold:"


def hold_key(node: str) -> str:
    """The meta key of a node's hold (the key column holds 64 characters: a long name is hashed)."""
    key = PREFIX + node
    return key if len(key) <= 64 else PREFIX + "#" + hashlib.sha256(node.encode()).hexdigest()[:40]


def encode_hold(hold: NodeHold | None) -> str:
    if hold is None:
        return ""
    return json.dumps({"reason": hold.reason, "since": hold.since, "deadline": hold.deadline})


def decode_hold(value: str) -> NodeHold | None:
    if not value:
        return None
    d = json.loads(value)
    deadline = d.get("deadline")
    return NodeHold(
        reason=str(d.get("reason", "")),
        since=float(d["since"]),
        deadline=None if deadline is None else float(deadline),
    )


def stored_holds(store: Store, node_names: list[str]) -> dict[int, NodeHold]:
    """The holds the store has, by node index (a row of a node the cluster no longer has is ignored)."""
    by_key = {hold_key(name): n for n, name in enumerate(node_names)}
    with store.reader.connect() as c:
        rows = c.execute(select(meta.c.key, meta.c.value).where(meta.c.key.like(PREFIX + "%"))).all()
    out: dict[int, NodeHold] = {}
    for key, value in rows:
        n = by_key.get(key)
        hold = decode_hold(value) if n is not None else None
        if n is not None and hold is not None:
            out[n] = hold
    return out


__all__ = ["PREFIX", "decode_hold", "encode_hold", "hold_key", "stored_holds"]
