"""Run one cell: the extension's pytest suite in a runtime, one process, a timeout, logs kept.

Backends share this request/execution vocabulary; ``VenvBackend`` runs in a
uv virtualenv on this host. Results cross the process boundary only as files
(junit XML and the probe JSON), never as parsed stdout.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Protocol

from harness import commands, processes, sandbox
from harness.build import BuildResult
from harness.envs import Env
from harness.files import write_atomic
from harness.plan import Cell, Runtime
from harness.verdict import Status

log = logging.getLogger(__name__)

PROBE_DIR = Path(__file__).parent / "cellprobe"
KILL_GRACE_SECONDS = 5.0
LOG_LIMIT = 64 * 2**20  # per stream, as the docker backend's log driver keeps


@dataclasses.dataclass(frozen=True)
class CellRequest:
    cell: Cell
    env: Env
    build: BuildResult
    out_dir: Path
    timeout: float
    threads: int = 1


@dataclasses.dataclass(frozen=True)
class CellExecution:
    returncode: int | None  # negative: killed by that signal
    timed_out: bool
    launched_at: float  # time.time() at launch, to split interpreter start from the rest
    seconds: float
    stdout: Path
    stderr: Path
    junit: Path
    probe: Path
    site: Path | None = None  # the unpacked wheel as the runtime sees it (a container sees its mount point)
    # Set when the backend decided the cell without a result from pytest: the docker engine
    # failed it (ERROR), or cannot give it the GPU it asks for (SKIPPED).
    decided: tuple[Status, str] | None = None

    @classmethod
    def in_dir(
        cls, out: Path, returncode: int | None, timed_out: bool, launched_at: float, seconds: float
    ) -> CellExecution:
        """An execution whose files have the standard names in the cell's output directory."""
        return cls(
            returncode,
            timed_out,
            launched_at,
            seconds,
            out / "stdout.log",
            out / "stderr.log",
            out / "junit.xml",
            out / "probe.json",
        )


class Backend(Protocol):
    name: str

    def prepare(self, runtimes: dict[Runtime, Env]) -> None:
        """Make ready whatever cells of these runtimes need, before the first one starts."""

    def run_cell(self, request: CellRequest) -> CellExecution: ...

    def stop_all(self) -> None:
        """Kill every running cell and refuse new ones: the run was interrupted."""


def pytest_argv(python: Path | str, tests: Path, out_dir: Path, config: Path) -> list[str]:
    return [
        str(python),
        "-m",
        "pytest",
        str(tests),
        "-c",
        str(config),
        "--rootdir",
        str(tests),
        "-p",
        "harness_cellprobe",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        f"--junitxml={out_dir / 'junit.xml'}",
        "-q",
        "-rfEs",
    ]


def cell_config(request: CellRequest) -> Path:
    """The extension's own pytest.ini when it has one; never the harness's configuration."""
    own = request.cell.build.extension.tests / "pytest.ini"
    if own.is_file():
        return own
    generated = request.out_dir / "pytest.ini"
    write_atomic(generated, "[pytest]\njunit_family = xunit2\n")
    return generated


class VenvBackend:
    name = "venv"

    def prepare(self, runtimes: dict[Runtime, Env]) -> None:
        pass  # the envs are the runtimes

    def __init__(self) -> None:
        self.sandbox = sandbox.detect()
        if not self.sandbox.isolated:
            log.warning(
                "cells run without the sandbox (%s): a cell can write into the envs and builds others use "
                "(each is verified after a failing cell) and a process it detaches can outlive it",
                self.sandbox.reason,
            )

    def stop_all(self) -> None:
        processes.REGISTRY.stop_all(grace=0)

    def run_cell(self, request: CellRequest) -> CellExecution:
        out = request.out_dir
        (out / "tmp").mkdir(parents=True, exist_ok=True)
        assert request.build.site is not None, "cells run only for builds that produced a wheel"
        environ = cell_environ(
            request,
            pythonpath=[request.build.site, PROBE_DIR],
            probe_file=out / "probe.json",
            tmp=out / "tmp",
            PATH=os.environ.get("PATH", "/usr/bin:/bin"),
            HOME=os.environ.get("HOME", str(out)),
            LANG=os.environ.get("LANG", "C.UTF-8"),
        )
        for passthrough in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
            if passthrough in os.environ:
                environ[passthrough] = os.environ[passthrough]
        argv = pytest_argv(request.env.python, request.cell.build.extension.tests, out, cell_config(request))
        extension = request.cell.build.extension
        protected = [
            request.env.path.parents[1],  # the harness cache: every env and build
            *([uv_cache] if (uv_cache := sandbox.uv_cache_dir()) else []),  # what the envs' files are hardlinks of
            PROBE_DIR,
            extension.root,
            extension.tests,
            out.parents[1],  # the run's reports: other cells' files
        ]
        where = (
            f"# in the harness sandbox: read-only {', '.join(map(str, protected))}; writable {out}\n"
            if self.sandbox.isolated
            else f"# without the sandbox: {self.sandbox.reason}\n"
        )
        write_atomic(out / "command.txt", commands.shell_line(argv, environ, out) + "\n" + where)
        execution = run_process(argv, environ, out, request.timeout, self.sandbox, protected)
        return dataclasses.replace(execution, site=request.build.site)


