"""File locks the harness's caches share between runs: an exclusive `flock` held while an env, a build or an
overlay is made (`locked`, waiting at most a bound where one is given), and the closing of held use locks.
fcntl is imported where it is used: `check`, `abi-diff` and `audit-guards` import the provisioning modules and
run on any OS; envs and builds are made on POSIX only."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from torch_abi_harness.core.errors import InfrastructureError

log = logging.getLogger(__name__)


def close_all(held: dict[Path, IO[str]]) -> None:
    """Close every use lock in held (closing the file drops its flock) and forget them."""
    for handle in held.values():
        handle.close()
    held.clear()


@contextlib.contextmanager
def locked(lock_path: Path, wait: float | None = None, why: str = "another run is creating this") -> Iterator[None]:
    """An exclusive lock on lock_path, held while the block runs (waiting for another run's if need be: at
    most `wait` seconds when given, then InfrastructureError)."""
    import fcntl

    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            bound, level = ("", logging.INFO) if wait is None else (f" (at most {wait:g} s)", logging.WARNING)
            log.log(level, "waiting for %s%s: %s", lock_path, bound, why)
            started = time.monotonic()
            if not wait_exclusive(handle, wait):
                raise InfrastructureError(
                    f"{lock_path}: waited {wait:g} s and it is still held: {why}\n"
                    "  let the runs using it end (or stop them), then run again"
                ) from None
            log.log(level, "%s: ours after %.1f s", lock_path, time.monotonic() - started)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_exclusive(handle: IO[str], wait: float | None) -> bool:
    """flock(LOCK_EX) on handle; False (the lock not taken) once wait seconds have passed without it."""
    import fcntl

    if wait is None:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(0.2, left))
