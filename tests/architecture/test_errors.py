"""Every exception class rackscale defines derives from one base, RackscaleError, and no two share a name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import rackscale
from rackscale.model.errors import RackscaleError


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(rackscale.__path__, "rackscale."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed (e.g. kubernetes): nothing to walk
            continue
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("rackscale."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_rackscale_exception_has_the_one_base() -> None:
    classes = _exception_classes()
    assert len(classes) >= 15  # the walk found them (a broken walk must not pass vacuously)
    strays = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, RackscaleError))
    assert strays == []


def test_no_two_exception_classes_share_a_name() -> None:
    names = [c.__qualname__ for c in _exception_classes()]
    assert sorted({n for n in names if names.count(n) > 1}) == []
