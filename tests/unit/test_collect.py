"""Classification from the files a cell leaves behind, on small real fixtures (no torch)."""

import json
import os
from pathlib import Path

import pytest

from torch_abi_harness.core.status import Status
from torch_abi_harness.execute.api import CellExecution, CellView
from torch_abi_harness.run.collect import ProbeRecord, classify, read_junit, read_untrusted

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="{failures}" skipped="1" tests="4" time="0.5">
<testcase classname="test_x" name="test_ok" time="0.1"/>
<testcase classname="test_x" name="test_ok2" time="0.1"/>
<testcase classname="test_x" name="test_skip" time="0.0"><skipped message="no"/></testcase>
{extra}
</testsuite></testsuites>"""
PASSING = JUNIT.format(failures=0, extra="")
LOADED = {"phase": "finished", "load_ok": True, "torch_version": "2.13.0+cpu", "module_file": None}


def cell(tmp_path: Path, code: int | None, probe: dict | None, junit: str | None, timed_out: bool = False):
    if probe is not None:
        (tmp_path / "probe.json").write_text(json.dumps(probe))
    if junit is not None:
        (tmp_path / "junit.xml").write_text(junit)
    view = CellView(("python",), {}, tmp_path / "site", tmp_path / "junit.xml", tmp_path / "probe.json", "python")
    return CellExecution(code, timed_out, 0.0, 1.0, tmp_path / "stdout.log", tmp_path / "stderr.log", view)


def test_pass(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, 0, LOADED, PASSING), 60)
    assert (outcome.status, outcome.reason) == (Status.PASS, "2 passed, 1 skipped")
    assert (outcome.tests.passed, outcome.tests.skipped, outcome.tests_seconds) == (2, 1, 0.5)


def test_test_failure_names_the_tests(tmp_path: Path) -> None:
    extra = '<testcase classname="test_x" name="test_bad" time="0.1"><failure message="boom"/></testcase>'
    outcome = classify(cell(tmp_path, 1, LOADED, JUNIT.format(failures=1, extra=extra)), 60)
    assert outcome.status is Status.TEST_FAILED
    assert outcome.reason == "1 of 4 tests failed: test_x::test_bad"
    assert outcome.failing == ("test_x::test_bad",)


def test_never_success_over_a_nonzero_exit(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, 3, LOADED, PASSING), 60)
    assert (outcome.status, outcome.reason) == (Status.ERROR, "pytest exit 3: internal error")


def test_no_tests_collected_is_an_error_not_a_pass(tmp_path: Path) -> None:
    empty = '<testsuites><testsuite name="pytest" tests="0" time="0"/></testsuites>'
    outcome = classify(cell(tmp_path, 5, LOADED, empty), 60)
    assert (outcome.status, outcome.reason) == (Status.ERROR, "pytest exit 5: no tests were collected")


def test_all_tests_skipped_is_skipped(tmp_path: Path) -> None:
    only_skips = (
        '<testsuites><testsuite name="pytest" tests="1" time="0"><testcase classname="t" name="s">'
        '<skipped message="x"/></testcase></testsuite></testsuites>'
    )
    outcome = classify(cell(tmp_path, 0, LOADED, only_skips), 60)
    assert (outcome.status, outcome.reason) == (Status.SKIPPED, "all 1 tests skipped")


def test_load_failure_carries_the_missing_symbol(tmp_path: Path) -> None:
    probe = {
        "phase": "load_failed",
        "load_ok": False,
        "missing_symbol": "torch_list_size",
        "error_chain": ["OSError: Could not load", "OSError: x.so: undefined symbol: torch_list_size"],
    }
    outcome = classify(cell(tmp_path, 10, probe, None), 60)
    assert (outcome.status, outcome.reason, outcome.missing_symbol) == (
        Status.LOAD_FAILED,
        "undefined symbol: torch_list_size",
        "torch_list_size",
    )


def test_load_failure_without_a_symbol_keeps_the_loaders_words(tmp_path: Path) -> None:
    probe = {
        "phase": "load_failed",
        "load_ok": False,
        "missing_symbol": None,
        "error_chain": ["OSError: Could not load", "OSError: x.so: wrong ELF class: ELFCLASS32"],
    }
    outcome = classify(cell(tmp_path, 10, probe, None), 60)
    assert (outcome.status, outcome.reason) == (Status.LOAD_FAILED, "OSError: x.so: wrong ELF class: ELFCLASS32")


def test_a_signal_is_a_crash_naming_the_running_test(tmp_path: Path) -> None:
    probe = {"phase": "tests", "load_ok": True, "current_test": "test_x.py::test_segv"}
    outcome = classify(cell(tmp_path, -11, probe, None), 60)
    assert (outcome.status, outcome.reason) == (Status.CRASHED, "killed by SIGSEGV in test test_x.py::test_segv")


def test_timeout(tmp_path: Path) -> None:
    probe = {"phase": "tests", "load_ok": True, "current_test": "test_x.py::test_hang"}
    outcome = classify(cell(tmp_path, None, probe, None, timed_out=True), 7)
    assert (outcome.status, outcome.reason) == (
        Status.TIMEOUT,
        "no result after 7 s, killed in test test_x.py::test_hang",
    )


def test_no_probe_is_an_infrastructure_error(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, 1, None, None), 60)
    assert outcome.status is Status.ERROR and "probe" in outcome.reason


def test_cuda_without_gpu_is_skipped(tmp_path: Path) -> None:
    probe = {"phase": "skipped", "skip_reason": "no CUDA device visible to torch 2.13.0+cpu"}
    outcome = classify(cell(tmp_path, 11, probe, None), 60)
    assert (outcome.status, outcome.reason) == (Status.SKIPPED, "no CUDA device visible to torch 2.13.0+cpu")


def test_extension_imported_from_outside_the_wheel_is_an_error(tmp_path: Path) -> None:
    probe = dict(LOADED, module_file="/src/demo/__init__.py")
    outcome = classify(cell(tmp_path, 0, probe, PASSING), 60)
    assert outcome.status is Status.ERROR and "not from the built wheel" in outcome.reason


@pytest.mark.parametrize("text", ["", "<not xml", "<testsuites>"])
def test_unreadable_junit_is_none(tmp_path: Path, text: str) -> None:
    (tmp_path / "j.xml").write_text(text)
    assert read_junit(tmp_path / "j.xml") is None


def test_files_a_cell_planted_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"phase": "finished"}')
    (tmp_path / "probe.json").symlink_to(secret)
    os.mkfifo(tmp_path / "junit.xml")  # reading a FIFO would hang the harness
    assert ProbeRecord.read(tmp_path / "probe.json") is None
    assert read_junit(tmp_path / "junit.xml") is None
    assert read_untrusted(secret) == b'{"phase": "finished"}'
    assert read_untrusted(secret, limit=4) is None  # larger than the limit


def test_a_probe_killed_between_unlinking_its_record_and_renaming_the_new_one_is_read_from_its_temp_file(
    tmp_path: Path,
) -> None:
    """The probe unlinks its old record before renaming the new one into place (a rename over a file costs a
    flush on ext4); a cell killed in between left only the temp file, whole, and the cell's test is still named."""
    (tmp_path / "probe.json.tmp").write_text(json.dumps({"phase": "tests", "current_test": "test_x.py::test_hangs"}))
    outcome = classify(cell(tmp_path, None, None, None, timed_out=True), 7)
    assert outcome.reason == "no result after 7 s, killed in test test_x.py::test_hangs"
    (tmp_path / "probe.json").write_text(json.dumps({"phase": "tests", "current_test": "test_x.py::test_first"}))
    record = ProbeRecord.read(tmp_path / "probe.json")  # the record in place wins over a temp file beside it
    assert record is not None and record.current_test == "test_x.py::test_first"


