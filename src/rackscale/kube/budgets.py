"""PodDisruptionBudgets, read as kube-scheduler's preemption reads them, for the core's disruption budgets.

kube-scheduler (``filterPodsWithPDBViolation`` in pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go) counts each victim pod against every ``policy/v1`` PodDisruptionBudget of its namespace
whose ``spec.selector`` matches the pod's labels, and a budget allows ``status.disruptionsAllowed`` of them; a pod
named in the budget's ``status.disruptedPods`` is not counted again (the API server has already counted its
eviction). The same here, with a gang's pods summed per budget (:class:`rackscale.scheduler.budgets.
DisruptionBudgets`: per budget what it allows, per running gang its pods each budget selects):

- ``spec.selector`` as ``metav1.LabelSelectorAsSelector`` reads it: absent or null matches no pod; ``{}``
  matches every pod of the namespace, labelled or not (policy/v1's meaning, which kube-scheduler's preemption
  follows since kubernetes/kubernetes#141785; before, it skipped such a budget); ``matchLabels`` and
  ``matchExpressions`` (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) all hold. A selector that does not
  parse (an unknown operator, ``In`` without values, ``Exists`` with some, a key or value no label could have,
  a field of the wrong type) matches no pod, as in kube-scheduler, and is logged once.
- ``status.disruptionsAllowed``: a missing status, or a status without it (or null), reads 0 (Go's zero value,
  which is what kube-scheduler reads of a budget the disruption controller has not written yet); a value below 0
  allows none. A value that is no int32 (a string, a float, a bool, past 2^31-1), or a status that is no mapping
  (a real API server refuses both), is no budget information: the budget is left out, as if it did not exist,
  and logged once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from rackscale.kube.pods import INT32_MAX, INT32_MIN, shown
from rackscale.kube.snapshot import Victim
from rackscale.model.errors import RackscaleError
from rackscale.scheduler.budgets import DisruptionBudgets

log = logging.getLogger("rackscale.kube")

Obj = Mapping[str, Any]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# A label value (k8s.io/apimachinery validation.IsValidLabelValue) and a qualified name (IsQualifiedName): what
# ``labels.NewRequirement`` checks of a selector's keys and values.
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE = re.compile(_NAME + r"|")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_key(k: object) -> TypeGuard[str]:
    if not isinstance(k, str):
        return False
    prefix, slash, name = k.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and re.fullmatch(_NAME, name) is not None


def _label_value(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 63 and _VALUE.fullmatch(v) is not None


Requirement = tuple[str, str, frozenset[str]]  # (key, operator, values)


class SelectorError(RackscaleError, ValueError):
    """A ``spec.selector`` that does not parse."""


def parse_selector(sel: object) -> tuple[Requirement, ...] | None:
    """The requirements of a label selector, all of which must hold (``()``: every pod), or None: no pod.
    Raises :class:`SelectorError` where ``LabelSelectorAsSelector`` returns an error."""
    if sel is None:
        return None
    if not isinstance(sel, Mapping):
        raise SelectorError(f"spec.selector is no mapping: {type(sel).__name__}")
    out: list[Requirement] = []
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError("spec.selector.matchLabels is no mapping")
    for k, v in labels.items():
        if not _label_key(k) or not _label_value(v):
            raise SelectorError(f"spec.selector.matchLabels: {shown(k)}={shown(v)} is no label")
        out.append((k, "In", frozenset((v,))))
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError("spec.selector.matchExpressions is no list")
    for i, e in enumerate(exprs):
        where = f"spec.selector.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            raise SelectorError(f"{where} is no mapping")
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not _label_key(key):
            raise SelectorError(f"{where}.key {shown(key)} is no label key")
        if op not in OPERATORS:
            raise SelectorError(f"{where}.operator {shown(op)} is none of {', '.join(OPERATORS)}")
        if not isinstance(values, list) or not all(_label_value(v) for v in values):
            raise SelectorError(f"{where}.values are no list of label values")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{where}: operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{where}: operator {op} takes no values")
        out.append((key, str(op), frozenset(values)))
    return tuple(out)


def matches(reqs: tuple[Requirement, ...] | None, labels: Mapping[str, str]) -> bool:
    if reqs is None:
        return False
    for key, op, values in reqs:
        have = labels.get(key)
        if op == "In":
            ok = have is not None and have in values
        elif op == "NotIn":
            ok = have is None or have not in values
        elif op == "Exists":
            ok = have is not None
        else:
            ok = have is None
        if not ok:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget as preemption reads it."""

    key: str  # namespace/name
    namespace: str
    selector: tuple[Requirement, ...] | None  # None: selects no pod
    allowed: int
    disrupted: frozenset[str]  # status.disruptedPods: names not counted again


