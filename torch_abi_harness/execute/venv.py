"""The venv backend: a cell's pytest in the runtime's uv virtualenv on this host, in the harness sandbox.

Results cross the process boundary only as files (junit XML and the probe JSON), never as parsed
stdout. The pieces every backend shares (the cell's pytest command line, its environment, its
pytest configuration) live here too.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from torch_abi_harness.config import size_words
from torch_abi_harness.core import commands, processes
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.execute import cgroups, sandbox
from torch_abi_harness.execute.api import (
    PRELOAD_TRACE,
    CappedLog,
    CellRequest,
    CellView,
    Executor,
    Launched,
    RuntimeHandle,
    supervise,
)
from torch_abi_harness.plan import Runtime
from torch_abi_harness.provision.envs import Env

log = logging.getLogger(__name__)

PROBE_DIR = Path(__file__).parent / "cellprobe"


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


def cell_config(request: CellRequest, writable: Path) -> Path:
    """The extension's own pytest.ini when it has one; never the harness's configuration."""
    own = request.cell.build.extension.tests / "pytest.ini"
    if own.is_file():
        return own
    generated = writable / "pytest.ini"
    write_atomic(generated, "[pytest]\njunit_family = xunit2\n")
    return generated


def cell_environ(
    request: CellRequest,
    *,
    pythonpath: Sequence[Path],
    probe_file: Path,
    tmp: Path,
    site_dirs: Sequence[Path] = (),
    preload: Sequence[Path] = (),
    **extra: str,
) -> dict[str, str]:
    """The environment of a cell's pytest process, as paths are seen where it runs (host or container).

    Besides the probe's own settings it tells the tests what they run as, so that a suite never
    parses the cell id: HARNESS_TARGET is the API level the binary was built for (what its compiler was
    given, which a recipe may set itself; else the matrix's target), HARNESS_BUILD_TORCH the torch it was built against.
    HARNESS_SITE_DIRS names the suite's test dependencies: the probe appends them to sys.path (after the
    env's site-packages, where PYTHONPATH would put them first) before pytest looks for plugins.
    A cell that preloads libraries (LD_PRELOAD) is told where they may say what they did: HARNESS_PRELOAD_TRACE,
    a file in its own directory.
    """
    build = request.cell.build
    return {
        **extra,
        "TMPDIR": str(tmp),
        **own_caches(tmp),
        **interpreter_environ(request.threads, pythonpath),
        **({"HARNESS_SITE_DIRS": os.pathsep.join(map(str, site_dirs))} if site_dirs else {}),
        **(
            {"LD_PRELOAD": " ".join(map(str, preload)), "HARNESS_PRELOAD_TRACE": str(probe_file.parent / PRELOAD_TRACE)}
            if preload
            else {}
        ),
        "HARNESS_PROBE_FILE": str(probe_file),
        "HARNESS_EXT_MODULE": build.extension.module,
        "HARNESS_DEVICE": request.cell.runtime.device,
        "HARNESS_CELL_ID": request.cell.id,
        "HARNESS_BUILD_ID": build.id,
        "HARNESS_BUILD_TORCH": str(build.torch),
        "HARNESS_TARGET": str(request.build.built_for or build.effective_target),
        "HARNESS_RUNTIME_ID": request.cell.runtime.id,
        "HARNESS_RUNTIME_TORCH": request.runtime.torch_version,
    }


def own_caches(tmp: Path) -> dict[str, str]:
    """Every cache a suite, torch or its compilers write by default, inside the cell's own temporary directory:
    no cell can block another with a lock it leaves (torch_extensions' JIT builds) or poison what another
    reads (Triton's and inductor's kernels). HOME too: whatever else writes under ~ stays the cell's."""
    return {
        "HOME": str(tmp),
        "XDG_CACHE_HOME": str(tmp / ".cache"),
        "TORCH_EXTENSIONS_DIR": str(tmp / "torch_extensions"),
        "TRITON_CACHE_DIR": str(tmp / ".triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / "torchinductor"),
    }


def host_environ(home: Path) -> dict[str, str]:
    """What a venv cell takes from the harness's own environment."""
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(home)),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    for passthrough in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"):
        if passthrough in os.environ:
            environ[passthrough] = os.environ[passthrough]
    return environ


def interpreter_environ(threads: int, pythonpath: Sequence[Path]) -> dict[str, str]:
    """The settings a venv cell's interpreter reads at start-up (a forkserver starts with the same)."""
    return {
        "PYTHONPATH": os.pathsep.join(map(str, pythonpath)),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONFAULTHANDLER": "1",
        "OMP_NUM_THREADS": str(threads),
    }


def cell_reads(request: CellRequest, view: CellView) -> tuple[Path, ...]:
    """What a venv cell must read, from what builds its argv and environment: its interpreter (the env, the base
    installation pyvenv.cfg names), its tests and pytest configuration (argv), the build's site dir and the probe
    (PYTHONPATH), the suite's test dependencies, the libraries it preloads."""
    pythonpath = [Path(p) for p in view.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return tuple([*sandbox.readable_in(view.argv), *pythonpath, *request.site_dirs, *request.preload, request.out_dir])


class VenvBackend(Executor):
    name = Backend.VENV

    def __init__(self, cache_dir: Path | None = None) -> None:
        super().__init__()
        self.cache_dir = cache_dir.resolve() if cache_dir is not None else None  # the harness's: what it wrote
        self.sandbox = sandbox.detect()
        self.groups = cgroups.detect() if self.sandbox.isolated else cgroups.Groups(None, "no sandbox")
        self._opened: set[Path] = set()  # builds' sites made readable by the cells' uid
        if not self.sandbox.isolated:
            log.warning(
                "cells run without the sandbox (%s): a cell can write wherever this user can (the envs and builds "
                "others use are verified after a failing cell) and a process it detaches can outlive it",
                self.sandbox.reason,
            )
        for off in self.guarantees_off() if self.sandbox.isolated else ():
            log.warning("cells run without %s", off)

    def guarantees_off(self) -> list[str]:
        off = self.sandbox.guarantees_off
        if self.sandbox.isolated and self.groups.hierarchy is None:
            off.append(f"memory and process bounds ({self.groups.reason})")
        return off

    def prepare(self, runtimes: Mapping[Runtime, Env | None]) -> dict[Runtime, RuntimeHandle]:
        handles = {}
        for runtime, env in runtimes.items():
            assert env is not None, "the venv backend runs every runtime from its env"
            handles[runtime] = RuntimeHandle.of_env(runtime, env)
        return handles

    def end_run(self) -> None:
        self.groups.close()

    def view(self, request: CellRequest) -> CellView:
        out = request.out_dir
        (out / "tmp").mkdir(parents=True, exist_ok=True)
        environ = cell_environ(
            request,
            pythonpath=[request.site, PROBE_DIR],
            probe_file=out / "probe.json",
            tmp=out / "tmp",
            site_dirs=request.site_dirs,
            preload=request.preload,
            **host_environ(out),
        )
        tests = request.cell.build.extension.tests
        argv = pytest_argv(request.runtime.python, tests, out, cell_config(request, out))
        command = commands.shell_line(argv, environ, out) + "\n" + self.where(request)
        return CellView(tuple(argv), environ, request.site, out / "junit.xml", out / "probe.json", command)

    def where(self, request: CellRequest) -> str:
        """command.txt's note on the cell's isolation, point by point."""
        if not self.sandbox.isolated:
            return f"# without the sandbox: {self.sandbox.reason}"
        uid = sandbox.cell_uid()
        limits, hierarchy = request.limits, self.groups.hierarchy
        bounds = (
            f"memory {size_words(limits.memory)}, {limits.pids} processes (cgroup v{hierarchy.version})"
            if hierarchy is not None
            else f"none ({self.groups.reason})"
        )
        return (
            f"# in the harness sandbox: every mount read-only; writable only {request.out_dir} and a private "
            f"{sandbox.SHM}"
            + "".join(f"; hidden (the host's CUDA toolkit) {p}" for p in sandbox.host_cuda_dirs())
            + f"\n# own PID namespace and /proc, network (loopback only), IPC and UTS; a minimal /dev; no core dumps;"
            f" uid {uid if uid is not None else 'of the harness (no root here)'}; no capabilities; bounds: {bounds}"
        )

    def world(self, request: CellRequest, view: CellView) -> tuple[sandbox.World, cgroups.CellGroup | None]:
        """The cell's world and its cgroup (made now, with its limits): what both executors give a cell."""
        group = None
        if self.sandbox.isolated:
            try:
                group = self.groups.make(request.cell.id, request.limits)
            except OSError as exc:  # the hierarchy went away under the run: this cell runs unbounded, said
                log.warning("%s: runs without memory and process bounds: %s", request.cell.id, exc)
        world = sandbox.World(
            (request.out_dir,), cell_reads(request, view), group.procs if group else (), request.out_dir
        )
        sandbox.hand_over([request.out_dir], world.uid)
        if world.uid is not None:
            self._open_cached(request, view)
        return world, group

    def _open_cached(self, request: CellRequest, view: CellView) -> None:
        """What the cell reads from the harness's cache (the build's site, the tests and interposers the harness
        generated: a header probe's, a mutant's) readable by the cell's uid, once a run: an earlier harness wrote
        such files 0600. Never the user's own files, never an env (read by all already, and large)."""
        cache = self.cache_dir
        candidates = [request.site, *(Path(a) for a in view.argv[1:] if a.startswith("/")), *request.preload]
        for path in candidates:
            if path in self._opened or not path.exists():
                continue
            real = path.resolve()
            if path == request.site or (cache is not None and real.is_relative_to(cache)):
                sandbox.readable_by_all(real)
            self._opened.add(path)

    def start(self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog) -> Launched:
        world, group = self.world(request, view)
        return Process.start(view.argv, view.environ, (stdout, stderr), self.sandbox, world, group)


class Process:
    """A command in its own session and process group (in the sandbox when given one), its output
    pumped into capped logs. Killing it kills its whole group."""

    kind = ExecutorKind.FRESH

    def __init__(
        self, proc: subprocess.Popen[bytes], pumps: list[LogPump], box: sandbox.Sandbox, group: cgroups.CellGroup | None
    ) -> None:
        self.proc = proc
        self.pumps = pumps
        self.box = box
        self.group = group
        self._bound: str | None = None

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        environ: Mapping[str, str],
        logs: tuple[CappedLog, CappedLog],
        box: sandbox.Sandbox,
        world: sandbox.World,
        group: cgroups.CellGroup | None = None,
    ) -> Process:
        """Start argv in world (its working directory the world's, writable); group: the cell's cgroup, removed
        when the process is closed."""
        cwd = world.cwd or Path("/")
        log.debug("$ %s", commands.shell_line(list(argv), dict(environ), cwd))
        try:
            proc = processes.REGISTRY.popen(
                box.wrap(argv, world.writable, world=world),
                cwd=cwd,
                env=dict(environ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        assert proc.stdout is not None and proc.stderr is not None
        return cls(proc, [LogPump(proc.stdout, logs[0]), LogPump(proc.stderr, logs[1])], box, group)

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.box.returncode(self.proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self, grace: float) -> None:
        if grace > 0:
            processes.kill_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                pass
        processes.kill_group(self.proc.pid, signal.SIGKILL)

    def close(self, stdout: CappedLog, stderr: CappedLog) -> None:
        processes.REGISTRY.release(self.proc)  # kills stragglers a test may have started in its group
        self.proc.wait()
        for pump in self.pumps:
            pump.finish()
        if self.group is not None:
            self._bound = self.group.bound()
            self.group.remove()

    def bound(self) -> str | None:
        return self._bound


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    returncode: int | None  # negative: killed by that signal; None: killed at the timeout
    timed_out: bool
    seconds: float
    stdout: Path
    stderr: Path


def run_process(
    argv: list[str],
    environ: dict[str, str],
    out: Path,
    timeout: float,
    box: sandbox.Sandbox | None = None,
) -> ProcessResult:
    """Run argv (in the sandbox, when given one) in its own process group, the way cells run, outside
    any run: stdout.log and stderr.log in out, capped; on timeout the whole group is killed."""
    box = box or sandbox.Sandbox("none", "not asked for")
    stdout, stderr = CappedLog(out / "stdout.log"), CappedLog(out / "stderr.log")
    started = time.monotonic()
    try:
        world = sandbox.World((out,), tuple(sandbox.readable_in(argv)), cwd=out)
        process = Process.start(argv, environ, (stdout, stderr), box, world)
        try:
            code, timed_out = supervise(process, timeout)
        finally:
            process.close(stdout, stderr)
    finally:
        stdout.close()
        stderr.close()
    return ProcessResult(code, timed_out, time.monotonic() - started, stdout.path, stderr.path)


class LogPump:
    """Copies one of a process's output pipes into its capped log, in a thread (a cell never blocks on its
    output); once the process has ended, a writer it detached that still holds the pipe is not waited for."""

    def __init__(self, pipe: IO[bytes], sink: CappedLog) -> None:
        self.pipe = pipe
        self.sink = sink
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, name=f"log {sink.path.name}", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        fd = self.pipe.fileno()
        deadline: float | None = None
        while True:
            if self.stop.is_set() and deadline is None:
                deadline = time.monotonic() + 2.0
            ready, _, _ = select.select([fd], [], [], 0.2)
            if deadline is not None and (not ready or time.monotonic() > deadline):
                break  # the process is over; only a writer it detached still holds the pipe
            if not ready:
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                break
            self.sink.write(data)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        self.pipe.close()
