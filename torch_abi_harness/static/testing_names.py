"""When torch.testing's helpers first appear: a suite that imports one an older runtime lacks is told which
release brought it (torch_abi_harness/data/torch_testing_names.json, made by tools/gen_testing_names.py from the
releases' own files)."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

# ImportError's message for a name a module lacks: cannot import name 'X' from 'torch.testing...' (path)
CANNOT_IMPORT = re.compile(r"cannot import name '(\w+)' from '(torch\.testing[\w.]*)'")


@functools.cache
def _packaged() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("torch_abi_harness.data").joinpath("torch_testing_names.json").read_text()
    )
    return data


def first_release(module: str, name: str) -> str | None:
    """The first release whose `module` binds `name`, where that is newer than the oldest release the data
    covers; None when the oldest already has it, or the data does not know it."""
    found: str | None = _packaged()["names"].get(module, {}).get(name)
    return found


def import_hint(message: str) -> str | None:
    """For an ImportError's message naming a torch.testing name: in which release it first appears."""
    match = CANNOT_IMPORT.search(message)
    if match is None:
        return None
    name, module = match[1], match[2]
    release = first_release(module, name)
    if release is None:
        return None
    level = ".".join(release.split(".")[:2])
    return (
        f"`{name}` first appears in torch {level} ({module}): the suite needs torch {level} or newer, so limit this "
        f"build's runtimes (`runtimes:`) or import it conditionally"
    )
