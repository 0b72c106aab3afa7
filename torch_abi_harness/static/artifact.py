"""What a built artifact asks of a runtime besides torch's symbols: a CUDA major, a Python ABI, host libraries.

Both are read from the artifact itself, never from configuration: the CUDA libraries its shared
objects name in DT_NEEDED (``libtorch_cuda.so``: any CUDA build of torch; ``libcudart.so.13``:
CUDA 13), and its wheel tags (``cp39-abi3``: CPython >= 3.9 without free threading). A runtime
provides the CUDA major of its torch's variant as prepared (``2.10.0+cu128``: CUDA 12;
``2.13.0+cpu``: none) and its CPython. :func:`unmet` lists what one does not give the other;
the promise (verdict.py) and the static prediction (predict.py) both read it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from torch_abi_harness.core.status import Condition
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.sonames import CUDA_MAJOR_LIBRARY, OTHER_CUDA_LIBRARY, TORCH_CUDA_LIBRARY
from torch_abi_harness.static.symbols import SharedObject, read_artifact
from torch_abi_harness.static.wheelfile import open_wheel

# The NVIDIA driver's own libraries: installed with the GPU driver, never by torch, CUDA wheels or a toolkit (a
# toolkit's stubs/libcuda.so only links); a machine without a GPU driver has none of them.
DRIVER_LIBRARY = re.compile(r"^lib(?:cuda\.so(?:\.\d+)*|nvidia-[\w.-]+\.so(?:\.\d+)*)$")
CUDA_VARIANT = re.compile(r"^cu(\d+)(\d)$")  # cu128 -> CUDA 12.8; cu92 -> 9.2
PYTHON = re.compile(r"^(\d+)\.(\d+)(t?)$")  # 3.11; 3.13t: free-threaded


def cuda_major(variant: str) -> int | None:
    """The CUDA major of a torch wheel variant: cu128 -> 12, cu130 -> 13; cpu, rocm6.2 -> None."""
    match = CUDA_VARIANT.match(variant)
    return int(match[1]) if match else None


@dataclasses.dataclass(frozen=True)
class RuntimeFacts:
    """What a runtime as prepared provides an artifact: its torch as installed, that torch's CUDA
    major (None: a torch without CUDA), its CPython (X.Y, with a `t` when free-threaded) and whether
    the runner it runs on has the NVIDIA driver (libcuda.so.1: a GPU runner)."""

    torch: str
    cuda: int | None
    python: str
    driver: bool = True

    @classmethod
    def of(cls, torch_version: str, variant: str, python: str, *, driver: bool = True) -> RuntimeFacts:
        return cls(torch_version, cuda_major(variant), python, driver)


@dataclasses.dataclass(frozen=True)
class Unmet:
    """One thing the artifact needs that the runtime does not provide, and why, in words."""

    condition: Condition
    why: str

    def to_json(self) -> dict[str, str]:
        return {"class": self.condition.value, "why": self.why}


@dataclasses.dataclass(frozen=True)
class ArtifactFacts:
    """The artifact's DT_NEEDED entries (every shared object's, sorted) and its wheel tags (none for a bare .so)."""

    needed: tuple[str, ...]
    tags: frozenset[Tag] = frozenset()
    host: tuple[str, ...] = ()  # what it needs of the host system: not torch's, CUDA's, Python's, libc's, nor its own
    host_missing: tuple[str, ...] = ()  # those of `host` this machine's loader does not find (decided before a run)

    @classmethod
    def of(cls, path: Path, objects: Sequence[SharedObject] | None = None) -> ArtifactFacts:
        """objects: the artifact's shared objects when already read (read_artifact), else read here."""
        found = read_artifact(path) if objects is None else objects
        needed = tuple(sorted({name for o in found for name in o.needed}))
        bundled = {Path(o.name).name for o in found} | {o.soname for o in found if o.soname}
        host = tuple(n for n in needed if host_libraries.is_host_library(n) and n not in bundled)
        return cls(needed, wheel_tags(path), host)

    @property
    def cuda_libraries(self) -> tuple[str, ...]:
        """Every CUDA library it needs, torch's own first (what the loader misses first on a CPU torch)."""
        torch = [n for n in self.needed if TORCH_CUDA_LIBRARY.match(n)]
        other = [n for n in self.needed if CUDA_MAJOR_LIBRARY.match(n) or OTHER_CUDA_LIBRARY.match(n)]
        return (*torch, *other)

    @property
    def cuda_majors(self) -> tuple[tuple[str, int], ...]:
        """(library, CUDA major) for each library that names its major: ('libcudart.so.13', 13)."""
        return tuple((n, int(m[2])) for n in self.needed if (m := CUDA_MAJOR_LIBRARY.match(n)))

    @property
    def driver_libraries(self) -> tuple[str, ...]:
        """The NVIDIA driver's libraries it needs: libcuda.so.1, libnvidia-ml.so.1."""
        return tuple(n for n in self.needed if DRIVER_LIBRARY.match(n))

    def to_json(self) -> dict[str, object]:
        return {"needed": list(self.needed), "tags": sorted(str(t) for t in self.tags)}


