"""Faults of the build stage and its cache: a build that did not finish is never cached as the
extension's failure, and a cached build that was changed is built again before any cell uses it."""

import os
import signal
import time
from pathlib import Path

import pytest
from kit import observed, processes_left, processes_mentioning


def _wait_for_compiler(proc_marker: str, timeout: float = 120) -> None:
    """Until a C++ compiler of this workspace runs (cc1plus compiles from the build's temporary copy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("cc1plus" in p for p in processes_mentioning(proc_marker)):
            return
        time.sleep(0.1)
    raise AssertionError("the compiler never started")


@pytest.mark.usefixtures("linked_env")
def test_B7_ctrl_c_while_the_compiler_runs_is_not_cached_as_a_build_failure(workspace, catalogue) -> None:
    """B7 (and B5): Ctrl-C to the job's process group while cc1plus runs; the next run builds again and passes."""
    proc = workspace.start()
    _wait_for_compiler(str(workspace.cache))
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out
    assert "interrupted" in out
    left = processes_left(str(workspace.cache))
    assert left == [], "the interrupted run left processes behind"

    again = workspace.run()
    catalogue(
        "B7",
        "Ctrl-C to the job's process group while cc1plus compiles; then a clean run",
        "the interrupted run exits 3 leaving no process; the failure is not cached: the next run builds and passes",
        f"interrupted run: exit {proc.returncode}, {len(left)} process(es) left; next run: "
        + observed(again, workspace.only_cell()),
    )
    assert again.returncode == 0, again.stdout
    assert "cached" not in again.stdout.split("== build")[1].split("== predict")[0]
    assert workspace.only_cell()["status"] == "PASS"


@pytest.mark.usefixtures("linked_env")
def test_D14_a_build_killed_by_the_build_timeout_is_an_error_and_not_cached(workspace, catalogue) -> None:
    """D14: settings.build_timeout kills the build: the cell is ERROR (exit 3), not BUILD_FAILED broken;
    with the timeout raised, the next run builds and passes."""
    build = "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n"
    workspace.write_matrix(build, extra="settings:\n  build_timeout: 2\n")
    first = workspace.run()
    assert first.returncode == 3, first.stdout
    cell = workspace.only_cell()
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error")
    assert "did not finish within 2 s (settings.build_timeout)" in cell["reason"]
    assert "NOT BUILT" in first.stdout

    workspace.write_matrix(build)
    second = workspace.run()
    catalogue(
        "D14",
        "settings.build_timeout: 2 kills the build; then the timeout is raised",
        "ERROR (exit 3), not BUILD_FAILED, and not cached: the next run builds and passes",
        f"first run: {observed(first, cell)}; second: {observed(second, workspace.only_cell())}",
    )
    assert second.returncode == 0, second.stdout
    assert workspace.only_cell()["status"] == "PASS"


def _site_file(workspace, pattern: str) -> Path:
    (build,) = workspace.builds()
    (found,) = (build / "site").glob(pattern)
    return found


@pytest.mark.usefixtures("linked_env")
@pytest.mark.parametrize(
    "probe, fault, damage",
    [
        (
            "D10",
            "the cached build's site/.../_C.so truncated in place",
            lambda ws: os.truncate(_site_file(ws, "probe_ext/_C*.so"), 4096),
        ),
        (
            "D11",
            "the cached build's _C.so replaced by random bytes",
            lambda ws: _site_file(ws, "probe_ext/_C*.so").write_bytes(os.urandom(200_000)),
        ),
        (
            "D12",
            "the cached build's __init__.py replaced by garbage",
            lambda ws: _site_file(ws, "probe_ext/__init__.py").write_text("this is not python (\n"),
        ),
        (
            "D8",
            "the cached wheel truncated",
            lambda ws: os.truncate(next((ws.builds()[0] / "dist").glob("*.whl")), 100),
        ),
    ],
    ids=["D10-truncated-so", "D11-random-so", "D12-garbage-init", "D8-truncated-wheel"],
)
def test_a_damaged_cached_build_is_built_again(
    workspace, private_uv_cache, cached_build, catalogue, probe: str, fault: str, damage
) -> None:
    """D8, D10-D12: the unpacked build or the cached wheel changed in place between runs: the next run
    says so, builds again, and the cell passes (today: CRASHED, LOAD_FAILED or 'not a wheel', forever).
    The build damaged is `cached_build`'s private copy, which the first run uses as cached."""
    first = workspace.run()
    assert first.returncode == 0, first.stdout
    assert ": built (cached)" in first.stdout and workspace.builds() == [cached_build], first.stdout
    damage(workspace)
    again = workspace.run()
    catalogue(
        probe,
        fault + ", between two runs",
        "the damage is named, the build made again, the cell passes",
        observed(again, workspace.only_cell())
        + ("; damage named" if "the cached build was damaged" in again.stdout else "; damage NOT named"),
    )
    assert again.returncode == 0, again.stdout
    assert "the cached build was damaged and was built again" in again.stdout
    assert workspace.only_cell()["status"] == "PASS"
