"""A user's prebuilt wheel as a build (extension.yaml ``recipe: wheel``).

The harness compiles nothing for such an extension: it finds the one wheel the
``wheel:`` glob names, refuses one that a cell could not use (not a zip, no shared
object, not the module the tests import, tags the matrix's Python cannot install),
and unpacks it like a wheel it built. The matrix's build entry states what the
wheel claims (build torch B, target T); :func:`claim_findings` compares that claim
with the stable shims the wheel really imports.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.kinds import Recipe
from torch_abi_harness.core.schema import Document
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.manifest import Manifest
from torch_abi_harness.static.predict import ArtifactImports
from torch_abi_harness.static.symbols import SharedObject
from torch_abi_harness.static.wheelfile import is_zip, open_wheel

SHARED_OBJECT = re.compile(r"\.so(\.|$)")
TORCH_LIBRARY = re.compile(r"^lib(torch\w*|c10\w*)\.so$")  # what an extension module of torch's links


def extension_modules(objects: Sequence[SharedObject]) -> list[SharedObject]:
    """The shared objects of a wheel that are extension modules: a CPython module (PyInit_*), or one that links
    torch's libraries; not a library bundled beside them (auditwheel's <package>.libs/: libz, libpng...)."""
    return [
        o
        for o in objects
        if SHARED_OBJECT.search(o.name)
        and (any(n.startswith("PyInit_") for n in o.exports) or any(TORCH_LIBRARY.match(n) for n in o.needed))
    ]


def find_wheel(directory: Path, pattern: str) -> tuple[Path | None, str]:
    """The one file the pattern (a path or glob relative to directory) names; else None and why."""
    where = os.path.normpath(directory / pattern)
    escaped = os.path.normpath(os.path.join(glob.escape(str(directory)), pattern))  # only the pattern is a glob
    matches = sorted(Path(m) for m in glob.glob(escaped) if Path(m).is_file())
    if not matches:
        return None, (
            f"{pattern!r} ({where}) matches no file: build the wheel first "
            "(e.g. `uv build --wheel <your project>`) or fix the path"
        )
    if len(matches) > 1:
        names = ", ".join(m.name for m in matches[:5]) + (f" (+{len(matches) - 5} more)" if len(matches) > 5 else "")
        return None, f"{pattern!r} matches {len(matches)} files ({names}): name exactly one wheel"
    return matches[0].resolve(), ""


def wheel_problems(path: Path, module: str) -> list[str]:
    """Why a cell could not use this file as the extension's wheel (empty when it can)."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        return [f"{path.name} is not a wheel file name ({exc}); give the .whl a build tool produced"]
    if not is_zip(path):
        return [f"{path} is not a wheel: not a zip archive (a truncated download or a pointer file?)"]
    try:
        with open_wheel(path) as wheel:
            names = wheel.namelist()
    except BadInputError as exc:
        return [str(exc)]
    problems: list[str] = []
    if not any(SHARED_OBJECT.search(n) for n in names):
        problems.append(f"{path.name} holds no shared object (.so): nothing in it uses the stable ABI")
    package = module.split(".")[0]
    tops = sorted({n.split("/")[0].removesuffix(".py") for n in names if not n.split("/")[0].endswith(".dist-info")})
    if package not in tops:
        problems.append(
            f"{path.name} has no top-level {package!r} (it has: {', '.join(tops) or 'nothing'}); "
            "`module:` must name the package the wheel installs"
        )
    return problems


def wheel_of(doc: Document, directory: Path, problems: list[str]) -> Path | None:
    """recipe 'wheel': the one wheel `wheel:` names, checked; every other recipe: no `wheel:` key."""
    data: dict[str, Any] = doc.data
    pattern = data.get("wheel")
    if data["recipe"] != Recipe.WHEEL:
        if pattern is not None:
            problems.append(f"{doc.where(('wheel',))}: only `recipe: wheel` reads it; remove it or set the recipe")
        return None
    if pattern is None:
        problems.append(
            f"{doc.where(('recipe',))}: `recipe: wheel` needs `wheel:`, the path or glob of the prebuilt wheel "
            "relative to extension.yaml (e.g. wheel: dist/my_ops-*.whl)"
        )
        return None
    found, why = find_wheel(directory, pattern)
    if found is None:
        problems.append(f"{doc.where(('wheel',))}: {why}")
        return None
    wrong = wheel_problems(found, data["module"])
    problems.extend(f"{doc.where(('wheel',))}: {p}" for p in wrong)
    return None if wrong else found


