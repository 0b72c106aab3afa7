"""The header audit's compiles, kept by what they read.

`audit-guards` and every gate compile the same probes against the same headers again and again: each target of a
candidate, once without and once with the CUDA headers, for every gate of that candidate (a nightly gate, a gate
per matrix, `--strict` and not). A compile is a function of the compiler, its arguments, the source and the
header trees it reads; `HeaderCompiler` keeps what each said (its exit, its errors, and for an object the undefined
symbols of each function) in the harness cache under a key of exactly those, so the same compile is read back in
milliseconds instead of seconds.

A header tree is known by every file's path, size, modification time and inode (one stat each): a torch env the harness
made is proven against RECORD before it is used, and a tree changed in any file gets another key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.core.files import write_atomic

log = logging.getLogger(__name__)

FORMAT = 1  # bump when what is kept, or how a compile is made, changes
COMPILE_TIMEOUT_S = 300
WORKDIR = "@WORKDIR@"  # the compile's directory in the kept errors: another run compiles in another one


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What one compile said: whether it compiled, its errors, and for an object the symbols each function
    imports (None for a syntax check or a compile that failed)."""

    ok: bool
    errors: str
    imports: dict[str, frozenset[str]] | None = None

    def to_json(self, workdir: Path) -> dict[str, Any]:
        imports = None if self.imports is None else {f: sorted(names) for f, names in self.imports.items()}
        return {"ok": self.ok, "errors": self.errors.replace(str(workdir), WORKDIR), "imports": imports}

    @classmethod
    def from_json(cls, data: dict[str, Any], workdir: Path) -> Compiled:
        imports = data["imports"]
        return cls(
            bool(data["ok"]),
            str(data["errors"]).replace(WORKDIR, str(workdir)),
            None if imports is None else {f: frozenset(names) for f, names in imports.items()},
        )


class HeaderCompiler:
    """`c++` on probe sources against header trees; with a cache directory, each compile's answer is kept there
    and read back for the same compile (cache None: every compile runs)."""

    def __init__(self, cache: Path | None = None) -> None:
        self.cache = cache

    def syntax_ok(self, source: str, flags: list[str], includes: list[Path], workdir: Path) -> bool:
        """Whether source compiles (-fsyntax-only) with flags and includes (-I, in order)."""
        return self._compile("syntax", source, flags, includes, workdir, "probe.cpp").ok

    def object_imports(
        self, source: str, flags: list[str], includes: list[Path], workdir: Path, name: str
    ) -> tuple[dict[str, frozenset[str]] | None, str]:
        """source compiled to an object (-c) as workdir/name: per function, the undefined symbols its code refers
        to; None and the compiler's errors when it does not compile."""
        compiled = self._compile("object", source, flags, includes, workdir, name)
        return compiled.imports, compiled.errors

    def _compile(
        self, kind: str, source: str, flags: list[str], includes: list[Path], workdir: Path, name: str
    ) -> Compiled:
        if self.cache is None:
            return _run(kind, source, flags, includes, workdir, name)
        material = {
            "format": FORMAT,
            "kind": kind,
            "compiler": compiler_stamp(),
            "flags": flags,
            "includes": [tree_stamp(str(path)) for path in includes],
            "name": name,
            "source": source,
        }
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        kept = self.cache / "header-compiles" / f"{key}.json"
        try:
            return Compiled.from_json(json.loads(kept.read_text()), workdir)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # a damaged entry: compiled again
            log.warning("%s: unreadable (%s); compiling again", kept, exc)
        compiled = _run(kind, source, flags, includes, workdir, name)
        _keep(kept, compiled.to_json(workdir))
        return compiled


def _run(kind: str, source: str, flags: list[str], includes: list[Path], workdir: Path, name: str) -> Compiled:
    path = workdir / name
    path.write_text(source)
    obj = path.with_suffix(".o")
    mode = ["-fsyntax-only"] if kind == "syntax" else ["-c"]
    argv = ["c++", *mode, *flags, *(f"-I{include}" for include in includes), str(path)]
    if kind == "object":
        argv += ["-o", str(obj)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise InfrastructureError("no C++ compiler: `c++` is not on PATH (install g++)") from exc
    if proc.returncode != 0 or kind == "syntax":
        return Compiled(proc.returncode == 0, proc.stderr)
    try:
        return Compiled(ok=True, errors=proc.stderr, imports=imports_by_function(obj))
    finally:
        obj.unlink(missing_ok=True)


def _keep(kept: Path, data: dict[str, Any]) -> None:
    """Written whole or not at all (write_atomic); a cache that cannot be written is only slower."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(kept, json.dumps(data))
    except OSError as exc:
        log.warning("%s: not kept (%s)", kept, exc)


def imports_by_function(obj: Path) -> dict[str, frozenset[str]]:
    """Per function (mangled name), the undefined symbols its code refers to."""
    found: dict[str, frozenset[str]] = {}
    with obj.open("rb") as stream:
        elf = ELFFile(stream)
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            return found
        for section in elf.iter_sections():
            if not isinstance(section, RelocationSection) or not section.name.startswith(".rela.text."):
                continue
            function = section.name[len(".rela.text.") :]
            undefined = set()
            for relocation in section.iter_relocations():
                symbol = symtab.get_symbol(relocation["r_info_sym"])
                if symbol.name and symbol["st_shndx"] == "SHN_UNDEF":
                    undefined.add(symbol.name)
            found[function] = frozenset(undefined)
    return found


@functools.cache
def compiler_stamp() -> str:
    """`c++` as this process finds it: the file it resolves to (path, size, mtime) and what --version says."""
    found = shutil.which("c++")
    if found is None:
        return "c++: not found"
    real = os.path.realpath(found)
    st = os.stat(real)
    try:
        version = subprocess.run(["c++", "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        version = ""
    return f"{real} {st.st_size} {st.st_mtime_ns} {version.strip().splitlines()[0] if version.strip() else ''}"


@functools.cache
def tree_stamp(root: str) -> str:
    """A header tree by every file's path, size, mtime and inode under root (links followed as the compiler does)."""
    digest = hashlib.sha256(os.path.realpath(root).encode())
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            digest.update(f"\0{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode())
    return digest.hexdigest()
