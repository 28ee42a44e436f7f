"""The attained-service record under Kubernetes (``rackscale.kube.attained``): one ConfigMap that outlives the
pods and the leader, read and written with optimistic concurrency against the fake API server, bounded, and
proof against hostile or corrupt content (docs/kubernetes.md, "Attained service")."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from tests.kube.conftest import wait_for
from tests.kube.fake_apiserver import FakeAPIServer
from tests.kube.faults import Fault

from rackscale.kube.attained import (
    DATA_KEY,
    Entry,
    ServiceRecord,
    after_stop,
    bounded,
    dump,
    merge,
    parse,
    record_key,
)
from rackscale.scheduler.framework import AttainedService

CM = "kube-system/rackscale-attained-service"  # the record: the lease's namespace, named after the lease


def stored(fake: FakeAPIServer) -> dict[str, Entry]:
    cm = wait_for(lambda: fake.get("configmaps", CM), what="the record written")
    assert isinstance(cm, dict)
    entries, bad = parse(cm["data"][DATA_KEY])
    assert bad == []
    return entries


def seed(fake: FakeAPIServer, entries: dict[str, Entry] | None = None, *, text: str | None = None) -> None:
    """The record as a leader before left it (or as someone else wrote it: ``text``)."""
    data = {DATA_KEY: text if text is not None else dump(entries or {})}
    ns, name = CM.split("/")
    fake.put("configmaps", {"metadata": {"name": name, "namespace": ns}, "data": data})


_GOOD = {"gpuS": 3600.0, "runS": 450.0, "waitedS": 0.0, "stoppedAt": 1.7e9, "runs": 1, "seen": 1.7e9}


def _doc(**entries: object) -> str:
    return json.dumps({"version": 1, "entries": {"default/good": _GOOD, **entries}})


def _raw(field: str, text: str) -> str:
    """A document with a good entry and one whose ``field`` is ``text`` as written (no JSON encoder would)."""
    return _doc(**{"default/x": {**_GOOD, field: "@@"}}).replace('"@@"', text)


@pytest.mark.parametrize(
    ("text", "kept", "n_bad"),
    [
        pytest.param(_doc(), {"default/good"}, 0, id="as-written"),
        pytest.param(None, set(), 0, id="no-document"),
        pytest.param("{not json", set(), 1, id="not-json"),
        pytest.param("[1, 2]", set(), 1, id="not-an-object"),
        pytest.param(json.dumps({"entries": [1]}), set(), 1, id="entries-not-an-object"),
        pytest.param("[" * 100_000, set(), 1, id="nested-past-the-parser"),
        pytest.param(12, set(), 1, id="data-not-a-string"),
        pytest.param(_doc(**{"default/x": {**_GOOD, "gpuS": "lots"}}), {"default/good"}, 1, id="a-string-number"),
        pytest.param(_doc(**{"default/x": {**_GOOD, "runs": True}}), {"default/good"}, 1, id="a-bool"),
        pytest.param(_doc(**{"default/x": {**_GOOD, "gpuS": -1}}), {"default/good"}, 1, id="negative"),
        pytest.param(_doc(**{"default/x": {**_GOOD, "runs": 2.5}}), {"default/good"}, 1, id="fractional-runs"),
        pytest.param(_doc(**{"default/x": {**_GOOD, "lastStart": "x"}}), {"default/good"}, 1, id="bad-last-start"),
        pytest.param(_doc(**{"default/x": 5}), {"default/good"}, 1, id="an-entry-not-an-object"),
        pytest.param(_doc(**{"no-slash": _GOOD, "a/" + "b" * 400: _GOOD}), {"default/good"}, 2, id="bad-keys"),
        pytest.param(_raw("gpuS", "NaN"), {"default/good"}, 1, id="nan"),
        pytest.param(_raw("gpuS", "1e999"), {"default/good"}, 1, id="infinite"),
        pytest.param(_raw("runs", "9" * 5000), {"default/good"}, 1, id="5000-digits"),
        pytest.param(_raw("gpuS", "1e300"), {"default/good"}, 1, id="huge"),
        pytest.param(_raw("runs", "1" + "0" * 20), {"default/good"}, 1, id="too-many-runs"),
    ],
)
def test_hostile_or_corrupt_records_are_ignored_entry_by_entry(text: object, kept: set[str], n_bad: int) -> None:
    entries, bad = parse(text)
    assert set(entries) == kept and len(bad) == n_bad
    assert all(isinstance(b, str) and len(b) < 200 for b in bad)  # one short line each


def _record(api_client: Callable[[], client.ApiClient], **kw: Any) -> ServiceRecord:
    ns, name = CM.split("/")
    return ServiceRecord(client.CoreV1Api(api_client()), name=name, namespace=ns, **kw)


def _other_writes(fake: FakeAPIServer, key: str, stopped: float) -> None:
    cm = fake.get("configmaps", CM)
    entries = parse(cm["data"][DATA_KEY])[0] if cm is not None else {}
    entries[key] = Entry(service=AttainedService(1.0, 1.0, 0.0, stopped, 1), seen=stopped)
    seed(fake, entries)


@pytest.mark.parametrize(
    ("before", "between", "requests"),
    [
        pytest.param(False, "create", ["POST", "GET", "PUT"], id="created-meanwhile"),
        pytest.param(True, "update", ["PUT", "GET", "PUT"], id="updated-meanwhile"),
        pytest.param(True, "delete", ["PUT", "GET", "POST"], id="deleted-meanwhile"),
    ],
)
def test_a_write_that_meets_another_writer_reads_again_and_merges(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient], before: bool, between: str, requests: list[str]
) -> None:
    """Optimistic concurrency: each write carries the resourceVersion read; a 409 (or a 404: deleted) is read
    again, the two records merged entry by entry, and written again."""
    if before:
        _other_writes(fake, "default/theirs", 1.7e9)
    rec = _record(api_client)
    assert rec.load()
    if between == "delete":
        fake.delete("configmaps", CM)
    else:
        _other_writes(fake, "default/later", 1.7e9 + 50)
    fake.requests.clear()
    rec.record("default/ours", started=1.7e9, stopped=1.7e9 + 100, gpus=8)
    assert rec.flush(now=1.7e9 + 100)
    assert [m for m, p in fake.requests if "configmaps" in p] == requests
    want = {"default/ours"} | ({"default/later"} if between != "delete" else set())
    want |= {"default/theirs"} if before and between != "delete" else set()
    assert set(stored(fake)) == want and rec.changed == {}


def test_a_failed_write_keeps_the_record_in_memory_and_is_made_again(
    fake: FakeAPIServer, api_client: Callable[[], client.ApiClient], caplog: pytest.LogCaptureFixture
) -> None:
    rec = _record(api_client)
    ns = CM.split("/")[0]
    fake.inject(Fault(method="POST", path=f"/api/v1/namespaces/{ns}/configmaps", status=500, times=2))
    rec.record("default/g", started=1.7e9, stopped=1.7e9 + 100, gpus=8)
    with caplog.at_level(logging.WARNING, logger="rackscale.kube"):
        assert not rec.flush(now=1.7e9 + 100) and not rec.flush(now=1.7e9 + 100)
    assert len([r for r in caplog.records if "writing failed" in r.getMessage()]) == 1  # once until it works
    assert fake.get("configmaps", CM) is None and set(rec.changed) == {"default/g"}
    assert rec.flush(now=1.7e9 + 100) and set(stored(fake)) == {"default/g"} and rec.changed == {}


def _e(seen: float, stopped: float | None = None) -> Entry:
    return Entry(service=AttainedService(10.0, 10.0, 0.0, seen if stopped is None else stopped, 1), seen=seen)


@pytest.mark.parametrize(
    ("entries", "kw", "kept"),
    [
        pytest.param(
            {f"d/{i}": _e(float(i)) for i in range(5)}, {"max_entries": 3}, {"d/2", "d/3", "d/4"}, id="at-most-n"
        ),
        pytest.param(
            {"d/old": _e(0.0), "d/new": _e(90.0)}, {"ttl_s": 50.0}, {"d/new"}, id="not-seen-for-the-ttl-is-dropped"
        ),
        pytest.param(
            {"d/old": _e(0.0), "d/new": _e(90.0)},
            {"ttl_s": 50.0, "present": {"d/old"}},
            {"d/old", "d/new"},
            id="seen-now-is-kept",
        ),
        pytest.param(
            {f"d/{i:04d}" + "x" * 300: _e(float(i)) for i in range(1000)},
            {"max_bytes": 64 * 1024},
            None,
            id="under-the-byte-bound",
        ),
    ],
)
def test_the_record_is_bounded(entries: dict[str, Entry], kw: dict[str, Any], kept: set[str] | None) -> None:
    out = bounded(entries, now=100.0, **kw)
    if kept is not None:
        assert set(out) == kept
    size = len(dump(out).encode())
    assert size <= kw.get("max_bytes", 512 * 1024) and out
    if kept is None:  # the most recently seen are the ones kept
        assert min(e.seen for e in out.values()) > max(e.seen for k, e in entries.items() if k not in out)
    if "present" in kw:
        assert out["d/old"].seen == 100.0


def test_the_default_bound_holds_the_longest_keys_well_under_a_configmaps_limit() -> None:
    """1,000 gangs with the longest key recorded, and the largest numbers an entry may hold: under 512 KiB, half the
    API server's 1 MiB."""
    big = AttainedService(1e16, 1e11, 1e11, 1e11, 10**9)
    entries = {f"{i:063d}/" + "g" * 253: Entry(service=big, seen=1e11 - i, last_start=1e11) for i in range(1500)}
    out = bounded(entries, now=1e11)
    assert len(out) <= 1000 and len(dump(out).encode()) <= 512 * 1024