@pytest.mark.parametrize("probe", [{"phase": "import_torch"}, None], ids=["during-import-torch", "before-the-probe"])
def test_a_crash_before_the_extension_loaded_is_an_error_not_a_crash(tmp_path: Path, probe: dict | None) -> None:
    """D4: a runtime that dies in `import torch` says nothing about the extension, which was never loaded."""
    outcome = classify(cell(tmp_path, -11, probe, None), 60)
    assert outcome.status is Status.ERROR
    assert "SIGSEGV" in outcome.reason and "before the extension was loaded" in outcome.reason


def test_a_hang_before_the_extension_loaded_is_an_error_not_a_timeout(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, None, {"phase": "import_torch"}, None, timed_out=True), 7)
    assert outcome.status is Status.ERROR
    assert outcome.reason == "no result after 7 s, killed during import torch, before the extension was loaded"


def test_a_crash_while_loading_the_extension_is_the_extensions(tmp_path: Path) -> None:
    outcome = classify(cell(tmp_path, -11, {"phase": "load"}, None), 60)
    assert (outcome.status, outcome.reason) == (Status.CRASHED, "killed by SIGSEGV during load")


def test_the_probe_record_is_typed_and_a_field_of_the_wrong_type_reads_as_absent(tmp_path: Path) -> None:
    """A cell can write anything into probe.json: a wrong type is never passed on as if the probe wrote it."""
    planted = {"phase": 3, "load_ok": "yes", "load_s": True, "torch_version": ["2.13"], "error_chain": "text", "pid": 7}
    record = ProbeRecord.of(planted)
    assert (record.phase, record.load_ok, record.load_s, record.torch_version) == ("start-up", None, None, None)
    assert (record.error_chain, record.pid) == ((), 7)
    probe = dict(LOADED, load_s=0.25, import_torch_s=2, error_chain=["a", "b"])
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    record = ProbeRecord.read(tmp_path / "probe.json")
    assert record is not None
    assert (record.load_ok, record.load_s, record.import_torch_s, record.torch_version) == (True, 0.25, 2, "2.13.0+cpu")
    (tmp_path / "probe.json").write_text("[1, 2]")
    assert ProbeRecord.read(tmp_path / "probe.json") is None


