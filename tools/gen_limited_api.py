"""Regenerate torch_abi_harness/data/limited_api.json: the first CPython minor whose limited API holds each symbol.

The source is real interpreters, not a copied list: for each CPython 3.X given (its `python3.X` executable),
the preprocessor reads its own `Python.h` with `-DPy_LIMITED_API=0x030X0000` and every `PyAPI_FUNC` /
`PyAPI_DATA` declaration left visible is taken, when its `libpython3.X.so` (or the executable) exports it.
Levels older than the oldest interpreter given (3.2 ... ) are read from that interpreter's headers at that
level. A symbol's entry is the oldest level that shows it; the stable ABI never removes one.

    python tools/gen_limited_api.py ~/.pyenv/versions/3.{6..13}*/bin/python3.?? [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile

DATA = Path(__file__).resolve().parents[1] / "torch_abi_harness" / "data"
OLDEST_LEVEL = (3, 2)  # PEP 384: the limited API starts with CPython 3.2
FUNC, DATA_MARK = "__harness_limited_func", "__harness_limited_data"
DECLARED_FUNC = re.compile(rf"{FUNC}\b[^;{{}}]*?\b([A-Za-z_]\w*)\s*\(")
DECLARED_DATA = re.compile(rf"{DATA_MARK}\b[^;{{}}(]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?;")
log = logging.getLogger(__name__)


def interpreter_facts(python: Path) -> tuple[tuple[int, int], Path, Path]:
    """(version, include directory, the library or executable that exports the C API) of a CPython."""
    code = (
        "import sys, sysconfig; v = sysconfig.get_config_vars(); "
        "print(sys.version_info[0], sys.version_info[1], sysconfig.get_paths()['include'], "
        "v.get('LIBDIR') or '', v.get('LDLIBRARY') or '', sys.executable)"
    )
    major, minor, include, libdir, ldlibrary, executable = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    library = Path(libdir) / ldlibrary
    return (int(major), int(minor)), Path(include), library if library.suffix == ".so" else Path(executable)


def exported(binary: Path) -> frozenset[str]:
    with open(binary, "rb") as handle:
        dynsym = ELFFile(handle).get_section_by_name(".dynsym")
        return frozenset(
            s.name
            for s in dynsym.iter_symbols()  # type: ignore[union-attr]
            if s.name and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        )


def visible(include: Path, level: tuple[int, int]) -> frozenset[str]:
    """The PyAPI_FUNC / PyAPI_DATA names that Python.h declares to a build with Py_LIMITED_API at level."""
    limited = f"0x{level[0]:02X}{level[1]:02X}0000"
    command = [
        "cc",
        "-E",
        "-P",
        "-x",
        "c",
        f"-DPy_LIMITED_API={limited}",
        f"-DPyAPI_FUNC(RTYPE)={FUNC} RTYPE",
        f"-DPyAPI_DATA(RTYPE)=extern {DATA_MARK} RTYPE",
        f"-I{include}",
        "-",
    ]
    log.info("%s", " ".join(command))
    text = subprocess.run(command, input="#include <Python.h>\n", capture_output=True, text=True, check=True).stdout
    return frozenset(DECLARED_FUNC.findall(text)) | frozenset(DECLARED_DATA.findall(text))


def build_table(pythons: list[Path]) -> dict[str, Any]:
    found = sorted((interpreter_facts(p) for p in pythons), key=lambda f: f[0])
    if not found:
        raise SystemExit("no interpreter given")
    first: dict[str, tuple[int, int]] = {}
    levels: list[tuple[int, int]] = []
    for index, (version, include, binary) in enumerate(found):
        exports = exported(binary)
        own = [(version[0], m) for m in range(OLDEST_LEVEL[1], version[1])] if index == 0 else []
        for level in [*own, version]:
            names = visible(include, level) & exports
            if not names:
                raise SystemExit(f"{include}: no PyAPI_FUNC/PyAPI_DATA declaration read at {level}: the markers failed")
            log.info("%d.%d limited API (from %s): %d symbols", *level, include, len(names))
            levels.append(level)
            for name in names:
                first[name] = min(first.get(name, level), level)
    return {
        "schema_version": 1,
        "source": [f"{v[0]}.{v[1]}" for v, _, _ in found],
        "levels": [f"{a}.{b}" for a, b in levels],
        "symbols": {name: f"{v[0]}.{v[1]}" for name, v in sorted(first.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gen_limited_api.py", description=__doc__)
    parser.add_argument("pythons", nargs="+", type=Path, help="CPython executables, one per minor (3.6 ... 3.13)")
    parser.add_argument("--out", type=Path, default=DATA / "limited_api.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    table = build_table(args.pythons)
    args.out.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    log.info("wrote %s: %d symbols, levels %s", args.out, len(table["symbols"]), ", ".join(table["levels"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
