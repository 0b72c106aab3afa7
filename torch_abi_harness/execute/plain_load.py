"""A plain load, as a user checks one by hand: `import torch; ctypes.CDLL(module)` in a runtime env, nothing of the
harness in between (no pytest, no probe, no forkserver), in the cells' sandbox so that it sees the system a cell
sees. `census --verify` holds every cell's verdict against it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.execute import sandbox

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
print(json.dumps(found))
"""


def plain_load(python: Path, paths: Sequence[Path], writable: Path) -> dict[str, str | None]:
    """Each path loaded in turn, in one process of the env's interpreter: None where it loaded, else the loader's
    error. Raises InfrastructureError when the interpreter itself fails (torch does not import)."""
    argv = sandbox.detect().wrap([str(python), "-c", PROGRAM, *map(str, paths)], [writable])
    proc = commands.run(argv, timeout=300, check=False, cwd=writable)
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        found: dict[str, str | None] = json.loads(last[0])
    except ValueError:
        raise InfrastructureError(
            f"{python}: the plain load did not finish (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
        ) from None
    return found
