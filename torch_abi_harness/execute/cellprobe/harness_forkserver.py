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
of its own on /dev/shm), its cgroup, the unprivileged uid, no core dumps, every capability dropped; pytest
runs as the child of a small init (PID 1 of the new namespace) whose exit ends whatever the cell left behind,
and a death by signal N is reported as exit 128+N, as the fresh sandbox's init reports it.
"""

from __future__ import annotations

import atexit
import faulthandler
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
    """The cell's own namespaces (mount, PID, network, IPC, UTS), then an init that runs pytest as its child.

    A process that unshares CLONE_NEWPID stays in its old PID namespace; only its next child is PID 1 of the new
    one, and only from there does a procfs mounted on /proc show the new namespace alone. So this process (the one
    whose host pid the harness holds, the leader of the cell's process group) forks the init, which makes the
    cell's world (`harness_cellworld.enter`: its /proc first) and forks pytest, dropped to the cell's uid. The
    harness times, kills and reaps through the host pid of this process: a kill of its process group reaches the
    init and pytest, which stay in the group through the fork, and the init's end ends every process of the
    namespace, a test's `setsid` child included."""
    harness_cellworld.unshare_cell()
    init = os.fork()
    if init:
        return harness_cellworld.as_init_status(os.waitpid(init, 0)[1])
    # PID 1 of the cell's namespace: its world, then pytest as a child; reap everything, exit with pytest's status
    status = SETUP_FAILED
    try:
        harness_cellworld.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        harness_cellworld.enter(world)
        pytest_pid = os.fork()
        if pytest_pid == 0:
            code = SETUP_FAILED
            try:
                harness_cellworld.drop(world)
                code = _run_pytest(request)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status = harness_cellworld.reap_until(pytest_pid)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def serve(control_fd: int) -> None:
    control = socket.socket(fileno=control_fd)
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
                gc.freeze()  # what the server holds (torch, pytest) is no cell's garbage: see main
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    control.close()
                    for fd in (wake_read, wake_write, *replies.values()):
                        os.close(fd)
                    _cell(json.loads(message), reply, stdout, stderr)
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
