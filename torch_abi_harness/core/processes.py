"""Every process the harness starts for a run (uv, compilers, cells) in its own process group,
registered so that an interrupt stops all of them at once and nothing is left behind.

Stop state belongs to one run: `Pipeline` resets it when a run starts, so an interrupted run
does not poison the next one in the same process (the tests run several).

A harness killed outright (SIGKILL, the OOM killer) runs no handler: its groups are killed by a guardian, a
small process started with the first command, told each group as it is registered and forgotten, which kills
every group it still holds when its stdin reaches EOF, that is when the harness has died (or exited) and the
kernel closed the pipe's write end. PR_SET_PDEATHSIG on each child would not do: it reaches the child alone
(a fork clears it, so a build frontend's compiler lives on), and it fires when the *thread* that forked exits
(a pool worker's end would kill a forkserver other threads still use). The pipe is not inherited by any child
(Python's pipes are close-on-exec), so only the harness's own end holds it open.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from torch_abi_harness.core.errors import HarnessError

log = logging.getLogger(__name__)

KILL_GRACE_SECONDS = 5.0


class Interrupted(HarnessError):
    """The run is stopping: no new process is started."""


# The guardian: "+PGID" registers a group, "-PGID" forgets it; at EOF every group it holds gets SIGKILL.
# In its own session, so a terminal's Ctrl-C, meant for the harness, does not reach it.
GUARDIAN = r"""
import os, signal, sys
groups = set()
for line in sys.stdin:
    (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class ProcessRegistry:
    """Process groups of the running commands; stop_all() ends them and refuses new ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self.stopping = threading.Event()
        self._guardian: subprocess.Popen[str] | None = None

    def _guard(self, message: str) -> None:
        """Tell the guardian (started on first use; called under the lock). A guardian that cannot be told is
        logged once and no longer asked: the run goes on, only a SIGKILL of the harness would leave groups."""
        if self._guardian is None:
            self._guardian = subprocess.Popen(
                [sys.executable, "-c", GUARDIAN],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # holding the harness's own output open would delay its readers' EOF
                cwd="/",
                text=True,
                start_new_session=True,
            )
            atexit.register(self._retire_guardian)
        stdin = self._guardian.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(message + "\n")
            stdin.flush()
        except (OSError, ValueError) as exc:
            log.warning("the guardian of this run's processes is gone (%s): a killed harness may leave them", exc)
            stdin.close()

    def reset(self) -> None:
        """A new run starts: forget an earlier run's stop."""
        self.stopping.clear()

    def _retire_guardian(self) -> None:
        """At exit (after the interpreter joined its threads): EOF to the guardian, which kills any group still
        registered (none after a clean run) and ends; waited for, so nothing of it outlives the harness."""
        guardian = self._guardian
        if guardian is None:
            return
        with contextlib.suppress(OSError):
            if guardian.stdin is not None:
                guardian.stdin.close()
        try:
            guardian.wait(timeout=5)
        except subprocess.TimeoutExpired:
            guardian.kill()
            guardian.wait()

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start argv as the leader of a new session (so a terminal's Ctrl-C reaches the harness,
        which stops it, not the command) and register its group."""
        with self._lock:
            if self.stopping.is_set():
                raise Interrupted(f"not started, the run is stopping: {argv[0]}")
            proc = subprocess.Popen(list(argv), start_new_session=True, **kwargs)
            self._groups.add(proc.pid)
            self._guard(f"+{proc.pid}")
        return proc

    def release(self, proc: subprocess.Popen[Any]) -> None:
        """The command ended: kill what it left in its group, and forget the group."""
        kill_group(proc.pid, signal.SIGKILL)
        with self._lock:
            self._groups.discard(proc.pid)
            self._guard(f"-{proc.pid}")

    def stop_all(self, grace: float = 1.0) -> None:
        """SIGTERM every group, SIGKILL what is left after grace seconds; refuse new commands."""
        with self._lock:
            self.stopping.set()
            groups = list(self._groups)
        if not groups:
            return
        log.info("stopping %d running command(s)", len(groups))
        terminate_groups(groups, grace)

    def kill_now(self) -> None:
        """SIGKILL every registered group at once, from a signal handler: takes no lock, since the code the signal
        interrupted may hold it (a copy of the set is taken whole under the GIL)."""
        for pgid in list(self._groups):
            kill_group(pgid, signal.SIGKILL)


def terminate_groups(groups: Sequence[int], grace: float) -> None:
    """SIGTERM each process group, SIGKILL what is left after grace seconds (at once when grace is 0)."""
    if grace > 0:
        for pgid in groups:
            kill_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(group_alive(g) for g in groups):
            time.sleep(0.05)
    for pgid in groups:
        kill_group(pgid, signal.SIGKILL)


def kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


REGISTRY = ProcessRegistry()
