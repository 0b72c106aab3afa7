"""Builds x runtimes -> cells, each with one canonical id used everywhere."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from packaging.version import Version

from torch_abi_harness import __version__
from torch_abi_harness.config import (
    BuildSpec,
    CudaPolicy,
    Device,
    Extension,
    Matrix,
    RuntimeSpec,
    is_path,
    selector_pattern,
)
from torch_abi_harness.core.errors import ConfigError, SelectionError
from torch_abi_harness.core.files import content_digest, file_digest
from torch_abi_harness.core.kinds import Backend
from torch_abi_harness.core.schema import did_you_mean
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.provision import interpreters


@dataclasses.dataclass(frozen=True)
class Build:
    extension: Extension
    torch: Version
    variant: str
    target: ApiLevel | None
    python: str
    only_on: tuple[Version, ...] = ()  # runtime releases this build runs on; empty: all
    cuda: CudaPolicy = CudaPolicy.SAME_MAJOR  # where a build needing CUDA is promised (not part of the id)
    default_python: str = ""  # the matrix's python: the id names the build's own only when it differs
    interpreter: str | None = None  # the interpreter's path when the matrix gave one, else found by version
    own_python_only: bool = False  # runs only on runtimes of its own Python (not part of the id: its python is)

    @classmethod
    def of(cls, spec: BuildSpec, python: str) -> Build:
        own, interpreter = python_of(spec.python, python)
        default, _ = python_of(None, python)
        return cls(
            spec.extension,
            spec.torch,
            spec.variant,
            spec.target,
            own,
            spec.runtimes,
            spec.cuda,
            default,
            interpreter,
            spec.own_python_only,
        )

    def runs_on(self, runtime: Runtime) -> bool:
        if self.own_python_only and runtime.python != self.python:
            return False
        return not self.only_on or runtime.torch in self.only_on

    @property
    def id(self) -> str:
        variant = "" if self.variant == "auto" else f"+{self.variant}"
        target = f"-t{self.target}" if self.target else ""
        return f"{self.extension.name}@b{self.torch}{variant}{target}{python_suffix(self.python, self.default_python)}"

    @property
    def effective_target(self) -> ApiLevel:
        """TORCH_TARGET_VERSION when given, else the build torch's own level."""
        return self.target or ApiLevel.of(self.torch)


@dataclasses.dataclass(frozen=True)
class Runtime:
    torch: Version
    variant: str
    device: Device
    python: str
    backend: Backend
    image: str | None = None  # docker backend: the runtime's own image (not part of the id)
    default_python: str = ""  # the matrix's python: the id names the runtime's own only when it differs
    interpreter: str | None = None  # the interpreter's path when the matrix gave one, else found by version

    @classmethod
    def of(cls, spec: RuntimeSpec, python: str, backend: Backend) -> Runtime:
        own, interpreter = python_of(spec.python, python)
        default, _ = python_of(None, python)
        image = spec.image if backend == Backend.DOCKER else None
        return cls(spec.torch, spec.variant, spec.device, own, backend, image, default, interpreter)

    @property
    def id(self) -> str:
        variant = "" if self.variant == "auto" else f"+{self.variant}"
        return f"r{self.torch}{variant}-{self.device}{python_suffix(self.python, self.default_python)}"


CELL_ID = re.compile(
    r"^(?P<extension>[^@~]+)@b(?P<build_torch>[^+~-]+)(?:\+(?P<build_variant>[^~-]+))?(?:-t(?P<target>[0-9.]+))?"
    r"(?:-py(?P<build_python>[0-9.]+))?~r(?P<runtime_torch>[^+~-]+)(?:\+(?P<runtime_variant>[^~-]+))?"
    r"-(?P<device>cpu|cuda)(?:-py(?P<runtime_python>[0-9.]+))?$"
)


def cell_id_parts(cell_id: str) -> dict[str, str | None] | None:
    """The parts of a cell id as Build.id and Runtime.id write them (a variant "auto" is not written), for a
    cell known by its id alone (a shard that reported nothing); None when it is not such an id."""
    found = CELL_ID.match(cell_id)
    return found.groupdict() if found else None


def python_of(requested: str | None, default: str) -> tuple[str, str | None]:
    """(X.Y, interpreter path or None) for a build's or runtime's python: a version, a path, or the default.

    A path is asked its version here (ids and promises need it); a version is looked up only when
    an environment is made (interpreters.find), so a plan needs no interpreter installed."""
    request = requested or default
    if is_path(request):  # the request as written, relative to the cwd of the run
        return interpreters.find(request).minor, request
    return request, None


