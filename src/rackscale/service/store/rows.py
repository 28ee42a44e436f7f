"""The store's rows as Python values: :class:`JobRow` and :class:`EventRow`, a placement's JSON
(:func:`encode_placement`, :func:`decode_placement`), and the lenient decoding of a stored record that does
not read as it should (text that is not UTF-8, JSON that does not decode): such a row is marked ``corrupt``
rather than failing the query that read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import product
from operator import itemgetter
from typing import Any

from pydantic_core import from_json

from rackscale.model.placement import NodeAlloc, Placement


@dataclass(frozen=True, slots=True)
class JobRow:
    """One run of a job, as stored (``seq``: the run's id; ``doc``: the submitted document)."""

    seq: int
    name: str
    queue: str
    kind: str
    gpus: float
    priority: int
    # The stored text: a JobPhase value for a sound row (a member compares equal to it); kept a plain str
    # so that a row whose status was damaged still reads, as it did before phases were an enum.
    status: str
    reason: str
    message: str
    doc: dict[str, Any]
    submitted: float
    started: float | None
    ended: float | None
    placement: Placement | None
    exit_code: int | None
    restarts: int
    # Why the stored record cannot be read as it is (its JSON or text does not decode); then doc is {},
    # placement None, and message says so. None for a sound row.
    corrupt: str | None = None


@dataclass(frozen=True, slots=True)
class EventRow:
    """One entry of a run's event log (``type``: what a Change said, or ``submitted``)."""

    id: int
    job: str
    run: int | None
    time: float
    type: str
    reason: str
    message: str


def encode_placement(p: Placement) -> str:
    doc: dict[str, object] = {
        "units": p.units,
        "allocs": [[a.node, list(a.gpus), a.milli, a.cpu_milli, a.memory_mib] for a in p.allocs],
    }
    if p.opportunistic:  # only then: rows written before the field existed read the same
        doc["opportunistic"] = True
    return json.dumps(doc, separators=(",", ":"))


def decode_placement(job: str, text: str) -> Placement:
    d = json.loads(text)
    allocs = tuple(
        NodeAlloc(int(n), tuple(int(g) for g in gs), int(m), int(c), int(mem)) for n, gs, m, c, mem in d["allocs"]
    )
    return Placement(job, allocs, int(d["units"]), opportunistic=d.get("opportunistic") is True)


JOB_TEXT = ("name", "queue", "kind", "status", "reason", "message", "doc", "placement")
EVENT_TEXT = ("job", "type", "reason", "message")


def lenient_text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def fixed_text(s: str) -> str:
    """A text read leniently, with the bytes that are not UTF-8 shown as U+FFFD."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def bad_text(v: object) -> bool:
    if not isinstance(v, str) or v.isascii():
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def repaired(m: Any, keys: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """The row as a dict with its texts that are not UTF-8 repaired, and the names of those columns."""
    bad = [k for k in keys if bad_text(m[k])]
    d = dict(m)
    for k in bad:
        d[k] = fixed_text(d[k])
    return d, bad


# Each column's types as a sound row holds them. SQLite keeps whatever it is given (text in a FLOAT column,
# a BLOB in a TEXT one), and no reply could carry such a value as its field's type: the row is corrupt, and
# shows the value below instead (a text, repaired into one). ``doc`` and ``placement`` decode from bytes too.
_NONE = type(None)
COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "seq": (int,),
    "name": (str,),
    "queue": (str,),
    "kind": (str,),
    "gpus": (int, float),
    "priority": (int,),
    "status": (str,),
    "reason": (str,),
    "message": (str,),
    "doc": (str, bytes),
    "submitted": (int, float),
    "started": (int, float, _NONE),
    "ended": (int, float, _NONE),
    "placement": (str, bytes, _NONE),
    "exit_code": (int, _NONE),
    "restarts": (int,),
}
_SHOWN_INSTEAD: dict[str, Any] = {"gpus": 0.0, "priority": 0, "submitted": 0.0, "restarts": 0}
# Every combination of the columns' types a sound row may have, in ``COLUMN_TYPES``' order (432 of them): a
# row's types are checked in one lookup, which a page of 500 rows does 500 times.
SOUND_TYPES = frozenset(product(*COLUMN_TYPES.values()))
_columns = itemgetter(*COLUMN_TYPES)
_TEXT_AT = tuple(i for i, k in enumerate(COLUMN_TYPES) if k in JOB_TEXT)


def _shown_instead(column: str, v: Any) -> Any:
    if column in _SHOWN_INSTEAD:
        return _SHOWN_INSTEAD[column]
    if COLUMN_TYPES[column][0] is str:
        return as_text(v)
    return None  # a time or an exit code


def as_text(v: Any) -> str:
    """A stored value that should be a text, as one: read leniently or strictly, a BLOB's bytes, a number
    (what is not UTF-8 shown as U+FFFD)."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "surrogateescape")
    return fixed_text(v if isinstance(v, str) else str(v))


EVENT_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,),
    "job": (str,),
    "run": (int, _NONE),
    "time": (int, float),
    "type": (str,),
    "reason": (str,),
    "message": (str,),
}


