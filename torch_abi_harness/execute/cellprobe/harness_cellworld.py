"""A cell's world, made inside its new namespaces by the process that will be PID 1 there (stdlib only).

Both executors make it the same way: the fresh sandbox's init execs ``python harness_cellworld.py PLAN -- ARGV``
as PID 1 of the cell's namespaces (its mounts already read-only), the forkserver's child calls `enter` after its
own unshare. The plan, a JSON object the harness writes (`torch_abi_harness.execute.sandbox.World.plan`), says:

- ``proc``: mount a procfs of the new PID namespace on /proc, so that no other process's /proc/PID (its cwd, its
  root, its environment) is visible;
- ``reveal``: [ancestor, [path...]]: an ancestor the cell's uid cannot traverse (/root, mode 0700) covered by an
  empty tmpfs, the paths the cell must read (its env, its interpreter, its build) bound back at their places;
- ``mounts``: the holes (``rw`` its own directory, ``shm`` a private /dev/shm, ``ro`` what must stay read-only,
  ``hide`` the host's CUDA toolkit), in order;
- ``dev``: a minimal /dev: null, zero, full, random, urandom, tty bound from the host (and the GPU's nodes where
  given), /dev/fd and the std links, a devpts of its own; no loop device, no /dev/kmsg;
- ``cgroups``: the ``cgroup.procs`` files the cell joins while still root (its memory and pids bounds);
- ``uid``: the unprivileged uid and gid the cell runs as (65534, nobody, when the harness is root), else null;
- ``cwd``: its working directory, entered after its directory is bound writable (a cwd taken before the bind
  would still be the read-only one).

Every network the cell has is a loopback of its own (`loopback_up`); its IPC and UTS namespaces are its own, so
a SysV segment it makes dies with it. `drop` then leaves it no core dumps, no groups, no capabilities and
no_new_privs. A plan step that cannot be made fails the cell's setup (exit 125), never leaves it open.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import socket
import struct
import sys
from typing import Any

SETUP_FAILED = 125

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
CELL_NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
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
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}

_libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, arg: int = 0) -> int:
    zero = ctypes.c_ulong(0)
    return int(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero))


def mount(source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None) -> None:
    src = source.encode() if source is not None else None
    kind = fstype.encode() if fstype is not None else None
    options = data.encode() if data is not None else None
    check(_libc.mount(src, target.encode(), kind, ctypes.c_ulong(flags), options), f"mount {target}")


def remount(path: str, *, read_only: bool) -> None:
    """Remount a bind at path read-only or writable, keeping the flags a user namespace locks."""
    kept = os.statvfs(path).f_flag
    flags = MS_REMOUNT | MS_BIND | sum(ms for st, ms in ST_TO_MS.items() if kept & st)
    mount(None, path, flags | (MS_RDONLY if read_only else 0))


def bind(path: str, mode: str) -> None:
    """Bind path onto itself read-only or writable; hide it under an empty read-only tmpfs (mode `hide`); or
    mount an empty tmpfs of the cell's own there (mode `shm`), as the fresh sandbox's init does."""
    if mode == "hide":
        mount("harness-hidden", path, MS_RDONLY, "tmpfs", "size=4k,mode=555")
        return
    if mode == "shm":
        mount("harness-shm", path, MS_NOSUID | MS_NODEV, "tmpfs", "mode=1777")
        return
    mount(path, path, MS_BIND)
    remount(path, read_only=mode == "ro")


def _held(paths: list[str]) -> dict[str, int]:
    """O_PATH descriptors of paths, taken before a tmpfs covers them: bound back through /proc/self/fd."""
    return {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in paths}


def _bind_back(fd: int, target: str) -> None:
    """Bind what fd holds at target (made in a fresh tmpfs: a directory or an empty file)."""
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)


def reveal(ancestor: str, paths: list[str]) -> None:
    """Cover ancestor with an empty tmpfs that anyone may traverse, and bind the paths back into it: the cell
    reaches what it must read, and nothing else of the ancestor (another cell's directory, ~/.netrc)."""
    held = _held(paths)
    mount("harness-reveal", ancestor, MS_NOSUID | MS_NODEV, "tmpfs", "mode=755,size=64k")
    for path, fd in held.items():
        _bind_back(fd, path)
        os.close(fd)
    remount(ancestor, read_only=True)


def make_dev(gpu: list[str]) -> None:
    """A tmpfs /dev holding only the nodes a cell needs, each bound from the host's."""
    held = _held([f"/dev/{name}" for name in DEV_NODES if os.path.exists(f"/dev/{name}")] + gpu)
    mount("harness-dev", "/dev", MS_NOSUID | MS_NOEXEC, "tmpfs", "mode=755,size=64k")
    for path, fd in held.items():
        _bind_back(fd, path)
        os.close(fd)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/pts")
    os.mkdir("/dev/shm")
    try:  # a terminal of its own where the kernel lets a namespace have one; a cell needs none
        mount("devpts", "/dev/pts", MS_NOSUID | MS_NOEXEC, "devpts", "newinstance,ptmxmode=0666,mode=620")
    except OSError:
        pass
    remount("/dev", read_only=True)


def loopback_up() -> None:
    """Bring the new network namespace's `lo` up (SIOCSIFFLAGS), as `ip link set lo up` would."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class PidNamespaces:
    """A new PID namespace for each child the forkserver forks: its cell is PID 1 there, no init forked between.

    `unshare(CLONE_NEWPID)` puts only the caller's next children in a new namespace, and the kernel refuses a second
    one while the first is still pending; `setns` to the caller's own namespace (held open here) resets that, so
    `fork` makes each cell the first process of a namespace of its own, and `restore` keeps any other child the
    server makes in its own. One fork of the server's large address space a cell, not two (each copies its page
    tables; 15-80 ms on a loaded machine)."""

    def __init__(self) -> None:
        self.own: int | None = None  # opened at the first sandboxed cell: a server without a sandbox never needs it

    def next_child_in_new(self) -> None:
        if self.own is None:
            self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.restore()
        check(_libc.unshare(CLONE_NEWPID), "unshare a PID namespace")

    def restore(self) -> None:
        check(_libc.setns(self.own, CLONE_NEWPID), "setns to the server's own PID namespace")


def unshare_world() -> None:
    """New mount, network, IPC and UTS namespaces for this process (PID 1 of its PID namespace already), its
    mounts no longer propagating to the server's."""
    check(_libc.unshare(CELL_NAMESPACES & ~CLONE_NEWPID), "unshare")
    mount(None, "/", MS_REC | MS_PRIVATE)


