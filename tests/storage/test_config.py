"""The plan's storage-lifecycle ConfigMap loads as written; every bad value is one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.model.spec_errors import SpecError
from rackscale.storage.config import Lifecycle, lifecycle_from_doc, load_lifecycle, parse_duration

DAY = 86_400
# The plan's section 8.1, as written (quoted values, as a ConfigMap's data must be strings).
PLAN_CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: storage-lifecycle
data:
  hot-tier: "7d"
  warm-tier: "30d"
  cold-tier: "180d"
"""


def test_the_plans_configmap_loads_as_written(tmp_path: Path) -> None:
    f = tmp_path / "storage-lifecycle.yaml"
    f.write_text(PLAN_CONFIGMAP)
    assert load_lifecycle(f) == Lifecycle(hot_s=7 * DAY, warm_s=30 * DAY, cold_s=180 * DAY)


def test_a_bare_mapping_and_unquoted_values_load_too() -> None:
    doc = {"hot-tier": "12h", "warm-tier": "2w", "cold-tier": "90d"}
    assert lifecycle_from_doc(doc) == Lifecycle(hot_s=12 * 3600, warm_s=14 * DAY, cold_s=90 * DAY)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("12h", 43_200), ("7d", 604_800), ("2w", 1_209_600), (" 7d ", 604_800)],
    ids=["seconds", "minutes", "hours", "days", "weeks", "padded"],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def _cm(data: object, **over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "storage-lifecycle"},
        "data": data,
    }
    doc.update(over)
    return doc


GOOD = {"hot-tier": "7d", "warm-tier": "30d", "cold-tier": "180d"}

HOSTILE = [
    (_cm({**GOOD, "hot-tier": "0d"}), "data.hot-tier: must be longer than 0"),
    (_cm({**GOOD, "hot-tier": "-7d"}), "data.hot-tier: must be a whole number followed by a unit"),
    (_cm({**GOOD, "warm-tier": "1.5d"}), "data.warm-tier: must be a whole number followed by a unit"),
    (_cm({**GOOD, "warm-tier": "30y"}), "data.warm-tier: has the unknown unit 'y'"),
    (_cm({**GOOD, "warm-tier": "30D"}), "data.warm-tier: has the unknown unit 'D'"),
    (_cm({**GOOD, "hot-tier": 7}), "data.hot-tier: must be a duration string with a unit"),
    (_cm({**GOOD, "hot-tier": "٧d"}), "data.hot-tier: must be a whole number"),  # Arabic-Indic 7
    (_cm({**GOOD, "hot-tier": "7 d"}), "data.hot-tier: must be a whole number"),
    (_cm({**GOOD, "hot-tier": ""}), "data.hot-tier: must be a whole number"),
    (_cm({**GOOD, "cold-tier": "99999999999d"}), "data.cold-tier: must be at most 100 years"),
    (_cm({"hot-tier": "7d", "warm-tier": "30d"}), "data.cold-tier: required field is missing"),
    (_cm({**GOOD, "archive-tier": "1y"}), "data.archive-tier: unknown field"),
    (_cm({**GOOD, "hot-tier": "30d"}), "data.warm-tier: must be longer than hot-tier"),
    (_cm({**GOOD, "cold-tier": "30d"}), "data.cold-tier: must be longer than warm-tier"),
    (_cm(GOOD, metadata={"name": "other"}), "metadata.name: must be one of 'storage-lifecycle'"),
    (_cm(GOOD, kind="Secret"), "kind: must be one of 'ConfigMap'"),
    (_cm(GOOD, apiVersion="v2"), "apiVersion: must be one of 'v1'"),
    (_cm(["7d"]), "data: must be a mapping"),
    ({**GOOD, "hot-tier": "1w", "warm-tier": "7d"}, "warm-tier: must be longer than hot-tier"),
    (["hot-tier"], "must be a mapping, got list"),
]


@pytest.mark.parametrize(
    ("doc", "message"),
    HOSTILE,
    ids=[
        "zero",
        "negative",
        "float",
        "unknown-unit",
        "upper-case-unit",
        "bare-number",
        "non-ascii-digit",
        "inner-space",
        "empty",
        "huge",
        "missing-tier",
        "unknown-key",
        "warm-not-above-hot",
        "cold-not-above-warm",
        "wrong-name",
        "wrong-kind",
        "wrong-api-version",
        "data-not-mapping",
        "bare-equal-ages-in-other-units",
        "not-a-mapping",
    ],
)
def test_hostile_configs_name_the_field_and_the_fix(doc: object, message: str) -> None:
    with pytest.raises(SpecError) as e:
        lifecycle_from_doc(doc, source="storage-lifecycle.yaml")
    text = str(e.value)
    assert message in text
    assert text.startswith("storage-lifecycle.yaml: ")
    assert "(fix: " in text


def test_an_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(SpecError) as e:
        lifecycle_from_doc(_cm({**GOOD, "hot_tier": "7d"}))
    assert "hot-tier, warm-tier, cold-tier" in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "must be a mapping, got NoneType"), ("data: [", "f.yaml"), ("a: &a [*a]", "f.yaml")],
    ids=["empty-file", "bad-yaml", "recursive-alias"],
)
def test_hostile_files(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "f.yaml"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        load_lifecycle(f)
    assert message in str(e.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        load_lifecycle(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(e.value)
    assert "\n" not in str(e.value)


def test_kubectl_get_output_loads_too() -> None:
    """`kubectl get configmap storage-lifecycle -o yaml` adds server fields; they are ignored."""
    doc = _cm(GOOD, immutable=True)
    doc["metadata"] = {
        "name": "storage-lifecycle",
        "namespace": "default",
        "uid": "0f5c...",
        "resourceVersion": "123",
        "creationTimestamp": "2025-06-01T00:00:00Z",
    }
    assert lifecycle_from_doc(doc).warm_s == 30 * DAY
