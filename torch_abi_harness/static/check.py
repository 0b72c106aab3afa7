"""`check`: where an artifact (a .so or a wheel) is predicted to load, from its ELF symbols alone, release by
release of the manifest; with the runtimes' variant and Python, what else it needs of them is checked too.

A wheel is judged as a whole (what loads every module) and module by module: a package that loads each module on its
own, going on without one that fails, works partly where the whole wheel is predicted not to load. An abi3 wheel's
Python C API imports are audited against the limited API of its floor (limited_api.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.status import Condition
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.artifact import ArtifactFacts, RuntimeFacts, Unmet, unmet
from torch_abi_harness.static.build_torch import BuildTorch, declared_beyond, read_build_torch, torch_requirement
from torch_abi_harness.static.limited_api import LimitedApiAudit, abi3_floor, module_python, packaged_limited_api
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.op_calls import DISPATCHER_SHIMS, fits
from torch_abi_harness.static.op_registry import packaged_op_schemas
from torch_abi_harness.static.prebuilt import extension_modules
from torch_abi_harness.static.predict import ArtifactImports, Predicted, Prediction, predict
from torch_abi_harness.static.symbols import SharedObject, read_artifact

# `check --json`; 2: per-module records, the modules' summary, the limited API audit; and, added since: a wheel's
# build torch as it says it, its declared torch requirement and where that admits releases it cannot load on
CHECK_JSON_VERSION = 2


@dataclasses.dataclass(frozen=True)
class ModuleCheck:
    """One extension module of an artifact (or all of them together: what loads the whole wheel), predicted."""

    name: str  # the member's path in the wheel, or the .so's file name
    imports: ArtifactImports
    facts: ArtifactFacts
    predictions: tuple[Prediction, ...]  # one per release checked, oldest first
    limited_api: LimitedApiAudit | None = None  # an abi3 wheel's Python C API against its floor's limited API
    python_tag: str | None = None  # what its file name says of the CPython that imports it (limited_api.py)
    bundled: frozenset[str] = frozenset()  # the file names and sonames of every shared object its wheel holds

    def loads_where(self, *, given_host: bool = False) -> list[str]:
        """The releases checked where it is predicted to load; given_host: were its host libraries installed."""
        return [p.runtime for p in self.predictions if predicted_to_load(p, given_host=given_host)]

    @property
    def loads(self) -> list[str]:
        return self.loads_where()

    @property
    def loads_from(self) -> str | None:
        """The oldest release checked from which it loads on every newer one checked."""
        return self.loads_from_where()

    def loads_from_where(self, *, given_host: bool = False) -> str | None:
        """loads_from; given_host: were its host libraries installed."""
        where = set(self.loads_where(given_host=given_host))
        return next(
            (
                p.runtime
                for p in self.predictions
                if all(q.runtime in where for q in self.predictions if Version(q.runtime) >= Version(p.runtime))
            ),
            None,
        )

    @property
    def failing(self) -> bool:
        """A predicted load failure for torch's sake (not for want of a host library), a call predicted to fail, or a
        Python symbol outside the floor's limited API."""
        return any(
            (p.outcome is Predicted.LOAD_FAILED and not predicted_to_load(p, given_host=True)) or p.failing_ops
            for p in self.predictions
        ) or bool(self.limited_api and self.limited_api.outside)

    @property
    def unseen_calls(self) -> bool:
        """It calls ops by name through the dispatcher: a name built at run time leaves no string to judge."""
        return bool(self.imports.stable & DISPATCHER_SHIMS)

    @property
    def import_note(self) -> str | None:
        """A module named for one CPython: `import` finds it only there; loading it by path works on any."""
        if self.python_tag is None or self.python_tag == "abi3":
            return None
        return (
            f"named for CPython {self.python_tag.removeprefix('cpython-')} only: `import` finds it only there "
            "(loading it by path, as torch.ops.load_library does, works on any)"
        )

    @property
    def host_libraries(self) -> tuple[str, ...]:
        """What it needs that neither torch, CUDA nor its own wheel provides: the runtime's system must (class
        host-library). The NVIDIA driver's libraries are driver_libraries."""
        return tuple(
            name
            for name in self.facts.needed
            if host_libraries.is_host_library(name)
            and not host_libraries.is_driver_library(name)
            and name not in self.bundled
        )

    @property
    def driver_libraries(self) -> tuple[str, ...]:
        """What it needs of the NVIDIA driver (libcuda.so.1, libnvidia-*): present only on a GPU machine."""
        return tuple(name for name in self.facts.needed if host_libraries.is_driver_library(name))

    def to_json(self) -> dict[str, Any]:
        return {
            "unseen_calls": "op names built at run time leave no string: not judged" if self.unseen_calls else None,
            "imports": self.imports.to_json(),
            "needs": self.facts.to_json(),
            "host_libraries": [
                {"name": name, "usual_package": host_libraries.usual_package(name)} for name in self.host_libraries
            ],
            "driver_libraries": list(self.driver_libraries),
            "limited_api": self.limited_api.to_json() if self.limited_api else None,
            "predictions": [{"runtime": p.runtime, **p.to_json()} for p in self.predictions],
            "loads_from": self.loads_from,
            "loads_from_given_host": self.loads_from_where(given_host=True),
        }


