"""What a build recipe needs of this machine: a C++ compiler, probed before it runs; Python's headers for the
build env's interpreter, probed before it runs where its sources include Python.h (directly, or through
torch/extension.h or pybind11); nvcc and the CUDA headers, probed before it runs where the extension declares
them (`requires: [nvcc]`). Else learnt from the build failing for want of them (`nvcc_missing`; a header the
machine should provide, `header_lack`).

A machine without them cannot build the extension, which says nothing about the extension: its
cells are SKIPPED with the reason and the fix (ERROR with `run --require-toolchain`), never
BUILD_FAILED, which would read as a broken promise.

nvcc is found where the person running the harness put it: `$CUDA_HOME/bin` (or `$CUDA_PATH/bin`),
else `nvcc` on PATH. A toolkit that sits elsewhere (/usr/local/cuda with nothing on PATH) is named in
the fix, not used behind their back.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

CXX_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c", ".cu"})  # nvcc hands host code to the C++ compiler too
USUAL_TOOLKIT = Path("/usr/local/cuda")
# What a recipe prints when it needed nvcc and found none (torch.utils.cpp_extension, CMake, the shell): the
# build was tried (no `requires: [nvcc]`) and failed for want of the toolkit, which is the machine's lack.
NVCC_MISSING = re.compile(
    r"CUDA_HOME environment variable is not set|nvcc: (?:command )?not found|No such file or directory: '[^']*nvcc'"
    r"|command '[^']*nvcc' failed: No such file|No CMAKE_CUDA_COMPILER could be found|[Cc]ould not find (?:nvcc|CUDA)"
    r"|nvcc (?:was )?not found",
)
# Sources that include Python.h, directly or through a header that does: they need the interpreter's headers.
INCLUDES_PYTHON = re.compile(rb'#\s*include\s*[<"](?:Python\.h|torch/extension\.h|torch/python\.h|pybind11/)')
SOURCE_SUFFIXES = frozenset({*CXX_SUFFIXES, ".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl"})
# Headers the machine provides, never an extension: CPython's (the python3-dev package) and the CUDA toolkit's.
PYTHON_HEADER = re.compile(
    r"^(?:Python|pyconfig|structmember|frameobject|pythread|marshal|datetime|longintrepr|py\w+|Py\w+)\.h$|^cpython/"
)
CUDA_HEADER = re.compile(
    r"^(?:cuda|cuda_\w+|cudaProfiler|cublas\w*|cufft\w*|curand\w*|cusparse\w*|cusolver\w*|nvrtc|nvToolsExt|"
    r"driver_types|vector_types|device_\w+)\.h$|^(?:thrust|cub|cuda|nvtx3)/"
)
PYTHON_DEV = (
    "install python3-dev (Debian/Ubuntu; python3.X-dev for another release than the system's), python3-devel "
    "(Fedora/RHEL), python3-dev (Alpine: apk add python3-dev)"
)


@dataclasses.dataclass(frozen=True)
class Needs:
    """What an extension's build needs of this machine."""

    cxx: bool = False
    cuda: bool = False
    python: bool = False  # its sources include Python.h: the build env's interpreter must have its headers

    @classmethod
    def of(
        cls, root: Path, exclude: Path, ignored: frozenset[str] = frozenset(), requires: frozenset[str] = frozenset()
    ) -> Needs:
        """C/C++ sources under root (its tests and build leftovers excluded) need a compiler; nvcc and the CUDA
        headers only when the extension declares them (`requires: [nvcc]`): a .cu file says nothing of whether
        its recipe compiles it here (many compile .cu only when a GPU is present)."""
        suffixes: set[str] = set()
        python = False
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if d not in ignored and here / d != exclude]
            suffixes.update(Path(name).suffix for name in filenames)
            python = python or any(_includes_python(here / n) for n in filenames if Path(n).suffix in SOURCE_SUFFIXES)
        cuda = "nvcc" in requires
        return cls(cxx=bool(suffixes & CXX_SUFFIXES) or cuda, cuda=cuda, python=python)


def _includes_python(source: Path) -> bool:
    try:
        return INCLUDES_PYTHON.search(source.read_bytes()) is not None
    except OSError:
        return False


def nvcc_missing(log: str) -> str | None:
    """The line of a failed build's log that says it wanted nvcc and found none; None when nothing does."""
    matches = list(NVCC_MISSING.finditer(log))
    if not matches:
        return None
    found = matches[-1]  # the last: a traceback quotes the raising line before the error's own
    start, end = log.rfind("\n", 0, found.start()) + 1, log.find("\n", found.end())
    return log[start : end if end >= 0 else len(log)].strip()[:300]


@dataclasses.dataclass(frozen=True)
class Missing:
    """One thing the machine lacks for a recipe: what, how it was looked for, and how to get it."""

    tool: str
    looked: str
    fix: str
    lacks: str = ""  # what is missing, said otherwise than "no <tool> on this machine"

    def text(self) -> str:
        return f"{self.lacks or f'no {self.tool} on this machine'} ({self.looked}); {self.fix}"


