"""Read cluster and job specs from YAML or JSON files: the I/O edge of the spec layer.

Parsing is here; validation is :mod:`rackscale.model.specs` (pure). Everything that can go wrong, from a
missing file to a bad field, is raised as one :class:`SpecError` whose lines name the file and, where the
YAML says so, the line: ``train.yaml:7: spec.gpus: ... (fix: ...)``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from rackscale.model.spec_errors import SpecError, SpecProblem, format_loc
from rackscale.model.specs import CLUSTER_KINDS, cluster_from_dict, job_from_dict
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec
from rackscale.pipes import open_text

__all__ = [
    "MAX_ALIAS_VALUES",
    "MAX_DEPTH",
    "MAX_TEXT_CHARS",
    "SpecError",
    "line_of",
    "load_any",
    "load_cluster",
    "load_jobs",
    "parse_cluster_text",
    "parse_jobs_text",
    "safe_load_bounded",
    "safe_load_document",
]

Loc = tuple[str | int, ...]

# Bounds on what one text may make the loader do (a spec file, a job stream, a config or token file).
MAX_TEXT_CHARS = 64 * 1024 * 1024  # 64 MiB of text (characters; a file's bytes are checked before reading)
MAX_ALIAS_VALUES = 1_000_000  # values a document may gain through aliases (*alias repeats an &anchor's values)
MAX_DEPTH = 64  # lists and mappings nested in one another


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc,valid-type]
    """``yaml.safe_load``'s loader (in C when available: job traces can hold thousands of documents),
    plus YAML 1.2's exponent floats: YAML 1.1 reads ``2.0e10`` or ``1e9`` as *strings*, a trap in specs
    full of byte counts. Registered on this subclass only; ``yaml.SafeLoader`` is left as it is."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


# --------------------------------------------------------------------------------------------- public
def load_cluster(path: str | os.PathLike[str]) -> GPUCluster:
    """Read one ``GpuCluster`` or ``Cluster`` document from a YAML or JSON file."""
    return parse_cluster_text(_read(path), source=os.fspath(path))


def load_jobs(path: str | os.PathLike[str], *, priority_classes: Mapping[str, int] | None = None) -> list[JobSpec]:
    """Read the jobs of a YAML or JSON file (see :func:`parse_jobs_text` for the layouts accepted)."""
    return parse_jobs_text(_read(path), source=os.fspath(path), priority_classes=priority_classes)


def load_any(
    path: str | os.PathLike[str], *, priority_classes: Mapping[str, int] | None = None
) -> GPUCluster | list[JobSpec]:
    """A cluster if the file's one document has a cluster ``kind``, else its jobs (for ``validate``)."""
    source = os.fspath(path)
    docs = documents(_read(path), source)
    if not docs:
        fix = "write a job (name, kind, gpus) or a cluster (kind: Cluster or GpuCluster); see docs/specs.md"
        raise SpecError(
            [SpecProblem((), "no job or cluster found in the file (it is empty or only comments)", fix)], source
        )
    if len(docs) == 1 and isinstance(docs[0][0], Mapping) and docs[0][0].get("kind") in CLUSTER_KINDS:
        return _cluster(docs, source)
    return _jobs(docs, source, priority_classes)


def parse_cluster_text(text: str, *, source: str = "<string>") -> GPUCluster:
    """Parse and validate one cluster document. Raises :class:`SpecError` naming ``source``."""
    return _cluster(documents(text, source), source)


def _cluster(docs: list[Document], source: str) -> GPUCluster:
    if not docs:
        raise SpecError(
            [SpecProblem((), "no cluster document found", "write a Cluster or GpuCluster; see docs/specs.md")], source
        )
    if len(docs) > 1:
        line = _line(docs[1][1], ())
        raise SpecError(
            [SpecProblem((), f"expected one cluster document, found {len(docs)}", "keep one cluster per file", line)],
            source,
        )
    data, node = docs[0]
    try:
        return cluster_from_dict(data)
    except SpecError as err:
        raise SpecError([locate_problem(p, (), node) for p in err.problems], source) from None


def parse_jobs_text(
    text: str, *, source: str = "<string>", priority_classes: Mapping[str, int] | None = None
) -> list[JobSpec]:
    """Parse and validate jobs. ``text`` may hold one job, a YAML stream of jobs (``---``), a list of jobs,
    or a Kubernetes-style ``kind: List`` with ``items``. Empty text gives no jobs.

    Problems of all jobs are gathered into one :class:`SpecError`; their paths start with the job's index
    (``[2].spec.gpus``, or ``items[2].spec.gpus`` in a ``kind: List``). Job names must be unique.
    """
    return _jobs(documents(text, source), source, priority_classes)


