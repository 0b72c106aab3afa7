"""A suite that cannot import what it needs is an ERROR whose reason names the module, where, and the fix."""

from pathlib import Path

from test_collect import JUNIT, LOADED, cell

from torch_abi_harness.core.status import Status
from torch_abi_harness.run.collect import classify

COLLECT_ERROR = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="0" skipped="0" tests="1" time="0.5">
<testcase classname="" name="test.test_muladd" time="0.0"><error message="collection failure">...</error></testcase>
</testsuite></testsuites>"""

EXPECTTEST = {
    "type": "ModuleNotFoundError",
    "message": "No module named 'expecttest'",
    "file": "torch/testing/_internal/common_utils.py",
    "line": 58,
    "suite_file": "test/test_muladd.py",
    "suite_line": 11,
    "missing": "expecttest",
    "in_suite": False,
}


def test_a_module_the_runtime_lacks_is_named_with_where_and_the_fix(tmp_path: Path) -> None:
    probe = {**LOADED, "collect_error": EXPECTTEST, "exitstatus": 2}
    outcome = classify(cell(tmp_path, 2, probe, COLLECT_ERROR), 60)
    assert outcome.status is Status.ERROR
    assert outcome.reason == (
        "collection failed: ModuleNotFoundError: No module named 'expecttest' "
        "(torch/testing/_internal/common_utils.py, line 58, imported from test/test_muladd.py, line 11); "
        "the runtime has no 'expecttest': declare what the suite needs in extension.yaml "
        "(test_requires: [expecttest])"
    )


def test_the_fix_names_the_distribution_where_it_differs_from_the_module(tmp_path: Path) -> None:
    failure = {**EXPECTTEST, "message": "No module named 'yaml'", "missing": "yaml", "suite_file": None}
    outcome = classify(cell(tmp_path, 2, {**LOADED, "collect_error": failure}, COLLECT_ERROR), 60)
    assert outcome.reason.endswith(
        "(torch/testing/_internal/common_utils.py, line 58); the runtime has no 'yaml': "
        "declare what the suite needs in extension.yaml (test_requires: [PyYAML])"
    )


def test_a_helper_module_of_the_suite_is_not_sent_to_test_requires(tmp_path: Path) -> None:
    failure = {**EXPECTTEST, "message": "No module named 'helpers'", "missing": "helpers", "in_suite": True}
    outcome = classify(cell(tmp_path, 2, {**LOADED, "collect_error": failure}, COLLECT_ERROR), 60)
    assert "'helpers' is the suite's own module" in outcome.reason and "test_requires" not in outcome.reason


def test_another_import_error_is_shown_without_a_fix(tmp_path: Path) -> None:
    failure = {"type": "NameError", "message": "name 'x' is not defined", "file": "test/test_a.py", "line": 3}
    outcome = classify(cell(tmp_path, 2, {**LOADED, "collect_error": failure}, COLLECT_ERROR), 60)
    assert (outcome.status, outcome.reason) == (
        Status.ERROR,
        "collection failed: NameError: name 'x' is not defined (test/test_a.py, line 3)",
    )


def test_a_conftest_that_fails_to_import_is_named_though_pytest_wrote_no_junit(tmp_path: Path) -> None:
    failure = {**EXPECTTEST, "file": "test/conftest.py", "line": 2, "suite_file": None}
    outcome = classify(cell(tmp_path, 4, {**LOADED, "phase": "collect", "collect_error": failure}, None), 60)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith(
        "collection failed: ModuleNotFoundError: No module named 'expecttest' (test/conftest.py, line 2);"
    )


def test_a_malformed_record_reads_as_absent(tmp_path: Path) -> None:
    probe = {**LOADED, "collect_error": {"type": 3}}
    outcome = classify(cell(tmp_path, 2, probe, COLLECT_ERROR), 60)
    assert (outcome.status, outcome.reason) == (
        Status.ERROR,
        "pytest exit 2: interrupted (often a test module failed to import)",
    )


FAILING = '<testcase classname="t" name="test_{n}" time="0.1"><failure message="ModuleNotFoundError"/></testcase>'


def test_tests_that_failed_only_on_a_missing_module_are_an_error_not_the_extensions_failure(tmp_path: Path) -> None:
    junit = JUNIT.format(failures=2, extra=FAILING.format(n=1) + FAILING.format(n=2))
    missing = [{"test": "t.py::test_1", "module": "hypothesis"}, {"test": "t.py::test_2", "module": "hypothesis"}]
    outcome = classify(cell(tmp_path, 1, {**LOADED, "missing_modules": missing}, junit), 60)
    assert outcome.status is Status.ERROR
    assert outcome.reason == (
        "2 test(s) failed only on a missing module (first: t.py::test_1); the runtime has no 'hypothesis': declare "
        "what the suite needs in extension.yaml (test_requires: [hypothesis])"
    )


def test_one_other_failure_keeps_the_cell_test_failed(tmp_path: Path) -> None:
    junit = JUNIT.format(failures=2, extra=FAILING.format(n=1) + FAILING.format(n=2))
    missing = [{"test": "t.py::test_1", "module": "hypothesis"}]
    outcome = classify(cell(tmp_path, 1, {**LOADED, "missing_modules": missing}, junit), 60)
    assert outcome.status is Status.TEST_FAILED
