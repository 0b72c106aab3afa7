"""The forkserver: one process per runtime env that has imported torch, pytest and the cell probe,
forking one child per cell. It runs inside the runtime env (stdlib, torch and pytest only, never
the harness) and never imports an extension: only its children do.

Protocol, over the SOCK_SEQPACKET socket whose fd the harness passes in: each message is one
cell, a JSON object with three fds attached (a reply socket, the cell's stdout and stderr pipes).
The child writes ``{"pid": HOST_PID}`` on the reply socket as soon as it leads its own session
(the harness kills that process group), the server writes ``{"status": CODE}`` when the child has
ended (CODE as subprocess gives it: negative for a signal) and closes the reply socket. End of
file on the control socket ends the server and every cell it still has.

A cell in the sandbox (the request's ``world``, the plan `harness_cellworld` makes) gets what a fresh sandboxed
cell gets: new mount, PID, network, IPC and UTS namespaces, a copy of the server's world where every mount is
read-only already, its own /proc, a minimal /dev, its holes (its own directory bound writable, an empty tmpfs
of its own on /dev/shm), its cgroup, the unprivileged uid, no core dumps, every capability dropped. The server
forks it as PID 1 of a new PID namespace (`harness_cellworld.PidNamespaces`); it makes its world and runs pytest
as its child, and its exit ends whatever the cell left behind; a death by signal N is reported as exit 128+N, as
the fresh sandbox's init reports it.
"""

from __future__ import annotations

import atexit
import faulthandler
import fnmatch
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import warnings
import weakref
from pathlib import Path
from typing import Any

import harness_cellworld

SETUP_FAILED = harness_cellworld.SETUP_FAILED  # the fresh sandbox's init uses it when it cannot make the mounts
PR_SET_PDEATHSIG = harness_cellworld.PR_SET_PDEATHSIG


def _host_pid() -> int:
    """This process's pid in the outermost namespace /proc knows (the harness's), as the probe reads it."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    return os.getpid()


class Rewrites:
    """pytest's assertion rewriting of each suite's test modules and conftest files, done once per suite in the
    server, before it forks that suite's first cell, rather than in every cell (test_conformance.py: 55-70 ms a
    cell, in about a hundred cells of the default matrix). pytest caches a rewrite in a pyc beside the source; a
    cell cannot write there (its suite is read-only), so each cell rewrote it again.

    A cell asks pytest to rewrite as it always does (`_pytest.assertion.rewrite._rewrite_test`); `install` answers
    that call from this table only when the file's source hash is the one rewritten here and the cell's config
    does not enable the assertion-pass hook (the one setting a rewrite depends on), and asks pytest otherwise. A
    pytest whose rewrite is not `_rewrite_test(path, config) -> (source_hash, code)` gets no table."""

    PATTERNS = ("test_*.py", "*_test.py", "conftest.py")  # pytest's default python_files, and conftest files
    MAX_FILES, MAX_BYTES, MAX_SECONDS = 300, 1 << 20, 2.0  # a suite's share; the rest is rewritten as before

    def __init__(self) -> None:
        self.table: dict[str, tuple[bytes, Any]] = {}
        self.seen: set[str] = set()
        self.rewrite: Any = None

    def prepare(self, args: list[str]) -> None:
        """Rewrite the test modules of the suite args name (its --rootdir), the first time it is asked for."""
        root = args[args.index("--rootdir") + 1] if "--rootdir" in args[:-1] else None
        if root is None or root in self.seen:
            return
        self.seen.add(root)
        if len(self.seen) == 1:
            try:
                from _pytest.assertion import rewrite

                self.rewrite = rewrite._rewrite_test
            except (ImportError, AttributeError):
                return
        deadline = time.monotonic() + self.MAX_SECONDS
        for path in self._modules(root, deadline):
            if self.rewrite is None or time.monotonic() > deadline:
                return
            try:
                with warnings.catch_warnings(record=True) as warned:
                    warnings.simplefilter("always")
                    source_hash, code = self.rewrite(path, None)
            except Exception:  # a module that does not parse: the cell meets it as pytest would
                continue
            if warned:  # a rewrite that warns (`assert (x, "why")`) warns in the cell, as pytest would there
                continue
            if not isinstance(source_hash, bytes):
                self.rewrite = None  # not the rewrite this table was written for
                return
            self.table[str(path)] = (source_hash, code)

    def _modules(self, root: str, deadline: float) -> list[Path]:
        found: list[Path] = []
        for folder, dirs, files in os.walk(root):
            if time.monotonic() > deadline:
                return found
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(files):
                path = Path(folder, name)
                if any(fnmatch.fnmatch(name, p) for p in self.PATTERNS) and _size(path) <= self.MAX_BYTES:
                    found.append(path)
                if len(found) >= self.MAX_FILES:
                    return found
        return found

    def install(self) -> None:
        """In the cell: pytest's rewrite answered from the table where the source is the one rewritten."""
        if not self.table or self.rewrite is None:
            return
        import importlib.util

        from _pytest.assertion import rewrite

        table, original = self.table, self.rewrite

        def rewritten(fn: Any, config: Any) -> Any:
            entry = table.get(str(fn))
            if entry is not None and not (config is not None and config.getini("enable_assertion_pass_hook")):
                if importlib.util.source_hash(fn.read_bytes()) == entry[0]:
                    return entry
            return original(fn, config)

        rewrite._rewrite_test = rewritten


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 1 << 62  # gone or unreadable: not this table's


