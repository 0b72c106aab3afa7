"""A reports directory: one directory per run, named by its start time, and `latest` pointing at the newest."""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)


def new_run_dir(reports_dir: Path) -> tuple[str, Path]:
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
    latest = reports_dir / "latest"
    tmp = reports_dir / f".latest-{os.getpid()}-{time.monotonic_ns()}"
    try:
        tmp.symlink_to(run_dir.name)
        tmp.replace(latest)
    except OSError as exc:
        log.warning("could not point %s at %s: %s", latest, run_dir, exc)
