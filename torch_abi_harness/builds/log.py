"""What a build's log says: the compiler's first error (the linker's own, where the linker failed), the target
it was really given, a want of nvcc or of a header the machine provides, a tool killed mid-build, and reads
outside the extension's folder."""

from __future__ import annotations

import re
from pathlib import Path

from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import Build
from torch_abi_harness.provision import toolchain
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.predict import ArtifactImports

# A compiler's command line as a recipe prints it (setuptools, ninja -v, CMake with VERBOSE=1): a source compiled
COMPILE_LINE = re.compile(r"\s-c\s+\S+\.(?:cpp|cc|cxx|c|cu)\b|\S+\.(?:cpp|cc|cxx|c|cu)\s+-c\s|\s-c\s+-o\s")
TARGET_DEFINE = re.compile(r"-DTORCH_TARGET_VERSION=(0[xX][0-9a-fA-F]{1,16})\b")
RECIPE_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "CMakeLists.txt")  # where a recipe names its sources
CLIMBING = re.compile(r"""["'(\s=]((?:\.\./)+[^"'\s)]*)""")  # a relative path that climbs out: '../csrc'


# The compiler driver's word that the linker failed, and the linker's own error lines (GNU ld, gold, lld, mold)
LINKER_FAILED = re.compile(r"collect2: error: ld returned|error: linker command failed|error: ld returned")
LINKER_ERROR = re.compile(
    r"multiple definition of|undefined reference to|cannot find -l|\bld(?:\.\w+)?: error:|\b(?:mold|lld): error:"
)
# A compiler that did not find an #include: gcc/nvcc's `fatal error: X: No such file or directory`, clang's
# `fatal error: 'X' file not found`
MISSING_HEADER = re.compile(r"fatal error: (?:'([^'\s]+)' file not found|([^:\s]+): No such file or directory)")


# A compiler or build tool that died of a signal (an interrupt, the OOM killer) or crashed: the
# recipe failed, but nothing was learnt about the extension's source.
KILLED_MARKERS = (
    "terminated by signal",
    "Killed signal terminated program",
    "internal compiler error",
    "KeyboardInterrupt",
)


def first_error_line(text: str, work: Path) -> str:
    """The compiler's first error, with the build copy's and torch's long paths cut off. Where that is the
    compiler driver's word that the linker failed (`collect2: error: ld returned 1 exit status`), the linker's
    own first error instead (`multiple definition of ...`, `undefined reference to ...`, `cannot find -lfoo`)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "error:" in line or "#error" in line:
            if LINKER_FAILED.search(line):
                own = [x for x in (*lines[:index], *lines[index + 1 :]) if LINKER_ERROR.search(x)]
                line = own[0] if own else line
            line = line.replace(f"{work}/", "")
            line = re.sub(r"\S*/site-packages/torch/include/", "<torch>/include/", line)
            return line.strip()[:300]
    return "the recipe exited non-zero (see the build log)"


def missing_header(text: str) -> str | None:
    """The first #include a compiler did not find ('Python.h'), from its `fatal error:` line; None: none."""
    match = MISSING_HEADER.search(text)
    return (match[1] or match[2]) if match else None


def in_tree(root: Path, header: str) -> bool:
    """Whether the extension's tree holds a file that is this header (csrc/ops.h for 'ops.h' or 'csrc/ops.h')."""
    name = Path(header).name
    return any(str(found).endswith(f"/{header}") for found in root.rglob(name) if found.is_file())


def machine_lack(text: str, root: Path, python: str | Path | None = None) -> str | None:
    """What a failed build's log says this machine lacks, as its toolchain reason; None: nothing of the machine.

    The recipe wanted nvcc and found none; or its compiler did not find a header the machine provides (CPython's
    where the interpreter has none, the CUDA toolkit's where nvcc or its headers are missing) and the extension's
    tree (root: its sources_root, where it has one) does not hold it. A header of the extension's own that is
    missing, misspelt or not on its include path stays a build failure."""
    line = toolchain.nvcc_missing(text)
    if line is not None:
        return needs_nvcc(line)
    header = missing_header(text)
    if header is None or in_tree(root, header):
        return None
    lack = toolchain.header_lack(header, python)
    return f"the build needs {header}, which this machine lacks: {lack.text()}" if lack is not None else None


def climbed_out(root: Path) -> str | None:
    """A finding for a build that succeeded although its recipe reads outside the extension's directory, which
    is not copied into the build (it may have built without those files); None: its recipe stays inside."""
    climbing = climbing_paths(root)
    if not climbing:
        return None
    return (
        f"the recipe reads outside the extension's directory ({climbing[0]}), which is not copied into the build: "
        "it built without those files, so its wheel may lack what they hold; declare the folder it reads from in "
        "extension.yaml (e.g. sources_root: ..)"
    )