REWRITES = Rewrites()


def _run_pytest(request: dict[str, Any]) -> int:
    """The cell's pytest in this (forked) interpreter, as `python -m pytest ARGS` would run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    tempfile.tempdir = None  # TMPDIR is the cell's own
    pythonpath = list(request["pythonpath"])
    rest = [p for p in sys.path[1:] if p not in pythonpath]
    sys.path[:] = [os.getcwd(), *pythonpath, *rest]  # `-m` puts the working directory first
    sys.argv = ["pytest", *request["args"]]
    if "numpy.random" in sys.modules:  # `random` reseeds itself after a fork; numpy's global state does not
        sys.modules["numpy.random"].seed()
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        import torch

        torch.set_num_threads(int(threads))
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    import harness_cellprobe
    import pytest

    REWRITES.install()
    harness_cellprobe._record["pytest_main_at"] = time.time()  # written with the probe's first record
    try:
        code = int(pytest.main(list(request["args"])))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    _interpreter_shutdown()
    return code


def _interpreter_shutdown() -> None:
    """What a fresh interpreter does at exit, in its order: wait for every non-daemon thread a test left
    (a thread that never ends holds the cell until its timeout, as it holds a fresh process), then run the
    at-exit handlers. Without the join a forked cell would pass where a fresh one times out."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()


