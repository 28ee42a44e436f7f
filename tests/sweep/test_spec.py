"""The Sweep document: every bad field is one line naming its path and a fix; the grid expands to the
cartesian product (crossed with explicit cells); a cell's key is stable and changes with what it runs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from tests.sweep.helpers import doc

from rackscale.sweep import SweepError, load_sweep, parse_sweep
from rackscale.sweep.cells import cell_key
from rackscale.sweep.spec import CellOptions

BAD: list[tuple[Any, str]] = [
    ([1, 2], "a Sweep document is a mapping"),
    ({**doc(), "apiVersion": "v2"}, "apiVersion: Input should be 'rackscale.io/v1' (fix: apiVersion: rackscale.io/v1)"),
    ({**doc(), "kind": "Job"}, "kind: Input should be 'Sweep' (fix: kind: Sweep)"),
    ({**doc(), "metadata": {"name": "Bad Name!"}}, "metadata.name: String should match pattern"),
    ({**doc(), "extra": 1}, "extra: Extra inputs are not permitted"),
    (doc(base={"rack": 2}), "spec.base.rack: unknown option (fix: did you mean 'racks'?"),
    (doc(grid={"policy": ["rackscale", "nope"]}), "spec.grid.policy[1]: unknown policy 'nope'; choose one of: "),
    (doc(grid={"seed": 3}), "spec.grid.seed: a grid axis is a non-empty list of values (fix: seed: [a, b])"),
    (doc(grid={"seed": []}), "spec.grid.seed: a grid axis is a non-empty list"),
    (doc(grid={"seed": [0, -1]}), "spec.grid.seed[1]: Input should be greater than or equal to 0"),
    (doc(grid={"arrival_scale": [1, "x"]}), "spec.grid.arrival_scale[1]: Input should be a valid number"),
    (doc(base={"racks": 0}), "spec.base.racks: Input should be greater than or equal to 1"),
    (doc(base={"racks": True}), "spec.base.racks: Input should be a valid integer"),
    (doc(grid={"seed": [0, "3"]}), "spec.grid.seed[1]: Input should be a valid integer"),
    (doc(base={"strict": "no"}), "spec.base.strict: Input should be a valid boolean"),
    (doc(base={"arrival_scale": float("nan")}), "spec.base.arrival_scale: Input should be a finite number"),
    (doc(grid={"gpu_mtbf_h": [5000, float("inf")]}), "spec.grid.gpu_mtbf_h[1]: Input should be a finite number"),
    (doc(base={"cluster": "c" * 5000}), "spec.base.cluster: String should have at most 4096 characters"),
    (doc(base={"maintenance": ["r000@1h+1h"] * 1001}), "spec.base.maintenance: Tuple should have at most 1000 items"),
    (doc(base={"maintenance": ["r000 at 2h"]}), "spec.base.maintenance: 'r000 at 2h': "),
    (doc(base={"start_time": "yesterday"}), "spec.base.start_time: "),
    (doc(base={"trace": "philly"}), "spec.base.trace: expected FORMAT:PATH"),
    (
        doc(grid={"trace": ["csv:a.csv", "phily:p.csv"]}),
        "spec.grid.trace[1]: unknown trace format 'phily' (fix: did you mean philly:? the formats are: philly,",
    ),
    (doc(base={"cluster": "a\x00b.yaml"}), "spec.base.cluster: a path holds no NUL character"),
    (doc(base={"schedules": ["ok.yaml", "a\x00b.yaml"]}), "spec.base.schedules: a path holds no NUL character"),
    (doc(base={"racks": 2, "cluster": "c.yaml"}), "spec with racks=2, cluster='c.yaml': give either cluster or racks"),
    (doc(cells=[{}, {"trace": "philly:a", "jobs_file": "b"}]), "spec.cells[1] with "),
    (doc(cells=[{"polcy": "x"}]), "spec.cells[0].polcy: unknown option (fix: did you mean 'policy'?"),
    (doc(compare={"kpis": ["mean_jct"]}), "spec.compare.kpis: unknown KPI 'mean_jct'; did you mean 'mean_jct_s'?"),
    (doc(compare={"baseline": "tiresias"}), "spec.compare.baseline: 'tiresias' is no policy of the sweep's cells"),
    (doc(grid={"seed": list(range(1000)), "jobs": list(range(1, 1000))}), "spec.grid: 999,000 cells is more than"),
    (
        doc(base={"racks": 1, "jobs": 10_000_000, "arrival_scale": 1e6}),
        "spec with racks=1, jobs=10000000, arrival_scale=1000000.0: jobs x arrival_scale is 10,000,000,000,000",
    ),
    (
        doc(base={"racks": 1, "jobs": 6_000_000}, grid={"arrival_scale": [1.0, 2.0]}),
        "spec with racks=1, jobs=6000000, arrival_scale=2.0: jobs x arrival_scale is 12,000,000 synthetic jobs, more",
    ),
]
IDS = [
    "not-a-mapping", "api-version", "kind", "name-pattern", "unknown-top-key", "unknown-option-typo",
    "unknown-policy-in-grid", "axis-not-a-list", "axis-empty", "negative-seed", "non-number", "zero-racks",
    "bool-racks", "string-seed", "string-bool", "nan-scale", "infinite-mtbf", "huge-path", "too-many-windows",
    "bad-maintenance", "bad-start-time", "trace-without-path", "unknown-trace-format", "nul-in-cluster-path",
    "nul-in-a-schedule-path",
    "cluster-and-racks", "trace-and-jobs-file",
    "cell-option-typo", "unknown-kpi", "baseline-not-swept", "grid-too-large", "jobs-times-scale-huge",
    "jobs-times-scale-on-one-grid-point",
]  # fmt: skip


@pytest.mark.parametrize(("document", "expected"), BAD, ids=IDS)
def test_bad_document_names_the_field(document: Any, expected: str) -> None:
    with pytest.raises(SweepError) as e:
        parse_sweep(document, source="s.yaml")
    first = str(e.value).splitlines()[0]
    assert first.startswith("s.yaml: ")
    assert expected in first, first
    assert "Traceback" not in str(e.value) and "pydantic" not in str(e.value)


@pytest.mark.parametrize(
    ("document", "last"),
    [
        (doc(grid={"seed": ["x"] * 50_000}), "s.yaml: ... and 49,990 more problems"),
        (doc(cells=[{"racks": 2, "cluster": "c.yaml"}] * 30), "s.yaml: ... and 20 more cells"),
        (doc(grid={"seed": ["x"] * 10}), "s.yaml: spec.grid.seed[9]: Input should be a valid integer"),
    ],
    ids=["a-long-axis-of-typos", "many-bad-cells", "ten-is-all-shown"],
)
def test_many_problems_are_at_most_eleven_lines(document: Any, last: str) -> None:
    with pytest.raises(SweepError) as e:
        parse_sweep(document, source="s.yaml")
    lines = str(e.value).splitlines()
    assert len(lines) <= 11 and lines[-1].startswith(last), lines[-1]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"a: [1", r"s.yaml:2: invalid YAML: "),
        (b"\xff\xfe\x00bad", "cannot read it"),
        (b"x" * (1 << 20 + 1), "larger than"),
        (b"a: " + b"[" * 100_000 + b"]" * 100_000, r"s.yaml:1: the document nests lists and mappings more than 64"),
        (b"a: " + b"{a: " * 5_000 + b"1" + b"}" * 5_000, "nests lists and mappings more than 64 levels"),
        (
            b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + b"".join(
                b"a%d: &a%d [" % (i, i) + b", ".join([b"*a" if i == 1 else b"*a%d" % (i - 1)] * 10) + b"]\n"
                for i in range(1, 9)
            ),
            r"s.yaml:1: the YAML expands to more than 1,000,000 values through aliases",
        ),
        (b"kind: Sweep\n---\nkind: Sweep\n", "expected a single document"),
    ],
    ids=["not-yaml", "not-utf8", "huge", "deeply-nested-lists", "deeply-nested-mappings", "alias-bomb", "two-docs"],
)
def test_bad_file_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    f = tmp_path / "s.yaml"
    f.write_bytes(content)
    with pytest.raises(SweepError) as e:
        load_sweep(f)
    assert len(e.value.problems) == 1 and re.search(expected, str(e.value)), str(e.value)[:300]
    assert str(e.value).startswith(str(f))


_LINES_DOC = """\
apiVersion: rackscale.io/v1
kind: Sweep
metadata: {name: t}
spec:
  base:
    jobs: 50
    polcy: x
  grid:
    policy: [rackscale, first-fitt]
    seed:
      - 0
      - "1"
  cells:
    - {}
    - racks: 0
