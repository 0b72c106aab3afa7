"""Run one cell: the extension's pytest suite in a runtime, one process, a timeout, logs kept.

Backends share this request/execution vocabulary; ``VenvBackend`` runs in a
uv virtualenv on this host. Results cross the process boundary only as files
(junit XML and the probe JSON), never as parsed stdout.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Protocol

from harness import commands
from harness.build import BuildResult
from harness.envs import Env
from harness.plan import Cell, Runtime
from harness.verdict import Status

log = logging.getLogger(__name__)

_active_lock = threading.Lock()
_active_groups: set[int] = set()
_stopping = threading.Event()

PROBE_DIR = Path(__file__).parent / "cellprobe"
KILL_GRACE_SECONDS = 5.0


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
    generated.write_text("[pytest]\njunit_family = xunit2\n")
    return generated


class VenvBackend:
    name = "venv"

    def prepare(self, runtimes: dict[Runtime, Env]) -> None:
        pass  # the envs are the runtimes

    def stop_all(self) -> None:
        kill_active_cells()

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
        (out / "command.txt").write_text(commands.shell_line(argv, environ, out) + "\n")
        return dataclasses.replace(run_process(argv, environ, out, request.timeout), site=request.build.site)


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


def run_process(argv: list[str], environ: dict[str, str], out: Path, timeout: float) -> CellExecution:
    """Run argv in its own process group; on timeout kill the whole group. Nothing is left running."""
    stdout, stderr = out / "stdout.log", out / "stderr.log"
    log.debug("$ %s", commands.shell_line(argv, environ, out))
    launched_at, started = time.time(), time.monotonic()
    timed_out = False
    with open(stdout, "wb") as out_f, open(stderr, "wb") as err_f:
        proc = subprocess.Popen(
            argv, cwd=out, env=environ, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL, start_new_session=True
        )
        with _active_lock:
            _active_groups.add(proc.pid)
        if _stopping.is_set():  # started just as the run was interrupted
            _kill_group(proc.pid, signal.SIGKILL)
        try:
            try:
                returncode: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=KILL_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    _kill_group(proc.pid, signal.SIGKILL)
                    proc.wait()
                returncode = None
        except BaseException:  # interrupted: do not leave the cell behind
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            _kill_group(proc.pid, signal.SIGKILL)  # stragglers a test may have started
            with _active_lock:
                _active_groups.discard(proc.pid)
    return CellExecution.in_dir(out, returncode, timed_out, launched_at, time.monotonic() - started)


def kill_active_cells() -> None:
    """Kill every cell still running, and any that starts from now on (an interrupted run leaves nothing)."""
    _stopping.set()
    with _active_lock:
        groups = list(_active_groups)
    for pgid in groups:
        _kill_group(pgid, signal.SIGKILL)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
