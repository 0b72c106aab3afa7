"""ELF dynamic symbols (pyelftools): what an artifact imports and what a runtime's libraries export.

No torch import and no loader: reading symbol tables takes milliseconds where
loading torch takes seconds. Artifacts may be a shared object or a wheel (its
shared objects are read from the zip without unpacking).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import enum
import functools
import io
import json
import logging
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.static.wheelfile import is_zip, open_wheel

log = logging.getLogger(__name__)

STABLE_C_NAME = re.compile(r"^(aoti_torch_|torch_)\w+$")
TORCH_NAMESPACE_NAMES = frozenset({"at", "c10", "torch", "caffe2"})
# A nested name after its N: CV-qualifiers (r V K), a ref-qualifier (R O), then its first component's source name.
NESTED_FIRST = re.compile(r"^N[rVK]*[RO]?(?P<length>[1-9][0-9]*)(?P<name>[A-Za-z_][A-Za-z0-9_$.]*)")
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
    soname: str | None = None  # DT_SONAME: the name another object's DT_NEEDED finds it by


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
    sonames: list[str] = []
    dynamic = elf.get_section_by_name(".dynamic")
    if dynamic is not None:
        tags = list(dynamic.iter_tags())  # type: ignore[attr-defined]
        needed = [tag.needed for tag in tags if tag.entry.d_tag == "DT_NEEDED"]
        sonames = [tag.soname for tag in tags if tag.entry.d_tag == "DT_SONAME"]
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
        sonames[0] if sonames else None,
    )


def read_artifact(path: Path) -> list[SharedObject]:
    """Every shared object of an artifact: a .so file, or the .so members of a wheel."""
    if not path.exists():
        raise BadInputError(f"{path}: no such file")
    if path.suffix == ".whl":
        if not is_zip(path):
            raise BadInputError(f"{path}: not a wheel (not a zip archive)")
        with open_wheel(path) as wheel:
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


@functools.cache
def _cxa_demangle() -> Any | None:
    """libstdc++'s ``abi::__cxa_demangle`` through ctypes (libiberty's demangler, which c++filt uses too), or None
    where no libstdc++ can be loaded: then names stay mangled, and only their display is the poorer."""
    for candidate in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not candidate:
            continue
        try:
            function = ctypes.CDLL(candidate).__cxa_demangle
        except (OSError, AttributeError):
            continue
        function.restype = ctypes.c_void_p  # a malloc'ed string: read, then freed
        function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return function
    log.info("no libstdc++ to demangle C++ names with: they are shown mangled")
    return None


@functools.cache
def _free() -> Any:
    return ctypes.CDLL(None).free  # the C library's: __cxa_demangle's buffer comes from its malloc


def _demangled(function: Any, name: str) -> str:
    status = ctypes.c_int(-1)
    pointer = function(name.encode(), None, None, ctypes.byref(status))
    if not pointer:
        return name
    try:
        return ctypes.string_at(pointer).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        _free()(ctypes.c_void_p(pointer))


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled C++ names -> readable ones, in-process (libstdc++'s demangler); mangled where none can be loaded.
    For display only: what a symbol is (classify) is read from its mangled form."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    function = _cxa_demangle() if mangled else None
    if function is None:
        return {n: n for n in mangled}
    return {n: _demangled(function, n) for n in mangled}


def outer_name(name: str) -> str | None:
    """The outermost name of a qualified C++ entity, from its mangled form: 'at' for _ZN2at6Tensor..., _ZNK3c10...
    (const), _ZNR5torch... (ref-qualified), and a local entity _ZZN2at...E... (of the function it is local to).
    None for an unqualified name (_Z3foov), std (_ZNSt..., _ZSt...) and special names (_ZTV vtable, _ZTI
    typeinfo, _ZGV guard variable, _ZTh thunk), whose demangled text begins with words, as before."""
    if not name.startswith("_Z"):
        return None
    rest = name[2:].lstrip("Z")  # a local entity: the function it is local to is named first
    match = NESTED_FIRST.match(rest)
    if match is None or len(match["name"]) < int(match["length"]):
        return None
    return match["name"][: int(match["length"])]


def classify(name: str) -> SymbolKind:
    """What an imported symbol is, from its name alone, so the same everywhere (no tool on PATH decides it). A C++
    name is unstable when its outermost name is one of torch's namespaces: the namespace its demangled text begins
    with, for a template function too (whose text begins with what it returns)."""
    if STABLE_C_NAME.match(name):
        return SymbolKind.STABLE
    if outer_name(name) in TORCH_NAMESPACE_NAMES:
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
