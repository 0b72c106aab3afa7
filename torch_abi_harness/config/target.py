"""The TORCH_TARGET_VERSION an extension's own sources declare, read as text: the default `target` of an author's
`[tool.torch-abi-harness]` table.

An author states the target once, where the compiler sees it: a `-DTORCH_TARGET_VERSION=0x020a000000000000` in
setup.py or CMakeLists.txt, a `("TORCH_TARGET_VERSION", "0x...")` define macro, or a `#define` in a header. The
harness reads that value instead of asking for it twice; two different values are a problem naming both places,
never a guess. The walk skips what a build or a checkout leaves behind and reads bounded files only.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path

from torch_abi_harness.core.versions import ApiLevel

# The name, then at most a few characters of punctuation or quoting (`=`, ` `, `", "`, `':'`), then the hex value.
DECLARED = re.compile(r"TORCH_TARGET_VERSION\b[\s=:,\"'()]{1,6}(0x[0-9a-fA-F]{1,16})(?![0-9a-fA-F])")
BUILD_FILES = frozenset({"setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", "meson.build"})
SOURCE_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".cmake"})
SKIPPED_DIRS = frozenset({"build", "dist", "node_modules", "site-packages", "__pycache__", "third_party", "reports"})
MAX_FILE_BYTES = 2 * 2**20  # a source file larger than this is generated, not where a target is stated
MAX_FILES = 5_000  # a tree larger than this is read this far: the build files at its top come first


@dataclasses.dataclass(frozen=True)
class Declared:
    """One TORCH_TARGET_VERSION value the sources state, and where (a path relative to the project, a line)."""

    level: ApiLevel
    value: str
    where: str


def candidate_files(root: Path) -> Iterator[Path]:
    """The project's build files and C, C++ and CUDA sources, top folder first, without following links and
    without hidden folders, virtual environments or what a build leaves (build/, dist/, *.egg-info)."""
    count = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            and not (Path(folder) / d / "pyvenv.cfg").exists()
        )  # fmt: skip
        for name in sorted(files):
            path = Path(folder) / name
            if (name in BUILD_FILES or path.suffix in SOURCE_SUFFIXES) and not path.is_symlink():
                count += 1
                if count > MAX_FILES:
                    return
                yield path


def declared_targets(root: Path) -> list[Declared]:
    """Every TORCH_TARGET_VERSION value stated under root, in the order the walk meets them."""
    found: list[Declared] = []
    for path in candidate_files(root):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for match in DECLARED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Declared(ApiLevel.from_hex(match[1]), match[1], f"{path.relative_to(root)}:{line}"))
    return found


def source_target(root: Path) -> tuple[ApiLevel | None, str]:
    """The one level the sources declare, and where it was read (in words); None and why when they declare none or
    several."""
    found = declared_targets(root)
    levels = sorted({d.level for d in found})
    if not found:
        return None, "no TORCH_TARGET_VERSION is given in the project's setup.py, CMakeLists.txt or sources"
    if len(levels) > 1:
        places = "; ".join(f"{d.level} ({d.value}) at {d.where}" for d in found[:6])
        return None, f"the sources give more than one TORCH_TARGET_VERSION: {places}"
    return levels[0], f"TORCH_TARGET_VERSION={found[0].value} at {found[0].where}"
