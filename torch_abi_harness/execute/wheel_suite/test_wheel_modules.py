"""The suite the harness runs for a published wheel that brings none: per extension module, does it load on this
torch, and does it register the same operators with the same schemas as on the torch the wheel was built for.

It runs inside a runtime env (stdlib, pytest and torch only, never the harness), two ways:

* as the suite of a published wheel with no `tests:`: every module is its own test case, so one module that fails
  to load hides nothing of another;
* as a script, by the harness when it unpacks such a wheel (``python test_wheel_modules.py SITE OUT``): the
  reference, what each module registers on the torch the wheel was built for.

The modules are read from MANIFEST (written into the unpacked wheel by the harness): each one's path in the wheel
and, for a CPython extension module (it exports PyInit_<name>), its dotted name. A CPython module is imported
alone (its package's __init__ is not run: it may load every module itself, or need dependencies); any other shared
object is loaded with ``torch.ops.load_library``, as packages built on the stable ABI load theirs. Each module's
registrations are the operators (schema, and the dispatch keys with kernels) that loading it added or changed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

MANIFEST = "_harness_wheel.json"


def find_manifest() -> Path:
    """The manifest of the wheel on sys.path (the harness puts the unpacked wheel there)."""
    for entry in sys.path:
        candidate = Path(entry or ".") / MANIFEST
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {MANIFEST} on sys.path: the harness writes it into the unpacked wheel")


def read_manifest(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


KERNEL = re.compile(r"^(\w+): registered at", re.MULTILINE)
SCHEMA = re.compile(r"^schema: (.*)$", re.MULTILINE)


def registrations() -> dict[str, dict[str, Any]]:
    """Every operator the dispatcher knows (defined, or only given kernels: a stable-ABI module often registers
    kernels for a schema its package defines in Python): its schema (None when not defined) and the dispatch keys
    it has kernels for."""
    import torch

    found: dict[str, dict[str, Any]] = {}
    for name in torch._C._dispatch_get_registrations_for_dispatch_key(""):
        dump = torch._C._dispatch_dump(name)
        schema = SCHEMA.search(dump)
        text = schema[1].strip() if schema else "(none)"
        found[name] = {"schema": None if text == "(none)" else text, "kernels": sorted(set(KERNEL.findall(dump)))}
    return found


def load(site: Path, module: dict[str, Any]) -> None:
    """Load one module the way its package would; raises what the loader raised."""
    path = site / module["path"]
    if module.get("import"):
        loader = importlib.machinery.ExtensionFileLoader(module["import"], str(path))
        spec = importlib.util.spec_from_file_location(module["import"], path, loader=loader)
        assert spec is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module["import"]] = loaded
        loader.exec_module(loaded)
    else:
        import torch

        torch.ops.load_library(str(path))


def error_text(exc: BaseException) -> str:
    """The loader's own words: torch.ops.load_library wraps the OSError that names the symbol or library."""
    chain: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 5:
        chain.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return " <- ".join(chain)


def load_and_list(site: Path, module: dict[str, Any]) -> dict[str, Any]:
    """One module: loaded or why not, and the schemas that appeared when it was loaded."""
    before = registrations()
    try:
        load(site, module)
    except Exception as exc:  # the outcome under test
        return {"error": error_text(exc), "registered": {}}
    after = registrations()
    return {"error": None, "registered": {n: s for n, s in sorted(after.items()) if before.get(n) != s}}


def main(argv: list[str]) -> int:
    """python wheel_modules.py SITE OUT: the reference registrations of every module, as JSON in OUT."""
    site, out = Path(argv[0]), Path(argv[1])
    import torch

    manifest = read_manifest(site / MANIFEST)
    found = {m["path"]: load_and_list(site, m) for m in manifest["modules"]}
    out.write_text(json.dumps({"torch": torch.__version__, "modules": found}, indent=1, sort_keys=True))
    return 0


RESULTS: dict[str, dict[str, Any]] = {}


def loaded(module: dict[str, Any]) -> dict[str, Any]:
    """Each module is loaded once, in manifest order, by the test that loads it."""
    if module["path"] not in RESULTS:
        RESULTS[module["path"]] = load_and_list(find_manifest().parent, module)
    return RESULTS[module["path"]]


def _wheel() -> dict[str, Any]:
    try:
        return read_manifest(find_manifest())
    except FileNotFoundError:  # run as the reference script: no tests are collected
        return {"modules": []}


WHEEL = _wheel()


@pytest.fixture(params=WHEEL["modules"], ids=[Path(m["path"]).name for m in WHEEL["modules"]])
def module(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(request.param)


def reference_of(module: dict[str, Any]) -> dict[str, Any] | None:
    """What the module registers on the torch the wheel was built for; None where it did not load there."""
    found = WHEEL.get("reference", {}).get("modules", {}).get(module["path"])
    return found if found is not None and found["error"] is None else None


def test_loads(module: dict[str, Any], record_module_load: Any) -> None:
    result = loaded(module)
    compared = result["error"] is None and reference_of(module) is not None
    record_module_load(module["path"], result["error"], len(result["registered"]), compared)
    assert result["error"] is None, f"{module['path']} does not load: {result['error']}"


def test_registers_the_same_operators(module: dict[str, Any]) -> None:
    result = loaded(module)
    if result["error"] is not None:
        pytest.skip("it does not load (test_loads says why)")
    reference = reference_of(module)
    if reference is None and "no_reference" in WHEEL:
        pytest.skip(f"no reference: {WHEEL['no_reference']}")
    if reference is None:
        pytest.skip(f"no reference: it did not load on the build torch {WHEEL.get('reference', {}).get('torch')}")
    ours, theirs = result["registered"], reference["registered"]
    missing = sorted(set(theirs) - set(ours))
    changed = sorted(n for n in set(theirs) & set(ours) if theirs[n] != ours[n])
    built_for = WHEEL["reference"]["torch"]
    problems = [f"{n} is not registered (on {built_for}: {_shown(theirs[n])})" for n in missing]
    problems += [f"{n}: {_shown(ours[n])} (on {built_for}: {_shown(theirs[n])})" for n in changed]
    assert not problems, f"{module['path']}: " + "; ".join(problems)


def _shown(registration: dict[str, Any]) -> str:
    schema = registration["schema"] or "no schema"
    return f"{schema}; kernels for {', '.join(registration['kernels']) or 'no key'}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
