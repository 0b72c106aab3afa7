"""One seam for running a cell, whatever it runs in: a request, an execution record, and a template.

A backend supplies only what differs: the runtimes it makes ready (`prepare`), where things sit
as the cell sees them (`view`) and how one cell's process starts, is waited for and is killed
(`start`, and the `Launched` it returns). `Executor.execute`, the template, owns everything else,
the same for every backend: the cell's capped log files and command.txt, its timing, the
registry of running cells and the run's stop state (per run: `begin_run` clears it).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.config import Limits
from torch_abi_harness.core import processes
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import Cell, Runtime
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.static.symbols import library_exports

log = logging.getLogger(__name__)

PRELOAD_TRACE = "preload-trace.txt"  # in a cell's directory: what a library it preloads says it did
LOG_LIMIT = 64 * 2**20  # bytes kept per stream; the rest is counted and dropped
KILL_GRACE_SECONDS = 5.0  # after a timeout: SIGTERM, this long, then SIGKILL


@dataclasses.dataclass(frozen=True)
class RuntimeHandle:
    """A runtime a backend made ready: what its cells run with, and what prediction reads."""

    runtime: Runtime
    torch_version: str  # as the runtime reports it (2.10.0+cpu)
    variant: str
    python: str  # the interpreter, as cells see it
    torch_lib: Path  # a host directory holding torch's shared libraries (read for prediction)
    exports_cache: Path  # where their exported symbols are cached
    env: Env | None = None  # the host env that holds the runtime; None when it lives in an image

    def exports(self) -> frozenset[str]:
        """Every symbol torch's libraries export (read once, then from the cache)."""
        return library_exports(self.torch_lib, self.exports_cache)

    @classmethod
    def of_env(cls, runtime: Runtime, env: Env, python: str | None = None) -> RuntimeHandle:
        """A runtime held by a host env (run from it, or mounted into a container that runs `python`)."""
        return cls(
            runtime,
            env.torch_version,
            env.variant,
            python or str(env.python),
            env.torch_lib,
            env.exports_cache,
            env,
        )


@dataclasses.dataclass(frozen=True)
class CellRequest:
    cell: Cell
    runtime: RuntimeHandle
    build: BuildResult
    out_dir: Path
    timeout: float
    threads: int = 1
    site_dirs: tuple[Path, ...] = ()  # the suite's test dependencies (host paths): on its path after the env's own
    # Shared libraries the cell's process preloads (LD_PRELOAD, host paths), a shim mutant's interposer: such a
    # cell runs in a fresh interpreter (a forkserver has loaded torch before any preload could take effect).
    preload: tuple[Path, ...] = ()
    limits: Limits = dataclasses.field(
        default_factory=Limits
    )  # the cell's memory and process bounds (its cgroup; a container's are docker:'s)

    @property
    def site(self) -> Path:
        assert self.build.site is not None, "cells run only for builds that produced a wheel"
        return self.build.site


@dataclasses.dataclass(frozen=True)
class CellView:
    """The cell's process as the backend will start it, and where the files it writes land on the host."""

    argv: tuple[str, ...]
    environ: Mapping[str, str]
    site: Path  # the built wheel, unpacked, as the cell sees it: the tests must import the extension from here
    junit: Path  # host paths of the files the cell writes
    probe: Path
    command: str  # command.txt: how to run the cell again by hand, and in what isolation
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # a container's, as given to the engine


@dataclasses.dataclass(frozen=True)
class CellExecution:
    """What running a cell left: how it ended, how long it took, and where its files are."""

    returncode: int | None  # negative: killed by that signal; None: it did not end by itself
    timed_out: bool
    launched_at: float  # time.time() at launch, to split interpreter start-up from the rest
    seconds: float
    stdout: Path
    stderr: Path
    view: CellView
    # Set when the backend decided the cell without a result from pytest: the docker engine
    # failed it (ERROR), or cannot give it the GPU it asks for (SKIPPED).
    decided: tuple[Status, str] | None = None
    executor: ExecutorKind | None = None  # the Launched's kind; None when the cell never started
    request: CellRequest | None = None  # what was run (None only where a record is made without an executor)
    bound: str | None = None  # a bound of the harness's that ended it (memory, processes), in words

    @property
    def junit(self) -> Path:
        return self.view.junit

    @property
    def probe(self) -> Path:
        return self.view.probe


class CellDecided(Exception):
    """Raised by a backend that ends a cell without a pytest result (the reason goes to stderr.log)."""

    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class CappedLog:
    """A cell's stdout or stderr file: keeps the first `limit` bytes, counts the rest, and says so at the end.

    A full disk is logged once and the rest dropped: the cell must never block on, or notice, its log.
    """

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path = path
        self.limit = LOG_LIMIT if limit is None else limit
        self.kept = self.dropped = 0
        self._sink = open(path, "wb")  # closed by close()

    def write(self, data: bytes) -> None:
        chunk = data[: max(0, self.limit - self.kept)]
        if chunk:
            try:
                self._sink.write(chunk)
            except OSError as exc:
                log.warning("%s: %s; the rest of this log is dropped", self.path, exc)
                self.kept, chunk = self.limit, b""
            else:
                self.kept += len(chunk)
        self.dropped += len(data) - len(chunk)

    def close(self) -> None:
        try:
            if self.dropped:
                note = f"\n[harness: log cut at {self.limit} bytes; {self.dropped} more bytes dropped]\n"
                self._sink.write(note.encode())
            self._sink.close()
        except OSError:
            pass


