import time
from pathlib import Path

import pytest
from shared_run import SharedRun, shared_run
from tiers import tier_lines, tier_times

REPO = Path(__file__).resolve().parents[1]
STARTED = time.monotonic()  # conftest.py is read as the session starts


@pytest.fixture
def repo() -> Path:
    return REPO


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each tier's summed time (tests/tiers.py), after --durations' slowest tests."""
    reports = [r for kind in terminalreporter.stats.values() for r in kind if hasattr(r, "when")]
    tiers = tier_times(reports)
    if not tiers:
        return
    terminalreporter.write_sep("=", "time by tier (setup + call + teardown, summed over workers)")
    for line in tier_lines(tiers, time.monotonic() - STARTED):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> SharedRun:
    """matrix.yaml run once for the whole session (every xdist worker reads the same run: tests/shared_run.py)."""
    return shared_run(tmp_path_factory, REPO / "matrix.yaml")
