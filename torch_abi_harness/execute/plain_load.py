"""A plain load, as a user checks one by hand: `import torch; ctypes.CDLL(module)` in a runtime env, nothing of the
harness in between (no pytest, no probe, no forkserver), in the cells' sandbox so that it sees the system a cell
sees. `census --verify` holds every cell's verdict against it, and loads each module outside the sandbox too: where
the host offers what the sandbox hides (a CUDA toolkit the loader's cache registers), the two differ, and that is
a finding (host_difference), never a disagreement with the run."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.execute import sandbox
from torch_abi_harness.static.host_libraries import CANNOT_OPEN

# Its last line: each path's loader error (null: it loaded); the line before: every file the process mapped.
PROGRAM = """\
import ctypes, json, sys
import torch
found = {}
for path in sys.argv[1:]:
    try:
        ctypes.CDLL(path)
        found[path] = None
    except OSError as exc:
        found[path] = str(exc)
with open("/proc/self/maps") as maps:
    mapped = sorted({line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6})
print(json.dumps({"mapped": [m for m in mapped if m.startswith("/")]}))
print(json.dumps(found))
"""


@dataclasses.dataclass(frozen=True)
class PlainLoad:
    """Each path's loader error (None: it loaded), and the files the loading process mapped (/proc/self/maps)."""

    errors: dict[str, str | None]
    mapped: tuple[str, ...] = ()


def plain_load(python: Path, paths: Sequence[Path], writable: Path, *, sandboxed: bool = True) -> PlainLoad:
    """Each path loaded in turn, in one process of the env's interpreter, in the cells' sandbox (sandboxed=False:
    outside it, seeing all the host's loader does). Raises InfrastructureError when the interpreter itself fails
    (torch does not import)."""
    argv = [str(python), "-c", PROGRAM, *map(str, paths)]
    if sandboxed:
        argv = sandbox.detect().wrap(argv, [writable])
    proc = commands.run(argv, timeout=300, check=False, cwd=writable)
    lines = proc.stdout.strip().splitlines()
    try:
        errors: dict[str, str | None] = json.loads(lines[-1])
        mapped = tuple(json.loads(lines[-2])["mapped"]) if len(lines) > 1 else ()
    except (ValueError, IndexError, KeyError, TypeError):
        raise InfrastructureError(
            f"{python}: the plain load did not finish (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
        ) from None
    return PlainLoad(errors, mapped)


def host_difference(path: str, inside: PlainLoad, outside: PlainLoad) -> str | None:
    """Where the module loads in the sandbox and outside it differently, in words, naming the host directory the
    outside load found what the sandbox hid ('loads outside the sandbox, finding libcudart.so.13 in
    /usr/local/cuda-13.0/lib64, which a cell does not see'); None where both agree."""
    within, without = inside.errors.get(path), outside.errors.get(path)
    if (within is None) == (without is None):
        return None
    if without is not None:
        return f"loads in the sandbox, fails outside it: {without.splitlines()[0][:200]}"
    missing = CANNOT_OPEN.search(within or "")
    where = found_in(missing[1], outside.mapped) if missing else None
    if missing and where:
        return f"loads outside the sandbox, finding {missing[1]} in {where}, which a cell does not see"
    hidden = sorted({os.path.dirname(m) for m in outside.mapped} & set(sandbox.host_cuda_dirs()))
    seen = f" (it mapped files of {', '.join(hidden)})" if hidden else ""
    return f"loads outside the sandbox{seen}; in it: {(within or '').splitlines()[0][:200]}"


def found_in(soname: str, mapped: Sequence[str]) -> str | None:
    """The directory of the mapped file the soname names (the file itself, or its real name: libcudart.so.13 ->
    libcudart.so.13.0.96); None when no mapped file is it."""
    for path in mapped:
        name = os.path.basename(path)
        if name == soname or name.startswith(soname + "."):
            return os.path.dirname(path)
    return None