def event_row(m: Any) -> EventRow:
    """A stored event, its texts repaired. A value not of its column's type (SQLite keeps any) is shown as
    a text, a time of 0 or no run, and the message says the event is corrupt: no reply could carry it."""
    d, _ = repaired(m, EVENT_TEXT)
    wrong = [k for k, types in EVENT_TYPES.items() if type(d[k]) not in types]
    for k in wrong:
        d[k] = 0.0 if k == "time" else None if k == "run" else as_text(d[k])
    if wrong:
        d["message"] = f"the stored event is corrupt: {', '.join(wrong)} not of the column's type"
    return EventRow(**d)


def job_row(m: Any, *, decoded: bool = False) -> JobRow:
    """``decoded``: every text of ``m`` came from a strict UTF-8 decode, so none needs repair (a page of
    500 rows skips 4,000 checks). Each column is read once, its type checked with the others in one lookup."""
    problems: list[str] = []
    values = _columns(m)
    if tuple(map(type, values)) not in SOUND_TYPES:
        d = dict(zip(COLUMN_TYPES, values, strict=True))
        wrong = [k for k, types in COLUMN_TYPES.items() if type(d[k]) not in types]
        for k in wrong:
            d[k] = _shown_instead(k, d[k])
        problems.append(f"{', '.join(wrong)} not of the column's type")
        values = _columns(d)
    if not decoded and any(bad_text(values[i]) for i in _TEXT_AT):
        d, bad = repaired(dict(zip(COLUMN_TYPES, values, strict=True)), JOB_TEXT)
        problems.append(f"{', '.join(bad)} not valid UTF-8")
        values = _columns(d)
    (seq, name, queue, kind, gpus, priority, status, reason, message, text, submitted, started, ended, where,
     exit_code, restarts) = values  # fmt: skip
    doc: dict[str, Any] = {}
    try:
        loaded = stored_doc(text)
        if not isinstance(loaded, dict):
            raise ValueError(f"a JSON {type(loaded).__name__}, not an object")
        doc = loaded
    except (ValueError, TypeError, RecursionError) as e:
        problems.append(f"its spec does not decode ({e})")
    placement: Placement | None = None
    if where:
        try:
            placement = decode_placement(name, where)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
            problems.append(f"its placement does not decode ({type(e).__name__}: {e})")
    corrupt = "; ".join(problems) if problems else None
    return JobRow(
        seq=seq,
        name=name,
        queue=queue,
        kind=kind,
        gpus=gpus,
        priority=priority,
        status=status,
        reason=reason,
        message=message if corrupt is None else f"the stored record is corrupt: {corrupt}",
        doc=doc if corrupt is None else {},
        submitted=submitted,
        started=started,
        ended=ended,
        placement=placement if corrupt is None else None,
        exit_code=exit_code,
        restarts=restarts,
        corrupt=corrupt,
    )


def stored_doc(text: Any) -> Any:
    """A stored document: by pydantic-core's parser (a list page decodes up to 5,000, and it takes a
    third of ``json.loads``' time), or by ``json.loads`` where that parser refuses the text (a number out of
    its range, a lone surrogate's escape...), so that what read before reads the same, and what did not
    fails as it did. Nesting past the parser's limit (~200 levels; no spec the API accepts comes near it)
    is an error, the record's corruption: ``json.loads`` would read it, but no reply could carry it
    (pydantic-core writes ~250 levels at most), and one such record made every list page holding it a 500."""
    try:
        return from_json(text)
    except ValueError as e:
        if "recursion limit" in str(e):
            raise ValueError(f"nested too deeply ({e})") from None
        return json.loads(text)
