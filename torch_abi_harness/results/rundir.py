"""A run's report directory: made with a unique name, pointed at by `latest`, and what lands in it."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shutil
import time
from pathlib import Path

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.core.files import write_json
from torch_abi_harness.results.model import CellResult

log = logging.getLogger(__name__)


def new_run_dir(reports_dir: Path) -> tuple[str, Path]:
    """A new directory for one run under reports_dir, named for when it started: (its name, its path)."""
    reports_dir = reports_dir.resolve()  # cells run with their own cwd: every path they get is absolute
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in ("", *(f"-{n}" for n in range(2, 100))):
        path = reports_dir / f"{stamp}{suffix}"
        try:
            path.mkdir(parents=True)
            return path.name, path
        except FileExistsError:
            continue
    raise FileExistsError(f"{reports_dir}: too many runs started at {stamp}")


def point_latest(reports_dir: Path, run_dir: Path) -> None:
    """reports_dir/latest -> run_dir, replaced atomically (a warning if it cannot be)."""
    latest = reports_dir / "latest"
    tmp = reports_dir / f".latest-{os.getpid()}-{time.monotonic_ns()}"
    try:
        tmp.symlink_to(run_dir.name)
        tmp.replace(latest)
    except OSError as exc:
        log.warning("could not point %s at %s: %s", latest, run_dir, exc)


def with_build_log(run_dir: Path, result: BuildResult) -> BuildResult:
    """A copy of the build log in the run's report, so the report stands on its own (if it can be copied)."""
    log_copy = run_dir / "builds" / f"{result.build.id}.log"
    try:
        log_copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(result.log, log_copy)
    except OSError as exc:
        log.warning("%s: build log not copied into the report: %s", result.build.id, exc)
        return result
    return dataclasses.replace(result, log=log_copy)


RESULT_FILE = "result.json"  # a cell's own result, in its directory


def write_cell(result: CellResult, out: Path) -> None:
    """Write the cell's result.json into `out` (atomically, replacing whatever a cell planted there). OSError
    when it cannot be: what that makes of the cell is the judge's to say (torch_abi_harness/run/judge.py)."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / RESULT_FILE, result.to_json())
