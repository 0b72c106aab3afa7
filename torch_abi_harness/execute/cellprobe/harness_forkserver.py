"""The forkserver: one process per runtime env that has imported torch, pytest and the cell probe,
forking one child per cell. It runs inside the runtime env (stdlib, torch and pytest only, never
the harness) and never imports an extension: only its children do.

Protocol, over the SOCK_SEQPACKET socket whose fd the harness passes in: each message is one
cell, a JSON object with three fds attached (a reply socket, the cell's stdout and stderr pipes).
The child writes ``{"pid": HOST_PID}`` on the reply socket as soon as it leads its own session
(the harness kills that process group), the server writes ``{"status": CODE}`` when the child has
ended (CODE as subprocess gives it: negative for a signal) and closes the reply socket. End of
file on the control socket ends the server and every cell it still has.

A cell in the sandbox (the request's ``mounts``) gets what a fresh sandboxed cell gets from
``torch_abi_harness.execute.sandbox``: new mount and PID namespaces, a copy of the server's world where every
mount is read-only already, then its holes: the cell's own directory bound writable and an empty
tmpfs of its own on /dev/shm; every capability dropped; pytest runs as the child of a small
init (PID 1 of the new namespace) whose exit ends whatever the cell left behind, and a death by
signal N is reported as exit 128+N, as the fresh sandbox's init reports it.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import threading
import traceback
from typing import Any

SETUP_FAILED = 125  # the same code the fresh sandbox's init uses when it cannot make the mounts

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
ST_TO_MS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = 126  # x86_64

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _prctl(option: int, arg: int = 0) -> int:
    zero = ctypes.c_ulong(0)
    return int(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero))


def _mount(source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None) -> None:
    src = source.encode() if source is not None else None
    kind = fstype.encode() if fstype is not None else None
    options = data.encode() if data is not None else None
    _check(_libc.mount(src, target.encode(), kind, ctypes.c_ulong(flags), options), f"mount {target}")


def _bind(path: str, mode: str) -> None:
    """Bind path onto itself read-only or writable, keeping the flags a user namespace locks; hide it
    under an empty read-only tmpfs (mode `hide`); or mount an empty tmpfs of the cell's own there (mode
    `shm`), as the fresh sandbox's init does."""
    if mode == "hide":
        _mount("harness-hidden", path, MS_RDONLY, "tmpfs", "size=4k,mode=555")
        return
    if mode == "shm":
        _mount("harness-shm", path, MS_NOSUID | MS_NODEV, "tmpfs", "mode=1777")
        return
    _mount(path, path, MS_BIND)
    kept = os.statvfs(path).f_flag
    flags = MS_REMOUNT | MS_BIND | sum(ms for st, ms in ST_TO_MS.items() if kept & st)
    _mount(None, path, flags | (MS_RDONLY if mode == "ro" else 0))


def _drop_capabilities() -> None:
    """What `setpriv --bounding-set=-all --inh-caps=-all --no-new-privs` leaves an exec'd root with: nothing."""
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0:
            break  # past the kernel's last capability
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 bits): all empty
    _check(_libc.syscall(SYS_CAPSET, header, data), "capset")


def _host_pid() -> int:
    """This process's pid in the outermost namespace /proc knows (the harness's), as the probe reads it."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    return os.getpid()


def _as_init_status(status: int) -> int:
    """A wait status as an exit code, death by signal N as 128+N: what an init that cannot re-raise reports."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


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
    import pytest

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
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server's death ends the cell
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
        mounts = request.get("mounts")
        if mounts is None:
            code = _run_pytest(request)
        else:
            code = _sandboxed(request, mounts)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _sandboxed(request: dict[str, Any], mounts: list[list[str]]) -> int:
    """New mount and PID namespaces: the binds here, then an init (PID 1) that runs pytest as its child."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    for mode, path in mounts:
        _bind(path, mode)
    init = os.fork()
    if init:
        return _as_init_status(os.waitpid(init, 0)[1])
    # PID 1 of the cell's namespace: run pytest as a child, reap everything, exit with pytest's status
    status = SETUP_FAILED
    try:
        pytest_pid = os.fork()
        if pytest_pid == 0:
            code = SETUP_FAILED
            try:
                _drop_capabilities()
                code = _run_pytest(request)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        while True:
            pid, raw = os.wait()
            if pid == pytest_pid:
                status = _as_init_status(raw)  # PID 1 cannot re-raise a signal
                break
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

    os.write(control_fd, json.dumps({"ready": True, "torch": torch.__version__}).encode())
    serve(control_fd)


if __name__ == "__main__":
    main()
