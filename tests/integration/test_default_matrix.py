"""The README's main job: the committed matrix, for real, across every release it names."""

from pathlib import Path
from typing import Any

from kit import cells_by_id, harness, latest_results
from shared_run import SharedRun

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.plan import make_plan

# What the no-target 2.15 build lacks on each older runtime, as the loader names it.
NEGATIVE_CONTROL_SYMBOL = {
    "2.9.1": "torch_tag_inplace_view",  # def() with tags, a 2.12 shim; the loader names one symbol
    "2.10.0": "torch_tag_inplace_view",
    "2.11.0": "torch_tag_inplace_view",
    "2.12.1": "torch_exception_get_what_without_backtrace",  # the 2.13 error-check macro
    "2.13.0": "torch_dtype_from_pyobject",  # 2.15 PyObject shims
    "2.14.1": "torch_dtype_from_pyobject",
}


def test_default_matrix_keeps_every_promise_then_reuses_everything(
    repo: Path, tmp_path: Path, default_run: SharedRun
) -> None:
    first = default_run  # the session's one run of matrix.yaml (tests/shared_run.py)
    assert first.returncode == 0, first.stdout
    assert "145 cells selected" in first.stdout
    results = latest_results(first.reports)
    cells = cells_by_id(results)
    plan = make_plan(load_matrix(repo / "matrix.yaml"))
    assert set(cells) == {c.id for c in plan.cells}

    # cuda_ops (libcudart.so.13) on the cu128 runtimes: the sandbox hides the host's CUDA 13 toolkit (the
    # one that builds it); only where there is no sandbox can the host lend it (an unexpected pass).
    host_cuda = {f"cuda_ops@b2.14.1-t2.10~r{r}-cpu" for r in ("2.9.1", "2.10.0")}
    for cell in plan.cells:
        got = cells[cell.id]
        expected = got["expected"]  # decided after the build: the plan's, or an artifact condition's
        if got["expected_class"] in ("no-cuda", "cuda-major"):  # CUDA 13 builds where torch ships none, or 12
            assert (expected, got["runtime"]["variant"]) in {("load_failed", "cpu"), ("load_failed", "cu128")}, got
        if expected in ("none", "crashed", "timeout") or (cell.id in host_cuda and got["status"] == "PASS"):
            continue  # the classic extension and the negative controls: checked below
        if expected == "pass":
            assert (got["status"], got["verdict"]) == ("PASS", "kept"), got
            assert got["tests"]["failed"] == 0
        else:
            assert (got["status"], got["verdict"]) == ("LOAD_FAILED", "expected_failure"), got
    classic_on_2_12 = "classic_ops@b2.13.0~r2.12.1-cpu"
    for got in cells.values():  # the static prediction agrees with every outcome but one (and the host's CUDA)
        if got["id"] == classic_on_2_12 or (got["id"] in host_cuda and got["status"] == "PASS"):
            continue
        assert got["findings"] == [], got
        assert got["prediction"]["outcome"] == ("load_failed" if got["status"] == "LOAD_FAILED" else "loads")
    for runtime, symbol in NEGATIVE_CONTROL_SYMBOL.items():
        cell = cells[f"stable_basic@b2.15.0~r{runtime}-cpu"]
        assert cell["missing_symbol"] == symbol
        assert cell["reason"] == f"undefined symbol: {symbol}"
    assert cells["stable_basic@b2.13.0-t2.10~r2.9.1-cpu"]["missing_symbol"] == "torch_list_size"
    assert_the_python_axis(cells)
    # The classic TORCH_LIBRARY extension (unstable C++ API) built on 2.13: no promise off 2.13.
    for runtime in ("2.9.1", "2.10.0", "2.11.0"):
        got = cells[f"classic_ops@b2.13.0~r{runtime}-cpu"]
        assert (got["status"], got["verdict"]) == ("LOAD_FAILED", "expected_failure")
        assert got["reason"].startswith("undefined symbol: torch::Library::_def(")
    # On 2.12.1 it loads (its symbols all resolve, as predicted) and every test fails: the op's
    # kernel lands under other dispatch keys. A break only running shows.
    silent = cells[classic_on_2_12]
    assert (silent["status"], silent["prediction"]["outcome"]) == ("TEST_FAILED", "loads")
    assert silent["tests"]["failed"] == 3
    assert silent["findings"][0].startswith("loaded as predicted, then TEST_FAILED")
    assert cells["classic_ops@b2.13.0~r2.13.0-cpu"]["verdict"] == "kept"
    assert_the_negative_controls_crash_and_hang(cells)
    # The ladder: the 2.15 headers at each target fail on the release just below it, for want of a
    # shim that release introduced.
    for target, older, symbol in [
        ("2.11", "2.10.0", "torch_from_blob"),
        ("2.12", "2.11.0", "torch_tag_inplace_view"),
        ("2.13", "2.12.1", "torch_exception_get_what_without_backtrace"),
        ("2.14", "2.13.0", "torch_tensor_from_pyobject"),
    ]:
        assert cells[f"stable_basic@b2.15.0-t{target}~r{older}-cpu"]["missing_symbol"] == symbol
    lent = sum(cells[i]["status"] == "PASS" for i in host_cuda)  # cuda_ops t2.10 on 2.10.0 where the host lends
    assert results["summary"] == {
        "kept": 80,  # 12 of them cuda_ops: its cpu cases pass, its cuda cases skip without a GPU; 31 on 3.10/3.13
        "broken": 0,
        "expected_failure": 63 - lent,  # 10 of cuda_ops: no-cuda on 2.13.0+cpu, cuda-major or T > R elsewhere
        "unexpected_pass": 2 + lent,
        "skipped": 0,
        "error": 0,
        "flaky": 0,
        "known_break": 0,
        "not_run": 0,
    }

    second = harness(
        "run", "--matrix", repo / "matrix.yaml", "--reports-dir", tmp_path / "again", "-k", "r2.10.0", cwd=tmp_path
    )
    assert second.returncode == 0, second.stdout
    assert "created" not in second.stdout and second.stdout.count("(cached)") == 13, second.stdout


