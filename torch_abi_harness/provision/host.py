"""What a run ran on, recorded in results.json: the machine, its C library, the C++ compiler and nvcc.

A grid is read months later, beside others: a cell that broke on one host and not another is
explained by these facts (a newer glibc in the build, another nvcc) more often than by torch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import os
import platform
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from torch_abi_harness.provision.toolchain import find_nvcc


@dataclasses.dataclass(frozen=True)
class HostFacts:
    os: str  # platform.platform(): "Linux-6.1.0-...-x86_64-with-glibc2.36"
    machine: str  # x86_64, aarch64
    cpus: int | None
    glibc: str | None  # "2.36"; None: another C library (musl) or another OS
    python: str  # the harness's own interpreter, "3.11.9"
    compiler: str | None  # the first line of `$CXX --version` (c++ when CXX is unset); None: none found
    nvcc: str | None  # the last line of `nvcc --version` ($CUDA_HOME's, else PATH's); None: none found

    @classmethod
    def probe(cls, environ: Mapping[str, str] | None = None) -> HostFacts:
        environ = os.environ if environ is None else environ
        libc, version = platform.libc_ver()
        cxx = (environ.get("CXX") or "").strip()
        nvcc, _ = find_nvcc(environ)
        return cls(
            os=platform.platform(),
            machine=platform.machine(),
            cpus=os.cpu_count(),
            glibc=version if libc == "glibc" and version else None,
            python=platform.python_version(),
            compiler=_version_line([*(shlex.split(cxx) if cxx else ["c++"]), "--version"], first=True),
            nvcc=_version_line([nvcc, "--version"], first=False) if nvcc else None,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostFacts:
        return cls(**{field.name: data[field.name] for field in dataclasses.fields(cls)})


@functools.cache
def nvidia_driver() -> str | None:
    """The NVIDIA driver's libcuda as this machine's loader finds it ('libcuda.so.1'); None: no GPU driver (a CPU
    runner), where a module that needs it cannot load, whatever torch it runs with."""
    found = ctypes.util.find_library("cuda")
    if found:
        return found
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LAZY)
    except OSError:
        return None
    return "libcuda.so.1"


def _version_line(argv: list[str], *, first: bool) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return (lines[0] if first else lines[-1]) if lines else None


# Where the loader looks without being told (ld.so's trusted directories, Debian's multiarch ones among them).
DEFAULT_LIBRARY_DIRS = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    f"/lib/{platform.machine()}-linux-gnu",
    f"/usr/lib/{platform.machine()}-linux-gnu",
)


@functools.cache
def loader_cache() -> frozenset[str]:
    """The sonames in this machine's loader cache (`ldconfig -p`): what dlopen finds by name beyond LD_LIBRARY_PATH
    and the default directories; empty where there is no ldconfig."""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return frozenset(line.strip().split(" ", 1)[0] for line in listing.splitlines()[1:] if " => " in line)
    return frozenset()


def loader_finds(soname: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this machine's loader would find the library by its soname, as dlopen looks: LD_LIBRARY_PATH, the
    loader cache, the default directories. Asked, never loaded: nothing of the library runs in the harness."""
    environ = os.environ if environ is None else environ
    if soname in loader_cache():
        return True
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return any(os.path.exists(os.path.join(d, soname)) for d in (*dirs, *DEFAULT_LIBRARY_DIRS))


def missing_here(sonames: Iterable[str]) -> tuple[str, ...]:
    """The libraries this machine's loader does not find (loader_finds), in their order."""
    return tuple(name for name in sonames if not loader_finds(name))
