"""Interrupts: a signal stops every stage promptly, leaves no process behind, and what a cell's own
files say agrees with the run's report."""

import json
import os
import signal
import time

import pytest
from kit import processes_mentioning

SLEEPS = """
import time

from @NS@ import ops

def test_sleeps():
    assert ops.answer() == 41
    time.sleep(120)
"""


def _wait_for(predicate, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.usefixtures("shared_cache")
def test_B3_a_cell_killed_by_the_interrupt_reads_the_same_in_its_own_file_and_the_report(workspace, catalogue) -> None:
    """B3: before, the killed cell's cells/<id>/result.json said CRASHED (broken) while results.json said
    ERROR 'not run', though it had run for seconds. Both must say ERROR, interrupted after N s."""
    workspace.add_extension("sleeper", SLEEPS)
    workspace.write_matrix("  - extension: sleeper\n    torch: 2.13.0\n    target: '2.10'\n")
    proc = workspace.start()
    probe = lambda: next(workspace.reports.glob("*/cells/*/probe.json"), None)  # noqa: E731
    _wait_for(lambda: probe() is not None and '"tests"' in probe().read_text(), "the cell's tests started")
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out
    results = json.loads((probe().parent.parent.parent / "results.json").read_text())
    assert results["interrupted"] is True
    (cell,) = results["cells"]
    own = json.loads((probe().parent / "result.json").read_text())
    catalogue(
        "B3",
        "Ctrl-C while a cell's test runs",
        "exit 3; the cell is ERROR 'interrupted after N s' in results.json and in its own result.json",
        f"exit {proc.returncode}; results.json: {cell['status']} ({cell['reason']}); "
        f"cells/<id>/result.json: {own['status']} ({own['reason']})",
    )
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error")
    assert cell["reason"].startswith("interrupted after ")
    assert (own["status"], own["reason"]) == (cell["status"], cell["reason"])


@pytest.mark.parametrize(
    "signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["B4-SIGTERM", "B5-2xSIGINT"]
)
def test_an_interrupt_during_env_creation_stops_uv_at_once_and_leaves_nothing(
    workspace, private_uv_cache, catalogue, signals
) -> None:
    """B4: SIGTERM while uv makes an env was acted on only when the env was done (22 s); B5: two
    SIGINTs left `uv pip install` writing into the cache. Now: exit 3 within seconds, no process left."""
    proc = workspace.start()
    _wait_for(lambda: any("pip install" in p for p in processes_mentioning(str(private_uv_cache))), "uv installing")
    started = time.monotonic()
    for sig in signals:
        os.killpg(proc.pid, sig)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=60)
    stopped = time.monotonic() - started
    time.sleep(0.5)
    left = processes_mentioning(str(private_uv_cache)) + processes_mentioning(str(workspace.cache))
    names = " then ".join(s.name for s in signals)
    catalogue(
        "B4" if len(signals) == 1 else "B5",
        f"{names} while uv installs torch into a new env",
        "exit 3 within seconds; no uv or compiler process left",
        f"exit {proc.returncode} after {stopped:.1f} s; {len(left)} process(es) left",
    )
    assert proc.returncode == 3, out
    assert stopped < 10, f"took {stopped:.1f} s to stop"
    assert left == []
