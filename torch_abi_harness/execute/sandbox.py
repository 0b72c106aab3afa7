"""The venv backend's cell sandbox: a cell sees a read-only world of its own, and nothing it starts outlives it.

A cell's pytest runs under `setpriv --pdeathsig KILL` (it dies with the harness thread that started it, even
when the harness is SIGKILLed), in new mount, PID, network, IPC and UTS namespaces made by `unshare` (a user
namespace too when the harness is not root). A small POSIX shell init joins the cell's cgroups while /sys is
still writable, makes **every mount of the namespace read-only** (remounted `bind,ro` in place, keeping their
nosuid/nodev/noexec/atime flags: `mount --all`, then each line of /proc/self/mountinfo still writable, so
submounts such as /dev, /proc, /sys and /tmp are covered one by one and not only `/`), then execs the cell's
world (`cellprobe/harness_cellworld.py`, PID 1 of the namespaces, from the plan `World.plan` writes): a procfs
of its own PID namespace on /proc (no other process's /proc/PID), the directories the cell's uid cannot
traverse (/root) covered by an empty tmpfs with only what it must read bound back, a minimal /dev, the host's
CUDA toolkit hidden, its own cell directory (its TMPDIR, HOME and every default cache: `venv.own_caches`) bound
writable again and an empty private tmpfs on /dev/shm, `lo` up in its own network, its working directory
entered after the bind. The cell then runs as `nobody` (when the harness is root; it owns only its directory),
with no core dumps, every capability dropped and no_new_privs. Where a host's GPU driver does not initialise
inside the sandbox, cells run outside it (`gpu_hidden`). A mount the init cannot make read-only (one a later
mount covers, say) fails the sandbox with its path named, rather than leaving it writable. When the cell's
process ends, PID 1 exits with its status and the kernel kills every process left in the namespace: a test's
`setsid` child included.

Read-only mounts and an unprivileged uid both: a uid of its own alone would still let a cell write wherever the
world may (/tmp, /dev/shm, /var/tmp, a world-writable cache: another cell's lock among them); read-only mounts
alone would leave root-only files and sockets and the host's /proc within reach. Together they give what the
docker backend gives (`--read-only` root, a non-root user, writable only the cell's own mounts).

The init reports a death by signal N as exit 128+N (PID 1 cannot re-raise it), which `returncode`
maps back, as the docker backend does for its init.

Where the kernel refuses namespaces (no unshare, user namespaces forbidden), cells run as before,
in a process group and with nothing read-only, and the run says so once.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Arguments: drop|keep (hide|rw|shm PATH)... -- COMMAND... First every mount the namespace holds is made
# read-only in place, keeping the flags a user namespace locks (nosuid, nodev, noexec, atime): one
# `mount --all -o remount,bind,ro` (util-linux 2.38 here remounts every mount of the table in that one
# exec), then each line of /proc/self/mountinfo still writable is remounted on its own, so the guarantee
# does not rest on what `--all` does in a given util-linux; where mounts are stacked, the top one, the
# only one a path reaches (a path is unescaped from mountinfo's octal, `\040` for a space). Then, in
# order: `hide` puts an empty read-only tmpfs over a directory, `rw` binds a path writable again, `shm`
# mounts a private empty tmpfs (POSIX shared memory and semaphores). `keep` runs COMMAND with its
# capabilities: the forkserver, which sandboxes each cell itself. A mount that cannot be made read-only
# fails the init.
INIT = """\
caps=$1; joins=$2; shift 2
ulimit -c 0  # no core dumps, in every cell and in a forkserver
for procs in $joins; do  # the cell's cgroups, joined while /sys is still writable
  echo 0 > "$procs" || { echo "harness sandbox: cannot join $procs" >&2; exit 125; }
done
mount --all -o remount,bind,ro 2>/dev/null  # the loop below checks what it did
mounts=
while read -r _ _ _ _ point options _; do mounts="$mounts$point $options
"; done < /proc/self/mountinfo
while read -r point options; do
  [ -n "$point" ] || continue
  case ,$options, in *,ro,*) continue;; esac  # read-only already
  case $point in
    *\\\\*) point=$(printf '%b' "$(printf '%s' "$point" | sed 's/\\\\\\([0-7][0-7][0-7]\\)/\\\\0\\1/g')");;
  esac
  kept=; ifs=$IFS; IFS=,
  for option in $options; do
    case $option in nosuid|nodev|noexec|noatime|nodiratime|relatime|strictatime) kept="$kept,$option";; esac
  done
  IFS=$ifs
  mount -o "remount,bind,ro$kept" "$point" || { echo "harness sandbox: cannot make $point read-only" >&2; exit 125; }
