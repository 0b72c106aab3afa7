"""The evidence that a cell's disk was full while it ran: free space right after it, and ENOSPC's words in what
it wrote. run/collect.py's `disk_full` rule reads it: a full disk is the machine's ERROR, never a break."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.execute.api import CellExecution

# Less free space than this, right after a failed cell, where it wrote or what it ran on: its failure proves
# nothing (a test that writes a few MB, a compiler's temp files, a Triton cache need that much).
LOW_DISK_BYTES = 16 * 2**20
# What a write that found its disk full says: strerror(ENOSPC) as Python, the C library and shells print it.
NO_SPACE = (b"No space left on device", b"[Errno 28]", b"ENOSPC")


def free_bytes(path: Path) -> int | None:
    """Free space on the file system holding path (statvfs), for an unprivileged writer; None if unknown."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def says_no_space(paths: Sequence[Path], chunk: int = 2**20) -> bool:
    """Whether any of these files (the cell's logs, its junit report) holds ENOSPC's words, read without
    following a link, a chunk at a time (a log may be 64 MB)."""
    overlap = max(map(len, NO_SPACE))
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                continue
            tail = b""
            while block := handle.read(chunk):
                if any(words in tail + block for words in NO_SPACE):
                    return True
                tail = block[-overlap:]
    return False


def disks_of(execution: CellExecution) -> tuple[Path, ...]:
    """Where a cell writes (its directory, which holds its logs) and what it ran on (its env, its build)."""
    request = execution.request
    if request is None:
        return (execution.stdout.parent,)
    env = request.runtime.env
    return (request.out_dir, *((env.path,) if env is not None else ()), *filter(None, (request.build.site,)))