def parse_budget(obj: Obj) -> tuple[Budget | None, str | None]:
    """The budget, and what is wrong with it (to log) if anything: (None, why) when it is not read at all."""
    md = obj.get("metadata")
    md = md if isinstance(md, Mapping) else {}
    ns, name = md.get("namespace") or "default", md.get("name")
    if not isinstance(ns, str) or not isinstance(name, str):
        return None, "metadata.namespace or .name is no string"
    status = obj.get("status")
    if status is None:
        status = {}
    if not isinstance(status, Mapping):
        return None, "status is no mapping: not read as a budget"
    allowed = status.get("disruptionsAllowed")
    if allowed is None:
        allowed = 0  # absent or null: Go's zero value, what kube-scheduler reads
    if isinstance(allowed, bool) or not isinstance(allowed, int) or not INT32_MIN <= allowed <= INT32_MAX:
        return None, f"status.disruptionsAllowed={shown(allowed)} is no int32: not read as a budget"
    disrupted = status.get("disruptedPods")
    names = frozenset(k for k in disrupted if isinstance(k, str)) if isinstance(disrupted, Mapping) else frozenset()
    spec = obj.get("spec")
    problem = None
    try:
        if spec is not None and not isinstance(spec, Mapping):
            raise SelectorError("spec is no mapping")
        selector = parse_selector(spec.get("selector") if spec is not None else None)
    except SelectorError as e:
        selector, problem = None, f"{e}: it selects no pod"
    return Budget(f"{ns}/{name}", ns, selector, allowed, names), problem


def pdb_key(obj: Obj) -> str:
    """``namespace/name`` of a PodDisruptionBudget (its cache's key; a hostile one without a name gets one)."""
    md = obj.get("metadata")
    md = md if isinstance(md, Mapping) else {}
    return f"{md.get('namespace') or 'default'}/{md.get('name')}"


def pod_labels(pod: Obj) -> Mapping[str, str]:
    labels = (pod.get("metadata") or {}).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


class _GangPods(Mapping[str, Mapping[str, int]]):
    """Per running gang (job name), its pods each budget selects: worked out for a gang the first time the core
    asks (a cycle asks only when it looks for victims, and only of the gangs it looks at)."""

    def __init__(self, holders: Mapping[str, tuple[Victim, ...]], by_ns: Mapping[str, list[Budget]]) -> None:
        self.holders, self.by_ns = holders, by_ns
        self._memo: dict[str, Mapping[str, int]] = {}

    def __getitem__(self, job: str) -> Mapping[str, int]:
        got = self._memo.get(job)
        if got is None:
            got = self._memo[job] = self._count(self.holders[job])
        return got

    def _count(self, pods: tuple[Victim, ...]) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for v in pods:
            md = v.pod.get("metadata") or {}
            budgets = self.by_ns.get(str(md.get("namespace", "default")))
            if not budgets:
                continue
            labels, name = pod_labels(v.pod), md.get("name")
            name = name if isinstance(name, str) else None  # (hostile: a list is no name, nor any disrupted pod's)
            for b in budgets:
                if name not in b.disrupted and matches(b.selector, labels):
                    out[b.key] = out.get(b.key, 0) + 1
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.holders)

    def __len__(self) -> int:
        return len(self.holders)


class BudgetBook:
    """The cache's PodDisruptionBudgets, parsed once per change of the cache (:meth:`changed`)."""

    def __init__(self) -> None:
        self._by_ns: dict[str, list[Budget]] | None = None
        self._allowed: dict[str, int] = {}
        self._told: dict[str, str] = {}  # budget -> the problem last logged for it (logged once)

    def changed(self) -> None:
        self._by_ns = None

    def _parse(self, pdbs: Mapping[str, Obj]) -> dict[str, list[Budget]]:
        by_ns: dict[str, list[Budget]] = {}
        told: dict[str, str] = {}
        for key, obj in pdbs.items():
            b, problem = parse_budget(obj)
            if problem is not None:
                told[key] = problem
                if self._told.get(key) != problem:
                    log.warning("PodDisruptionBudget %s: %s (docs/kubernetes.md, Preemption)", key, problem)
            if b is not None:
                by_ns.setdefault(b.namespace, []).append(b)
        self._told = told
        self._allowed = {b.key: b.allowed for bs in by_ns.values() for b in bs}
        return by_ns

    def budgets(self, pdbs: Mapping[str, Obj], holders: Mapping[str, tuple[Victim, ...]]) -> DisruptionBudgets | None:
        """The core's view of the budgets for one cycle whose preemptible gangs are ``holders`` (their pods), or
        None when no budget could select any of them."""
        if self._by_ns is None:
            self._by_ns = self._parse(pdbs)
        if not self._by_ns or not holders:
            return None
        return DisruptionBudgets(allowed=self._allowed, units=_GangPods(holders, self._by_ns))