def read_text(path: str | os.PathLike[str]) -> str:
    """A spec file's text (raises SpecError naming the file when it cannot be read)."""
    return _read(path)


def safe_load_bounded(text: str, source: str = "<string>") -> Any:
    """``yaml.safe_load(text)`` (YAML 1.1, one document, None when empty) within the loader's bounds: at
    most :data:`MAX_TEXT_CHARS` of text, :data:`MAX_ALIAS_VALUES` values gained through aliases and
    :data:`MAX_DEPTH` levels of nesting. For the YAML files that are not specs (config, tokens).

    Raises :class:`SpecError` naming ``source`` (and the line) for bad YAML or a text over a bound."""
    return safe_load_document(text, source)[0]


def safe_load_document(text: str, source: str = "<string>") -> Document:
    """:func:`safe_load_bounded`'s data with its YAML node, for :func:`line_of` (``(None, None)`` when empty)."""
    try:
        _check_size(text)
        docs = _yaml_documents(text, _SafeLoader, single=True)
    except SpecError as err:
        raise SpecError(err.problems, source) from None
    return docs[0] if docs else (None, None)


def line_of(node: yaml.Node | None, loc: Loc) -> int | None:
    """1-based line of ``loc`` (e.g. ``("spec", "grid", "seed", 1)``) in the document at ``node``: the deepest
    part of it the document has (a missing key: its parent mapping's line); None without a node."""
    return _line(node, loc)


def parse_job_documents(text: str, *, source: str = "<string>") -> list[tuple[JobSpec, dict[str, Any]]]:
    """Like :func:`parse_jobs_text`, each job with the document it came from (what a client sends to the
    service), in file order."""
    docs = documents(text, source)
    jobs = _jobs(docs, source, None)
    entries = document_entries(docs, [])
    return [(job, dict(data)) for job, (_prefix, data, _node) in zip(jobs, entries, strict=True)]


def _jobs(docs: list[Document], source: str, priority_classes: Mapping[str, int] | None) -> list[JobSpec]:
    problems: list[SpecProblem] = []
    jobs: list[JobSpec] = []
    first_at: dict[str, Loc] = {}
    for prefix, data, node in document_entries(docs, problems):
        if isinstance(data, Mapping) and data.get("kind") in CLUSTER_KINDS:
            # One line, not a dozen about fields a job does not have.
            what = f"this is a {data['kind']} (a cluster spec), not a job"
            fix = "pass it with --cluster, or give a job spec"
            problems.append(SpecProblem(prefix, what, fix, _line(node, ()) if prefix else None))
            continue
        try:
            job = job_from_dict(data, priority_classes=priority_classes)
        except SpecError as err:
            problems += [locate_problem(p, prefix, node) for p in err.problems]
            continue
        if job.name in first_at:
            loc: Loc = ("metadata", "name") if "metadata" in data else ("name",)
            where = format_loc(first_at[job.name])
            fix = "give every job its own name"
            problems.append(
                locate_problem(
                    SpecProblem(loc, f"job name {job.name!r} is already used by {where or 'an earlier job'}", fix),
                    prefix,
                    node,
                )
            )
        first_at.setdefault(job.name, prefix)
        jobs.append(job)
    if problems:
        raise SpecError(problems, source)
    return jobs


# --------------------------------------------------------------------------------------------- parsing
Document = tuple[Any, "yaml.Node | None"]


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n % 2**20 else f"{n // 2**20} MiB"


def _too_big(size: str) -> SpecProblem:
    return SpecProblem(
        (),
        f"the text is {size}, more than the {_mib(MAX_TEXT_CHARS)} a spec or config file may hold",
        "split it into several files (a job stream can be read file by file)",
    )