done <<MOUNTS
$mounts
MOUNTS
while [ "$1" != "--" ]; do
  case $1 in
    hide) mount -t tmpfs -o ro,size=4k,mode=555 harness-hidden "$2";;
    shm) mount -t tmpfs -o nosuid,nodev,mode=1777 harness-shm "$2";;
    *) mount --bind "$2" "$2" && mount -o "remount,bind,$1" "$2";;
  esac || { echo "harness sandbox: cannot mount $2 $1" >&2; exit 125; }
  shift 2
done
shift
if [ "$caps" = keep ]; then "$@"; exit $?; fi
exec "$@"  # the cell's world (harness_cellworld.py), PID 1 of its namespaces
"""
SETUP_FAILED = 125  # INIT could not make the mounts: the sandbox, not the cell, failed
SHM = "/dev/shm"  # POSIX shared memory and semaphores (multiprocessing): private to each cell


NOBODY = 65534  # the uid and gid a cell runs as when the harness is root
CELLWORLD = Path(__file__).parent / "cellprobe" / "harness_cellworld.py"


def cell_uid() -> int | None:
    """The uid a cell runs as: nobody where the harness is root; None (the caller's own uid, mapped to root of a
    user namespace that maps nothing else) where it is not."""
    return NOBODY if os.geteuid() == 0 else None


@dataclasses.dataclass(frozen=True)
class World:
    """What one cell's world holds beyond the read-only host, as `harness_cellworld` makes it.

    `readable` are the paths the cell must read (its env, interpreter, build, tests): where the cell's uid cannot
    traverse one of their ancestors (/root is 0700), that ancestor is covered by an empty tmpfs with only these
    bound back. `cgroups` are the `cgroup.procs` files the cell joins; `cwd` its working directory."""

    writable: tuple[Path, ...]
    readable: tuple[Path, ...] = ()
    cgroups: tuple[Path, ...] = ()
    cwd: Path | None = None
    uid: int | None = dataclasses.field(default_factory=cell_uid)

    def plan(self, *, join: bool = True, keep: Sequence[Path] = ()) -> dict[str, Any]:
        """The JSON plan harness_cellworld executes. join=False: the cgroups were joined before (the fresh init
        joins them while /sys is writable); keep: directories made read-only again (a forkserver's cgroup hole)."""
        writable = _existing(self.writable)
        cwd = self.cwd or (Path(writable[0]) if writable else Path("/"))
        return {
            "proc": True,
            "cgroups": [str(p) for p in self.cgroups] if join else [],
            "reveal": reveals([*self.readable, *map(Path, writable), cwd], self.uid),
            "dev": list(gpu_device_nodes()),
            "mounts": [*Sandbox.mounts(self.writable), *(("ro", p) for p in _existing(keep))],
            "net": True,
            "uid": self.uid,
            "cwd": str(cwd),
        }


def readable_in(argv: Sequence[str]) -> list[Path]:
    """What a command must read, as its argv names it: every existing absolute path in it, and for an interpreter
    its virtualenv and the base interpreter's installation (pyvenv.cfg's `home`, the real file's prefix)."""
    found = [Path(arg) for arg in argv if arg.startswith("/") and os.path.exists(arg)]
    if argv and argv[0].startswith("/"):
        python = Path(argv[0])
        found.append(Path(os.path.realpath(python)).parent.parent)
        config = python.parent.parent / "pyvenv.cfg"
        if config.is_file():
            found.append(python.parent.parent)
            for line in config.read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    found.append(Path(os.path.realpath(value.strip())).parent)
    return found


def _blocks(path: Path, uid: int) -> bool:
    """Whether uid (with no groups but its own gid, equal to it) cannot traverse the directory."""
    st = path.stat()
    bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == uid else 0o001
    return not st.st_mode & bit


def reveals(paths: Sequence[Path], uid: int | None) -> list[tuple[str, list[str]]]:
    """For each topmost ancestor uid cannot traverse, the paths under it to bind back (none nested in another)."""
    if uid is None:
        return []
    # each path where it resolves to and where it is named: an env linked into another cache (a symlink) is read by
    # its linked name (the interpreter's sys.prefix), which must lead somewhere inside the cell too
    named = dict.fromkeys(os.path.abspath(p) for p in paths if p.exists())
    wanted = sorted({*_existing(paths), *named}, key=lambda p: (p.count(os.sep), p))
    wanted = [p for p in wanted if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in wanted)]
    grouped: dict[str, list[str]] = {}
    for path in wanted:
        for ancestor in reversed(Path(path).parents):
            if ancestor != Path("/") and _blocks(ancestor, uid):
                grouped.setdefault(str(ancestor), []).append(path)
                break
    return sorted(grouped.items())