class Launched(Protocol):
    """One cell's process (or container), started."""

    kind: ExecutorKind  # how the cell runs, for its record: fresh (a new interpreter), forkserver, container

    def wait(self, timeout: float | None) -> int | None:
        """Its exit code as subprocess gives it (a signal death is -N); None if still running after timeout."""

    def kill(self, grace: float) -> None:
        """End the whole cell, every process it started: SIGTERM, then SIGKILL after grace seconds."""

    def close(self, stdout: CappedLog, stderr: CappedLog) -> None:
        """It has ended: finish its logs and release what it held. Never raises for the cell's own outcome."""

    def bound(self) -> str | None:
        """After close: the bound of the harness's the cell reached (its memory, its process count), in words, as
        its cgroup's events or its engine say; None where it reached none (or none was kept)."""


class Executor(abc.ABC):
    """The template every backend runs cells through."""

    name: ClassVar[Backend]

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, Launched] = {}
        self._stopping = threading.Event()

    # ---- what a backend supplies -------------------------------------------------------

    def needs_env(self, runtime: Runtime) -> bool:
        """Whether the runtime is held by a host env the harness makes (else the backend brings it)."""
        return True

    @abc.abstractmethod
    def prepare(self, runtimes: Mapping[Runtime, Env | None]) -> dict[Runtime, RuntimeHandle]:
        """Make every runtime ready before the first cell starts; envs are None where needs_env is False."""

    @abc.abstractmethod
    def view(self, request: CellRequest) -> CellView:
        """Where things sit as the cell sees them; may make the directories the cell writes into."""

    @abc.abstractmethod
    def start(self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog) -> Launched:
        """Start the cell (raise CellDecided to end it without running it)."""

    # ---- the template --------------------------------------------------------------------

    def begin_run(self, cells: Sequence[Cell] = ()) -> None:
        """A run of these cells starts: forget an earlier run's stop."""
        self._stopping.clear()

    def guarantees_off(self) -> list[str]:
        """What this host cannot give the backend's cells, in words, for the run's first line (empty: all)."""
        return []

    def warmups(self) -> dict[str, float]:
        """CPU seconds a runtime's one-off start (importing torch once, for the cells it then forks) took, by runtime
        id: what the run's floor counts as that runtime's `import torch`. Empty where cells start fresh."""
        return {}

    def end_run(self) -> None:  # noqa: B027  (most backends hold nothing across cells)
        """Every cell of the run has ended: release what the backend held for them."""

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop_all(self) -> None:
        """The run was interrupted: kill every running cell and refuse new ones."""
        self._stopping.set()
        with self._lock:
            running = list(self._active.values())
        for launched in running:
            launched.kill(0)

    def execute(self, request: CellRequest) -> CellExecution:
        """Run one cell to its end (or its timeout, or the run's stop) and keep what it left."""
        out = request.out_dir
        view = self.view(request)
        write_atomic(out / "command.txt", view.command + "\n")
        stdout, stderr = CappedLog(out / "stdout.log"), CappedLog(out / "stderr.log")
        launched_at, started = time.time(), time.monotonic()
        decided: tuple[Status, str] | None = None
        returncode, timed_out, executor, bound = None, False, None, None
        try:
            returncode, timed_out, executor, bound = self._run(request, view, stdout, stderr)
        except CellDecided as exc:
            stderr.write(exc.reason.encode() + b"\n")
            decided = (exc.status, exc.reason)
        finally:
            stdout.close()
            stderr.close()
        seconds = time.monotonic() - started
        return CellExecution(
            returncode,
            timed_out,
            launched_at,
            seconds,
            stdout.path,
            stderr.path,
            view,
            decided,
            executor,
            request,
            bound,
        )

    def _run(
        self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog
    ) -> tuple[int | None, bool, ExecutorKind, str | None]:
        if self.stopping:
            raise processes.Interrupted(f"not started, the run is stopping: {request.cell.id}")
        launched = self.start(request, view, stdout, stderr)
        with self._lock:
            self._active[request.cell.id] = launched
        try:
            if self.stopping:  # stop_all ran while it started: it missed this one
                launched.kill(0)
            code, timed_out = supervise(launched, request.timeout)
        finally:
            with self._lock:
                self._active.pop(request.cell.id, None)
            launched.close(stdout, stderr)
        return code, timed_out, launched.kind, launched.bound()


def supervise(launched: Launched, timeout: float) -> tuple[int | None, bool]:
    """Wait for a started process up to timeout, then kill it; whatever happens, it is not left running.
    Returns (exit code or None, whether it timed out)."""
    try:
        code = launched.wait(timeout)
        if code is None:
            launched.kill(KILL_GRACE_SECONDS)
            launched.wait(None)
            return None, True
        return code, False
    except BaseException:
        launched.kill(0)
        raise