def predicted_to_load(prediction: Prediction, *, given_host: bool = False) -> bool:
    """Predicted to load; given_host: or kept from it only by host libraries that the runtime's system lacks."""
    if prediction.outcome is Predicted.LOADS:
        return True
    return (
        given_host
        and prediction.outcome is Predicted.LOAD_FAILED
        and not prediction.missing
        and all(u.condition is Condition.HOST_LIBRARY for u in prediction.unmet)
    )


def host_unmet(names: Sequence[str]) -> list[Unmet]:
    """Host libraries as what a runtime lacks: a bare runtime's system has none of them, and cannot load the module."""
    if not names:
        return []
    return [Unmet(Condition.HOST_LIBRARY, f"needs from the host system {described(names)}")]


def described(names: Sequence[str]) -> str:
    """'FFmpeg (libavcodec.so.61, libavutil.so.59)' and, for a library no project is known for, its name."""
    by_project: dict[str, list[str]] = {}
    for name in names:
        by_project.setdefault(host_libraries.project_of(name) or name, []).append(name)
    return ", ".join(
        project if names_of == [project] else f"{project} ({', '.join(sorted(names_of))})"
        for project, names_of in sorted(by_project.items())
    )


@dataclasses.dataclass(frozen=True)
class ArtifactCheck:
    """A .so or a wheel: the artifact as a whole (what every module needs) and each extension module alone."""

    artifact: Path
    built_with: str | None  # the release whose op schemas its calls are judged against; None: only existence
    whole: ModuleCheck
    modules: tuple[ModuleCheck, ...]
    build_torch: BuildTorch | None = None  # a wheel's build torch as it says it (build_torch.py); None: a .so
    torch_pin: str | None = None  # a wheel's Requires-Dist on torch, as written

    @property
    def declared_beyond(self) -> str | None:
        """Where its declared torch range admits releases checked it cannot load on: 'declares torch>=2.9, loads
        from 2.13.0'."""
        return declared_beyond(self.torch_pin, self.whole.predictions)

    def build_torch_json(self) -> dict[str, Any] | None:
        found = self.build_torch
        if found is None:
            return None
        release = str(found.release) if found.release is not None else None
        return {"release": release, "exact": found.exact, "how": found.how, "said": found.said}

    @property
    def failing(self) -> bool:
        return self.whole.failing or any(m.failing for m in self.modules)

    def loading(self, runtime: str, *, given_host: bool = False) -> list[str]:
        """The modules predicted to load on a release checked; given_host: were their host libraries installed."""
        return [
            m.name
            for m in self.modules
            for p in m.predictions
            if p.runtime == runtime and predicted_to_load(p, given_host=given_host)
        ]

    @property
    def host_libraries(self) -> tuple[str, ...]:
        """Every host library a module needs, once."""
        return tuple(sorted({name for m in self.modules for name in m.host_libraries}))

    @property
    def summary(self) -> str:
        """Which modules load where, newest releases first: '2 of 2 modules on 2.11.0+, 1 of 2 on 2.10.0 (...)';
        where modules need host libraries, without them, then with them: '3 of 15 ... without FFmpeg (...); with
        it, ...'."""
        if not self.host_libraries:
            return self.grouped()
        it = "it" if len({host_libraries.project_of(n) or n for n in self.host_libraries}) == 1 else "them"
        return f"{self.grouped()} without {described(self.host_libraries)}; with {it}, {self.grouped(given_host=True)}"

    def grouped(self, *, given_host: bool = False) -> str:
        """Which modules load where, consecutive releases that load the same modules together, newest first."""
        total = len(self.modules)
        runtimes = [p.runtime for p in reversed(self.whole.predictions)]
        groups: list[tuple[list[str], list[str]]] = []  # (releases newest first, modules loading), consecutive
        for runtime in runtimes:
            loading = self.loading(runtime, given_host=given_host)
            if groups and groups[-1][1] == loading:
                groups[-1][0].append(runtime)
            else:
                groups.append(([runtime], loading))
        parts = []
        for index, (releases, loading) in enumerate(groups):
            if releases[0] == runtimes[0] and len(runtimes) > 1:
                where = f"{releases[-1]}+"
            elif len(releases) > 1:
                where = f"{releases[-1]} to {releases[0]}"
            else:
                where = releases[0]
            names = f" ({', '.join(PurePosixPath(n).name for n in loading)})" if 0 < len(loading) < total else ""
            parts.append(f"{len(loading)} of {total}{' modules' if index == 0 else ''} on {where}{names}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        whole = self.whole.to_json()
        for prediction in whole["predictions"]:
            prediction["modules_loading"] = self.loading(prediction["runtime"])
            prediction["modules_loading_given_host"] = self.loading(prediction["runtime"], given_host=True)
        return {
            "schema_version": CHECK_JSON_VERSION,
            "artifact": str(self.artifact),
            "built_with": self.built_with,
            "build_torch": self.build_torch_json(),
            "declared_torch": self.torch_pin,
            "declared_beyond": self.declared_beyond,
            **whole,
            "summary": self.summary,
            "modules": [{"name": m.name, "python_tag": m.python_tag, **m.to_json()} for m in self.modules],
        }


def select_releases(manifest_releases: Sequence[str], spec: str | None) -> list[str]:
    """--runtimes: '2.10.0,2.13' (those levels) or '2.10+' (that level and newer); None: every release."""
    if not spec:
        return list(manifest_releases)
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        newer = item.endswith("+")
        try:
            level = ApiLevel.parse(".".join(item.rstrip("+").split(".")[:2]))
        except ValueError as exc:
            raise BadInputError(f"--runtimes: {item!r} is not a release such as '2.10.0' or '2.10+'") from exc
        found = [
            r
            for r in manifest_releases
            if (ApiLevel.of(Version(r)) >= level if newer else ApiLevel.of(Version(r)) == level)
        ]
        if not found:
            raise BadInputError(
                f"--runtimes: {item!r} matches no release of the manifest ({', '.join(manifest_releases)})"
            )
        chosen += [r for r in found if r not in chosen]
    return sorted(chosen, key=Version)


def runtime_lacks(facts: ArtifactFacts, release: str, variant: str | None, python: str | None) -> list[Unmet]:
    """What the artifact needs of a runtime of this release besides symbols, as far as variant and python
    say what the runtime is (neither given: nothing is checked)."""
    runtime = RuntimeFacts.of(f"{release}+{variant}", variant or "", python or "3.11")
    checked = {Condition.PYTHON_ABI} if python else set()
    checked |= {Condition.NO_CUDA, Condition.CUDA_MAJOR} if variant else set()
    return [u for u in unmet(facts, runtime) if u.condition in checked]


def check_artifact(
    artifact: Path, runtimes: str | None, variant: str | None, python: str | None, built_with: str | None
) -> ArtifactCheck:
    """Predict the artifact, and each of its extension modules alone, on the manifest's releases that runtimes
    selects (select_releases); with built_with, judge its calls by op name against that release's schemas."""
    manifest = packaged_manifest()
    releases = select_releases(manifest.releases, runtimes)
    objects = read_artifact(artifact)
    schemas = packaged_op_schemas()
    recorded = schemas.release(built_with) if built_with else None
    facts = ArtifactFacts.of(artifact, objects)
    floor = abi3_floor(facts.tags)

    bundled = frozenset({PurePosixPath(o.name).name for o in objects} | {o.soname for o in objects if o.soname})

    def check(name: str, members: list[SharedObject], python_tag: str | None) -> ModuleCheck:
        imports = ArtifactImports.of(members, siblings=objects)
        own = ArtifactFacts(tuple(sorted({n for o in members for n in o.needed})), facts.tags)
        hosts = ModuleCheck(name, imports, own, (), bundled=bundled).host_libraries
        predictions = tuple(
            predict(
                imports,
                r,
                manifest.exported_by(r),
                manifest,
                full_exports=False,
                unmet=[*runtime_lacks(own, r, variant, python), *host_unmet(hosts)],
                ops=fits(imports.calls, schemas, r, recorded),
            )
            for r in releases
        )
        audit = LimitedApiAudit.of(imports.python, floor, packaged_limited_api()) if floor else None
        return ModuleCheck(name, imports, own, predictions, audit, python_tag, bundled)

    members = extension_modules(objects) or objects  # a library bundled beside the modules is not one of them
    modules = tuple(check(o.name, [o], module_python(o.name)) for o in members)
    whole = modules[0] if len(modules) == 1 else check(artifact.name, members, None)
    wheel = artifact.suffix == ".whl"
    return ArtifactCheck(
        artifact,
        recorded,
        dataclasses.replace(whole, name=artifact.name),
        modules,
        read_build_torch(artifact) if wheel else None,
        torch_requirement(artifact)[0] if wheel else None,
    )