def ordered_tags(python: str) -> list[Tag]:
    """What CPython `python` (3.11) installs on this platform, most specific first, as pip ranks them."""
    major, minor = (int(p) for p in python.rstrip("t").split("."))
    platforms = list(platform_tags())
    version = (major, minor)
    abis = [f"cp{major}{minor}t"] if python.endswith("t") else [f"cp{major}{minor}", "abi3", "none"]
    tags = [*cpython_tags(version, abis=abis, platforms=platforms), *compatible_tags(version, abis[0], platforms)]
    free_threaded = python.endswith("t")  # the limited API is not for a free-threaded CPython
    return [tag for tag in tags if not (free_threaded and tag.abi == "abi3")]


def supported_tags(python: str) -> set[Tag]:
    """What CPython `python` (e.g. '3.11') on this host installs: cpXY, abi3 from cp32 up, py3 and none."""
    return set(ordered_tags(python))


def tag_problem(path: Path, python: str) -> str | None:
    _, _, _, tags = parse_wheel_filename(path.name)
    if tags & supported_tags(python):
        return None
    shown = ", ".join(sorted(str(t) for t in tags))
    return (
        f"{path.name} is tagged {shown}: Python {python} on this host cannot install it; "
        f"build it for cp{python.replace('.', '')} or as abi3 (py_limited_api) for this platform"
    )


def claim_problems(name: str, wheel: Path, torch: Version, target: ApiLevel | None, python: str) -> list[str]:
    """A build entry of a prebuilt wheel states what the wheel claims; some claims cannot hold."""
    found: list[str] = []
    if target is not None and target > ApiLevel.of(torch):
        found.append(
            f"the prebuilt wheel of {name!r} cannot target {target}, newer than its build torch {torch}: "
            "nothing is compiled here, so state the torch and target it was really built with"
        )
    unusable = tag_problem(wheel, python)
    if unusable:
        found.append(unusable)
    return found


def newest_stable_import(imports: ArtifactImports, manifest: Manifest) -> tuple[Version, str] | None:
    """The stable shim an artifact imports that the newest release first exported, and that release: the
    artifact needs at least that release's stable-ABI level. None: it imports no shim the manifest dates."""
    introduced = sorted(
        (Version(facts.first_exported), name)
        for name in imports.stable
        if name in manifest and (facts := manifest[name]).first_exported
    )
    return introduced[-1] if introduced else None


def claim_findings(
    imports: ArtifactImports, torch: Version, target: ApiLevel, manifest: Manifest, *, stable: bool
) -> tuple[str, ...]:
    """Where the wheel's imports contradict what is claimed for it: build torch, target, stable ABI only."""
    found: list[str] = []
    newest = newest_stable_import(imports, manifest)
    if newest is not None:
        release, name = newest
        if ApiLevel.of(release) > target:
            found.append(
                f"the wheel claims target {target} but imports {name}, first exported in {release}: "
                f"it needs stable-ABI level {ApiLevel.of(release)}"
            )
        if release > torch and ApiLevel.of(release) > ApiLevel.of(torch):
            found.append(f"the wheel claims build torch {torch} but imports {name}, which {torch} does not export")
    unknown = sorted(n for n in imports.stable if n not in manifest or not manifest[n].first_exported)
    if unknown:
        found.append(f"the wheel imports {len(unknown)} shim(s) no release in the manifest exports: {unknown[0]}")
    if stable and imports.unstable:
        first = next(iter(imports.unstable.values()))
        found.append(
            f"the wheel imports {len(imports.unstable)} unstable C++ symbol(s) (e.g. {first}): "
            "it is not on the stable ABI alone"
        )
    return tuple(found)
