"""Published wheels as builds: each `wheel: <requirement>` entry of a matrix made into an extension and a build.

The wheel is resolved for each Python the matrix's runtimes use (one file serves them all when it is abi3) and
downloaded once. Nothing in it is compiled, and nothing the configuration says is taken as its build torch B or
target T: both are read from the artifact. T is the stable-ABI level of the newest shim it imports (what it needs
from a runtime); B is what the wheel says it was built with (torch_abi_harness/static/build_torch.py: an exact pin,
else what its build left in its files), else unknown. An unknown B is never guessed: the wheel is unpacked in an
env of the oldest release here that exports every shim it imports, but no reference is taken there (its modules'
loads are checked, their operators compared with nothing), and the promise says so (verdict.py). Its declared
torch requirement is recorded and reported, never obeyed: the runtime's torch is the one under test; where it
admits releases the binary cannot load on, that is reported too. It brings no suite: the derived suite
(torch_abi_harness/execute/wheel_suite) loads each extension module and, where B is known, compares what it
registers with what it registers on B.
"""

from __future__ import annotations

import dataclasses
import logging
from importlib import resources
from pathlib import Path

from packaging.version import Version

from torch_abi_harness.config import BuildSpec, Extension, Matrix, PublishedFacts, PublishedRequest, Recipe, is_path
from torch_abi_harness.core.errors import ResolutionError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.provision.published import PublishedWheel, resolve
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.static.build_torch import BuildTorch, declared_beyond, read_build_torch, torch_requirement
from torch_abi_harness.static.manifest import Manifest, packaged_manifest
from torch_abi_harness.static.predict import ArtifactImports, predict
from torch_abi_harness.static.symbols import SharedObject, read_artifact

log = logging.getLogger(__name__)

SUITE = "wheel_suite"  # torch_abi_harness/execute/wheel_suite: the derived suite


def derived_suite() -> Path:
    return Path(str(resources.files("torch_abi_harness.execute").joinpath(SUITE)))


@dataclasses.dataclass(frozen=True)
class WheelReading:
    """What the artifact says of itself: the level it needs, the torch it was built with, its modules."""

    target: ApiLevel | None  # None: it imports no stable shim
    newest: tuple[str, Version] | None  # the newest shim it imports and the release that first exported it
    torch_pin: str | None  # its Requires-Dist on torch, as written
    build_torch: BuildTorch  # B as the wheel says it (pinned, read from a file), or unknown
    stable: bool  # it imports no unstable C++ symbol
    declared_beyond: str | None = None  # its torch requirement admits releases it cannot load on: in words


def read_wheel(path: Path, objects: list[SharedObject], manifest: Manifest) -> WheelReading:
    imports = ArtifactImports.of(objects)
    introduced = sorted(
        (Version(facts.first_exported), name)
        for name in imports.stable
        if name in manifest and (facts := manifest[name]).first_exported
    )
    newest = (introduced[-1][1], introduced[-1][0]) if introduced else None
    pin, _ = torch_requirement(path)
    predictions = [
        predict(imports, r, manifest.exported_by(r), manifest, full_exports=False) for r in manifest.releases
    ]
    return WheelReading(
        ApiLevel.of(newest[1]) if newest else None,
        newest,
        pin,
        read_build_torch(path),
        not imports.unstable,
        declared_beyond(pin, predictions),
    )


def runtime_pythons(matrix: Matrix) -> list[str]:
    """The CPython versions the matrix's runtimes use (an interpreter given by path counts as the matrix's)."""
    found = {_python_of(r.python, matrix.python) for r in matrix.runtimes}
    return sorted(found, key=lambda p: tuple(int(x) for x in p.rstrip("t").split(".")))


