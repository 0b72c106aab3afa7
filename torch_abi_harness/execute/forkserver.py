"""The venv backend's forkserver executor: one long-lived process per runtime env that imported
torch, pytest and the cell probe once (and `settings.preload`, where the run gives the runtime more than one
cell), forking one child per cell.

Each forked cell gets what a fresh cell gets: its own session and process group, its own stdout and stderr (pipes
pumped into the same capped logs), its own working directory, the build's site dir first on `sys.path`, the cell
environment applied before anything of the extension is imported, and the same world (`harness_cellworld`: mount,
PID, network, IPC and UTS namespaces made by the child itself, its own /proc, the whole filesystem read-only but
its own directory and a private /dev/shm, a minimal /dev, its cgroup, uid nobody, no core dumps, capabilities
dropped). The harness holds the host pid of the forked child, PID 1 of the cell's PID namespace (it leads the
cell's process group; pytest below it stays in that group): it times the cell through a pidfd on it and kills the
group, and its death ends the whole PID namespace. The server never imports an extension. What it cannot give, it
does not pretend to: a `device: cuda` runtime keeps fresh processes (CUDA must not be initialised before a fork),
and a runtime whose server does not start runs its cells fresh, said once in the log. A server that dies under a
running cell makes that cell ERROR. The server freezes its heap before it forks (`gc.freeze`): a cell's
collections walk only what the cell made. The next runtime's server starts while this one's cells run.

Every wait on a server is bounded. A server reports a cell's end within `ANSWER_SECONDS` of the cell's process
ending (seen through a pidfd, not through the server) or of the harness killing it after its timeout; one that
does not (stopped, wedged) is unresponsive: it is killed, the cell is ERROR "forkserver unresponsive" (the harness
failed, not the extension), and the runtime's later cells are forked from a new server.

The server itself runs in the sandbox with every mount read-only and nothing writable but an empty /dev/shm of its
own, its TMPDIR (the host's CUDA toolkit hidden), keeping the capabilities it needs to sandbox each child: a
child's namespace is a copy of that read-only world, so each cell only opens its own holes (its directory
writable, an empty /dev/shm), a few mount calls instead of one per mount of the host. The server alone may write
the harness's cgroup directories (a hole only its namespace has), so that each cell joins its own group before
dropping to nobody; the cell makes that hole read-only again in its own world.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from torch_abi_harness.core import processes
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.kinds import Device, ExecutorKind
from torch_abi_harness.core.status import Status
from torch_abi_harness.execute import cgroups, sandbox
from torch_abi_harness.execute.api import (
    CappedLog,
    CellDecided,
    CellExecution,
    CellRequest,
    CellView,
    Launched,
    RuntimeHandle,
)
from torch_abi_harness.execute.venv import PROBE_DIR, LogPump, VenvBackend, host_environ, interpreter_environ
from torch_abi_harness.plan import Cell, Runtime
from torch_abi_harness.provision.envs import Env

log = logging.getLogger(__name__)

READY_TIMEOUT = 300.0  # seconds for a server to import torch and pytest
ANSWER_SECONDS = 10.0  # seconds for a server to report a cell whose process has ended or was killed
SERVER = "import harness_forkserver; harness_forkserver.main()"


class ServerGone(Exception):
    """The runtime's forkserver is not there (it died, or never started)."""


@dataclasses.dataclass(frozen=True)
class ServerRun:
    """What a server takes from its cells' run: the run's directory (it names the server) and each cell's threads."""

    run_dir: Path
    threads: int