def test_the_test_running_is_the_last_whole_line_the_probe_appended(tmp_path: Path) -> None:
    """The probe writes its record once when the tests begin (naming the first) and appends each test's node id
    to probe.json.tests; a cell killed in a test is named by that file's last whole line, never by a line it was
    cut short in, and by the record where the file is missing."""
    (tmp_path / "probe.json").write_text(json.dumps({"phase": "tests", "current_test": "test_x.py::test_first"}))
    outcome = classify(cell(tmp_path, None, None, None, timed_out=True), 7)
    assert outcome.reason == "no result after 7 s, killed in test test_x.py::test_first"
    (tmp_path / "probe.json.tests").write_bytes(b"test_x.py::test_first\ntest_x.py::test_hangs\ntest_x.py::test_ne")
    outcome = classify(cell(tmp_path, None, None, None, timed_out=True), 7)
    assert outcome.reason == "no result after 7 s, killed in test test_x.py::test_hangs"
    finished = {"phase": "finished", "load_ok": True, "exitstatus": 0}
    (tmp_path / "probe.json").write_text(json.dumps(finished))
    record = ProbeRecord.read(tmp_path / "probe.json")
    assert record is not None and record.current_test is None  # the tests are over: no test is running
    (tmp_path / "probe.json.tests").unlink()
    (tmp_path / "probe.json.tests").symlink_to("/etc/passwd")  # a cell's planted link is not followed
    (tmp_path / "probe.json").write_text(json.dumps({"phase": "tests", "current_test": "test_x.py::test_first"}))
    record = ProbeRecord.read(tmp_path / "probe.json")
    assert record is not None and record.current_test == "test_x.py::test_first"


def test_the_probes_list_of_started_tests_stays_small_and_always_ends_with_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real probe plugin's hook, called as pytest calls it: the record is written once, when the first test
    starts; past TESTS_KEPT bytes the list is replaced by a file holding only the newest line."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "torch_abi_harness" / "execute" / "cellprobe"))
    import harness_cellprobe as probe

    monkeypatch.setenv("HARNESS_PROBE_FILE", str(tmp_path / "probe.json"))
    monkeypatch.setattr(probe, "_record", {"phase": "collect"})
    monkeypatch.setattr(probe, "_tests", {"fd": None, "size": 0})
    monkeypatch.setattr(probe, "TESTS_KEPT", 200)
    writes = []
    real_write = probe._write
    monkeypatch.setattr(probe, "_write", lambda: (writes.append(1), real_write()))
    try:
        for n in range(40):
            probe.pytest_runtest_logstart(f"test_x.py::test_{n}", None)
            listed = (tmp_path / "probe.json.tests").read_bytes()
            assert listed.endswith(f"test_x.py::test_{n}\n".encode()) and len(listed) <= 200
    finally:
        os.close(probe._tests["fd"])
    assert json.loads((tmp_path / "probe.json").read_text())["current_test"] == "test_x.py::test_0"
    assert len(writes) == 1  # the record once; each test after it one line
    record = ProbeRecord.read(tmp_path / "probe.json")
    assert record is not None and record.current_test == "test_x.py::test_39"
    assert not (tmp_path / "probe.json.tests.tmp").exists()