def with_published(matrix: Matrix, cache: Path) -> Matrix:
    """The matrix with every published-wheel entry made into an extension and its builds: one build per distinct
    file; when the release ships a file per CPython, each build runs on the runtimes of its own CPython."""
    if not matrix.published:
        return matrix
    sources = resolve_sources(matrix.sources)
    manifest = packaged_manifest()
    extensions, builds = dict(matrix.extensions), list(matrix.builds)
    for request in matrix.published:
        files: dict[Path, tuple[PublishedWheel, list[str]]] = {}
        refused: dict[str, str] = {}  # python -> why the sources serve no file for it
        for python in runtime_pythons(matrix):
            try:
                wheel = resolve(request.requirement, python, sources, cache)
            except ResolutionError as exc:
                refused[python] = str(exc)
                continue
            files.setdefault(wheel.path, (wheel, []))[1].append(python)
        if not files:  # why, in the resolver's words (once each: an unknown name reads the same for every Python)
            raise ResolutionError(f"{request.where}: " + "\n".join(dict.fromkeys(refused.values())))
        for why in dict.fromkeys(refused.values()):
            log.warning("%s: %s", request.where, why)
        unserved = list(refused)
        for wheel, pythons in files.values():
            python = matrix.python if matrix.python in pythons else pythons[0]
            several = len(files) > 1
            releases = sorted({r.torch for r in matrix.runtimes if _python_of(r.python, matrix.python) in pythons})
            extension, spec = _build_of(request, wheel, python, releases, manifest, tuple(unserved))
            spec = dataclasses.replace(spec, own_python_only=several)
            extensions[extension.name if not several else f"{extension.name} (py{python})"] = extension
            builds.append(spec)
    return dataclasses.replace(matrix, extensions=extensions, builds=tuple(builds))


def _python_of(request: str | None, default: str) -> str:
    return request if request and not is_path(request) else default


def _first_release(reading: WheelReading, releases: list[Version]) -> tuple[Version, str]:
    """The first release that exports every shim the wheel imports (the oldest release here when it imports
    none), and where its target comes from, in words."""
    if reading.newest is not None:
        shim, first = reading.newest
        return first, f"read from the wheel: it imports {shim}, first exported in torch {first}"
    return releases[0], "it imports no stable shim (not a stable-ABI wheel): no target"


def _build_of(
    request: PublishedRequest,
    wheel: PublishedWheel,
    python: str,
    releases: list[Version],
    manifest: Manifest,
    unserved: tuple[str, ...],
) -> tuple[Extension, BuildSpec]:
    """The extension and build of one file: B as the wheel says it; where it says none, the env it is unpacked in
    is the oldest of the releases the matrix runs on the file's CPythons that exports every shim it imports (an
    env the runtimes make anyway)."""
    objects = [o for o in read_artifact(wheel.path) if o.name.endswith(".so") or ".so." in o.name]
    if not objects:
        raise ResolutionError(
            f"{request.where}: {wheel.filename} holds no shared object: nothing in it uses the stable ABI"
        )
    reading = read_wheel(wheel.path, objects, manifest)
    first, target_from = _first_release(reading, releases)
    torch, torch_from = _torch_of(reading, releases, first)
    learnt = reading.build_torch
    facts = PublishedFacts(
        request.requirement,
        wheel.filename,
        wheel.url,
        wheel.sha256,
        reading.torch_pin,
        torch_from,
        target_from,
        unserved,
        build_torch=str(torch) if learnt.known else None,
        build_torch_how=learnt.how,
        declared_beyond=reading.declared_beyond,
    )
    extension = Extension(
        name=f"{wheel.project}-{wheel.version}",
        module="",  # the derived suite loads each module as its own test case
        min_target=reading.target or ApiLevel.of(torch),
        stable=reading.stable,
        recipe=Recipe.WHEEL,
        root=wheel.path.parent,
        tests=derived_suite(),
        wheel=wheel.path,
        published=facts,
    )
    spec = BuildSpec(extension, torch, "auto", reading.target, request.runtimes, request.cuda, python)
    log.info(
        "%s: %s; build torch: %s; target %s (%s)",
        request.requirement,
        wheel.filename,
        torch_from,
        reading.target,
        target_from,
    )
    if reading.declared_beyond:
        log.warning("%s: its metadata %s", request.requirement, reading.declared_beyond)
    return extension, spec


def _torch_of(reading: WheelReading, releases: list[Version], first: Version) -> tuple[Version, str]:
    """The torch of the build's env, and where B came from, in words. B read as a release series only (2.14) is
    run as the newest release of that series here (else X.Y.0); B unknown is not guessed: the env that unpacks the
    wheel is the oldest release here from first on, and no reference is taken on it."""
    learnt = reading.build_torch
    if learnt.release is not None and learnt.level is not None:
        if learnt.exact:
            return learnt.release, learnt.describe()
        series = [r for r in releases if ApiLevel.of(r) == learnt.level]
        torch = series[-1] if series else learnt.release
        return torch, f"{learnt.describe()}; torch {torch} of that series is its build torch here"
    served = [r for r in releases if r >= first]
    torch = served[0] if served else first
    said = f"it requires {reading.torch_pin}" if reading.torch_pin else "its metadata names no torch"
    return torch, (
        f"unknown: {said}, and none of its files names the torch it was built with (torch {torch}, the oldest "
        "release here that exports every shim it imports, unpacks it; no reference is taken, no operators compared)"
    )