def wheel_tags(path: Path) -> frozenset[Tag]:
    """A wheel's tags: those of its file name and the `Tag:` lines of its WHEEL file (empty for a .so)."""
    if path.suffix != ".whl":
        return frozenset()
    tags: set[Tag] = set()
    try:
        tags |= parse_wheel_filename(path.name)[3]
    except InvalidWheelFilename:
        pass
    with open_wheel(path) as wheel:
        for member in wheel.namelist():
            if re.fullmatch(r"[^/]+\.dist-info/WHEEL", member):
                for line in wheel.read(member).decode("utf-8", "replace").splitlines():
                    if line.startswith("Tag:"):
                        tags |= parse_tag(line.partition(":")[2].strip())
    return frozenset(tags)


def python_fits(python: str) -> frozenset[tuple[str, str]]:
    """The (interpreter, abi) pairs CPython `python` (3.11, 3.13t) installs, by packaging.tags."""
    match = PYTHON.match(python)
    if not match:
        raise ValueError(f"{python!r} is not a CPython version such as '3.11' or '3.13t'")
    version = (int(match[1]), int(match[2]))
    interpreter = f"cp{version[0]}{version[1]}"
    threaded = bool(match[3])
    tags = [
        *cpython_tags(version, [interpreter + match[3]], ["any"]),
        *compatible_tags(version, interpreter, ["any"]),
    ]
    # A free-threaded CPython cannot load abi3 (packaging < 24.1 still offers it).
    return frozenset((t.interpreter, t.abi) for t in tags if not (threaded and t.abi == "abi3"))


def fits_which_python(tags: Iterable[Tag]) -> str:
    """'CPython >= 3.9 (not free-threaded)' / 'CPython 3.11 only': what a wheel's tags allow, in words."""
    parts = set()
    for tag in tags:
        version = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
        if tag.abi == "abi3" and version:
            parts.add(f"CPython >= {version[1]}.{version[2]} (not free-threaded)")
        elif version and tag.abi.startswith(tag.interpreter):
            parts.add(f"CPython {version[1]}.{version[2]}{'t' if tag.abi.endswith('t') else ''} only")
        else:
            parts.add(f"{tag.interpreter}-{tag.abi}")
    return " or ".join(sorted(parts))


def python_problem(tags: frozenset[Tag], python: str) -> str | None:
    """Why a wheel with these tags does not install on CPython `python`; None when it does, or has no tags."""
    if not tags or {(t.interpreter, t.abi) for t in tags} & python_fits(python):
        return None
    shown = ", ".join(sorted({f"{t.interpreter}-{t.abi}" for t in tags}))
    return f"a {shown} wheel fits {fits_which_python(tags)}; the runtime runs CPython {python}"


def unmet(artifact: ArtifactFacts, runtime: RuntimeFacts, *, any_cuda_major: bool = False) -> tuple[Unmet, ...]:
    """What the artifact needs and the runtime does not provide, in the order the promise classes it by (the first
    decides): Python ABI first (the wheel never installs), then the host system's libraries that this machine lacks
    (on every runtime alike: no torch provides them), then CUDA, then the NVIDIA driver (last: a build that also
    needs a CUDA the runtime lacks is classed by that).

    any_cuda_major: the build declares it works across CUDA majors (`cuda: any`): a different
    major is no condition; a torch without CUDA still is."""
    found: list[Unmet] = []
    why = python_problem(artifact.tags, runtime.python)
    if why:
        found.append(Unmet(Condition.PYTHON_ABI, why))
    if artifact.host_missing:
        found.append(Unmet(Condition.HOST_LIBRARY, host_libraries.describe_all(artifact.host_missing)))
    cuda = artifact.cuda_libraries
    if cuda and runtime.cuda is None:
        found.append(Unmet(Condition.NO_CUDA, f"needs {cuda[0]}; torch {runtime.torch} is a build without CUDA"))
    elif runtime.cuda is not None and not any_cuda_major:
        other = [library for library, major in artifact.cuda_majors if major != runtime.cuda]
        if other:
            found.append(
                Unmet(Condition.CUDA_MAJOR, f"needs {other[0]}; torch {runtime.torch} ships CUDA {runtime.cuda}")
            )
    driver = artifact.driver_libraries
    if driver and not runtime.driver:
        found.append(
            Unmet(Condition.NO_DRIVER, f"needs {driver[0]}, the NVIDIA driver's library; this runner has no GPU driver")
        )
    return tuple(found)
