"""ELF dynamic symbols (pyelftools): what an artifact imports and what a runtime's libraries export.

No torch import and no loader: reading symbol tables takes milliseconds where
loading torch takes seconds. Artifacts may be a shared object or a wheel (its
shared objects are read from the zip without unpacking).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import os
import re
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from torch_abi_harness.core.errors import BadInputError

STABLE_C_NAME = re.compile(r"^(aoti_torch_|torch_)\w+$")
TORCH_NAMESPACES = ("at::", "c10::", "torch::", "caffe2::")
SYSTEM_VERSION = re.compile(r"^(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)$")
# A C string of read-only data that ends in a qualified name: 'aten::narrow', the op name a call passes
# (its overload is another string). Short strings may follow other data with no NUL between: the
# reader of these strings (opcalls.py) matches the namespace as a suffix of what is found before '::'.
QUALIFIED_NAME = re.compile(rb"([A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*)(?=\x00)")
# A call's source text, kept in read-only data by the check macros that wrap it (STD_TORCH_CHECK,
# TORCH_ERROR_CODE_CHECK): `torch_call_dispatcher("aten::sum", "dim_IntList", ...)` pairs name and overload.
DISPATCHER_CALL = re.compile(
    rb'(?:aoti_)?torch_call_dispatcher\(\s*"([A-Za-z0-9_]+::[A-Za-z0-9_]+)"\s*,\s*"([A-Za-z0-9_]*)"'
)


class SymbolKind(enum.StrEnum):
    STABLE = "stable"  # a C shim of the stable ABI (aoti_torch_* / torch_*)
    UNSTABLE = "unstable"  # mangled C++ from at::, c10::, torch::: no cross-release promise
    PYTHON = "python"  # the interpreter's C API
    SYSTEM = "system"  # glibc, libstdc++, libgcc, CUDA... anything else


@dataclasses.dataclass(frozen=True)
class SharedObject:
    name: str
    imports: frozenset[str]  # undefined, strong
    weak_imports: frozenset[str]
    exports: frozenset[str]
    needed: tuple[str, ...]  # DT_NEEDED
    version_needs: tuple[str, ...]  # GLIBC_2.32, GLIBCXX_3.4.26, ...
    qualified_strings: frozenset[str] = frozenset()  # '...ns::name' C strings of .rodata (read for artifacts only)
    dispatcher_calls: frozenset[tuple[str, str]] = frozenset()  # (op, overload) from calls' source text in .rodata


def read_shared_object(stream: IO[bytes], name: str, *, strings: bool = False) -> SharedObject:
    """strings: also read the 'ns::name' C strings of its read-only data (the ops it may call by name)."""
    try:
        elf = ELFFile(stream)
    except ELFError as exc:
        raise BadInputError(f"{name}: not an ELF shared object ({exc})") from exc
    dynsym = elf.get_section_by_name(".dynsym")
    imports: set[str] = set()
    weak: set[str] = set()
    exports: set[str] = set()
    if dynsym is not None:
        for symbol in dynsym.iter_symbols():  # type: ignore[attr-defined]
            if not symbol.name:
                continue
            binding = symbol["st_info"]["bind"]
            if symbol["st_shndx"] == "SHN_UNDEF":
                (weak if binding == "STB_WEAK" else imports).add(symbol.name)
            elif binding in ("STB_GLOBAL", "STB_WEAK") and symbol["st_other"]["visibility"] in (
                "STV_DEFAULT",
                "STV_PROTECTED",
            ):
                exports.add(symbol.name)
    needed: list[str] = []
    dynamic = elf.get_section_by_name(".dynamic")
    if dynamic is not None:
        needed = [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]  # type: ignore[attr-defined]
    versions: list[str] = []
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, auxiliaries in section.iter_versions():
                versions.extend(aux.name for aux in auxiliaries)
    qualified: set[str] = set()
    calls: set[tuple[str, str]] = set()
    rodata = elf.get_section_by_name(".rodata") if strings else None
    if rodata is not None and rodata["sh_type"] != "SHT_NOBITS":
        data = rodata.data()
        qualified = {m.decode() for m in QUALIFIED_NAME.findall(data)}
        calls = {(op.decode(), overload.decode()) for op, overload in DISPATCHER_CALL.findall(data)}
    return SharedObject(
        name,
        frozenset(imports),
        frozenset(weak),
        frozenset(exports),
        tuple(needed),
        tuple(sorted(set(versions))),
        frozenset(qualified),
        frozenset(calls),
    )


def read_artifact(path: Path) -> list[SharedObject]:
    """Every shared object of an artifact: a .so file, or the .so members of a wheel."""
    if not path.exists():
        raise BadInputError(f"{path}: no such file")
    if path.suffix == ".whl":
        if not zipfile.is_zipfile(path):
            raise BadInputError(f"{path}: not a wheel (not a zip archive)")
        with zipfile.ZipFile(path) as wheel:
            members = [m for m in wheel.namelist() if re.search(r"\.so(\.|$)", m)]
            if not members:
                raise BadInputError(f"{path}: the wheel holds no shared object")
            return [read_shared_object(io.BytesIO(wheel.read(m)), m, strings=True) for m in members]
    with open(path, "rb") as handle:
        return [read_shared_object(handle, path.name, strings=True)]


def torch_libraries(torch_lib: Path) -> list[Path]:
    return sorted(p for p in torch_lib.glob("*.so*") if p.name.startswith(("libtorch", "libc10", "libshm")))


def library_exports(torch_lib: Path, cache: Path | None = None) -> frozenset[str]:
    """Everything torch's own libraries export, cached next to them (keyed by size and mtime)."""
    libraries = torch_libraries(torch_lib)
    stamp = [[p.name, p.stat().st_size, int(p.stat().st_mtime)] for p in libraries]
    if cache is not None:
        try:
            data = json.loads(cache.read_text())
            if data["stamp"] == stamp:
                return frozenset(data["exports"])
        except (OSError, ValueError, KeyError):
            pass
    exports: set[str] = set()
    for library in libraries:
        with open(library, "rb") as handle:
            exports |= read_shared_object(handle, library.name).exports
    if cache is not None:
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"stamp": stamp, "exports": sorted(exports)}))
        tmp.replace(cache)
    return frozenset(exports)


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled C++ names -> readable ones, through c++filt when it is installed."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {n: n for n in mangled}
    out = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True, check=False).stdout
    readable = out.splitlines()
    return dict(zip(mangled, readable, strict=False)) if len(readable) == len(mangled) else {n: n for n in mangled}


def classify(name: str, readable: str) -> SymbolKind:
    if STABLE_C_NAME.match(name):
        return SymbolKind.STABLE
    if name.startswith("_Z") and readable.lstrip().startswith(TORCH_NAMESPACES):
        return SymbolKind.UNSTABLE
    if name.startswith(("Py", "_Py")):
        return SymbolKind.PYTHON
    return SymbolKind.SYSTEM


def system_floor(version_needs: Iterable[str]) -> dict[str, str]:
    """The highest version needed per family: {'GLIBC': '2.32', 'GLIBCXX': '3.4.26'}."""
    best: dict[str, tuple[int, ...]] = {}
    for version in version_needs:
        match = SYSTEM_VERSION.match(version)
        if match:
            parts = tuple(int(p) for p in match[2].split(".") if p)
            if parts > best.get(match[1], ()):
                best[match[1]] = parts
    return {family: ".".join(map(str, parts)) for family, parts in sorted(best.items())}
