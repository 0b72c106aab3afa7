"""Published wheels in the gate: each wheel of the matrix (`wheel: <requirement>`) on the previous release and on the
candidate, module by module, with the derived suite's record of each load (the census's reading of a run).

A published wheel has no build axis: nothing of it is built on the candidate, so the only question is backward:
does what loaded and registered the same operators on the previous release still do so on the candidate? A module
that did and does not is lost, and why it is lost decides what the gate makes of it:

- the candidate lacks a symbol the module imports (a removed export): a reason against the candidate (NO-GO);
- the candidate's default build switched CUDA major or variant (the module needs libcudart.so.12 and the
  candidate's default wheel ships CUDA 13; or no CUDA at all): a decision the release made, which the gate states
  (gate.md, the console) rather than hides, and does not count as a break of the stable ABI by itself;
- the host (a library no torch or CUDA wheel ships) or the runner (no GPU driver): never counted against the
  candidate, whose wheels cannot provide either;
- anything else (it crashed, registers other operators): a reason, as any broken promise is.

The run's own verdicts of these cells are not the gate's matrix reasons (`apart`): the comparison judges them, once.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence
from typing import Any

from packaging.version import InvalidVersion, Version

from torch_abi_harness.config import Matrix
from torch_abi_harness.core.status import Condition
from torch_abi_harness.core.text import md_text
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.results.census import PackageCensus, RuntimeRow, census
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.static.host_libraries import is_driver_library, is_host_library
from torch_abi_harness.static.sonames import CUDA_MAJOR_LIBRARY, OTHER_CUDA_LIBRARY, TORCH_CUDA_LIBRARY
from torch_abi_harness.verdict import Verdict

CUDA_LABEL = re.compile(r"\+cu(\d+)(\d)$")  # 2.11.0+cu130: CUDA 13.0; 2.15.0+cu132: CUDA 13.2


class Cause(enum.StrEnum):
    """Why a module that loaded on the previous release does not on the candidate."""

    REMOVED_EXPORT = "removed-export"  # the candidate lacks a symbol it imports: NO-GO
    BUILD_SWITCH = "build-switch"  # the default build changed CUDA major or variant: stated, not a NO-GO by itself
    HOST = "host"  # a host library or the GPU driver: never counted against the candidate
    HARNESS = "harness"  # the cell errored: says nothing about the candidate (the gate is UNDECIDED by it)
    OTHER = "other"  # crashed, timed out, registers other operators: NO-GO

    @property
    def counted(self) -> bool:
        """Whether a module lost this way is a reason against the candidate."""
        return self in (Cause.REMOVED_EXPORT, Cause.OTHER)


HOST_CLASSES = (Condition.HOST_LIBRARY, Condition.NO_DRIVER)
SWITCH_CLASSES = (Condition.CUDA_MAJOR, Condition.NO_CUDA)


@dataclasses.dataclass(frozen=True)
class Lost:
    """A module that does not load (or not the same) on the candidate, why, and the cell's class that says so."""

    module: str
    cause: Cause
    condition: str  # the candidate cell's class (cuda-major, host-library, torch-abi...) or its verdict
    detail: str  # in words: 'the candidate lacks X, which it imports'

    def line(self) -> str:
        counted = "" if self.cause.counted else "; not counted against the candidate"
        return f"{self.module}: {self.detail} ({self.condition}{counted})"

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "cause": self.cause.value,
            "class": self.condition,
            "detail": self.detail,
            "counted": self.cause.counted,
        }


@dataclasses.dataclass(frozen=True)
class PackageChange:
    """One published release from the previous release to the candidate: its modules kept, lost, gained, and those
    that load on neither (with the candidate's cause: a host library is listed here, never counted)."""

    label: str  # torchao 0.18.0
    kept: tuple[str, ...]
    lost: tuple[Lost, ...]
    gained: tuple[str, ...]
    neither: tuple[Lost, ...]
    unpaired: tuple[str, ...] = ()  # the candidate's CPythons with no runtime of the previous release: not compared

    def markdown(self) -> list[str]:
        """Its lines in gate.md, every name and loader text escaped (core.text: they come from a wheel)."""
        lines = [f"### {md_text(self.label)}", ""]
        lines.append(f"- kept: {md_text(', '.join(self.kept) or 'none')}")
        lines += [f"- lost: {md_text(item.line())}" for item in self.lost]
        if self.gained:
            lines.append(f"- gained: {md_text(', '.join(self.gained))}")
        lines += [f"- loads on neither: {md_text(item.line())}" for item in self.neither]
        if self.unpaired:
            shown = ", ".join(f"py{p}" for p in self.unpaired)
            lines.append(f"- not compared on {md_text(shown)}: the previous release has no runtime of that CPython")
        return [*lines, ""]

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.label,
            "kept": list(self.kept),
            "lost": [item.to_json() for item in self.lost],
            "gained": list(self.gained),
            "neither": [item.to_json() for item in self.neither],
            "unpaired": list(self.unpaired),
        }


