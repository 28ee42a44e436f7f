"""Read cluster and job specs from YAML or JSON files: the I/O edge of the spec layer.

Parsing is here; validation is :mod:`rackscale.model.specs` (pure). Everything that can go wrong, from a
missing file to a bad field, is raised as one :class:`SpecError` whose lines name the file and, where the
YAML says so, the line: ``train.yaml:7: spec.gpus: ... (fix: ...)``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from rackscale.model.spec_errors import SpecError, SpecProblem, format_loc
from rackscale.model.specs import CLUSTER_KINDS, cluster_from_dict, job_from_dict
from rackscale.model.topology import GPUCluster
from rackscale.model.workload import JobSpec

__all__ = ["SpecError", "load_any", "load_cluster", "load_jobs", "parse_cluster_text", "parse_jobs_text"]

Loc = tuple[str | int, ...]


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
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
    docs = _documents(_read(path), source)
    if len(docs) == 1 and isinstance(docs[0][0], Mapping) and docs[0][0].get("kind") in CLUSTER_KINDS:
        return _cluster(docs, source)
    return _jobs(docs, source, priority_classes)


def parse_cluster_text(text: str, *, source: str = "<string>") -> GPUCluster:
    """Parse and validate one cluster document. Raises :class:`SpecError` naming ``source``."""
    return _cluster(_documents(text, source), source)


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
        raise SpecError([_locate(p, (), node) for p in err.problems], source) from None


def parse_jobs_text(
    text: str, *, source: str = "<string>", priority_classes: Mapping[str, int] | None = None
) -> list[JobSpec]:
    """Parse and validate jobs. ``text`` may hold one job, a YAML stream of jobs (``---``), a list of jobs,
    or a Kubernetes-style ``kind: List`` with ``items``. Empty text gives no jobs.

    Problems of all jobs are gathered into one :class:`SpecError`; their paths start with the job's index
    (``[2].spec.gpus``, or ``items[2].spec.gpus`` in a ``kind: List``). Job names must be unique.
    """
    return _jobs(_documents(text, source), source, priority_classes)


def read_text(path: str | os.PathLike[str]) -> str:
    """A spec file's text (raises SpecError naming the file when it cannot be read)."""
    return _read(path)


def parse_job_documents(text: str, *, source: str = "<string>") -> list[tuple[JobSpec, dict[str, Any]]]:
    """Like :func:`parse_jobs_text`, each job with the document it came from (what a client sends to the
    service), in file order."""
    docs = _documents(text, source)
    jobs = _jobs(docs, source, None)
    entries = _entries(docs, [])
    return [(job, dict(data)) for job, (_prefix, data, _node) in zip(jobs, entries, strict=True)]


def _jobs(docs: list[Document], source: str, priority_classes: Mapping[str, int] | None) -> list[JobSpec]:
    problems: list[SpecProblem] = []
    jobs: list[JobSpec] = []
    first_at: dict[str, Loc] = {}
    for prefix, data, node in _entries(docs, problems):
        try:
            job = job_from_dict(data, priority_classes=priority_classes)
        except SpecError as err:
            problems += [_locate(p, prefix, node) for p in err.problems]
            continue
        if job.name in first_at:
            loc: Loc = ("metadata", "name") if "metadata" in data else ("name",)
            where = format_loc(first_at[job.name])
            fix = "give every job its own name"
            problems.append(
                _locate(
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


def _read(path: str | os.PathLike[str]) -> str:
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        problem = SpecProblem((), "file not found", f"check the path (relative paths start at {os.getcwd()})")
    except UnicodeDecodeError as err:
        problem = SpecProblem((), f"not UTF-8 text (byte {err.start})", "save the file as UTF-8 YAML or JSON")
    except OSError as err:
        problem = SpecProblem((), f"cannot read: {err.strerror or err}", "check that it is a readable file")
    raise SpecError([problem], source)


def _documents(text: str, source: str) -> list[Document]:
    """The non-empty documents of ``text`` with their YAML nodes (for line numbers; None if unknown)."""
    if text.lstrip().startswith(("{", "[")):
        # JSON first: PyYAML rejects some valid JSON (tab indentation), and JSON's errors read better.
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            json_error = SpecProblem(
                (), f"invalid JSON: {err.msg} at column {err.colno}", "check commas, quotes and brackets", err.lineno
            )
        except RecursionError:
            json_error = SpecProblem((), "invalid JSON: nested too deeply", "flatten the document")
        else:
            return [(data, _compose(text))]
        try:
            return _yaml_documents(text)
        except SpecError:
            raise SpecError([json_error], source) from None  # meant as JSON: its error is the useful one
    try:
        return _yaml_documents(text)
    except SpecError as err:
        raise SpecError(err.problems, source) from None


def _yaml_documents(text: str) -> list[Document]:
    loader = _Loader(text)
    docs: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            data = loader.construct_document(node)
            if data is not None:  # an empty document (a stray `---`) holds nothing
                docs.append((data, node))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = err.problem or "syntax error"
        if err.context:
            what += f" ({err.context})"
        col = f" at column {mark.column + 1}" if mark else ""
        fix = "check indentation, colons and quoting on this line and the one above"
        raise SpecError([SpecProblem((), f"invalid YAML: {what}{col}", fix, mark.line + 1 if mark else None)]) from None
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as err:
        # ValueError/OverflowError: PyYAML builds dates with datetime, which refuses e.g. 2024-13-01.
        fix = 'quote values that should stay text, e.g. "2024-13-01"'
        raise SpecError([SpecProblem((), f"invalid YAML: {str(err) or type(err).__name__}", fix)]) from None
    finally:
        loader.dispose()
    return docs


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree of a JSON text, for line numbers only (best effort)."""
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None
    return node


def _entries(docs: list[Document], problems: list[SpecProblem]) -> list[tuple[Loc, Any, yaml.Node | None]]:
    """Flatten documents, lists and ``kind: List`` into (path prefix, job document, node) entries."""
    out: list[tuple[Loc, Any, yaml.Node | None]] = []
    for i, (data, node) in enumerate(docs):
        base: Loc = (i,) if len(docs) > 1 else ()
        if isinstance(data, list):
            out += [((*base, j), item, _child(node, j)) for j, item in enumerate(data)]
        elif isinstance(data, Mapping) and data.get("kind") == "List":
            for key in sorted(set(data) - {"apiVersion", "kind", "metadata", "items"}, key=str):
                fix = "a List holds apiVersion, kind, metadata and items only"
                problems.append(_locate(SpecProblem((key,), "unknown field", fix), base, node))
            items = data.get("items")
            if not isinstance(items, list):
                problems.append(
                    _locate(SpecProblem(("items",), "must be a list of jobs", "write items: [ ... ]"), base, node)
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


def _locate(problem: SpecProblem, prefix: Loc, node: yaml.Node | None) -> SpecProblem:
    """Put ``problem`` (found inside the document at ``node``) at its place in the whole file."""
    return replace(problem, loc=prefix + problem.loc, line=problem.line or _line(node, problem.loc))