def _check_size(text: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise SpecError([_too_big(_mib(len(text)))])


def _read(path: str | os.PathLike[str]) -> str:
    source = os.fspath(path)
    try:
        # (A named pipe is waited on for its writer FIFO_WAIT_S at most: rackscale.pipes.)
        with open_text(path, source, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_TEXT_CHARS:  # a regular file: its size is known without reading it
                raise SpecError([_too_big(_mib(st.st_size))], source)
            # A pipe or a device (/dev/zero) has no size: a bounded part (read(n) allocates n up front, so a
            # regular file, within the bound already, is read whole instead).
            text = f.read() if stat.S_ISREG(st.st_mode) else f.read(MAX_TEXT_CHARS + 1)
            if len(text) > MAX_TEXT_CHARS:
                raise SpecError([_too_big(f"more than {_mib(MAX_TEXT_CHARS)}")], source)
            return text
    except FileNotFoundError:
        problem = SpecProblem((), "file not found", f"check the path (relative paths start at {os.getcwd()})")
    except UnicodeDecodeError as err:
        problem = SpecProblem((), f"not UTF-8 text (byte {err.start})", "save the file as UTF-8 YAML or JSON")
    except OSError as err:
        problem = SpecProblem((), f"cannot read: {err.strerror or err}", "check that it is a readable file")
    raise SpecError([problem], source)


def documents(text: str, source: str) -> list[Document]:
    """The non-empty documents of ``text`` with their YAML nodes (for line numbers; None if unknown)."""
    try:
        _check_size(text)
    except SpecError as err:
        raise SpecError(err.problems, source) from None
    if text.lstrip().startswith(("{", "[")):
        # JSON first: PyYAML rejects some valid JSON (tab indentation), and JSON's errors read better.
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            json_error = SpecProblem(
                (), f"invalid JSON: {err.msg} at column {err.colno}", "check commas, quotes and brackets", err.lineno
            )
        except RecursionError:
            json_error = _too_deep(None)
        except ValueError as err:  # a value Python refuses (an integer past its digit limit): YAML finds its line
            json_error = SpecProblem((), *_refused_value(str(err)))
        else:
            node = _compose(text)
            problem = _bounds(node) if node is not None else _data_depth(data)
            if problem is not None:
                raise SpecError([problem], source)
            return [(data, node)]
        try:
            return _yaml_documents(text)
        except (_OverBound, _Unbuildable) as err:  # valid YAML, but over a bound or a value refused: say that
            raise SpecError(err.problems, source) from None
        except SpecError:
            raise SpecError([json_error], source) from None  # meant as JSON: its error is the useful one
    try:
        return _yaml_documents(text)
    except SpecError as err:
        raise SpecError(err.problems, source) from None


def _yaml_documents(
    text: str, loader_class: type[yaml.SafeLoader] = _Loader, *, single: bool = False
) -> list[Document]:
    """The documents of ``text``, each checked against the bounds (:func:`_bounds`) between composing
    its node graph and constructing its values. ``single``: one document at most, kept even when it is
    empty (``yaml.safe_load``'s rules)."""
    loader = loader_class(text)
    docs: list[Document] = []
    try:
        while single or loader.check_node():
            node = loader.get_single_node() if single else loader.get_node()
            if node is None:  # single, and the text holds no document
                break
            problem = _bounds(node)
            if problem is not None:
                raise _OverBound([problem])
            try:
                data = loader.construct_document(node)
            except (ValueError, OverflowError) as err:
                # Python refused a scalar's value (an integer past its digit limit, a date 2024-13-01): the
                # error has no mark, so the scalar is looked for (and only then) to give the line.
                raise _Unbuildable([_unbuildable(loader, node, err)]) from None
            if data is not None or single:  # an empty document (a stray `---`) holds nothing
                docs.append((data, node))
            if single:
                break
    except SpecError:
        raise
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if err.problem and "maximum nesting depth" in err.problem:  # libyaml stops at 1000 levels
            raise _OverBound([_too_deep(mark.line + 1 if mark else None)]) from None
        tab = _tab_at(text, mark.line, mark.column, err.problem or "") if mark else None
        if tab is not None:  # PyYAML's words ("found character that cannot start any token") hide the cause
            tab_line, tab_col = tab
            where = f"a tab character at line {tab_line} column {tab_col}"
            fix = "replace the tab with spaces"
            raise SpecError(
                [SpecProblem((), f"invalid YAML: {where}: YAML indents with spaces", fix, tab_line)]
            ) from None
        what = err.problem or "syntax error"
        if err.context:
            what += f" ({err.context})"
        col = f" at column {mark.column + 1}" if mark else ""
        fix = "check indentation, colons and quoting on this line and the one above"
        raise SpecError([SpecProblem((), f"invalid YAML: {what}{col}", fix, mark.line + 1 if mark else None)]) from None
    except RecursionError:  # the pure-Python composer, where libyaml is missing
        raise _OverBound([_too_deep(None)]) from None
    except (yaml.YAMLError, ValueError, OverflowError) as err:
        # ValueError/OverflowError: from the parser rather than a value (those are _Unbuildable, above).
        fix = 'quote values that should stay text, e.g. "2024-13-01"'
        raise SpecError([SpecProblem((), f"invalid YAML: {str(err) or type(err).__name__}", fix)]) from None
    finally:
        loader.dispose()
    return docs


def _tab_at(text: str, line: int, column: int, problem: str) -> tuple[int, int] | None:
    """(1-based line, column) of the tab that made a YAML error at ``line``:``column`` (0-based), or None
    when the error is not about a tab: the character at the mark is one, or PyYAML names a tab and the
    line's indentation holds one."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return None
    row = lines[line]
    if column < len(row) and row[column] == "\t":
        return line + 1, column + 1
    indent = row[: len(row) - len(row.lstrip(" \t"))]
    if "tab" in problem and "\t" in indent:
        return line + 1, indent.index("\t") + 1
    return None


# --------------------------------------------------------------------------------------------- values
class _Unbuildable(SpecError):
    """The YAML is readable but Python refuses one of its values: reported even where a JSON error would be."""


def _refused_value(reason: str, digits: int | None = None) -> tuple[str, str]:
    """(what, fix) of Python's refusal of a value, in words: its int digit limit (``sys.set_int_max_str_digits``,
    which it names, is no fix a spec's author can apply) or its own reason (a date past the calendar)."""
    if "digits" in reason and "integer" in reason:
        size = f"{digits:,} digits" if digits is not None else "more digits"
        what = f"an integer of {size}, more than the {sys.get_int_max_str_digits():,} Python reads"
        return what, "check the value (no count is that long); quote it if it should stay text"
    return f"invalid YAML: {reason}", 'quote values that should stay text, e.g. "2024-13-01"'


def _unbuildable(loader: yaml.SafeLoader, root: yaml.Node, err: Exception) -> SpecProblem:
    """The problem of the first scalar under ``root`` (in document order, keys too) whose value Python
    refuses, with its line; without its line when none is found (the error came from elsewhere)."""
    seen: set[int] = set()
    stack: list[yaml.Node] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:  # an alias: its anchor was looked at
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [n for pair in reversed(node.value) for n in reversed(pair)]
        elif isinstance(node, yaml.SequenceNode):
            stack += reversed(node.value)
        elif (build := loader.yaml_constructors.get(node.tag)) is not None:
            try:
                build(loader, node)
            except (ValueError, OverflowError) as e:
                digits = sum(c.isdigit() for c in node.value)
                return SpecProblem((), *_refused_value(str(e), digits), node.start_mark.line + 1)
            except Exception:  # not this scalar's refusal: keep looking
                continue
    return SpecProblem((), *_refused_value(str(err) or type(err).__name__))


# --------------------------------------------------------------------------------------------- bounds
class _OverBound(SpecError):
    """The YAML is readable but over a bound (depth, aliases): reported even where a JSON error would be."""


def _too_deep(line: int | None) -> SpecProblem:
    return SpecProblem(
        (), f"the document nests lists and mappings more than {MAX_DEPTH} levels deep", "flatten the document", line
    )


def _bounds(root: yaml.Node) -> SpecProblem | None:
    """What is wrong with a document's node graph before its values are built, or None: nesting deeper than
    :data:`MAX_DEPTH`, an alias inside its own anchor, or more than :data:`MAX_ALIAS_VALUES` values gained
    through aliases (a "billion laughs": 9 levels of 9 aliases of a 9-item list make 9**9 values from a few
    hundred bytes).

    An alias is the anchor's node object itself, so one walk with memoised counts visits each node and
    edge once: linear in the text, however far the aliases would expand. Iterative (no recursion limit)."""
    expands: dict[int, int] = {}  # id(node) -> the values it stands for, itself included (capped)
    heights: dict[int, int] = {}  # id(collection node) -> levels of collections from it down
    open_ids: set[int] = set()  # collections on the current path (an alias to one of them is a cycle)
    cap = 2**62

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    # frames: [node, its children, next child index, values so far, tallest child so far]
    if isinstance(root, yaml.ScalarNode):
        return None
    stack: list[list[Any]] = [[root, children(root), 0, 1, 0]]  # the root is at depth 1
    open_ids.add(id(root))
    while stack:
        frame = stack[-1]
        node, kids, i = frame[0], frame[1], frame[2]
        if i < len(kids):
            frame[2] = i + 1
            kid = kids[i]
            kid_id = id(kid)
            if kid_id in expands:  # seen before: an alias (or a shared scalar)
                if len(stack) + heights.get(kid_id, 0) > MAX_DEPTH:
                    return _too_deep(node.start_mark.line + 1)
                frame[3] = min(frame[3] + expands[kid_id], cap)
                frame[4] = max(frame[4], heights.get(kid_id, 0))
            elif kid_id in open_ids:
                return SpecProblem(
                    (),
                    "an alias (*name) refers to a list or mapping that holds it: the YAML would never end",
                    "use the anchor (&name) only after its list or mapping ends",
                    node.start_mark.line + 1,
                )
            elif isinstance(kid, yaml.ScalarNode):
                expands[kid_id] = 1
                frame[3] = min(frame[3] + 1, cap)
            else:
                if len(stack) >= MAX_DEPTH:
                    return _too_deep(kid.start_mark.line + 1)
                open_ids.add(kid_id)
                stack.append([kid, children(kid), 0, 1, 0])
            continue
        stack.pop()
        open_ids.discard(id(node))
        expands[id(node)], heights[id(node)] = frame[3], frame[4] + 1
        if stack:
            parent = stack[-1]
            parent[3] = min(parent[3] + frame[3], cap)
            parent[4] = max(parent[4], frame[4] + 1)
    gained = expands[id(root)] - len(expands)
    if gained > MAX_ALIAS_VALUES:
        return SpecProblem(
            (),
            f"the YAML expands to more than {MAX_ALIAS_VALUES:,} values through aliases (&anchor / *alias)",
            "write the values out, or use fewer aliases of large lists and mappings",
            root.start_mark.line + 1,
        )
    return None


def _data_depth(data: Any) -> SpecProblem | None:
    """:data:`MAX_DEPTH` for parsed JSON whose YAML nodes are unknown (JSON has no aliases)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                return _too_deep(None)
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return None


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree of a JSON text, for line numbers only (best effort)."""
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    return node


def document_entries(docs: list[Document], problems: list[SpecProblem]) -> list[tuple[Loc, Any, yaml.Node | None]]:
    """Flatten documents, lists and ``kind: List`` into (path prefix, job document, node) entries."""
    out: list[tuple[Loc, Any, yaml.Node | None]] = []
    for i, (data, node) in enumerate(docs):
        base: Loc = (i,) if len(docs) > 1 else ()
        if isinstance(data, list):
            out += [((*base, j), item, _child(node, j)) for j, item in enumerate(data)]
        elif isinstance(data, Mapping) and data.get("kind") == "List":
            for key in sorted(set(data) - {"apiVersion", "kind", "metadata", "items"}, key=str):
                fix = "a List holds apiVersion, kind, metadata and items only"
                problems.append(locate_problem(SpecProblem((key,), "unknown field", fix), base, node))
            items = data.get("items")
            if not isinstance(items, list):
                problems.append(
                    locate_problem(
                        SpecProblem(("items",), "must be a list of jobs", "write items: [ ... ]"), base, node
                    )
                )
                continue
            items_node = _child(node, "items")
            out += [((*base, "items", j), item, _child(items_node, j)) for j, item in enumerate(items)]
        else:
            out.append((base, data, node))
    return out


# --------------------------------------------------------------------------------------------- lines
def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    """The value node under key or index ``part`` of ``node``, or None."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                found: yaml.Node = value
                return found
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item: yaml.Node = node.value[part]
        return item
    return None


def _line(node: yaml.Node | None, loc: Loc) -> int | None:
    """1-based line of the deepest node on ``loc`` that exists (a missing key: its parent mapping)."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            keys = [k for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == part]
            if keys:
                line = keys[0].start_mark.line + 1  # the key's line: the value may start on the next one
        child = _child(node, part)
        if child is None:
            break
        if isinstance(part, int):
            line = child.start_mark.line + 1
        node = child
    return line


def locate_problem(problem: SpecProblem, prefix: Loc, node: yaml.Node | None) -> SpecProblem:
    """Put ``problem`` (found inside the document at ``node``) at its place in the whole file."""
    return replace(problem, loc=prefix + problem.loc, line=problem.line or _line(node, problem.loc))