@dataclasses.dataclass(frozen=True)
class Ecosystem:
    """The matrix's published wheels, previous release -> candidate: what each package kept, lost and gained."""

    previous: str
    candidate: str
    builds: tuple[str, str]  # the default builds as the runtimes were installed: ('CUDA 12', 'CUDA 13')
    packages: tuple[PackageChange, ...]

    def counts(self) -> dict[str, int]:
        lost = [item for p in self.packages for item in p.lost]
        return {
            "kept": sum(len(p.kept) for p in self.packages),
            "lost": len(lost),
            "gained": sum(len(p.gained) for p in self.packages),
            "lost_counted": sum(item.cause.counted for item in lost),
            "lost_to_build_switch": sum(item.cause is Cause.BUILD_SWITCH for item in lost),
            "lost_to_host": sum(item.cause is Cause.HOST for item in lost),
        }

    def _lost(self, *causes: Cause) -> list[str]:
        return [f"{p.label}: {item.line()}" for p in self.packages for item in p.lost if item.cause in causes]

    def reasons(self) -> list[tuple[str, tuple[str, ...]]]:
        """(title, evidence) of each reason against the candidate: removed exports, then any other counted loss."""
        found = []
        removed = self._lost(Cause.REMOVED_EXPORT)
        if removed:
            found.append(
                (
                    f"{len(removed)} module(s) of published wheels that loaded on {self.previous} fail on the "
                    "candidate: it lacks symbols they import",
                    tuple(removed),
                )
            )
        other = self._lost(Cause.OTHER)
        if other:
            found.append(
                (
                    f"{len(other)} module(s) of published wheels that loaded on {self.previous} fail on the candidate",
                    tuple(other),
                )
            )
        return found

    def stated(self) -> list[str]:
        """The decision the candidate's default build made, stated: the modules it costs (none: nothing to say)."""
        switched = self._lost(Cause.BUILD_SWITCH)
        if not switched:
            return []
        before, after = self.builds
        return [
            f"{len(switched)} module(s) of published wheels lost to the default build's switch to {after} (from "
            f"{before} on {self.previous}): a decision of the release, stated here; not a NO-GO by itself",
            *switched,
        ]

    def evidence(self) -> str:
        n = self.counts()
        return (
            f"published wheels {self.previous} -> {self.candidate}: {len(self.packages)} package(s), {n['kept']} "
            f"module(s) kept, {n['lost']} lost ({n['lost_counted']} counted against the candidate, "
            f"{n['lost_to_build_switch']} to the default build's switch, {n['lost_to_host']} to the host), "
            f"{n['gained']} gained"
        )

    def markdown(self) -> list[str]:
        lines = [f"## Published wheels ({self.previous} -> {self.candidate})", ""]
        stated = self.stated()
        if stated:
            lines += [f"**{md_text(stated[0])}**", "", *(f"- {md_text(item)}" for item in stated[1:]), ""]
        for package in self.packages:
            lines += package.markdown()
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "previous": self.previous,
            "candidate": self.candidate,
            "builds": {"previous": self.builds[0], "candidate": self.builds[1]},
            "counts": self.counts(),
            "stated": self.stated(),
            "packages": [p.to_json() for p in self.packages],
        }


def default_build(torch: str) -> str:
    """A runtime's torch as installed, in words: '2.11.0+cu130' is 'CUDA 13', '2.13.0+cpu' 'a CPU-only build'."""
    match = CUDA_LABEL.search(torch)
    if match:
        return f"CUDA {match[1]}"
    return "a CPU-only build" if torch.endswith("+cpu") else f"torch {torch}"


def _release(torch: str) -> Version | None:
    try:
        return Version(release_of(torch))
    except InvalidVersion:
        return None


def _rows(package: PackageCensus, release: Version) -> dict[str | None, RuntimeRow]:
    """The package's rows on one release, by the runtime's CPython (one file per CPython: one row each)."""
    return {row.cell.runtime_python: row for row in package.rows if _release(row.release) == release}