def missing(
    needs: Needs, environ: Mapping[str, str] | None = None, python: str | Path | None = None
) -> tuple[Missing, ...]:
    """What of `needs` this machine lacks, as the build would look for it (empty: it can build). python: the
    build env's interpreter, whose headers a build that includes Python.h needs."""
    environ = os.environ if environ is None else environ
    keys = ("PATH", "CXX", "CUDA_HOME", "CUDA_PATH")
    found = _probe(needs, tuple((k, environ.get(k)) for k in keys))
    headers = python_headers(str(python)) if needs.python and python is not None else None
    return (*found, headers) if headers is not None else found


@functools.lru_cache(maxsize=32)
def python_headers(python: str) -> Missing | None:
    """What is missing where the interpreter's Python.h should be (its INCLUDEPY, where setuptools and
    torch.utils.cpp_extension look first, and its sysconfig `include` path); None when it is in either, or the
    interpreter cannot say."""
    code = (
        "import sys, sysconfig; print(sysconfig.get_config_var('INCLUDEPY') or ''); "
        "print(sysconfig.get_paths()['include']); print('%d.%d' % sys.version_info[:2])"
    )
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    said = [line.strip() for line in proc.stdout.splitlines()]
    if proc.returncode != 0 or len(said) < 3:
        return None
    includes = list(dict.fromkeys(Path(d) for d in said[:2] if d))
    if any((include / "Python.h").is_file() for include in includes):
        return None
    lacks = f"Python's headers for CPython {said[2]} ({python}) are missing"
    return Missing("Python headers", f"no Python.h in {' or '.join(map(str, includes))}", PYTHON_DEV, lacks)


def header_lack(
    header: str, python: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Missing | None:
    """Why a header a compiler did not find is this machine's lack: one of CPython's where the interpreter has
    no headers, or the CUDA toolkit's where nvcc or its headers are missing. None: the machine has what provides
    it (the recipe did not point its compiler there), or no machine provides it (the extension's own)."""
    if PYTHON_HEADER.match(header) and python is not None:
        return python_headers(str(python))
    if CUDA_HEADER.match(header):
        return next(iter(missing(Needs(cxx=True, cuda=True), environ)), None)
    return None


@functools.lru_cache(maxsize=32)
def _probe(needs: Needs, environ: tuple[tuple[str, str | None], ...]) -> tuple[Missing, ...]:
    env = {k: v for k, v in environ if v is not None}
    path = env.get("PATH", "")
    found: list[Missing] = []
    if needs.cxx or needs.cuda:
        cxx = (env.get("CXX") or "").strip()
        compiler = shlex.split(cxx)[0] if cxx else "c++"
        if shutil.which(compiler, path=path) is None:
            where = "$CXX" if cxx else "c++ on PATH"
            found.append(
                Missing(
                    "C++ compiler",
                    f"{where}: {compiler!r} not found",
                    "install one (Debian/Ubuntu: apt-get install g++) or point CXX at it",
                )
            )
    if needs.cuda:
        nvcc, root = find_nvcc(env)
        if nvcc is None:
            usual = USUAL_TOOLKIT / "bin" / "nvcc"
            hint = (
                f"there is {usual}: put {usual.parent} on PATH or export CUDA_HOME={USUAL_TOOLKIT}"
                if usual.is_file()
                else "install the CUDA toolkit whose major matches the build torch's CUDA (no GPU needed to "
                "build), then put its bin/ on PATH or export CUDA_HOME"
            )
            found.append(Missing("nvcc", "not in $CUDA_HOME/bin, $CUDA_PATH/bin or on PATH", hint))
        elif root is None or cuda_headers(root) is None:
            found.append(
                Missing(
                    "CUDA headers",
                    f"no include/cuda_runtime.h in the toolkit of {nvcc}",
                    "install the toolkit's development headers (cuda-cudart-dev) or set CUDA_HOME to a whole toolkit",
                )
            )
    return tuple(found)


def find_nvcc(env: Mapping[str, str]) -> tuple[str | None, Path | None]:
    """nvcc and the toolkit it belongs to: $CUDA_HOME or $CUDA_PATH, else nvcc on PATH."""
    for key in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(key):
            nvcc = Path(env[key]) / "bin" / "nvcc"
            return (str(nvcc), Path(env[key])) if os.access(nvcc, os.X_OK) else (None, None)
    nvcc_on_path = shutil.which("nvcc", path=env.get("PATH", ""))
    if nvcc_on_path is None:
        return None, None
    return nvcc_on_path, _toolkit_of(nvcc_on_path)


def _toolkit_of(nvcc: str) -> Path | None:
    """The toolkit an nvcc belongs to, as nvcc itself says (`_HERE_` of a dry run): /usr/local/bin/nvcc may
    be a wrapper script that runs /usr/local/cuda-13.0/bin/nvcc."""
    try:
        dry = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    here = re.search(r"^#\$ _HERE_=(.+)$", dry.stdout + dry.stderr, re.M)
    if here:
        return Path(here[1].strip()).parent
    return Path(nvcc).resolve().parent.parent


def cuda_headers(root: Path) -> Path | None:
    """The directory holding cuda_runtime.h in a toolkit (include/, or targets/<arch>/include/)."""
    for include in (root / "include", *sorted(root.glob("targets/*/include"))):
        if (include / "cuda_runtime.h").is_file():
            return include
    return None