"""


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("spec.base.polcy: unknown option", 7),
        ("spec.grid.policy[1]: unknown policy 'first-fitt'", 9),  # a flow list: the list's line
        ("spec.grid.seed[1]: ", 12),  # a block list: the item's own line
        ("spec.cells[1].racks: ", 15),
    ],
    ids=["unknown-option", "flow-list-item", "block-list-item", "a-cells-field"],
)
def test_a_fields_problem_names_its_line(tmp_path: Path, field: str, line: int) -> None:
    """As a job spec's problems do (``train.yaml:7: spec.gpus: ...``): the line of the field named."""
    f = tmp_path / "s.yaml"
    f.write_text(_LINES_DOC)
    with pytest.raises(SweepError) as e:
        load_sweep(f)
    got = [p for p in e.value.problems if field in p]
    assert len(got) == 1, e.value.problems
    assert got[0].startswith(f"{f}:{line}: {field}"), got


def test_a_device_is_read_bounded() -> None:
    with pytest.raises(SweepError, match="larger than"):  # /dev/zero has no size and never ends
        load_sweep(Path("/dev/zero"))


def test_missing_file() -> None:
    with pytest.raises(SweepError, match=r"nope.yaml: cannot read it \(No such file"):
        load_sweep(Path("nope.yaml"))


