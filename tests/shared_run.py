"""One run of the committed matrix (matrix.yaml, every cell) per test session, read by every test that needs one.

A full default-matrix run is the tier's most expensive single piece of work (145 cells, minutes on a loaded
machine); the tests that judge it only read its report. So it is made once per session and shared:

- HARNESS_DEFAULT_RUN, when set, names the reports directory of a run this tree already made (`.ci/run` points
  it at the main job's `--reports-dir`): its `latest/` report, the run's output in `run.out` and its exit code
  in `run.rc`. Nothing is run then.
- Otherwise the first test to ask makes it, under a file lock in a directory every xdist worker of this session
  shares (the parent of the workers' base temp dirs); the other workers wait on that lock and read what it made.
  Without xdist the session's own base temp dir holds it, so no later session reads a stale run.

The run writes into the harness's normal cache (envs and builds, content-addressed and locked), as every
integration test does.
"""

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from kit import harness

GIVEN = "HARNESS_DEFAULT_RUN"
OUTPUT, EXIT_CODE = "run.out", "run.rc"


@dataclass(frozen=True)
class SharedRun:
    """A finished run of a matrix: its reports directory, what it printed and its exit code."""

    reports: Path
    returncode: int
    stdout: str

    @property
    def latest(self) -> Path:
        """The run's report (results.json, summary.md, report.html...)."""
        return (self.reports / "latest").resolve()


def read_run(reports: Path) -> SharedRun:
    """The run whose `--reports-dir` is reports, with its output and exit code kept beside its report."""
    missing = [name for name in (OUTPUT, EXIT_CODE) if not (reports / name).is_file()]
    if missing:
        pytest.fail(
            f"{reports}: not a finished run's reports directory (no {' or '.join(missing)}): {GIVEN} names the "
            "--reports-dir of a `run` of matrix.yaml whose output went to run.out and its exit code to run.rc"
        )
    run = SharedRun(reports, int((reports / EXIT_CODE).read_text()), (reports / OUTPUT).read_text())
    if not (run.latest / "results.json").is_file():
        pytest.fail(f"{reports}: the run made no report (exit {run.returncode}); it said:\n{run.stdout}")
    return run


def session_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory this session's processes share: under xdist, the parent of every worker's base temp dir."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_run(factory: pytest.TempPathFactory, matrix: Path) -> SharedRun:
    """HARNESS_DEFAULT_RUN's run, else this session's run of matrix: made by the first process to ask."""
    given = os.environ.get(GIVEN)
    if given:
        return read_run(Path(given).resolve())
    home = session_dir(factory) / f"shared-run-{matrix.stem}"
    home.mkdir(exist_ok=True)
    with open(home / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait here while the first makes the run
        reports = home / "reports"
        if not (reports / EXIT_CODE).is_file():  # the first to ask: make it
            reports.mkdir(exist_ok=True)
            done = harness("run", "--matrix", matrix, "--reports-dir", reports, cwd=home)
            (reports / OUTPUT).write_text(done.stdout)
            (reports / EXIT_CODE).write_text(f"{done.returncode}\n")  # last: its presence says finished
        return read_run(reports)