def hand_over(paths: Sequence[Path], uid: int | None) -> None:
    """Make the cell's uid the owner of what it may write and all in it (its pytest.ini, written 0600 by the
    harness, included): the harness, root, reads and removes it after. No link is followed."""
    if uid is None:
        return
    for top in _existing(paths):
        os.chown(top, uid, uid)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def readable_by_all(top: Path) -> None:
    """top, a file or a directory and all it holds, readable by any uid (see _readable_by_all)."""
    mode = os.lstat(top).st_mode
    if stat.S_ISREG(mode) and mode & 0o004 != 0o004:
        os.chmod(top, stat.S_IMODE(mode) | 0o004)
    elif stat.S_ISDIR(mode):
        if mode & 0o005 != 0o005:
            os.chmod(top, stat.S_IMODE(mode) | 0o005)
        _readable_by_all(top)


def _readable_by_all(top: Path) -> None:
    """Let any uid read what top holds (files o+r, directories o+rx) where the harness wrote it 0600 (mkstemp's
    mode, before write_atomic gave files open()'s): a build's site made by an earlier harness, read by a cell that
    runs as nobody. Modes only; no link is followed."""
    for root, dirs, files in os.walk(top):
        for name, bits in [*((d, 0o005) for d in dirs), *((f, 0o004) for f in files)]:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & bits != bits:
                os.chmod(path, stat.S_IMODE(mode) | bits)


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """How cells are isolated on this host: 'namespaces', or 'none' with the reason."""

    kind: str
    reason: str = ""

    @property
    def isolated(self) -> bool:
        return self.kind == "namespaces"

    @property
    def guarantees_off(self) -> list[str]:
        """What a cell does not get on this host, in words (empty: everything the sandbox promises)."""
        if not self.isolated:
            return [f"the sandbox ({self.reason})"]
        if cell_uid() is None:
            return ["an unprivileged uid (the harness is not root: a cell runs as the harness's own uid)"]
        return []

    def wrap(
        self,
        argv: Sequence[str],
        writable: Sequence[Path],
        *,
        keep_capabilities: bool = False,
        world: World | None = None,
    ) -> list[str]:
        """argv run inside the sandbox: the whole filesystem read-only but the writable paths and a private
        /dev/shm, in the cell's world (`World`; by default one whose reads are what argv names). keep_capabilities:
        a forkserver, which makes each cell's world itself. Without namespaces the cell still dies with the
        harness (pdeathsig), where setpriv exists."""
        if not self.isolated:
            return ["setpriv", "--pdeathsig", "KILL", "--", *argv] if shutil.which("setpriv") else list(argv)
        userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        if keep_capabilities:
            joins, ops, command = "", [a for m in self.mounts(writable) for a in m], list(argv)
        else:
            world = world or World(tuple(writable), tuple(readable_in(argv)))
            hand_over(world.writable, world.uid)
            plan = json.dumps(world.plan(join=False))
            joins, ops = " ".join(map(str, world.cgroups)), []
            command = [sys.executable, "-I", "-S", str(CELLWORLD), plan, "--", *argv]
        return [
            "setpriv",
            "--pdeathsig",
            "KILL",
            "--",
            "unshare",
            *userns,
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--net",
            "--ipc",
            "--uts",
            "--fork",
            "--kill-child",
            "--",
            "sh",
            "-c",
            INIT,
            "harness-cell-init",
            "keep" if keep_capabilities else "drop",
            joins,
            *ops,
            "--",
            *command,
        ]

    @staticmethod
    def mounts(writable: Sequence[Path]) -> list[tuple[str, str]]:
        """What a namespace made from the host's mounts after INIT made them all read-only, in order:
        (hide|rw|shm, absolute path). The host's CUDA toolkit libraries are hidden: a cell loads the CUDA its
        torch ships, or none, as in a container."""
        return [("hide", path) for path in host_cuda_dirs()] + Sandbox.holes(writable)

    @staticmethod
    def holes(writable: Sequence[Path]) -> list[tuple[str, str]]:
        """What a cell may write in a read-only world: its writable paths and an empty /dev/shm of its own."""
        return [("rw", path) for path in _existing(writable)] + [("shm", SHM)]

    def returncode(self, code: int) -> int:
        """The cell's own exit code: the init's 128+N is death by signal N (negative, like subprocess's)."""
        if self.isolated and 128 < code <= 128 + 64:
            return -(code - 128)
        return code


def _existing(paths: Sequence[Path]) -> list[str]:
    """Absolute, existing, each once, parents before children (a child is bound after its parent)."""
    seen = dict.fromkeys(str(p.resolve()) for p in paths if p.exists())
    return sorted(seen, key=lambda p: (p.count(os.sep), p))