def enter(plan: dict[str, Any]) -> None:
    """Make the world of plan, as root, in the process that is PID 1 of the cell's new namespaces."""
    if plan.get("proc"):
        mount("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "proc")
    for procs in plan.get("cgroups", []):  # before `mounts` makes the forkserver's cgroup hole read-only
        with open(procs, "w") as joined:
            joined.write("0")
    for ancestor, paths in plan.get("reveal", []):
        reveal(ancestor, paths)
    if plan.get("dev") is not None:
        make_dev(list(plan["dev"]))
    for mode, path in plan.get("mounts", []):
        bind(path, mode)
    if plan.get("net"):
        loopback_up()
    os.chdir(plan.get("cwd") or "/")


def drop(plan: dict[str, Any]) -> None:
    """Leave the cell no core dumps, its unprivileged uid (where the plan has one), no capabilities, no_new_privs."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for cap in range(64):  # while still root: dropping from the bounding set takes CAP_SETPCAP
        if prctl(PR_CAPBSET_DROP, cap) != 0:
            break  # past the kernel's last capability
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    uid = plan.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    check(prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 bits): all empty
    check(_libc.syscall(SYS_CAPSET, header, data), "capset")


def as_init_status(status: int) -> int:
    """A wait status as an exit code, death by signal N as 128+N: what an init that cannot re-raise reports."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def reap_until(child: int) -> int:
    """PID 1's loop: reap every process of the namespace until child ends; its status, as an init reports it."""
    while True:
        pid, raw = os.wait()
        if pid == child:
            return as_init_status(raw)


def main() -> None:
    """`python harness_cellworld.py PLAN -- ARGV...`, as PID 1: the world, then ARGV as its child, then its status
    (the namespace's every other process dies with PID 1)."""
    plan = json.loads(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    try:
        enter(plan)
    except OSError as exc:
        sys.stderr.write(f"harness sandbox: cannot make the cell's world: {exc}\n")
        os._exit(SETUP_FAILED)
    child = os.fork()
    if child == 0:
        try:
            drop(plan)
            os.execvp(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"harness sandbox: cannot start {argv[0]}: {exc}\n")
        os._exit(SETUP_FAILED if plan.get("uid") is None else 127)
    os._exit(reap_until(child))


if __name__ == "__main__":
    main()
