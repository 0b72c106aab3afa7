"""Builds x runtimes -> cells, each with one canonical id used everywhere."""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence

from packaging.version import Version

from harness.config import BuildSpec, Device, Extension, Matrix, RuntimeSpec
from harness.errors import SelectionError
from harness.schema import did_you_mean
from harness.versions import ApiLevel


@dataclasses.dataclass(frozen=True)
class Build:
    extension: Extension
    torch: Version
    variant: str
    target: ApiLevel | None
    python: str
    only_on: tuple[Version, ...] = ()  # runtime releases this build runs on; empty: all

    @classmethod
    def of(cls, spec: BuildSpec, python: str) -> Build:
        return cls(spec.extension, spec.torch, spec.variant, spec.target, python, spec.runtimes)

    def runs_on(self, runtime: Runtime) -> bool:
        return not self.only_on or runtime.torch in self.only_on

    @property
    def id(self) -> str:
        variant = "" if self.variant == "auto" else f"+{self.variant}"
        target = f"-t{self.target}" if self.target else ""
        return f"{self.extension.name}@b{self.torch}{variant}{target}"

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
    backend: str
    image: str | None = None  # docker backend: the runtime's own image (not part of the id)

    @classmethod
    def of(cls, spec: RuntimeSpec, python: str, backend: str) -> Runtime:
        return cls(spec.torch, spec.variant, spec.device, python, backend, spec.image if backend == "docker" else None)

    @property
    def id(self) -> str:
        variant = "" if self.variant == "auto" else f"+{self.variant}"
        return f"r{self.torch}{variant}-{self.device}"


@dataclasses.dataclass(frozen=True)
class Cell:
    build: Build
    runtime: Runtime

    @property
    def id(self) -> str:
        return f"{self.build.id}~{self.runtime.id}"


@dataclasses.dataclass(frozen=True)
class Plan:
    matrix: Matrix
    builds: tuple[Build, ...]
    runtimes: tuple[Runtime, ...]
    cells: tuple[Cell, ...]
    selectors: tuple[str, ...]

    @property
    def needed_builds(self) -> tuple[Build, ...]:
        used = {cell.build for cell in self.cells}
        return tuple(b for b in self.builds if b in used)

    @property
    def needed_runtimes(self) -> tuple[Runtime, ...]:
        used = {cell.runtime for cell in self.cells}
        return tuple(r for r in self.runtimes if r in used)


def selector_pattern(selector: str) -> str:
    """A selector matches any part of a cell id; * ? [...] are glob wildcards within it."""
    return f"*{selector}*"


def make_plan(matrix: Matrix, selectors: Sequence[str] = (), backend: str = "venv") -> Plan:
    builds = tuple(Build.of(spec, matrix.python) for spec in matrix.builds)
    runtimes = tuple(Runtime.of(spec, matrix.python, backend) for spec in matrix.runtimes)
    every = [Cell(b, r) for b in builds for r in runtimes if b.runs_on(r)]
    cells = every
    if selectors:
        unmatched = [s for s in selectors if not fnmatch.filter([c.id for c in every], selector_pattern(s))]
        if unmatched:
            ids = [c.id for c in every]
            hints = "".join(f"\n  {s!r} matches nothing{did_you_mean(s, ids)}" for s in unmatched)
            raise SelectionError(
                f"{len(unmatched)} selector(s) matched no cell of {matrix.path.name}:{hints}\n"
                f"  cell ids look like {every[0].id!r}; list them with `python -m harness plan`"
            )
        patterns = [selector_pattern(s) for s in selectors]
        cells = [c for c in every if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    return Plan(matrix, builds, runtimes, tuple(cells), tuple(selectors))
