"""classify's rules (run/collect.py RULES) one by one where no other test holds them, and their order: the first
rule that answers decides the cell."""

import dataclasses
from pathlib import Path

import pytest

from tests.unit.test_collect import JUNIT, LOADED, PASSING, cell
from torch_abi_harness.core.status import Status
from torch_abi_harness.execute.api import CellExecution, CellView
from torch_abi_harness.run.collect import classify


def test_a_cell_its_executor_decided_keeps_that_decision(tmp_path: Path) -> None:
    view = CellView(("python",), {}, tmp_path / "site", tmp_path / "junit.xml", tmp_path / "probe.json", "python")
    decided = (Status.ERROR, "the cell could not start")
    execution = CellExecution(
        None,
        timed_out=False,
        launched_at=0.0,
        seconds=0.0,
        stdout=tmp_path / "o",
        stderr=tmp_path / "e",
        view=view,
        decided=decided,
    )
    outcome = classify(execution, 60)
    assert (outcome.status, outcome.reason) == decided


def test_a_cell_that_exited_before_the_probe_ran_is_an_error(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, 1, None, None), 60)
    assert (outcome.status, outcome.reason) == (
        Status.ERROR,
        "the cell exited 1 before the harness probe ran; see stderr.log",
    )


@pytest.mark.parametrize(
    ("probe", "reason"),
    [
        ({"missing_version": "GLIBCXX_3.4.32"}, "version GLIBCXX_3.4.32 not found"),
        ({"error_chain": ["OSError: one", "ImportError: two"]}, "ImportError: two"),
        ({}, "unknown load error"),
    ],
)
def test_a_load_failure_says_what_it_lacked(tmp_path: Path, probe: dict[str, object], reason: str) -> None:
    outcome = classify(cell(tmp_path, 10, {"phase": "load_failed", "load_ok": False, **probe}, None), 60)
    assert (outcome.status, outcome.reason, outcome.missing_symbol) == (Status.LOAD_FAILED, reason, None)


@pytest.mark.parametrize(
    ("entry", "why", "symbol"),
    [
        ({"error": "OSError: x", "missing_symbol": "aoti_x"}, "undefined symbol: aoti_x", "aoti_x"),
        ({"error": "OSError: x", "missing_library": "libc10.so"}, "libc10.so: cannot open shared object file", None),
        ({"error": "ImportError: first line\nsecond"}, "ImportError: first line", None),
    ],
)
def test_a_derived_suite_module_that_did_not_load_fails_the_cell(
    tmp_path: Path, entry: dict[str, str], why: str, symbol: str | None
) -> None:
    modules = {"pkg/_b.so": entry, "pkg/_a.so": {"error": None, "registered": 2}}
    outcome = classify(cell(tmp_path, 1, {**LOADED, "modules": modules}, PASSING), 60)
    assert (outcome.status, outcome.reason, outcome.missing_symbol) == (
        Status.LOAD_FAILED,
        f"1 of 2 modules did not load: _b.so: {why}",
        symbol,
    )


def test_a_derived_suite_module_failure_is_not_read_over_a_pytest_error(tmp_path: Path) -> None:
    modules = {"pkg/_b.so": {"error": "OSError: x"}}
    outcome = classify(cell(tmp_path, 3, {**LOADED, "modules": modules}, PASSING), 60)
    assert (outcome.status, outcome.reason) == (Status.ERROR, "pytest exit 3: internal error")


def test_a_cell_without_a_junit_report_is_an_error(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, 0, LOADED, None), 60)
    assert (outcome.status, outcome.reason) == (Status.ERROR, "pytest exited 0 without writing its junit report")


def test_the_first_rule_that_answers_decides(tmp_path: Path) -> None:
    """A timeout outranks what the probe says of the load; a crash outranks a missing probe."""
    load_failed = {"phase": "load_failed", "load_ok": False, "missing_symbol": "torch_x"}
    outcome = classify(cell(tmp_path, None, load_failed, None, timed_out=True), 7)
    assert (outcome.status, outcome.reason) == (Status.TIMEOUT, "no result after 7 s, killed during load failed")
    (tmp_path / "none").mkdir()
    crashed = classify(cell(tmp_path / "none", -9, None, None), 7)
    assert (crashed.status, crashed.reason) == (
        Status.ERROR,
        "the runtime crashed (SIGKILL) during start-up, before the extension was loaded: "
        "the torch environment is suspect, not the extension",
    )


@pytest.mark.parametrize(
    ("code", "timed_out", "junit", "without"),
    [
        (-9, False, None, Status.CRASHED),
        (1, False, "failing", Status.TEST_FAILED),
        (None, True, None, Status.TIMEOUT),
        (0, False, "passing", Status.PASS),
    ],
    ids=["killed-by-the-oom-killer", "tests-failed-on-fork", "timed-out-stuck-at-the-bound", "passed-anyway"],
)
def test_a_bound_the_cell_reached_makes_it_an_error_naming_the_bound_whatever_else_it_left(
    tmp_path: Path, code: int | None, timed_out: bool, junit: str | None, without: Status
) -> None:
    """A cell its cgroup's memory or process bound ended is the harness's bound, never the extension's CRASHED,
    TEST_FAILED or TIMEOUT (nor a PASS that hid it)."""
    bound = "memory bound 512 MiB reached: the kernel killed the cell (OOM)"
    failing = '<testcase classname="test_x" name="test_bad" time="0.1"><failure message="boom"/></testcase>'
    junits = {"passing": PASSING, "failing": JUNIT.format(failures=1, extra=failing), None: None}
    execution = dataclasses.replace(cell(tmp_path, code, LOADED, junits[junit], timed_out), bound=bound)
    outcome = classify(execution, 60)
    assert (outcome.status, outcome.reason) == (Status.ERROR, bound)
    assert classify(dataclasses.replace(execution, bound=None), 60).status is without  # what the bound overrules
