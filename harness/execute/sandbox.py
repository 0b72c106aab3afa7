"""The venv backend's cell sandbox: what a cell runs on cannot be changed by it, and nothing it
starts outlives it.

A cell's pytest runs under `setpriv --pdeathsig KILL` (it dies with the harness thread that
started it, even when the harness is SIGKILLed), in new mount and PID namespaces made by
`unshare` (a user namespace too when the harness is not root). A small POSIX shell init, PID 1
there, bind-mounts every protected path read-only (the harness cache with its envs and builds,
uv's cache whose files the envs hardlink, the probe plugin, the extension's sources and tests,
the run's reports), mounts the cell's own output directory writable again, and runs the cell
with every capability dropped, so it can neither write through those mounts nor remount them.
When the cell's process ends, PID 1 exits with its status and the kernel kills every process
left in the namespace: a test's `setsid` child included.

The init reports a death by signal N as exit 128+N (PID 1 cannot re-raise it), which `returncode`
maps back, as the docker backend does for its init.

Where the kernel refuses namespaces (no unshare, user namespaces forbidden), cells run as before,
in a process group, and the run says so once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.core import commands
from harness.core.errors import CommandError
from harness.provision.sources import uv_binary

log = logging.getLogger(__name__)

# Arguments: drop|keep (ro|rw|hide PATH)... -- COMMAND...; paths in order, so a writable one inside a
# read-only one opens it again; `hide` puts an empty read-only tmpfs over a directory. `keep` runs
# COMMAND with its capabilities: the forkserver, which sandboxes each cell itself.
INIT = """\
caps=$1; shift
while [ "$1" != "--" ]; do
  if [ "$1" = hide ]; then mount -t tmpfs -o ro,size=4k,mode=555 harness-hidden "$2"
  else mount --bind "$2" "$2" && mount -o "remount,bind,$1" "$2"
  fi || { echo "harness sandbox: cannot mount $2 $1" >&2; exit 125; }
  shift 2
done
shift
if [ "$caps" = keep ]; then "$@"; else setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"; fi
exit $?
"""
SETUP_FAILED = 125  # INIT could not make the mounts: the sandbox, not the cell, failed


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """How cells are isolated on this host: 'namespaces', or 'none' with the reason."""

    kind: str
    reason: str = ""

    @property
    def isolated(self) -> bool:
        return self.kind == "namespaces"

    def wrap(
        self, argv: Sequence[str], protected: Sequence[Path], writable: Sequence[Path], keep_capabilities: bool = False
    ) -> list[str]:
        """argv run inside the sandbox, protected paths read-only and writable ones (inside them) writable.
        Without namespaces the cell still dies with the harness (pdeathsig), where setpriv exists."""
        if not self.isolated:
            return ["setpriv", "--pdeathsig", "KILL", "--", *argv] if shutil.which("setpriv") else list(argv)
        userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
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
            "--fork",
            "--kill-child",
            "--",
            "sh",
            "-c",
            INIT,
            "harness-cell-init",
            "keep" if keep_capabilities else "drop",
            *(arg for mount in self.mounts(protected, writable) for arg in mount),
            "--",
            *argv,
        ]

    @staticmethod
    def mounts(protected: Sequence[Path], writable: Sequence[Path]) -> list[tuple[str, str]]:
        """The mounts a cell's sandbox makes, in order: (ro|rw|hide, absolute path). The host's CUDA
        toolkit libraries are hidden: a cell loads the CUDA its torch ships, or none, as in a container."""
        hidden = [("hide", path) for path in host_cuda_dirs()]
        return hidden + [("ro", path) for path in _existing(protected)] + [("rw", path) for path in _existing(writable)]

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
        # succeeds only where the sandbox starts *and* a protected path refuses a write
        argv = probe.wrap(["sh", "-c", f"! touch {tmp}/written 2>/dev/null"], [Path(tmp)], [])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Sandbox("none", f"the sandbox did not start: {exc}")
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return Sandbox("none", f"the kernel refused the namespaces ({detail})")
    return probe


# CUDA toolkit libraries whose soname carries the CUDA major: on the loader's path they would stand in
# for what a runtime's torch does not ship (a CUDA 13 build loading into torch+cu128).
CUDA_TOOLKIT_LIBRARY = re.compile(
    r"^lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|nvblas|cupti|cufft|cusparse|curand|cusolver)\.so"
)
SYSTEM_LIBRARY_DIRS = {"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"}


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


@functools.cache
def uv_cache_dir() -> Path | None:
    """uv's cache, whose files the envs hardlink (writing one changes every env of that release)."""
    try:
        out = commands.run([uv_binary(), "cache", "dir"], timeout=30).stdout.strip().splitlines()
    except (CommandError, OSError) as exc:  # the cell still runs; only this path goes unprotected
        log.warning("uv's cache directory not found, so not protected from cells: %s", exc)
        return None
    return Path(out[-1]) if out else None
