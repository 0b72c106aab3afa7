"""A published wheel's derived suite, as the build prepares it: the manifest of its extension modules written into
the unpacked wheel, and the reference, what each module registers on the build torch (the suite itself, run as a
script in that env, in the cells' sandbox)."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import CommandError
from torch_abi_harness.core.files import write_json
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.symbols import read_artifact

log = logging.getLogger(__name__)

# Confines a command that runs an artifact's code (argv, the paths it may write -> argv to run): the cells' sandbox.
Confine = Callable[[Sequence[str], Sequence[Path]], list[str]]

DERIVED_SUITE_MANIFEST = "_harness_wheel.json"  # the derived suite's MANIFEST (torch_abi_harness/execute/wheel_suite)
DERIVED_SUITE_FORMAT = 2  # 2: extension modules only (no bundled library), sorted; a reference from a newer env
# Why a manifest holds no reference (the suite's skip says it): its build torch is not known, and is not guessed.
NO_REFERENCE = "its build torch is unknown (neither its metadata nor its files name one): nothing to compare with"


def derived_suite_script() -> Path:
    """The derived suite of a published wheel, which is also the script that records its reference."""
    return Path(str(resources.files("torch_abi_harness.execute").joinpath("wheel_suite", "test_wheel_modules.py")))


def write_manifest(wheel: Path, out: Path, envs: Sequence[Env], confine: Confine) -> None:
    """A published wheel's derived suite reads its modules and its reference from site/_harness_wheel.json:
    each extension module (its dotted name when it is a CPython module), and what each registers on the build
    torch, found by loading them there, in the cells' sandbox (it is the wheel's code that runs). Where the build
    torch's env loads none of them (a CUDA wheel on a CPU build, say), the next env given that loads one is the
    reference, and says so. No env given: its build torch is unknown, and no reference is taken (the suite then
    only loads each module, its operators compared with nothing)."""
    modules = []
    for shared in sorted(prebuilt.extension_modules(read_artifact(wheel)), key=lambda o: o.name):
        dotted = shared.name.split(".")[0].replace("/", ".")
        stem = dotted.rsplit(".", 1)[-1]
        modules.append({"path": shared.name, "import": dotted if f"PyInit_{stem}" in shared.exports else None})
    manifest = out / "site" / DERIVED_SUITE_MANIFEST
    if not envs:
        write_json(manifest, {"modules": modules, "no_reference": NO_REFERENCE})
        return
    write_json(manifest, {"modules": modules})
    found: dict[str, Any] = {}
    for env in envs:
        found = reference(env, out, confine)
        if any(m["error"] is None for m in found.get("modules", {}).values()):
            break
        log.warning(
            "%s: no module loads on torch %s; trying the next release for its reference",
            wheel.name,
            env.torch_version,
        )
    found["build_torch"] = envs[0].torch_version
    write_json(manifest, {"modules": modules, "reference": found})


def reference(env: Env, out: Path, confine: Confine) -> dict[str, Any]:
    """What each module registers on env's torch (the derived suite run as a script), or why that failed.
    It runs the artifact's code, confined like a cell, writing only a scratch directory of its own (the sandbox
    hands what a confined command may write to the cell's uid: never the build's own directory)."""
    with tempfile.TemporaryDirectory(prefix="harness-reference-") as scratch:
        reference = Path(scratch) / "reference.json"
        argv = [str(env.python), str(derived_suite_script()), str(out / "site"), str(reference)]
        try:
            said = commands.run(confine(argv, [Path(scratch)]), timeout=300, check=False, cwd=Path(scratch)).stdout
        except CommandError as exc:  # it hung: the cells will say so for themselves
            said = f"{exc}\n{exc.output}"
        return _read_reference(env, reference, said)


def _read_reference(env: Env, reference: Path, said: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(reference.read_text())
    except (OSError, ValueError):
        found = {"torch": env.torch_version, "modules": {}, "error": said.strip()[-2000:]}
        log.warning("the reference load on torch %s failed: %s", env.torch_version, found["error"])
    return found