def cell_environ(
    request: CellRequest, *, pythonpath: list[Path], probe_file: Path, tmp: Path, **extra: str
) -> dict[str, str]:
    """The environment of a cell's pytest process, as paths are seen where it runs (host or container)."""
    return {
        **extra,
        "TMPDIR": str(tmp),
        "PYTHONPATH": os.pathsep.join(map(str, pythonpath)),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONFAULTHANDLER": "1",
        "OMP_NUM_THREADS": str(request.threads),
        "HARNESS_PROBE_FILE": str(probe_file),
        "HARNESS_EXT_MODULE": request.cell.build.extension.module,
        "HARNESS_DEVICE": request.cell.runtime.device,
        "HARNESS_CELL_ID": request.cell.id,
    }


def run_process(
    argv: list[str],
    environ: dict[str, str],
    out: Path,
    timeout: float,
    box: sandbox.Sandbox | None = None,
    protected: Sequence[Path] = (),
) -> CellExecution:
    """Run argv (in the sandbox, when given one) in its own process group; on timeout kill the whole
    group. stdout and stderr are kept up to LOG_LIMIT each. Nothing is left running."""
    box = box or sandbox.Sandbox("none", "not asked for")
    stdout, stderr = out / "stdout.log", out / "stderr.log"
    log.debug("$ %s", commands.shell_line(argv, environ, out))
    launched_at, started = time.time(), time.monotonic()
    timed_out = False
    proc = processes.REGISTRY.popen(
        box.wrap(argv, protected, [out]),
        cwd=out,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [LogPump(proc.stdout, stdout, LOG_LIMIT), LogPump(proc.stderr, stderr, LOG_LIMIT)]
    try:
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            processes.kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                processes.kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
    except BaseException:  # interrupted: do not leave the cell behind
        processes.kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        processes.REGISTRY.release(proc)  # kills stragglers a test may have started in its group
        for pump in pumps:
            pump.finish()
    returncode = None if code is None else box.returncode(code)
    return CellExecution.in_dir(out, returncode, timed_out, launched_at, time.monotonic() - started)


class LogPump:
    """Copies one of a cell's output pipes into its log file, keeping at most LOG_LIMIT bytes and
    then only draining (a cell never blocks on, or fills the disk through, its output)."""

    def __init__(self, pipe: IO[bytes], path: Path, limit: int = LOG_LIMIT) -> None:
        self.pipe = pipe
        self.path = path
        self.limit = limit
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, name=f"log {path.name}", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        fd = self.pipe.fileno()
        kept = dropped = 0
        deadline: float | None = None
        with open(self.path, "wb") as sink:
            while True:
                if self.stop.is_set() and deadline is None:
                    deadline = time.monotonic() + 2.0
                ready, _, _ = select.select([fd], [], [], 0.2)
                if deadline is not None and (not ready or time.monotonic() > deadline):
                    break  # the cell is over; only a writer it detached still holds the pipe
                if not ready:
                    continue
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                room = self.limit - kept
                if room > 0:
                    chunk = data[:room]
                    try:
                        sink.write(chunk)
                    except OSError as exc:  # a full disk: keep draining, the cell must not notice
                        log.warning("%s: %s; the rest of this log is dropped", self.path, exc)
                        kept = self.limit
                    else:
                        kept += len(chunk)
                dropped += len(data) - max(0, min(room, len(data)))
            if dropped:
                try:
                    sink.write(f"\n[harness: log cut at {self.limit} bytes; {dropped} more bytes dropped]\n".encode())
                except OSError:
                    pass

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        self.pipe.close()
