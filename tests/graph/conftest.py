"""What the graph tests share: the folder their jobs' disks, the artifact store and the cache store live in."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def graph_root() -> Iterator[Path]:
    """A fresh folder under $HARNESS_GRAPH_ROOT (default /tmp) for one module's graph; a job that died mid-way
    leaves its mount, unmounted here, then everything removed. Root only: each job loop-mounts its own disk."""
    if os.geteuid() != 0:
        pytest.fail("the CI graph tests loop-mount a 14 GB file system per job: run them as root")
    root = Path(os.environ.get("HARNESS_GRAPH_ROOT", "/tmp")) / f"harness-graph-{os.getpid()}"
    root.mkdir(parents=True)
    yield root
    for mount in root.iterdir():
        if mount.is_dir() and os.path.ismount(mount):
            subprocess.run(["umount", str(mount)], check=False)
    shutil.rmtree(root, ignore_errors=True)