def test_a_gang_too_long_to_key_or_a_lone_pod_is_not_recorded() -> None:
    assert record_key("group:default/train") == "default/train"
    assert record_key("running-group:default/train") == "default/train"
    assert record_key("pod:default/p") is None and record_key("running-pod:default/p") is None
    assert record_key("group:default/" + "g" * 400) is None


def test_a_stop_is_counted_once_and_a_restart_adds_the_wait() -> None:
    first = after_stop(None, started=100.0, stopped=200.0, gpus=8)
    assert first is not None and first.service == AttainedService(800.0, 100.0, 0.0, 200.0, 1)
    assert after_stop(first, started=100.0, stopped=230.0, gpus=8) is None  # the same run, decided again
    for hostile in (-1.0, 2.5e11):  # a start no entry may hold: a run of unknown start, no service
        odd = after_stop(None, started=hostile, stopped=200.0, gpus=8)
        assert (
            odd is not None and odd.last_start is None and odd.service.gpu_s == 0 and parse(dump({"d/g": odd}))[1] == []
        )
    second = after_stop(first, started=500.0, stopped=600.0, gpus=4)
    assert second is not None and second.service == AttainedService(1200.0, 200.0, 300.0, 600.0, 2)
    # Merging: the later stop wins, whoever wrote it.
    assert merge({"d/g": second}, {"d/g": first})["d/g"].service == second.service
    assert merge({"d/g": first}, {"d/g": second})["d/g"].service == second.service
    assert math.isclose(merge({"d/g": first}, {"d/g": second})["d/g"].seen, 600.0)