def needs_nvcc(line: str) -> str:
    """A tried build's want of nvcc as its toolchain reason: what its log said, and how to get one."""
    lacks = toolchain.missing(toolchain.Needs(cxx=True, cuda=True))
    fix = "; ".join(m.text() for m in lacks) or "nvcc was not found as the recipe looked for it"
    return f"the recipe needs nvcc ({line}): {fix}"


def compiled_levels(text: str) -> tuple[ApiLevel, ...] | None:
    """Every -DTORCH_TARGET_VERSION a build's compiler command lines gave, in order, each once; () when its log
    shows compiler command lines and none defines it; None when it shows none (nothing is known from the log)."""
    levels = [ApiLevel.from_hex(m) for m in TARGET_DEFINE.findall(text)]
    if levels:
        return tuple(dict.fromkeys(levels))
    return () if COMPILE_LINE.search(text) else None


def compiled_target(build: Build, text: str, imports: ArtifactImports) -> tuple[ApiLevel, tuple[str, ...]]:
    """The level a build was really compiled for, and the findings where that is not the matrix's target.

    Read from what its compiler was given (the log's -DTORCH_TARGET_VERSION; command lines without one: the
    build torch's own level). A setup.py that hard-codes its own target is promised that target. A stable shim it
    imports that is newer than that level (the manifest says which release first exports it) is a finding, never a
    new promise: it is what a leaking header guard does."""
    asked, own = build.effective_target, ApiLevel.of(build.torch)
    levels = compiled_levels(text)
    found: list[str] = []
    if levels is None:
        level = asked
    elif not levels:
        level = own
        if build.target:
            found.append(
                f"asked for target {build.target}, but no compiler command line in its build log defines "
                f"TORCH_TARGET_VERSION: built for its build torch's own level {own} (pass the TORCH_TARGET_VERSION "
                "the harness exports to the compiler, e.g. -DTORCH_TARGET_VERSION=$TORCH_TARGET_VERSION)"
            )
    else:
        level = max(levels)
        if len(levels) > 1:
            shown = ", ".join(f"{lv} ({lv.hex})" for lv in levels)
            found.append(f"its compiler command lines define several TORCH_TARGET_VERSION values: {shown}")
        if level != asked:
            found.append(
                f"asked for target {build.target or f'none (its build torch {own})'}, but its compiler was given "
                f"-DTORCH_TARGET_VERSION={level.hex}: built for {level} (its recipe sets its own target); "
                f"its cells are promised by {level}"
            )
    newest = prebuilt.newest_stable_import(imports, packaged_manifest())
    if newest is not None and ApiLevel.of(newest[0]) > level:
        # What its compiler was given stays the promise: headers that leak a newer shim into a build for `level`
        # are the break the promise exists to catch (a guard bug in torch's headers, or a call the target lacks),
        # so its cells on older runtimes stay promised, and break.
        release, name = newest
        found.append(
            f"built for {level} but imports {name}, first exported in {release}: it needs stable-ABI level "
            f"{ApiLevel.of(release)} (its cells are still promised by {level}, what its compiler was given)"
        )
    return level, tuple(found)


def climbing_paths(root: Path) -> tuple[str, ...]:
    """Relative paths that climb out of the extension's directory ('../csrc') in its recipe's files, each as
    'setup.py, line 12: ../csrc'."""
    found: list[str] = []
    for name in RECIPE_FILES:
        try:
            lines = (root / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            found.extend(f"{name}, line {number}: {m}" for m in CLIMBING.findall(f" {line}"))
    return tuple(found)


def outside_reads(root: Path, text: str, copied: Path, work: Path) -> str | None:
    """Why a failed build failed, where it read outside what was copied for it: a recipe path that climbs out of
    the extension's directory, or a file it did not find outside the build's copy. None: neither."""
    climbing = climbing_paths(root)
    missing = [
        line.strip()
        for line in text.splitlines()
        if "No such file" in line and ("../" in line or (str(copied.parent) in line and str(work) not in line))
    ]
    if not climbing and not missing:
        return None
    seen = climbing[0] if climbing else missing[0].replace(f"{copied.parent}/", "../")[:200]  # as the recipe sees it
    return (
        f"the recipe reads outside the extension's directory ({seen}), which is not copied into the build: declare "
        f"the folder it reads from in extension.yaml (e.g. sources_root: ..; the build then runs in "
        f"{root.name}/ of a copy of that folder)"
    )
