"""The error a bad spec raises, and the translation of pydantic's errors into it.

A user sees ``path: message (fix: ...)`` lines, never a pydantic traceback: pydantic's own messages name
Python types and link to its docs, which says little to someone editing a YAML file.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from rackscale.model.errors import RackscaleError

__all__ = ["SpecError", "SpecInvalid", "SpecProblem", "format_loc", "problems_from_validation"]


def format_loc(loc: Iterable[str | int]) -> str:
    """``("spec", "pools", 1, "name")`` -> ``spec.pools[1].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong with a spec: where (``loc``, and ``line`` when read from a file), what, and a fix."""

    loc: tuple[str | int, ...]
    message: str
    fix: str = ""
    line: int | None = None

    @property
    def path(self) -> str:
        return format_loc(self.loc)

    def render(self, source: str | None = None) -> str:
        where = [source] if source else []
        if source and self.line is not None:
            where = [f"{source}:{self.line}"]
        if self.loc:
            where.append(self.path)
        text = ": ".join([*where, self.message])
        return f"{text} (fix: {self.fix})" if self.fix else text


class SpecError(RackscaleError, ValueError):
    """A spec (cluster or job) is invalid. ``problems`` lists every problem found, in document order.

    ``str()`` gives one line per problem, ``[source[:line]: ]path: message (fix: hint)``.
    """

    def __init__(self, problems: Sequence[SpecProblem], source: str | None = None) -> None:
        self.problems: list[SpecProblem] = list(problems)
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(p.render(self.source) for p in self.problems)

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduce would call SpecError(message); rebuild from the problems instead.
        return (type(self), (self.problems, self.source))


class SpecInvalid(RackscaleError, ValueError):
    """Raised by spec validators: pydantic keeps the instance, so its ``fix`` reaches the SpecProblem."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


# ------------------------------------------------------------------------- pydantic -> SpecProblem
_NOUNS = {
    "int": "a whole number",
    "float": "a number",
    "string": "a string",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping (key: value pairs)",
    "model": "a mapping (key: value pairs)",
}
_COMPARE = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _unwrap(tp: Any) -> Any:
    """Strip ``X | None`` down to ``X``."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``loc`` (None if ``loc`` leads elsewhere)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int) and get_origin(tp) is list:
            tp = get_args(tp)[0]
        elif isinstance(part, str) and isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or n: f for n, f in tp.model_fields.items()}
            if part not in fields:
                return None
            tp = fields[part].annotation
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _field(root: type[BaseModel], loc: tuple[str | int, ...]) -> FieldInfo | None:
    """The pydantic field declared for the key at ``loc``, if ``loc`` ends in a key."""
    parent = _model_at(root, loc[:-1]) if loc else None
    fields = {f.alias or n: f for n, f in parent.model_fields.items()} if parent else {}
    return fields.get(str(loc[-1])) if loc and isinstance(loc[-1], str) else None


def _example(root: type[BaseModel], loc: tuple[str | int, ...]) -> str:
    """`` e.g. key: value`` from the field's declared examples, or ''."""
    info = _field(root, loc)
    return f", e.g. {loc[-1]}: {info.examples[0]}" if info and info.examples else ""


def _bound(value: Any) -> str:
    """A rule's bound as a user would type it: ``315576000``, not ``3.15576e+08``; ``0.5`` as it is."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _convert(err: ErrorDetails, root: type[BaseModel]) -> SpecProblem:
    loc: tuple[str | int, ...] = tuple(err["loc"])
    kind: str = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    got = _short(err.get("input"))
    key = str(loc[-1]) if loc else "the document"
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        allowed = [f.alias or n for n, f in parent.model_fields.items()] if parent else []
        camel = to_camel(key)
        near = [camel] if camel in allowed else difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return SpecProblem(
            loc, "unknown field", f"{hint}remove it or check the spelling (allowed: {', '.join(allowed)})"
        )
    if kind == "missing":
        return SpecProblem(loc, "required field is missing", f"add {key}{_example(root, loc)}")
    if kind == "value_error" and isinstance(ctx.get("error"), SpecInvalid):
        inv: SpecInvalid = ctx["error"]
        return SpecProblem(loc, f"{inv.message}, got {got}", inv.fix)
    if kind in _COMPARE:
        rule = f"{_COMPARE[kind]} {_bound(next(iter(ctx.values())))}"
        return SpecProblem(loc, f"must be {rule}, got {got}", f"use a value {rule}")
    if kind == "literal_error":
        return SpecProblem(loc, f"must be one of {ctx.get('expected')}, got {got}", "use one of the listed values")
    if kind == "finite_number":
        return SpecProblem(loc, f"must be a finite number, got {got}", f"give a plain number{_example(root, loc)}")
    if kind == "string_too_short":
        return SpecProblem(loc, "must not be empty", f"give a value{_example(root, loc)}")
    if kind in ("too_short", "too_long", "string_too_long"):  # a text's own max_length: string_too_long
        info = _field(root, loc)
        n, limit = ctx.get("actual_length"), ctx.get("min_length", ctx.get("max_length"))
        if n is None and isinstance(err.get("input"), str):  # string_too_long gives no actual_length
            n = len(err["input"])
        rule = f"at least {limit}" if kind == "too_short" else f"at most {limit}"
        if isinstance(err.get("input"), str):  # a length bound on a text field (not a list): characters
            return SpecProblem(loc, f"is {n} characters long, needs {rule}", f"shorten it to {rule} characters")
        hint = info.description if info and info.description else f"give {rule} entries"
        return SpecProblem(loc, f"has {n} entries, needs {rule}", hint)
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] == "[key]":  # a mapping's key, e.g. an environment variable's name
            loc = loc[:-1]  # the key itself names the place
            return SpecProblem(
                loc,
                f"{str(loc[-1])[:60]!r} is not a valid name",
                "use letters, digits and _, not starting with a digit",
            )
        return SpecProblem(loc, f"{got} does not match the pattern {ctx.get('pattern')}", "see docs/specs.md")
    if kind == "int_from_float":
        return SpecProblem(loc, f"must be a whole number, got {got}", f"drop the fraction{_example(root, loc)}")
    noun = kind.rsplit("_", 1)[0] if kind.endswith(("_type", "_parsing")) else ""
    if noun in _NOUNS or kind in ("model_attributes_type", "dict_type"):
        what = _NOUNS.get(noun, _NOUNS["dict"])
        return SpecProblem(loc, f"must be {what}, got {got}", f"write {what} here{_example(root, loc)}")
    # Rare types keep pydantic's message, which is readable enough without its URL.
    return SpecProblem(loc, str(err["msg"]), "")


def problems_from_validation(err: ValidationError, root: type[BaseModel]) -> list[SpecProblem]:
    """Translate every error of ``err`` (raised validating ``root``) into a :class:`SpecProblem`."""
    return [_convert(e, root) for e in err.errors(include_url=False)]
