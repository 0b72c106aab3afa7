"""Real extensions that crash, hang, fail a test or ship no tests: each cell is classified, the run completes."""

import json
import signal
import time
from pathlib import Path

import pytest
from kit import cells_by_id, harness, latest_results, make_extension, processes_mentioning, start_harness


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("outcomes")
    make_extension(
        root / "extensions",
        "crashes",
        """
        from @NS@ import ops

        def test_before_the_crash():
            assert ops.answer() == 41

        def test_segfault():
            ops.crash()
    """,
    )
    make_extension(
        root / "extensions",
        "hangs",
        """
        from @NS@ import ops

        def test_spins_forever():
            ops.spin()
    """,
    )
    make_extension(
        root / "extensions",
        "fails",
        """
        from @NS@ import ops

        def test_passes():
            assert ops.answer() == 41

        def test_answer_is_42():
            assert ops.answer() == 42
    """,
    )
    make_extension(root / "extensions", "no_tests", None)
    builds = "".join(
        f"  - extension: {name}\n    torch: 2.13.0\n" for name in ("crashes", "hangs", "fails", "no_tests")
    )
    (root / "matrix.yaml").write_text(f"schema_version: 1\nruntimes:\n  - torch: 2.13.0\nbuilds:\n{builds}")
    return root


def test_each_failure_mode_is_classified_and_the_run_completes(workspace: Path) -> None:
    proc = harness("run", "--timeout", "20", "--reports-dir", "reports", cwd=workspace)
    assert proc.returncode == 1, proc.stdout  # a promise (same-release cells pass) was broken
    cells = cells_by_id(latest_results(workspace / "reports"))
    crashed = cells["crashes@b2.13.0~r2.13.0-cpu"]
    assert (crashed["status"], crashed["verdict"]) == ("CRASHED", "broken")
    assert crashed["reason"] == "killed by SIGSEGV in test test_crashes.py::test_segfault"
    hung = cells["hangs@b2.13.0~r2.13.0-cpu"]
    assert (hung["status"], hung["verdict"]) == ("TIMEOUT", "broken")
    assert hung["reason"] == "no result after 20 s, killed in test test_hangs.py::test_spins_forever"
    # the hung cell's process is gone (a cell's pid is its own PID namespace's: look for it by the run's directory,
    # which a fresh cell's command line and a forked cell's (its server's) both name)
    assert processes_mentioning(str((workspace / "reports").resolve())) == []
    failed = cells["fails@b2.13.0~r2.13.0-cpu"]
    assert (failed["status"], failed["verdict"]) == ("TEST_FAILED", "broken")
    assert failed["failing_tests"] == ["test_fails::test_answer_is_42"]
    assert failed["tests"] == {"passed": 1, "failed": 1, "skipped": 0, "errors": 0}
    assert failed["prediction"]["outcome"] == "loads"
    assert failed["findings"] == [
        "loaded as predicted, then TEST_FAILED: a break that symbols do not show "
        "(1 of 2 tests failed: test_fails::test_answer_is_42)"
    ]
    empty = cells["no_tests@b2.13.0~r2.13.0-cpu"]
    assert (empty["status"], empty["verdict"], empty["reason"]) == (
        "ERROR",
        "error",
        "pytest exit 5: no tests were collected",
    )
    stderr = (workspace / "reports" / "latest" / crashed["logs"]["stderr"]).read_text()
    assert "Segmentation fault" in stderr and "test_segfault" in stderr  # faulthandler names the test frame


def test_an_interrupted_run_kills_its_cells_and_still_writes_the_report(workspace: Path) -> None:
    proc = start_harness("run", "-k", "hangs", "--reports-dir", "interrupted", cwd=workspace)
    probes = workspace / "interrupted"
    deadline = time.monotonic() + 600
    probe: Path | None = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(probes.glob("*/cells/*/probe.json"))
        if found and '"phase": "tests"' in found[0].read_text():
            probe = found[0]
            break
        time.sleep(0.2)
    if probe is None:
        proc.kill()
        raise AssertionError(f"the hanging cell never started:\n{proc.communicate()[0]}")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out
    results = json.loads((probes / "latest" / "results.json").read_text())
    assert results["interrupted"] is True
    (cell,) = results["cells"]
    assert cell["status"] == "ERROR"
    assert cell["reason"].startswith("interrupted after "), cell["reason"]
    assert processes_mentioning(str(probes.resolve())) == []  # the cell, and its forkserver, died with the run