def test_grid_is_the_cartesian_product_crossed_with_cells() -> None:
    spec = parse_sweep(
        doc(grid={"policy": ["rackscale", "first-fit"], "seed": [0, 1, 2]}, cells=[{"racks": 1}, {"racks": 2}])
    )
    cells = spec.expand()
    got = [(c.racks, c.policy, c.seed) for c in cells]
    assert got == [(r, p, s) for r in (1, 2) for p in ("rackscale", "first-fit") for s in (0, 1, 2)]
    assert all(c.jobs == 30 and c.duration_h == 2.0 for c in cells)  # the base reaches every cell


def test_a_repeated_grid_value_is_one_cell() -> None:
    assert len(parse_sweep(doc(grid={"seed": [0, 0, 1]})).expand()) == 2


def test_a_large_arrival_scale_of_a_small_mix_is_no_error() -> None:  # 1 job x 1e6: judged with its cell's jobs
    assert len(parse_sweep(doc(base={"racks": 1, "jobs": 1, "arrival_scale": 1e6})).expand()) == 1


@pytest.mark.parametrize(
    ("spelt", "left_out"),
    [
        ({"racks": 4}, {}),  # the default cluster: 4 NVL72 racks
        ({"policy": "rackscale"}, {}),
        ({"arrival_scale": 1}, {}),
        ({"racks": 4, "seed": 3}, {"seed": 3}),
    ],
    ids=["default-racks", "default-policy", "default-scale-as-int", "default-racks-with-seed"],
)
def test_a_default_spelt_out_is_the_same_cell(spelt: dict[str, Any], left_out: dict[str, Any]) -> None:
    assert cell_key(CellOptions.model_validate(spelt)) == cell_key(CellOptions.model_validate(left_out))
    assert len(parse_sweep(doc(base={"jobs": 30}, cells=[left_out, spelt])).expand()) == 1


def test_key_is_stable_and_sensitive(tmp_path: Path) -> None:
    a = CellOptions(racks=1, jobs=30, seed=0)
    assert cell_key(a) == cell_key(CellOptions(seed=0, jobs=30, racks=1))  # field order does not matter
    assert cell_key(a) == cell_key(CellOptions(racks=1, jobs=30, seed=0, policy="rackscale"))  # a default, spelt
    others = [CellOptions(racks=1, jobs=30, seed=1), CellOptions(racks=2, jobs=30), CellOptions(racks=1, jobs=31)]
    assert len({cell_key(a), *(cell_key(o) for o in others)}) == 4
    assert cell_key(a, version="0.1.0") != cell_key(a, version="0.2.0")
    trace = tmp_path / "t.csv"
    trace.write_text("a\n")
    t = CellOptions(trace=f"csv:{trace}")
    before = cell_key(t)
    trace.write_text("ab\n")  # another size
    assert cell_key(t) != before
    again = cell_key(t)
    os.utime(trace, ns=(1, 1))  # the same size, another mtime
    assert cell_key(t) != again