def assert_the_python_axis(cells: dict[str, dict[str, Any]]) -> None:
    # The Python axis: the abi3 wheels are promised and pass on 3.10 and 3.13; the cp311 wheels (cp_specific,
    # classic_ops) are refused by the installer there, class python-abi, and do not run.
    for runtime in ("r2.12.1-cpu-py3.10", "r2.14.1-cpu-py3.10", "r2.12.1-cpu-py3.13", "r2.15.0-cpu-py3.13"):
        abi3 = cells[f"stable_basic@b2.15.0-t2.9~{runtime}"]
        assert (abi3["status"], abi3["verdict"], abi3["runtime"]["python"]) == ("PASS", "kept", runtime[-4:])
        for build in ("cp_specific@b2.15.0-t2.9", "classic_ops@b2.13.0"):
            got = cells[f"{build}~{runtime}"]
            assert (got["status"], got["expected_class"], got["verdict"]) == (
                "LOAD_FAILED",
                "python-abi",
                "expected_failure",
            ), got
            assert got["reason"].startswith(f"not installable on CPython {runtime[-4:]}: a cp311-cp311 wheel")
    assert cells["cp_specific@b2.15.0-t2.9~r2.9.1-cpu"]["verdict"] == "kept"


def assert_the_negative_controls_crash_and_hang(cells: dict[str, dict[str, Any]]) -> None:
    # The negative controls crash and hang where they load; the run goes on.
    for runtime in ("2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"):
        got = cells[f"crash_control@b2.13.0-t2.9~r{runtime}-cpu"]
        assert (got["status"], got["verdict"]) == ("CRASHED", "expected_failure")
        assert got["reason"] == "killed by SIGSEGV in test test_crash.py::test_segfault"
    hung = cells["hang_control@b2.13.0-t2.9~r2.15.0-cpu"]
    assert (hung["status"], hung["verdict"]) == ("TIMEOUT", "expected_failure")
    assert hung["reason"] == "no result after 10 s, killed in test test_hang.py::test_spin_forever"