class ForkedCell:
    """A cell forked by a server: its pid arrives first on the reply socket, its exit status last.

    The cell's process is watched through a pidfd as well: once it has ended (or been killed), the server
    has `ANSWER_SECONDS` to report it, else it is taken for unresponsive (`wait` raises CellDecided)."""

    kind = ExecutorKind.FORKSERVER

    def __init__(
        self, reply: socket.socket, pumps: list[LogPump], server: Server, group: cgroups.CellGroup | None
    ) -> None:
        self.reply = reply
        self.group = group
        self._bound: str | None = None
        self.pumps = pumps
        self.server = server
        self.pid: int | None = None
        self.code: int | None = None
        self.ended = False  # the reply socket closed: the server sent all it will
        self.answer_by: float | None = None  # the cell's process is over: the server must report it by then
        self._pidfd: int | None = None
        self._pending = b""

    def _watch(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already ended and reaped: its status is on its way
            self._expect_answer()
        except OSError as exc:  # a kernel without pidfds: the server's answer is bounded only after a kill
            log.debug("no pidfd for cell process %d: %s", pid, exc)

    def _expect_answer(self) -> None:
        if self.answer_by is None:
            self.answer_by = time.monotonic() + ANSWER_SECONDS

    def _read(self, timeout: float | None) -> bool:
        """Read what the server said, or see the cell's process end, within timeout; False if neither."""
        watched = [self.reply] + ([self._pidfd] if self._pidfd is not None else [])
        ready, _, _ = select.select(watched, [], [], timeout)
        if not ready:
            return False
        if self._pidfd is not None and self._pidfd in ready:
            os.close(self._pidfd)
            self._pidfd = None
            self._expect_answer()
        if self.reply not in ready:
            return True
        data = self.reply.recv(4096)
        if not data:
            self.ended = True
            return True
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "pid" in message:
                self._watch(int(message["pid"]))
            if "status" in message:
                self.code = int(message["status"])
        return True

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.code is None:
            if self.ended:
                raise CellDecided(Status.ERROR, f"the forkserver of {self.server.label} ended while this cell ran")
            now = time.monotonic()
            if self.answer_by is not None and now >= self.answer_by:
                raise CellDecided(Status.ERROR, self.server.unresponsive(self.pid))
            bounds = [b for b in (deadline, self.answer_by) if b is not None]
            remaining = max(0.0, min(bounds) - now) if bounds else None
            if not self._read(remaining) and deadline is not None and time.monotonic() >= deadline:
                return None
        return self.server.box_returncode(self.code)

    def kill(self, grace: float) -> None:
        while self.pid is None and not self.ended and self.code is None:
            if not self._read(2.0):
                break
        if self.pid is not None:
            processes.terminate_groups([self.pid], grace)
        self._expect_answer()  # killed (or never forked): the server has this long to say so

    def close(self, stdout: CappedLog, stderr: CappedLog) -> None:
        if self.pid is not None:
            processes.kill_group(self.pid, signal.SIGKILL)  # what a test left in the cell's group
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.reply.close()
        for pump in self.pumps:
            pump.finish()
        if self.group is not None:
            self._bound = self.group.bound()
            self.group.remove()

    def bound(self) -> str | None:
        return self._bound


class Server:
    """One runtime's forkserver: started in the sandbox, asked for cells over a SOCK_SEQPACKET socket."""

    def __init__(
        self,
        label: str,
        proc: subprocess.Popen[bytes],
        control: socket.socket,
        backend: ForkserverBackend,
        output: IO[bytes],
        log_path: Path,
    ):
        self.label = label
        self.proc = proc
        self.control = control
        self.backend = backend
        self.output = output  # what the server itself printed (nothing, unless it failed)
        self.log_path = log_path
        self.start_cpu_s: float | None = None  # the CPU seconds it took to import torch and the rest, as it says
        self._lock = threading.Lock()
        control.settimeout(ANSWER_SECONDS)  # a server that stopped reading cannot block a cell's start

    def unresponsive(self, pid: int | None) -> str:
        """The server did not report a cell in time: kill it (its backend forks later cells from a new one)
        and say why, as the cell's reason."""
        cell = f"cell process {pid}" if pid is not None else "cell (never forked)"
        reason = (
            f"forkserver unresponsive: the forkserver of {self.label} (pid {self.proc.pid}) did not report its "
            f"{cell} within {ANSWER_SECONDS:.0f} s of its end; killed, later cells fork from a new one"
        )
        self.backend.retire(self, reason)
        return reason

    @classmethod
    def start(cls, handle: RuntimeHandle, run: ServerRun, backend: ForkserverBackend) -> Server:
        label, preload = f"torch {handle.torch_version}", backend.preloads.get(handle.runtime, ())
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # the run's directory names the server (and the cells it forks, which share its command line)
        argv = [handle.python, "-c", SERVER, str(theirs.fileno()), str(run.run_dir), *preload]
        environ = {**host_environ(Path("/")), **interpreter_environ(run.threads, [PROBE_DIR])}
        cgroup_holes = backend.groups.prepare() if backend.sandbox.isolated else ()  # its cells join their groups
        if backend.sandbox.isolated:  # importing torch needs a temporary directory: the server's own empty tmpfs
            environ["TMPDIR"] = sandbox.SHM
        log.info("%s: starting its forkserver", label)
        output = tempfile.TemporaryFile()  # kept in the report only if the server says anything
        try:
            proc = processes.REGISTRY.popen(
                backend.sandbox.wrap(argv, cgroup_holes, keep_capabilities=True),
                cwd="/",
                env=environ,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        except BaseException as exc:  # the run is stopping (Interrupted), or the server could not be started
            ours.close()
            output.close()
            if isinstance(exc, OSError):
                raise ServerGone(f"the forkserver of {label} did not start: {exc}") from exc
            raise
        finally:
            theirs.close()
        ready, _, _ = select.select([ours], [], [], READY_TIMEOUT)
        message = ours.recv(4096) if ready else b""
        if not message:
            processes.kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            processes.REGISTRY.release(proc)
            ours.close()
            tail = _read(output).decode(errors="replace").strip().splitlines()[-3:]
            output.close()
            raise ServerGone(f"the forkserver of {label} did not start: {' / '.join(tail) or 'no output'}")
        server = cls(label, proc, ours, backend, output, run.run_dir / "forkservers" / f"{handle.runtime.id}.log")
        with contextlib.suppress(ValueError, LookupError, TypeError):  # none said: its wall time counts
            server.start_cpu_s = float(json.loads(message)["cpu_s"])
        return server

    def box_returncode(self, code: int) -> int:
        return self.backend.sandbox.returncode(code)

    def spawn(self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog) -> ForkedCell:
        """Ask for one cell; ServerGone if the server cannot take it."""
        backend = self.backend
        world, group = backend.world(request, view)
        try:
            return self._ask(request, view, (stdout, stderr), world, group)
        except BaseException:
            if group is not None:
                group.remove()
            raise

    def _ask(
        self,
        request: CellRequest,
        view: CellView,
        logs: tuple[CappedLog, CappedLog],
        world: sandbox.World,
        group: cgroups.CellGroup | None,
    ) -> ForkedCell:
        isolated = self.backend.sandbox.isolated
        message = {
            "args": list(view.argv[3:]),  # argv is PYTHON -m pytest ARGS...
            "environ": dict(view.environ),
            "cwd": str(request.out_dir),
            "pythonpath": view.environ["PYTHONPATH"].split(os.pathsep),
            # the cell's world, made in the server's read-only one: its cgroup hole read-only again once joined
            "world": world.plan(keep=self.backend.groups.parents) if isolated else None,
        }
        reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self.control, [json.dumps(message).encode()], [reply_theirs.fileno(), out_w, err_w])
        except OSError as exc:
            reply.close()
            for fd in (out_r, err_r):
                os.close(fd)
            raise ServerGone(f"the forkserver of {self.label} is gone: {exc}") from exc
        finally:
            reply_theirs.close()
            os.close(out_w)
            os.close(err_w)
        pumps = [LogPump(os.fdopen(out_r, "rb"), logs[0]), LogPump(os.fdopen(err_r, "rb"), logs[1])]
        return ForkedCell(reply, pumps, self, group)

    def kill(self) -> None:
        """End it now, whatever state it is in (SIGKILL reaches a stopped process); its cells die with it."""
        processes.kill_group(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        """End of file on its socket ends it and whatever cells it still has; then its whole sandbox goes."""
        self.control.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        processes.REGISTRY.release(self.proc)
        said = _read(self.output)
        self.output.close()
        if said:
            log.warning(
                "the forkserver of %s said (kept in %s): %s",
                self.label,
                self.log_path,
                said[-500:].decode(errors="replace"),
            )
            try:
                self.log_path.parent.mkdir(exist_ok=True)
                write_atomic(self.log_path, said.decode(errors="replace"))
            except OSError as exc:
                log.warning("%s: not written: %s", self.log_path, exc)


def _read(output: IO[bytes], limit: int = 1 << 20) -> bytes:
    output.seek(0)
    return output.read(limit)


class ForkserverBackend(VenvBackend):
    """The venv backend, its cells forked from a per-runtime server instead of started fresh."""

    executor = ExecutorKind.FORKSERVER

    def __init__(self, preload: Sequence[str] = (), cache_dir: Path | None = None) -> None:
        super().__init__(cache_dir)
        self.preload = tuple(preload)  # modules each server imports after torch and pytest
        self._servers: dict[Runtime, Server | None] = {}
        self._starting: dict[Runtime, threading.Lock] = {}
        self._remaining: dict[Runtime, int] = {}
        # The preload per runtime, where the run gives it more than one cell: for one it only moves that cell's imports
        # into its server, or imports what the cell never does (torch.testing's optests: 1.8 s of CPU, more than torch)
        self.preloads: dict[Runtime, tuple[str, ...]] = {}
        self._guard = threading.Lock()
        self._warmups: dict[str, float] = {}  # runtime id -> seconds its server took to start (import torch once)
        self._handles: dict[Runtime, RuntimeHandle] = {}
        self._next: dict[Runtime, Runtime] = {}  # a runtime -> the one whose cells run next
        self._ahead: list[threading.Thread] = []  # each holds a server it started ahead, until the run is over
        self._over = threading.Event()  # set when the run is over: the threads of _ahead may end

    def prepare(self, runtimes: Mapping[Runtime, Env | None]) -> dict[Runtime, RuntimeHandle]:
        handles = super().prepare(runtimes)
        self._handles.update(handles)
        return handles

    def begin_run(self, cells: Sequence[Cell] = ()) -> None:
        super().begin_run(cells)
        self._over.clear()
        with self._guard:
            self._starting = {}  # a new run starts its servers anew, each once
            self._remaining = {}
            for cell in cells:
                self._remaining[cell.runtime] = self._remaining.get(cell.runtime, 0) + 1
            self.preloads = {runtime: self.preload if n > 1 else () for runtime, n in self._remaining.items()}
            order = list(dict.fromkeys(cell.runtime for cell in cells if cell.runtime.device != Device.CUDA))
            self._next = dict(itertools.pairwise(order))

    def _server(self, request: CellRequest) -> Server | None:
        runtime = request.cell.runtime
        run = ServerRun(request.out_dir.parents[1], request.threads)  # cells/<id>/ in the run's directory
        self._start_ahead(self._next.get(runtime), run)
        return self._ensure(request.runtime, run)

    def _ensure(self, handle: RuntimeHandle, run: ServerRun) -> Server | None:
        """The runtime's server, started now unless it is there (or being started: then wait for it)."""
        runtime = handle.runtime
        with self._guard:
            starting = self._starting.setdefault(runtime, threading.Lock())
        with starting:
            if runtime not in self._servers:
                try:
                    started = time.monotonic()
                    server = self._servers[runtime] = Server.start(handle, run, self)
                    # its CPU time: its wall time grows when it starts alongside the cells (_start_ahead)
                    self._warmups[runtime.id] = server.start_cpu_s or time.monotonic() - started
                except ServerGone as exc:
                    log.warning("%s; its cells run in fresh processes", exc)
                    self._servers[runtime] = None
            return self._servers[runtime]

    def _start_ahead(self, runtime: Runtime | None, run: ServerRun) -> None:
        """Start the next runtime's server while this one's cells run (its start is one thread: it takes a core
        the cells leave free, instead of holding both workers at that runtime's first cells); once per runtime."""
        handle = self._handles.get(runtime) if runtime is not None else None
        with self._guard:
            if handle is None or runtime in self._starting or self.stopping:
                return
            self._starting[handle.runtime] = threading.Lock()
            thread = threading.Thread(target=self._ahead_of_time, args=(handle, run), name=f"forkserver {runtime}")
            self._ahead.append(thread)
        thread.start()

    def _ahead_of_time(self, handle: RuntimeHandle, run: ServerRun) -> None:
        try:
            self._ensure(handle, run)
        except BaseException as exc:  # the run is stopping (Interrupted): its first cell will say so, or not run
            log.debug("the forkserver of torch %s was not started ahead: %s", handle.torch_version, exc)
        self._over.wait()  # a server dies with the thread that started it (the sandbox's `setpriv --pdeathsig`)

    def warmups(self) -> dict[str, float]:
        with self._guard:
            return dict(self._warmups)

    def view(self, request: CellRequest) -> CellView:
        view = super().view(request)
        if self._forks(request):
            torch = request.runtime.torch_version
            preloaded = "".join(f", {m}" for m in self.preloads.get(request.cell.runtime, ()))
            note = f"# forked by the forkserver of torch {torch} (imported once: torch, pytest{preloaded})"
            view = dataclasses.replace(view, command=view.command + "\n" + note)
        return view

    def _forks(self, request: CellRequest) -> bool:
        """Whether the cell is forked from its runtime's server; else it starts fresh, as the venv backend's do.
        CUDA must not be initialised in a process that forks; a preload must be in place before torch loads."""
        return request.cell.runtime.device != Device.CUDA and not request.preload

    def start(self, request: CellRequest, view: CellView, stdout: CappedLog, stderr: CappedLog) -> Launched:
        if self._forks(request):
            server = self._server(request)
            if server is not None:
                try:
                    return server.spawn(request, view, stdout, stderr)
                except ServerGone as exc:
                    log.warning("%s; %s runs in a fresh process", exc, request.cell.id)
                    with self._guard:
                        self._servers[request.cell.runtime] = None
        return super().start(request, view, stdout, stderr)

    def execute(self, request: CellRequest) -> CellExecution:
        try:
            return super().execute(request)
        finally:
            with self._guard:
                left = self._remaining.get(request.cell.runtime, 1) - 1
                self._remaining[request.cell.runtime] = left
                server = self._servers.pop(request.cell.runtime, None) if left <= 0 else None
            if server is not None:
                server.stop()  # its runtime's last cell is done

    def retire(self, server: Server, reason: str) -> None:
        """An unresponsive server: kill it and forget it, so that the next cell of its runtime starts a new one."""
        log.warning("%s", reason)
        with self._guard:
            runtimes = [r for r, s in self._servers.items() if s is server]
            for runtime in runtimes:
                del self._servers[runtime]
        server.kill()
        if runtimes:  # else whoever took it from _servers (the run's end, another of its cells) stops it
            server.stop()

    def stop_all(self) -> None:
        super().stop_all()
        self.end_run()

    def end_run(self) -> None:
        with self._guard:
            ahead, self._ahead = self._ahead, []
            starting = list(self._starting.values())
        for lock in starting:  # a server being started (ahead) is in _servers once its lock is free
            with lock:
                pass
        with self._guard:
            servers = [s for s in self._servers.values() if s is not None]
            self._servers = {}
        for server in servers:
            server.stop()
        self._over.set()  # their servers stopped, the threads that started them ahead may end
        for thread in ahead:
            thread.join()
        super().end_run()