def python_suffix(python: str, default: str) -> str:
    """'-py3.10' in an id when its python is not the matrix's (ids of default-python cells never change)."""
    return "" if not default or python == default else f"-py{python}"


@dataclasses.dataclass(frozen=True)
class Cell:
    build: Build
    runtime: Runtime

    @property
    def id(self) -> str:
        return f"{self.build.id}~{self.runtime.id}"


MAX_SHARDS = 256  # GitHub Actions runs at most 256 jobs of one matrix; a larger fan-out is a typo


@dataclasses.dataclass(frozen=True)
class Shard:
    """Part K of N (1 <= K <= N) of a plan's cells: `run --shard K/N`. `by`: how the cells were split: "cells"
    (balanced by time, a build's cells kept together) or "runtime" (every cell of a runtime in one part, so a
    CI job makes only its runtimes' envs: `--by runtime`)."""

    index: int
    count: int
    by: str = "cells"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """'2/3' -> Shard(2, 3); ValueError saying what is wrong otherwise."""
        index, slash, count = text.partition("/")
        if not slash or not index.strip().isdigit() or not count.strip().isdigit():
            raise ValueError(f"{text!r} is not K/N (e.g. 1/3: the first of three shards)")
        if len(count.strip()) > 6 or int(count) > MAX_SHARDS:
            raise ValueError(f"{text!r}: at most {MAX_SHARDS} shards (a CI job matrix holds at most {MAX_SHARDS} jobs)")
        shard = cls(int(index), int(count))
        if not 1 <= shard.index <= shard.count:
            raise ValueError(f"{text!r}: K must be from 1 to N (there are {shard.count} shard(s), counted from 1)")
        return shard

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, int | str]:
        # "by" only when it is not the default: results.json of a split by cells reads as before
        return {"index": self.index, "count": self.count} | ({"by": self.by} if self.by != "cells" else {})