def cause_of(row: RuntimeRow, module: str, *, lost: bool = True) -> tuple[Cause, str, str]:
    """Why the module did not load (or not the same) in the candidate's row: the module's own record first (what
    the loader named), then the cell's class. (cause, class, in words; lost: it loaded on the previous release)"""
    cell = row.cell
    condition = cell.expected_class.value if cell.expected_class else cell.verdict.value
    if cell.verdict is Verdict.ERROR:
        return Cause.HARNESS, condition, f"the cell ended in a harness error: {cell.reason}"[:160]
    record = next((m for m in cell.modules if m.name == module), None)
    library = record.missing_library if record else None
    if record is not None and record.missing_symbol:
        return Cause.REMOVED_EXPORT, condition, f"the candidate lacks {record.missing_symbol}, which it imports"
    if library and (is_host_library(library) or is_driver_library(library)):
        return Cause.HOST, condition, f"needs {library}, which the host does not provide"
    cuda = library and any(p.match(library) for p in (CUDA_MAJOR_LIBRARY, OTHER_CUDA_LIBRARY, TORCH_CUDA_LIBRARY))
    if cuda or cell.expected_class in SWITCH_CLASSES:
        needs = f"needs {library}; " if library else ""
        build = default_build(cell.runtime_torch)
        switch = (
            f"{needs}lost to the default build's switch to {build}" if lost else f"{needs}the default build is {build}"
        )
        return Cause.BUILD_SWITCH, condition, switch
    if cell.expected_class in HOST_CLASSES:
        return Cause.HOST, condition, "the host or runner lacks what it needs"
    proof = next((m for m in row.modules if m.name == module), None)
    return Cause.OTHER, condition, (proof.why if proof and proof.why else cell.reason or cell.status.value)


def package_change(package: PackageCensus, candidate: Version, previous: Version) -> PackageChange:
    """Each module of the package on the candidate against the previous release, runtime by runtime of the same
    CPython (a module is named with its CPython where the candidate runs it on several); a CPython the previous
    release has no runtime of is not compared (census.yaml runs 2.15.0 on 3.13 and 2.14.1 not)."""
    before, after = _rows(package, previous), _rows(package, candidate)
    kept: list[str] = []
    gained: list[str] = []
    lost: list[Lost] = []
    neither: list[Lost] = []
    unpaired = [str(python) for python in after if python not in before]
    for python, row in after.items():
        old = before.get(python)
        if old is None:  # nothing to compare with: a module loading there is not gained, one failing not lost
            continue
        for module in package.modules:
            name = module if len(after) == 1 else f"{module} (py{python})"
            was, now = module in old.proven, module in row.proven
            if now:
                (kept if was else gained).append(name)
                continue
            cause, condition, detail = cause_of(row, module, lost=was)
            (lost if was else neither).append(Lost(name, cause, condition, detail))
    return PackageChange(package.label, tuple(kept), tuple(lost), tuple(gained), tuple(neither), tuple(unpaired))


def compare(run: RunResult, candidate: Version, previous: Version) -> Ecosystem | None:
    """The run's published wheels, previous -> candidate; None when the run holds none."""
    packages = census(run)
    if not packages:
        return None
    torch = {_release(c.runtime_torch): c.runtime_torch for c in run.cells if c.build_id in published_builds(run)}
    builds = (default_build(torch.get(previous, str(previous))), default_build(torch.get(candidate, str(candidate))))
    changes = tuple(package_change(p, candidate, previous) for p in packages)
    return Ecosystem(str(previous), str(candidate), builds, changes)


def published_builds(run: RunResult) -> frozenset[str]:
    return frozenset(p.build for p in run.published)


def apart(run: RunResult) -> RunResult:
    """The run without its published wheels' cells: what the gate's matrix reasons read (the comparison judges
    those cells, once)."""
    ids = published_builds(run)
    if not ids:
        return run
    return dataclasses.replace(run, cells=tuple(c for c in run.cells if c.build_id not in ids))


def on_both(matrix: Matrix, releases: Sequence[Version]) -> Matrix:
    """The matrix with each published wheel run on these releases only (the previous and the candidate): a wheel
    has no build axis, so the gate's question about it is asked there; a build that already names its runtimes
    keeps those of them."""
    if not matrix.published:
        return matrix
    builds = []
    for build in matrix.builds:
        if build.extension.published is not None:
            wanted = tuple(r for r in releases if not build.runtimes or r in build.runtimes)
            build = dataclasses.replace(build, runtimes=wanted) if wanted else build
        builds.append(build)
    return dataclasses.replace(matrix, builds=tuple(builds))