@functools.cache
def detect() -> Sandbox:
    """Whether this host lets the harness isolate cells; tried once, for real, per process."""
    missing = [tool for tool in ("unshare", "setpriv", "mount", "sh") if shutil.which(tool) is None]
    if missing:
        return Sandbox("none", f"{', '.join(missing)} not found (util-linux)")
    probe = Sandbox("namespaces")
    with tempfile.TemporaryDirectory(prefix="harness-sandbox-") as tmp:
        # succeeds only where the cell's world starts, its own directory takes a write, and a directory anyone may
        # write (mode 0777, so that only the read-only mount refuses the cell's uid) does not
        base = Path(tmp)
        base.chmod(0o755)
        hole, open_to_all = base / "hole", base / "open"
        hole.mkdir()
        open_to_all.mkdir()
        open_to_all.chmod(0o777)
        script = f"touch {hole}/written && ! touch {open_to_all}/written 2>/dev/null"
        argv = probe.wrap(["sh", "-c", script], [hole])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Sandbox("none", f"the sandbox did not start: {exc}")
        if proc.returncode == 0 and not (hole / "written").exists():
            return Sandbox("none", "the sandbox started, but its cell's writable directory took no write")
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if proc.returncode == SETUP_FAILED:  # namespaces made, but the world could not be made
            return Sandbox("none", f"the sandbox could not make its mounts ({detail})")
        return Sandbox("none", f"the kernel refused the namespaces ({detail})")
    hidden = gpu_hidden(probe)
    if hidden:
        return Sandbox("none", hidden)
    return probe


# The CUDA driver's own initialisation, as torch's first CUDA call makes it: 0 is CUDA_SUCCESS.
CU_INIT = "import ctypes, sys; sys.stdout.write(str(ctypes.CDLL('libcuda.so.1').cuInit(0)))"


def gpu_hidden(probe: Sandbox) -> str | None:
    """Why the sandbox would hide this host's GPU from a cell, or None. On a host with a GPU whose driver
    initialises outside the sandbox, it must initialise inside it too; where it does not (seen on an H200 machine:
    error 304, "OS call failed", under the PID namespace with the host's /proc and under the read-only mounts),
    cells run outside the sandbox rather than report a GPU the runtime has as missing."""
    if not gpu_device_nodes():
        return None
    try:
        outside = subprocess.run([sys.executable, "-c", CU_INIT], capture_output=True, text=True, timeout=60)
        if outside.stdout != "0":
            return None  # no working driver here: nothing the sandbox could hide
        with tempfile.TemporaryDirectory(prefix="harness-sandbox-") as tmp:
            argv = probe.wrap([sys.executable, "-c", CU_INIT], [Path(tmp)])
            inside = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the GPU check did not finish ({exc}): cells run outside the sandbox"
    if inside.stdout == "0":
        return None
    said = f"cuInit returned {inside.stdout}" if inside.stdout else f"exit {inside.returncode}"
    return f"the GPU's driver does not initialise inside the sandbox ({said}): cells run outside it, unconfined"


# CUDA toolkit libraries whose soname carries the CUDA major: on the loader's path they would stand in
# for what a runtime's torch does not ship (a CUDA 13 build loading into torch+cu128).
CUDA_TOOLKIT_LIBRARY = re.compile(
    r"^lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|nvblas|cupti|cufft|cusparse|curand|cusolver)\.so"
)
SYSTEM_LIBRARY_DIRS = {"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"}


GPU_DEVICE_NODES = (
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
    "/dev/dri/*",
)  # NVIDIA's driver nodes; a GPU's DRM nodes (a GPU is here)


def gpu_device_nodes() -> tuple[str, ...]:
    """The GPU's character devices on this host (none on a machine without one)."""
    found = []
    for pattern in GPU_DEVICE_NODES:
        for path in glob.glob(pattern):
            try:
                if stat.S_ISCHR(os.stat(path).st_mode):
                    found.append(path)
            except OSError:
                continue
    return tuple(sorted(found))


@functools.cache
def host_cuda_dirs() -> tuple[str, ...]:
    """Directories of the loader's cache (`ldconfig -p`) that hold a CUDA toolkit's libraries, never a
    system library directory (the GPU driver's libcuda.so lives there and stays visible)."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = set()
    for line in listing.splitlines():
        name, _, target = line.strip().partition(" => ")
        if target and CUDA_TOOLKIT_LIBRARY.match(name):
            directory = os.path.realpath(os.path.dirname(target))
            if directory not in SYSTEM_LIBRARY_DIRS and not os.path.exists(os.path.join(directory, "libc.so.6")):
                found.add(directory)
    return tuple(sorted(found))
