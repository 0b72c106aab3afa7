"""Libraries an extension needs that are neither torch's, CUDA's, Python's nor the C/C++ runtime's: a codec, a
BLAS, a compression library. A runtime that lacks one cannot load the module, and that is no verdict on torch's
ABI: such a cell is an expected failure of class host-library, naming the library and the package that usually
provides it (torch_abi_harness/data/host_libraries.json)."""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Sequence
from importlib import resources

from torch_abi_harness.static.sonames import CUDA_MAJOR_LIBRARY, OTHER_CUDA_LIBRARY, TORCH_CUDA_LIBRARY

# What torch's wheels, CUDA's, the NVIDIA driver (libcuda, libnvidia-*: class no-driver) and the C/C++ runtime
# provide: never a host library.
PROVIDED = re.compile(
    r"^(lib(torch\w*|c10\w*|shm|caffe2\w*|cuda|nvrtc\w*|nvJitLink|nvToolsExt|cupti|cusparseLt|nccl|nvshmem\w*|cufile\w*"
    r"|nvidia-[\w.-]+)"
    r"\.so(\.\d+)*"
    r"|lib(c|m|dl|rt|pthread|util|resolv|stdc\+\+|gcc_s|atomic)\.so(\.\d+)*"
    r"|ld-linux[\w.-]*\.so(\.\d+)*|libpython3[\w.]*\.so(\.\d+)*)$"
)
# The NVIDIA driver's own libraries: installed with the driver, on a GPU machine only (never by torch or CUDA's wheels).
DRIVER_LIBRARY = re.compile(r"^lib(cuda|nvidia-[\w.-]+?)\.so(\.\d+)*$")
# The error a loader gives for a library it cannot find: "libavutil.so.59: cannot open shared object file".
CANNOT_OPEN = re.compile(r"([\w.+-]+\.so[.\d]*): cannot open shared object file")


def is_host_library(soname: str) -> bool:
    """Whether a DT_NEEDED entry is a library the host system, not torch or CUDA, must provide."""
    if PROVIDED.match(soname) or TORCH_CUDA_LIBRARY.match(soname) or CUDA_MAJOR_LIBRARY.match(soname):
        return False
    return not OTHER_CUDA_LIBRARY.match(soname)


@functools.cache
def _table() -> tuple[tuple[str, str, str], ...]:
    data = json.loads(resources.files("torch_abi_harness.data").joinpath("host_libraries.json").read_text())
    return tuple((e["soname"], e["project"], e["debian"]) for e in data["libraries"])


def usual_package(soname: str) -> str | None:
    """Who usually provides the library: 'FFmpeg (Debian: libavutil-dev ...)'; None when it is not listed."""
    for pattern, project, debian in _table():
        if fnmatch.fnmatchcase(soname, pattern):
            return f"{project} (Debian: {debian})"
    return None


def is_driver_library(soname: str) -> bool:
    """Whether a DT_NEEDED entry is the NVIDIA driver's (libcuda.so.1, libnvidia-ml.so.1): a CPU machine lacks it."""
    return bool(DRIVER_LIBRARY.match(soname))


def project_of(soname: str) -> str | None:
    """The project that makes the library ('FFmpeg' for libavutil.so.59); None when it is not listed."""
    return next((project for pattern, project, _ in _table() if fnmatch.fnmatchcase(soname, pattern)), None)


def missing_host_library(error: str) -> str | None:
    """The host library a loader's error says it could not find; None when it names none, or a torch/CUDA one."""
    match = CANNOT_OPEN.search(error)
    return match[1] if match and is_host_library(match[1]) else None


def describe(soname: str) -> str:
    """Why a cell missing this library is an expected failure, in words."""
    return describe_all([soname])


def describe_all(sonames: Sequence[str]) -> str:
    """Why a cell missing these libraries is an expected failure, in words: each library, then who usually provides
    them ('needs libavutil.so.59, which neither torch nor CUDA provides ... (usually from FFmpeg (Debian: ...))')."""
    packages = list(dict.fromkeys(usual_package(s) for s in sonames))
    sources = "; ".join(f"usually from {p}" if p else "no package is known for it here" for p in packages)
    return (
        f"needs {', '.join(sonames)}, which neither torch nor CUDA provides and this runtime's system lacks ({sources})"
    )


# The libraries describe_all names, read back from a promise's reason (results.json keeps the reason, not the list).
DESCRIBED = re.compile(
    r"needs ((?:[\w.+-]+\.so[.\d]*)(?:, [\w.+-]+\.so[.\d]*)*), which neither torch nor CUDA provides"
)


def named_in(why: str) -> list[str]:
    """The host libraries a promise's reason names (describe_all's), in its order; none when it names none."""
    match = DESCRIBED.search(why)
    return match[1].split(", ") if match else []