def _cell(request: dict[str, Any], reply: int, stdout: int, stderr: int) -> None:
    """The forked child: own session, its output on the cell's pipes, sandboxed if asked; never returns."""
    code = SETUP_FAILED
    try:
        os.setsid()
        harness_cellworld.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server's death ends the cell
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # SIGPIPE stays ignored, as Python starts
        signal.set_wakeup_fd(-1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (null, stdout, stderr):
            os.close(fd)
        os.write(reply, json.dumps({"pid": _host_pid()}).encode() + b"\n")
        os.close(reply)
        world = request.get("world")
        if world is None:
            code = _run_pytest(request)
        else:
            code = _sandboxed(request, world)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _sandboxed(request: dict[str, Any], world: dict[str, Any]) -> int:
    """PID 1 of the cell's own PID namespace (the server made it for this fork): its other namespaces (mount,
    network, IPC, UTS), its world, then pytest as its child; it reaps every process of the namespace and returns
    pytest's status as an init reports it.

    Only from PID 1 does a procfs mounted on /proc show the new namespace alone, and PID 1's end ends every process
    of the namespace, a test's `setsid` child included. This process is also the one whose host pid the harness
    holds (the leader of the cell's process group): the harness times, kills and reaps through it, and a kill of
    its group reaches pytest too. A signal reaches PID 1 only through a handler: SIGTERM (the harness's kill after
    a timeout) ends it at once, as it ended the process that led the group when an init was forked below it."""
    if os.getpid() != 1:
        raise OSError("the forkserver could not give this cell a PID namespace of its own")
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    harness_cellworld.unshare_world()
    harness_cellworld.enter(world)
    pytest_pid = os.fork()
    if pytest_pid == 0:
        code = SETUP_FAILED
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            harness_cellworld.drop(world)
            code = _run_pytest(request)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return harness_cellworld.reap_until(pytest_pid)


def _fork(request: dict[str, Any], namespaces: harness_cellworld.PidNamespaces) -> int:
    """Fork the cell; a sandboxed one as PID 1 of a new PID namespace. Where the kernel refuses that, the cell
    still forks and fails its setup, saying why (`_sandboxed`), never runs outside its namespace."""
    if request.get("world") is None:
        return os.fork()
    try:
        namespaces.next_child_in_new()
    except OSError:
        traceback.print_exc()
        return os.fork()  # nothing to restore: the kernel left the server's next children where they were
    pid = os.fork()
    if pid:
        namespaces.restore()
    return pid


def serve(control_fd: int) -> None:
    control = socket.socket(fileno=control_fd)
    namespaces = harness_cellworld.PidNamespaces()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the harness's to act on
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    replies: dict[int, int] = {}  # child pid -> its reply fd
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
                if not message:
                    _shutdown(replies)
                    return
                reply, stdout, stderr = fds
                request = json.loads(message)
                REWRITES.prepare(list(request["args"]))
                gc.freeze()  # what the server holds (torch, pytest) is no cell's garbage: see main
                pid = _fork(request, namespaces)
                if pid == 0:
                    selector.close()
                    control.close()
                    for fd in (wake_read, wake_write, *replies.values()):
                        os.close(fd)
                    _cell(request, reply, stdout, stderr)
                os.close(stdout)
                os.close(stderr)
                replies[pid] = reply
            else:
                while True:
                    try:
                        if not os.read(wake_read, 512):
                            break
                    except BlockingIOError:
                        break
        _reap(replies)


def _reap(replies: dict[int, int]) -> None:
    while replies:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = replies.pop(pid, None)
        if reply is None:
            continue
        try:
            os.write(reply, json.dumps({"status": os.waitstatus_to_exitcode(raw)}).encode() + b"\n")
        except OSError:
            pass  # the harness gave up on this cell
        os.close(reply)


def _shutdown(replies: dict[int, int]) -> None:
    for pid in replies:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def _leave_the_servers_finalizers() -> None:
    """The finalizers alive now (torch's own: about 200 `torch.library.Library` handles made at import, each
    taking its operators out of the dispatcher) are the server's, not a cell's: no cell runs them at its exit.
    They cost each cell 0.1-0.2 s, the same in every cell, spent undoing what the server did; a forked cell ends
    with os._exit, so the C++ side of that teardown never runs in it either. What a cell registers itself (an
    extension's own `torch.library.Library`, a test's `weakref.finalize`) still runs at its exit, in order."""
    for finalizer in list(getattr(weakref.finalize, "_registry", ())):
        finalizer.atexit = False


def main() -> None:
    """`python -c 'import harness_forkserver; harness_forkserver.main()' FD LABEL [MODULE...]`: import
    torch, pytest, the probe and each MODULE (one a release lacks is skipped), say so, serve. LABEL
    (the run's directory) is only there for a person or a test to tell whose server this is."""
    control_fd = int(sys.argv[1])
    import harness_cellprobe  # noqa: F401  (with pytest and torch: imported once here, no cell pays for them)
    import pytest  # noqa: F401
    import torch

    for module in sys.argv[3:]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            pass  # not in this release: a cell that needs it fails to import it, as it would fresh

    _leave_the_servers_finalizers()
    # Everything imported so far goes to the collector's permanent generation: a cell's collections (pytest runs
    # several at its end to surface unraisable exceptions) then walk only what the cell made, not torch's objects
    # (about 0.2 s each otherwise), and leave the pages they share with the server unwritten.
    gc.freeze()
    ready = {"ready": True, "torch": torch.__version__, "cpu_s": round(time.process_time(), 3)}  # the run's floor
    os.write(control_fd, json.dumps(ready).encode())
    serve(control_fd)
    # Its cells are over and it wrote nothing it must flush: end now, not after tearing down torch's modules (a
    # tenth of a second and more that the harness waits for, between one runtime's last cell and its result).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