@dataclasses.dataclass(frozen=True)
class PlanIdentity:
    """What a run was a part of: the whole selected plan (before sharding), what it was made from, and which
    shard of it.

    Shards of one plan have one digest: it covers the cells and the plan's inputs (the matrix file's content,
    the harness version, each extension's files or wheel), so a shard run from a checkout whose test or
    matrix was changed is another plan. `merge` refuses reports whose digests differ, naming what differs,
    and names the cells of the plan that no report holds."""

    matrix: str  # the matrix file's name (not its path: shards run on different machines)
    cells: tuple[str, ...]  # sorted ids of every cell of the plan, before sharding
    shard: Shard | None = None
    inputs: tuple[tuple[str, str], ...] = ()  # (what, sha256), sorted; empty in results.json before version 7

    @property
    def digest(self) -> str:
        covered: dict[str, Any] = {"matrix": self.matrix, "cells": sorted(self.cells)}
        if self.inputs:
            covered["inputs"] = dict(self.inputs)
        text = json.dumps(covered, sort_keys=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "matrix": self.matrix,
            "inputs": dict(self.inputs),
            "cells": sorted(self.cells),
            "shard": self.shard.to_json() if self.shard else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlanIdentity:
        shard = data["shard"]
        identity = cls(
            data["matrix"],
            tuple(data["cells"]),
            Shard(shard["index"], shard["count"], shard.get("by", "cells")) if shard else None,
            tuple(sorted(data.get("inputs", {}).items())),  # from 7
        )
        if identity.digest != data["digest"]:
            raise ValueError(f"plan digest {data['digest']!r} does not match its matrix, inputs and cells")
        return identity

    def differences(self, other: PlanIdentity) -> list[str]:
        """What makes other another plan, in words (for merge's refusal)."""
        mine, theirs = dict(self.inputs), dict(other.inputs)
        said = [f"matrix {self.matrix!r} vs {other.matrix!r}"] if self.matrix != other.matrix else []
        for what in sorted(mine.keys() | theirs.keys()):
            if mine.get(what) != theirs.get(what):
                said.append(f"{what} ({_short(mine.get(what))} vs {_short(theirs.get(what))})")
        a, b = set(self.cells), set(other.cells)
        said += [f"{len(a - b)} cell(s) only in the first (e.g. {', '.join(sorted(a - b)[:3])})"] if a - b else []
        said += [f"{len(b - a)} cell(s) only in the second (e.g. {', '.join(sorted(b - a)[:3])})"] if b - a else []
        return said


def _short(digest: str | None) -> str:
    return "absent" if digest is None else digest[:12]


def plan_inputs(matrix: Matrix, builds: Collection[Build]) -> tuple[tuple[str, str], ...]:
    """What a plan is made from, by sha256: the matrix file, the harness version, and each extension its builds
    use (its whole directory, tests and recipe included, build outputs left out; or its prebuilt wheel and its
    tests)."""
    inputs = {"matrix file": file_digest(matrix.path), "harness": __version__}
    for extension in sorted({b.extension for b in builds}, key=lambda e: e.name):
        wheel = extension.wheel
        found = file_digest(wheel) if wheel else content_digest(extension.root, BUILD_OUTPUTS)
        inputs[f"extension {extension.name}"] = found
        if _tests_apart(extension):
            inputs[f"extension {extension.name} tests"] = content_digest(extension.tests, BUILD_OUTPUTS)
    return tuple(sorted(inputs.items()))


def _tests_apart(extension: Extension) -> bool:
    """Whether the extension's digest leaves its suite out: a prebuilt wheel's digest is the wheel's alone, and a
    directory's leaves out tests kept elsewhere. Shards of a `recipe: wheel` extension whose tests had changed
    between them merged as one plan, "every promise kept" by two different suites. (A published wheel's derived
    suite is made from the wheel, which its digest covers.)"""
    if extension.published is not None or extension.generated is not None:
        return False
    return extension.wheel is not None or not extension.tests.is_relative_to(extension.root)


# What a build, a run or a checkout leaves in an extension's directory: not part of what the extension is. An
# author's source tree (`run` in it) holds its repository, its tools' folders and the harness's own `reports/`: a
# run there must neither copy them into each build nor change the build's key.
BUILD_OUTPUTS = (
    "__pycache__", "build", "dist", "*.egg-info", "*.so", "*.pyc", ".pytest_cache",
    ".git", ".nox", ".tox", ".venv", ".mypy_cache", ".ruff_cache", "reports",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Plan:
    matrix: Matrix
    builds: tuple[Build, ...]
    runtimes: tuple[Runtime, ...]
    cells: tuple[Cell, ...]
    selectors: tuple[str, ...]
    shard: Shard | None = None
    unsharded: tuple[Cell, ...] | None = None  # the selected cells before sharding (None: not sharded)

    @property
    def identity(self) -> PlanIdentity:
        whole = self.cells if self.unsharded is None else self.unsharded
        inputs = plan_inputs(self.matrix, {c.build for c in whole})
        return PlanIdentity(self.matrix.path.name, tuple(sorted(c.id for c in whole)), self.shard, inputs)

    def only(self, ids: Collection[str]) -> Plan:
        """The cells whose ids are in ids (e.g. the failures of a previous run), in plan order."""
        return dataclasses.replace(self, cells=tuple(c for c in self.cells if c.id in ids))

    @property
    def needed_builds(self) -> tuple[Build, ...]:
        used = {cell.build for cell in self.cells}
        return tuple(b for b in self.builds if b in used)

    @property
    def needed_runtimes(self) -> tuple[Runtime, ...]:
        used = {cell.runtime for cell in self.cells}
        return tuple(r for r in self.runtimes if r in used)


def _check_unique(kind: str, ids: Sequence[str], matrix: Matrix) -> None:
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ConfigError(
            matrix.path,
            [
                f"two {kind}s have the id {i!r} (interpreters given as paths run the same Python version?)"
                for i in twice
            ],
        )


def make_plan(matrix: Matrix, selectors: Sequence[str] = (), backend: Backend = Backend.VENV) -> Plan:
    builds = tuple(Build.of(spec, matrix.python) for spec in matrix.builds)
    runtimes = tuple(Runtime.of(spec, matrix.python, backend) for spec in matrix.runtimes)
    _check_unique("runtime", [r.id for r in runtimes], matrix)
    _check_unique("build", [b.id for b in builds], matrix)
    every = [Cell(b, r) for b in builds for r in runtimes if b.runs_on(r)]
    cells = every
    if selectors:
        unmatched = [s for s in selectors if not fnmatch.filter([c.id for c in every], selector_pattern(s))]
        if unmatched:
            ids = [c.id for c in every]
            hints = "".join(f"\n  {s!r} matches nothing{did_you_mean(s, ids)}" for s in unmatched)
            raise SelectionError(
                f"{len(unmatched)} selector(s) matched no cell of {matrix.path.name}:{hints}\n"
                f"  cell ids look like {every[0].id!r}; list them with `python -m torch_abi_harness plan`"
            )
        patterns = [selector_pattern(s) for s in selectors]
        cells = [c for c in every if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    return Plan(matrix, builds, runtimes, tuple(cells), tuple(selectors))
