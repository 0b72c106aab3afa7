"""The forkserver executor under attack: a server that stops answering bounds its cell's wait (F2), and a
forked cell ends the way an interpreter does, so a suite's verdict never depends on the executor (F6)."""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from kit import forkservers, processes_mentioning, start_harness

from torch_abi_harness.execute.forkserver import ANSWER_SECONDS

SLOW = """
import time

from @NS@ import ops

def test_a_few_seconds():
    time.sleep(3)
    assert ops.answer() == 41
"""

THREAD_ENDS = """
import threading
import time

from @NS@ import ops

def test_leaves_a_thread_that_ends_after_a_few_seconds():
    threading.Thread(target=time.sleep, args=(4,), name="lingers").start()
    assert ops.answer() == 41
"""

THREAD_NEVER_ENDS = """
import threading

from @NS@ import ops

def test_leaves_a_thread_that_never_ends():
    threading.Thread(target=threading.Event().wait, name="forever").start()
    assert ops.answer() == 41
"""


def _results(reports: Path) -> dict[str, dict]:
    (run,) = [d for d in reports.iterdir() if d.is_dir() and not d.is_symlink()]
    return {c["id"].split("@")[0]: c for c in json.loads((run / "results.json").read_text())["cells"]}


def _cell_in_tests(reports: Path, extension: str) -> bool:
    probe = next(reports.glob(f"*/cells/{extension}@*/probe.json"), None)
    return probe is not None and '"phase": "tests"' in probe.read_text()


@pytest.mark.usefixtures("shared_cache")
def test_F2_a_stopped_forkserver_bounds_its_cell_and_is_replaced(workspace, catalogue) -> None:
    """F2: SIGSTOP on the forkserver while a cell runs hung the run until the server resumed, then the
    cell, whose tests had passed, read TIMEOUT broken. Now its end is seen through a pidfd, the server
    has ANSWER_SECONDS to report it, else it is killed, the cell is ERROR 'forkserver unresponsive' and
    the next cell is forked from a new server."""
    workspace.add_extension("a_stalled", SLOW)
    workspace.add_extension("b_after")
    workspace.write_matrix(
        "  - extension: a_stalled\n    torch: 2.13.0\n    target: '2.10'\n"
        "  - extension: b_after\n    torch: 2.13.0\n    target: '2.10'\n"
    )
    timeout = 30
    proc = workspace.start("-j", "1", "--timeout", str(timeout))
    marker = str(workspace.reports)
    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not stopped:
            if _cell_in_tests(workspace.reports, "a_stalled"):
                stopped = forkservers(marker)
            time.sleep(0.1)
        assert stopped, f"the first cell never ran under a forkserver:\n{proc.communicate(timeout=60)[0]}"
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        since = time.monotonic()
        out, _ = proc.communicate(timeout=timeout + ANSWER_SECONDS + 180)
        took = time.monotonic() - since
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = [pid for pid in stopped if any(line.startswith(f"{pid}:") for line in processes_mentioning(marker))]
        for pid in left:  # a server the run failed to kill: never left behind, stopped
            os.kill(pid, signal.SIGKILL)
    cells = _results(workspace.reports)
    stalled, after = cells["a_stalled"], cells["b_after"]
    catalogue(
        "F2",
        f"the forkserver stopped (SIGSTOP) while a cell runs, cell timeout {timeout} s",
        f"the run ends within a bound; the cell is ERROR 'forkserver unresponsive' (within {ANSWER_SECONDS:.0f} s "
        "of its end); the stopped server is killed; the next cell passes, forked from a new server",
        f"exit {proc.returncode} {took:.0f} s after the stop; {stalled['status']} ({stalled['verdict']}): "
        f"{stalled['reason'][:60]}...; next cell {after['status']} ({after['verdict']}, {after['executor']}); "
        f"stopped server {'left' if left else 'killed'}",
    )
    assert proc.returncode == 3, out
    assert (stalled["status"], stalled["verdict"]) == ("ERROR", "error"), stalled
    assert stalled["reason"].startswith("forkserver unresponsive: the forkserver of torch 2.13.0"), stalled
    assert (after["status"], after["verdict"], after["executor"]) == ("PASS", "kept", "forkserver"), after
    assert after["durations"]["import_torch"] < 0.05, after  # forked from a server that imported torch
    assert took < timeout + ANSWER_SECONDS + 120, f"the run took {took:.0f} s after the stop"
    assert left == [], "the stopped server outlived its run"
    assert processes_mentioning(marker) == [], "a server or cell outlived its run"


@pytest.mark.usefixtures("shared_cache")
def test_F6_a_test_leaving_a_non_daemon_thread_gets_one_verdict_under_both_executors(workspace, catalogue) -> None:
    """F6: a forked cell ended with os._exit right after pytest, killing a non-daemon thread a test left,
    where a fresh interpreter joins it at exit: PASS forked, TIMEOUT fresh. Now a forked cell joins
    them too (threading._shutdown, then the at-exit handlers), so both executors agree."""
    workspace.add_extension("thread_ends", THREAD_ENDS)
    workspace.add_extension("thread_never_ends", THREAD_NEVER_ENDS)
    workspace.write_matrix(
        "  - extension: thread_ends\n    torch: 2.13.0\n    target: '2.10'\n"
        "  - extension: thread_never_ends\n    torch: 2.13.0\n    target: '2.10'\n"
    )
    timeout = 25
    reports = {executor: workspace.root / f"reports-{executor}" for executor in ("forkserver", "fresh")}
    procs = {
        executor: start_harness(
            *workspace.args("-j", "2", "--timeout", str(timeout), "--executor", executor, "--reports-dir", where),
            cwd=workspace.root,
            env=workspace.env,
            session=True,
        )
        for executor, where in reports.items()
    }
    try:
        outs = {executor: proc.communicate(timeout=900)[0] for executor, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    cells = {executor: _results(where) for executor, where in reports.items()}
    verdicts = {
        executor: {name: (c["status"], c["verdict"]) for name, c in found.items()} for executor, found in cells.items()
    }
    catalogue(
        "F6",
        "a test leaves a non-daemon thread running (one ends after 4 s, one never ends), cell timeout "
        f"{timeout} s, under --executor forkserver and --executor fresh",
        "one verdict per suite under both executors: the thread that ends is waited for (PASS), the one "
        "that never ends holds the cell to its timeout (TIMEOUT)",
        "; ".join(
            f"{executor}: "
            + ", ".join(f"{name} {status} ({verdict})" for name, (status, verdict) in sorted(found.items()))
            for executor, found in verdicts.items()
        ),
    )
    for executor, out in outs.items():
        assert procs[executor].returncode == 1, out  # the never-ending thread breaks a promise: TIMEOUT
    assert verdicts["forkserver"] == verdicts["fresh"]
    assert verdicts["fresh"] == {"thread_ends": ("PASS", "kept"), "thread_never_ends": ("TIMEOUT", "broken")}
    assert {c["executor"] for c in cells["forkserver"].values()} == {"forkserver"}
    # The forked cell waited for the thread that ends, as the fresh interpreter did: it lasted its 4 s.
    for executor in reports:
        assert cells[executor]["thread_ends"]["durations"]["total"] >= 4, cells[executor]["thread_ends"]
