"""--rerun-broken: a broken cell run again; one that then keeps its promise is flaky, never kept."""

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from test_report import BROKEN, KEPT, result, run_of

from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Status
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.diff import compare
from torch_abi_harness.results.model import CellLogs, CellResult, load_results
from torch_abi_harness.run.judge import retried
from torch_abi_harness.verdict import Expected, Verdict

PASSED_AGAIN = dataclasses.replace(
    BROKEN, status=Status.PASS, verdict=Verdict.KEPT, reason="", logs=CellLogs(stdout="a2")
)
FAILED_AGAIN = dataclasses.replace(BROKEN, reason="failed again", logs=CellLogs(stdout="attempt-2/x/stdout.log"))
FLAKY = retried(retried(BROKEN, FAILED_AGAIN), PASSED_AGAIN)
OTHER = result("b2.10.0", "r2.10.0-cpu", Status.CRASHED, Verdict.BROKEN)
STILL_BROKEN = retried(
    retried(OTHER, dataclasses.replace(OTHER, reason="again")),
    dataclasses.replace(OTHER, status=Status.ERROR, verdict=Verdict.ERROR, reason="disk full"),
)


def test_a_retry_that_keeps_the_promise_makes_the_cell_flaky_with_every_attempt() -> None:
    assert (FLAKY.status, FLAKY.verdict, FLAKY.logs) == (Status.PASS, Verdict.FLAKY, CellLogs(stdout="a2"))
    assert [(a.status, a.verdict, a.reason) for a in FLAKY.attempts] == [
        (Status.TEST_FAILED, Verdict.BROKEN, "TEST_FAILED because"),
        (Status.TEST_FAILED, Verdict.BROKEN, "failed again"),
        (Status.PASS, Verdict.KEPT, ""),
    ]


def test_retries_that_fail_leave_the_first_break_with_every_attempt() -> None:
    assert (STILL_BROKEN.status, STILL_BROKEN.verdict, STILL_BROKEN.reason) == (
        Status.CRASHED,
        Verdict.BROKEN,
        "CRASHED because",
    )
    assert [a.verdict for a in STILL_BROKEN.attempts] == [Verdict.BROKEN, Verdict.BROKEN, Verdict.ERROR]


def test_a_control_that_fails_as_built_on_a_retry_is_flaky_and_only_that() -> None:
    """A retry keeps the promise when it ends kept or as an expected failure (a negative control that crashed
    as built to); anything else (an unexpected pass, a skip) leaves the first break standing."""
    control = result("b2.10.0", "r2.13.0-cpu", Status.PASS, Verdict.BROKEN, Expected.CRASHED)
    crashed = dataclasses.replace(control, status=Status.CRASHED, verdict=Verdict.EXPECTED_FAILURE)
    assert retried(control, crashed).verdict is Verdict.FLAKY
    for verdict in (Verdict.UNEXPECTED_PASS, Verdict.SKIPPED, Verdict.ERROR, Verdict.BROKEN):
        assert retried(control, dataclasses.replace(control, verdict=verdict)).verdict is Verdict.BROKEN


def test_flaky_does_not_fail_the_run_and_never_counts_as_kept() -> None:
    run = run_of(KEPT, FLAKY)
    assert run.exit_code is ExitCode.OK
    assert run.counts()["flaky"] == 1 and run.counts()["kept"] == 1
    assert run_of(FLAKY, STILL_BROKEN).exit_code is ExitCode.BROKEN


def test_results_json_carries_the_attempts_and_round_trips(tmp_path: Path) -> None:
    files = write_report(run_of(KEPT, FLAKY, STILL_BROKEN), tmp_path)
    data = json.loads(files["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    cells = {c["id"]: c for c in data["cells"]}
    assert cells[KEPT.id]["attempts"] == []
    assert [a["status"] for a in cells[FLAKY.id]["attempts"]] == ["TEST_FAILED", "TEST_FAILED", "PASS"]
    assert data["summary"]["flaky"] == 1
    assert {c.id: c for c in load_results(files["results"]).cells}[FLAKY.id] == FLAKY


def test_summary_shows_flaky_apart_with_its_attempts(tmp_path: Path) -> None:
    text = write_report(run_of(KEPT, FLAKY), tmp_path)["summary"].read_text()
    assert "| `demo@b2.10.0` | 🔁 pass |" in text
    assert "**Result: no promise broken for good: flaky cells** (exit 0). 1 kept, 1 flaky" in text
    assert "🔁 **flaky**" in text  # the legend
    assert f"- 🔁 `{FLAKY.id}`: **PASS** (flaky)" in text
    assert "  - attempt 1: TEST_FAILED (broken): TEST_FAILED because\n" in text
    assert "  - attempt 3: PASS (kept): \n" in text


def test_junit_writes_flaky_as_surefire_does(tmp_path: Path) -> None:
    root = ET.parse(write_report(run_of(FLAKY, STILL_BROKEN), tmp_path)["junit"]).getroot()
    cases = {c.get("classname") + "~" + c.get("name"): c for c in root.iter("testcase")}
    flaky = cases[FLAKY.id]
    assert flaky.find("failure") is None and flaky.find("skipped") is None  # a passing testcase...
    assert [e.get("message") for e in flaky.findall("flakyFailure")] == [
        "TEST_FAILED: TEST_FAILED because",
        "TEST_FAILED: failed again",
    ]
    broken = cases[STILL_BROKEN.id]
    assert broken.find("failure") is not None
    assert [e.tag for e in broken if e.tag.startswith("rerun")] == ["rerunFailure", "rerunError"]
    assert root.get("failures") == "1" and root.get("errors") == "0"


@pytest.mark.parametrize(
    ("before", "after", "where"),
    [
        (KEPT, FLAKY, "changed"),  # not a new break: it kept its promise in the end
        (BROKEN, FLAKY, "changed"),  # not fixed either: it still broke once
        (FLAKY, BROKEN, "new_breaks"),
    ],
)
def test_diff_reads_flaky_as_a_change_not_a_break(before: CellResult, after: CellResult, where: str) -> None:
    # KEPT and BROKEN are different cells; give them one id so they compare.
    before, after = dataclasses.replace(before, id="c"), dataclasses.replace(after, id="c")
    diff = compare(run_of(before), run_of(after))
    found = {name: [c.id for c in getattr(diff, name)] for name in ("new_breaks", "fixed", "changed")}
    assert found == {name: (["c"] if name == where else []) for name in found}
