import dataclasses
import json
from pathlib import Path

import pytest
from test_report import result, run_of

from torch_abi_harness.cli import main
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.status import Status
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.cases import CaseCounts
from torch_abi_harness.results.diff import compare, load_run
from torch_abi_harness.verdict import Expected, Verdict

KEPT = result("b2.13.0", "r2.13.0-cpu", Status.PASS, Verdict.KEPT)
LOAD = result("b2.13.0", "r2.10.0-cpu", Status.LOAD_FAILED, Verdict.EXPECTED_FAILURE, Expected.LOAD_FAILED)
OLD_OK = result("b2.10.0", "r2.13.0-cpu", Status.PASS, Verdict.KEPT)
NOW_BROKEN = result("b2.10.0", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN)
OLD_BROKEN = result("b2.10.0", "r2.10.0-cpu", Status.CRASHED, Verdict.BROKEN)
NOW_FIXED = result("b2.10.0", "r2.10.0-cpu", Status.PASS, Verdict.KEPT)


def test_new_breaks_fixes_and_unchanged_cells() -> None:
    diff = compare(run_of(KEPT, LOAD, OLD_OK, OLD_BROKEN), run_of(KEPT, NOW_BROKEN, NOW_FIXED))
    assert [c.id for c in diff.new_breaks] == [NOW_BROKEN.id]
    assert diff.new_breaks[0].before == "kept (PASS)" and diff.new_breaks[0].after == "broken (TEST_FAILED)"
    assert [c.id for c in diff.fixed] == [NOW_FIXED.id]
    assert diff.changed == () and diff.removed == (LOAD.id,) and diff.added == ()
    assert "## New breaks (1)" in diff.markdown()


def test_a_cell_still_broken_in_another_way_is_a_change_not_a_new_break() -> None:
    other = result("b2.10.0", "r2.10.0-cpu", Status.TIMEOUT, Verdict.BROKEN)
    diff = compare(run_of(OLD_BROKEN), run_of(other))
    assert diff.new_breaks == () and [c.after for c in diff.changed] == ["broken (TIMEOUT)"]


def test_cli_diff_exits_1_on_a_new_break(tmp_path: Path) -> None:
    write_report(run_of(KEPT, OLD_OK), tmp_path / "old")
    write_report(run_of(KEPT, NOW_BROKEN), tmp_path / "new")
    assert main(["diff", str(tmp_path / "old"), str(tmp_path / "new" / "results.json")]) == 1
    assert main(["diff", str(tmp_path / "new"), str(tmp_path / "new")]) == 0


def test_a_missing_or_foreign_baseline_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such results file"):
        load_run(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"cells": "nope"}))
    with pytest.raises(BadInputError, match=r"not a results\.json of this harness"):
        load_run(tmp_path)


def test_a_schema_version_1_baseline_still_loads(tmp_path: Path) -> None:
    data = run_of(KEPT).to_json()
    data["schema_version"] = 1
    for cell in data["cells"]:
        del cell["prediction"], cell["findings"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    old = load_run(tmp_path)
    assert old.cells[0].prediction is None and old.cells[0].findings == ()
    assert compare(old, run_of(KEPT)).new_breaks == ()


def test_the_same_status_from_other_test_counts_is_a_change() -> None:
    fewer = dataclasses.replace(KEPT, tests=CaseCounts(passed=3, skipped=1))
    more = dataclasses.replace(KEPT, tests=CaseCounts(passed=4))
    diff = compare(run_of(fewer), run_of(more))
    assert diff.new_breaks == () and diff.fixed == ()
    assert [(c.before, c.after) for c in diff.changed] == [
        ("kept (PASS): 3 passed, 0 failed, 1 skipped, 0 errors", "kept (PASS): 4 passed, 0 failed, 0 skipped, 0 errors")
    ]
    assert compare(run_of(more), run_of(more)).changed == ()
