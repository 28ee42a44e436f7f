"""What the text in a spec may contain: one definition for names, labels, command words and env entries.

Every string of a job or cluster document comes from someone who may be hostile: a tenant of the service,
a file handed to ``validate``. These rules are enforced by the spec models (so by the API, the loaders and
every verb alike), and each failure names its field and a fix:

- **Anywhere** (keys and values, known fields or not): no NUL byte, no lone surrogate (``"\\ud800"``, which
  no database, JSON encoder or terminal can carry), and nesting at most :data:`MAX_DEPTH` deep.
- **Names** (job names, queues): :data:`NAME_RULE`, a full match (``"x\\n"`` is not ``"x"``), at most 253
  characters, the store's column width.
- **Plain text** (GPU models, priority classes, currencies and other short values): printable, no control
  or bidirectional-formatting character, at most 253 characters.
- **Labels**: Kubernetes' rules (a key is an optional DNS prefix and a name of at most 63 characters; a
  value is at most 63 characters of the same alphabet, or empty).
- **Command words and env values**: at most 32 KiB each; tab and newline are allowed (a ``python -c``
  script has them), no other control character.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from rackscale.model.spec_errors import SpecInvalid, SpecProblem

MAX_NAME = 253  # the store's name and queue columns
MAX_PLAIN = 253
MAX_WORD = 32 * 1024
MAX_DEPTH = 32  # a job document is 4 deep; JSON 1,000 deep is an attack on the parser, not a job
NAME_RULE = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,251}[a-z0-9])?")
NAME_FIX = "use 1-253 lowercase letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_DNS_PREFIX = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")
# Characters that reorder or hide text on a screen (the "Trojan Source" set) are never plain text.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def char_name(ch: str) -> str:
    """``'\\x1b'`` -> ``'the control character \\x1b'``, for messages (never the raw character)."""
    code = ord(ch)
    shown = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    if ch == "\0":
        return "a NUL byte (\\x00)"
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate ({shown})"
    if ch in _BIDI:
        return f"the bidirectional control {shown}"
    return f"the control character {shown}"


def first_bad_char(text: str, *, allow: str = "") -> str | None:
    """The first character of ``text`` no text field may hold (controls, bidi controls, surrogates), else
    None. ``allow``: control characters this field documents (e.g. tab and newline in a command word)."""
    if text.isprintable():  # the common case, in C: no control, format, surrogate or separator character
        return None
    for ch in text:
        if ch in allow:
            continue
        if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs"):
            return ch
    return None


def _plain(text: str) -> str:
    if (bad := first_bad_char(text)) is not None:
        raise SpecInvalid(f"contains {char_name(bad)}", "use printable text only")
    return text


def _word(text: str) -> str:
    if (bad := first_bad_char(text, allow="\t\n")) is not None:
        raise SpecInvalid(f"contains {char_name(bad)}", "only tab and newline may appear among control characters")
    return text


def _name(text: str) -> str:
    if NAME_RULE.fullmatch(text) is None:
        raise SpecInvalid("is not a valid name", NAME_FIX)
    return text


def _label_key(text: str) -> str:
    prefix, _, name = text.rpartition("/")
    if _LABEL_NAME.fullmatch(name) is None or (prefix and _DNS_PREFIX.fullmatch(prefix) is None):
        raise SpecInvalid(
            "is not a valid label key",
            "use an optional DNS prefix and '/', then 1-63 letters, digits, '-', '_' or '.' (Kubernetes' rule)",
        )
    return text


def _label_value(text: str) -> str:
    if text and _LABEL_NAME.fullmatch(text) is None:
        raise SpecInvalid("is not a valid label value", "use at most 63 letters, digits, '-', '_' or '.', or nothing")
    return text


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME), AfterValidator(_name)]
Plain = Annotated[str, Field(min_length=1, max_length=MAX_PLAIN), AfterValidator(_plain)]
LongText = Annotated[str, Field(max_length=MAX_WORD), AfterValidator(_word)]  # annotations, descriptions
CommandWord = Annotated[str, Field(min_length=1, max_length=MAX_WORD), AfterValidator(_word)]
EnvValue = Annotated[str, Field(max_length=MAX_WORD), AfterValidator(_word)]
LabelKey = Annotated[str, Field(min_length=1, max_length=317), AfterValidator(_label_key)]
LabelValue = Annotated[str, Field(max_length=63), AfterValidator(_label_value)]


# ------------------------------------------------------------------------ the whole document
def document_problems(doc: Any, *, max_depth: int = MAX_DEPTH) -> list[SpecProblem]:
    """What no field may hold, wherever it is: NUL bytes and lone surrogates in keys or values, and nesting
    deeper than ``max_depth``. Checked before the models look at the document, so an unknown key is judged
    too (the models would echo it back in their message). On the submit path: a loop, not a recursion."""
    problems: list[SpecProblem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(doc, ())]
    while stack:
        value, loc = stack.pop()
        if isinstance(value, str):
            if (bad := _nul_or_surrogate(value)) is not None:
                problems.append(SpecProblem(loc, f"contains {char_name(bad)}", "remove it: no field may hold it"))
            continue
        if isinstance(value, Mapping):
            items: Iterable[tuple[Any, Any]] = value.items()
        elif isinstance(value, list | tuple):
            items = enumerate(value)
        else:
            continue
        if len(loc) >= max_depth:
            problems.append(SpecProblem(loc, f"is nested more than {max_depth} levels deep", "flatten the document"))
            continue
        for key, item in items:
            if isinstance(key, str) and (bad := _nul_or_surrogate(key)) is not None:
                shown = key.encode("unicode_escape").decode("ascii")  # the key names the place, escaped
                problems.append(
                    SpecProblem((*loc, shown), f"this key contains {char_name(bad)}", "remove it: no key may hold it")
                )
                continue
            if isinstance(item, str) and item.isascii() and "\0" not in item:
                continue  # the common case, without a trip through the stack
            stack.append((item, (*loc, key if isinstance(key, str | int) else repr(key))))
    problems.reverse()  # roughly document order for a single problem; several are all reported
    return problems


def _nul_or_surrogate(text: str) -> str | None:
    if text.isprintable() or (text.isascii() and "\0" not in text):
        return None
    for ch in text:
        if ch == "\0" or 0xD800 <= ord(ch) <= 0xDFFF:
            return ch
    return None


__all__ = [
    "MAX_DEPTH",
    "MAX_NAME",
    "NAME_FIX",
    "NAME_RULE",
    "CommandWord",
    "EnvValue",
    "LabelKey",
    "LabelValue",
    "LongText",
    "Name",
    "Plain",
    "char_name",
    "document_problems",
    "first_bad_char",
]
