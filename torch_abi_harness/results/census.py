"""The census: for each published wheel a run proved, on which runtimes each of its extension modules loads and
registers the same operators as on the torch it was built for, in a table per package and one line a person
can read ("torchao 0.18.0: 2 of 2 modules load and register the same operators on torch 2.11.0, 2.12.1").

Read from a run's results.json alone: the published builds (`published`), each cell's verdict and class, and
the derived suite's per-module record (`modules`) and failing tests."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.status import Condition
from torch_abi_harness.results.cases import PublishedBuild
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.static.host_libraries import is_host_library, named_in, usual_package
from torch_abi_harness.verdict import Verdict

MARK_BEGIN, MARK_END = "<!-- census:begin -->", "<!-- census:end -->"
MADE_ON = "Made on "  # the page's first line: when and from which run (not compared by --check)
SAME_OPS_TEST = "test_registers_the_same_operators"
OUTSIDE = (
    "Outside the cells' sandbox (`census --verify`), this host loads otherwise: the cells see only what the torch "
    "release ships (docs/reference/environments.md), so these are the host's, not the verdict's:"
)


@dataclasses.dataclass(frozen=True)
class ModuleProof:
    """One module on one runtime: proven (it loaded and registered what it registers on its build torch; where
    that torch is unknown, it loaded: there is nothing to compare with), or why not."""

    name: str
    proven: bool
    why: str  # '' when proven
    registered: int = 0
    compared: bool = True  # its operators were compared with those on its build torch (False: B unknown)


@dataclasses.dataclass(frozen=True)
class RuntimeRow:
    runtime: str  # the runtime's torch as installed, with its CPython: 2.11.0+cu130, py3.11
    release: str
    cell: CellResult
    modules: tuple[ModuleProof, ...]

    @property
    def proven(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modules if m.proven)


@dataclasses.dataclass(frozen=True)
class PackageCensus:
    label: str  # torchao 0.18.0
    builds: tuple[PublishedBuild, ...]  # one per file (a release with a wheel per CPython has several)
    modules: tuple[str, ...]  # file names: a module is the same module in each CPython's file
    rows: tuple[RuntimeRow, ...]

    @property
    def compared(self) -> bool:
        """Its operators are compared with those on its build torch: every file's B is known (or was not recorded)."""
        return all(b.build_torch is not None or b.build_torch_how is None for b in self.builds)

    def releases_where(self, names: set[str]) -> list[str]:
        """The releases on which exactly these modules (and no others) are proven on every runtime of the release."""
        by_release: dict[str, list[set[str]]] = {}
        for row in self.rows:
            by_release.setdefault(row.release, []).append(set(row.proven))
        return [r for r, proven in by_release.items() if all(p == names for p in proven)]

    def line(self) -> str:
        """The package's compatibility in one line."""
        everything = set(self.modules)
        n = len(self.modules)
        parts = []
        whole = self.releases_where(everything)
        if whole and self.compared:
            verbs = "loads and registers" if n == 1 else "load and register"
            parts.append(f"{_modules_word(n)} {verbs} the same operators on torch {_releases(whole)}")
        elif whole:
            verb = "loads" if n == 1 else "load"
            parts.append(
                f"{_modules_word(n)} {verb} on torch {_releases(whole)} "
                "(its build torch is unknown: operators not compared)"
            )
        partial: dict[frozenset[str], list[str]] = {}
        for row in self.rows:
            proven = frozenset(row.proven)
            if proven and proven != everything and row.release not in partial.get(proven, []):
                partial.setdefault(proven, []).append(row.release)
        for proven, releases in partial.items():
            shown = ", ".join(sorted(proven))
            parts.append(f"{shown} {'also ' if whole else ''}on {_releases(releases)}")
        nothing = self.releases_where(set())
        if nothing:
            classes = sorted({_class_of(r.cell, detailed=True) for r in self.rows if r.release in nothing})
            parts.append(f"none on {_releases(nothing)} ({'; '.join(classes)})")
        return f"{self.label}: " + "; ".join(parts or ["no cell ran"])

    def measured_beyond(self) -> str | None:
        """Where its declared torch requirement admits releases of the run on which a module of it missed a torch
        symbol (what the run measured, beside what `check` predicts from its imports): 'declares torch>=2.9;
        measured here, a module misses a torch symbol on 2.11.0, 2.12.1'; None where the run saw no such release."""
        pins = sorted({b.torch_pin for b in self.builds if b.torch_pin})
        if not pins:
            return None
        try:
            specifier = Requirement(pins[0]).specifier
        except InvalidRequirement:
            return None
        missed = {row.release for row in self.rows if any(m.missing_symbol for m in row.cell.modules)}
        claimed = sorted(v for r in missed if (v := _version(r)) and specifier.contains(v, prereleases=True))
        if not claimed:
            return None
        loads = sorted(v for row in self.rows if row.proven and (v := _version(row.release)) and v > claimed[-1])
        after = f"; it loads from {loads[0]}" if loads else ""
        shown = ", ".join(str(v) for v in claimed)
        return f"declares {pins[0]}; measured here, a module misses a torch symbol on {shown}{after}"

    def table(self) -> list[str]:
        names = [_short(m) for m in self.modules]
        lines = [
            f"| runtime | verdict | {' | '.join(names)} |",
            f"|---|---|{'---|' * len(names)}",
        ]
        for row in self.rows:
            cells = []
            for module in self.modules:
                proof = next((m for m in row.modules if m.name == module), None)
                if proof is None:
                    cells.append("not run")
                elif proof.proven:
                    cells.append(f"✅ {proof.registered} op(s)" + ("" if proof.compared else ", not compared"))
                else:
                    cells.append(f"❌ {proof.why}")
            verdict = row.cell.verdict.value.replace("_", " ")
            if row.cell.expected_class and row.cell.verdict is Verdict.EXPECTED_FAILURE:
                verdict += f" ({row.cell.expected_class.value})"
            lines.append(f"| {row.runtime} | {verdict} | {' | '.join(cells)} |")
        return lines


def _version(release: str) -> Version | None:
    try:
        return Version(release)
    except InvalidVersion:
        return None


def _modules_word(n: int) -> str:
    return {1: "its module", 2: "both modules"}.get(n, f"all {n} modules")


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _releases(releases: list[str]) -> str:
    return ", ".join(releases)


def _class_of(cell: CellResult, *, detailed: bool = False) -> str:
    """Why a cell proves nothing, in a word (its class), with the libraries for host-library when detailed."""
    if cell.verdict is Verdict.EXPECTED_FAILURE and cell.expected_class:
        if detailed and cell.expected_class is Condition.HOST_LIBRARY:
            missing = sorted(  # the promise's (decided before the run) and what the loader said it missed
                {*named_in(cell.expected_why)}
                | {m.missing_library for m in cell.modules if m.missing_library and is_host_library(m.missing_library)}
            )
            package = next((p for m in missing if (p := usual_package(m))), None)
            return f"host-library: {', '.join(missing)}" + (f", from {package}" if package else "")
        return cell.expected_class.value
    return f"{cell.verdict.value}: {cell.reason}"[:120]


def _module_proofs(cell: CellResult, modules: tuple[str, ...], *, compared: bool = True) -> tuple[ModuleProof, ...]:
    """Each module's proof in one cell, from its derived suite's record; a cell that never ran the suite
    (its wheel does not install on that Python, say) proves none, each saying why. Not compared (its build torch
    is unknown): a module that loads is proven as far as it can be, and says its operators were not compared."""
    if not cell.modules:
        why = _class_of(cell) if cell.expected_class is not Condition.TORCH_ABI else cell.reason
        return tuple(ModuleProof(m, proven=False, why=why[:120]) for m in modules)
    found = []
    for record in cell.modules:
        name = record.name
        if record.error is not None:
            missing = record.missing_symbol or record.missing_library
            shown = f"missing {missing}" if missing else record.error.splitlines()[0][:120]
            found.append(ModuleProof(name, proven=False, why=shown))
            continue
        differs = any(SAME_OPS_TEST in t and f"[{name}]" in t for t in cell.failing_tests)
        if differs:
            found.append(ModuleProof(name, proven=False, why="registers other operators than on its build torch"))
        elif not compared:
            found.append(ModuleProof(name, proven=True, why="", registered=record.registered, compared=False))
        elif not record.compared:
            found.append(
                ModuleProof(
                    name, proven=False, why="loads; its operators not compared (it did not load on its build torch)"
                )
            )
        else:
            found.append(ModuleProof(name, proven=True, why="", registered=record.registered))
    return tuple(found)


def census(run: RunResult) -> list[PackageCensus]:
    """One entry per published release of the run (its builds, one per file, together), its rows in the run's
    runtime order."""
    order = {runtime: index for index, runtime in enumerate(run.runtime_order)}
    releases: dict[str, list[PublishedBuild]] = {}
    for published in run.published:
        releases.setdefault(published.requirement, []).append(published)
    packages = []
    for requirement, builds in releases.items():
        unknown = {b.build for b in builds if b.build_torch is None and b.build_torch_how is not None}
        ids = {b.build for b in builds}
        cells = sorted((c for c in run.cells if c.build_id in ids), key=lambda c: order.get(c.runtime_id, 0))
        modules = tuple(dict.fromkeys(_short(m.path) for c in cells for m in c.modules))
        rows = tuple(
            RuntimeRow(
                f"{c.runtime_torch}, py{c.runtime_python}" if c.runtime_python else c.runtime_torch,
                c.runtime_torch.split("+")[0],
                c,
                _module_proofs(c, modules, compared=c.build_id not in unknown),
            )
            for c in cells
        )
        project, _, version = requirement.partition("==")
        label = f"{project} {version}" if version else requirement
        packages.append(PackageCensus(label, tuple(builds), modules, rows))
    return packages


def document(
    run: RunResult,
    packages: list[PackageCensus],
    today: datetime.date | None = None,
    findings: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The census as a docs page holds it between its markers: when and from what run, each package's line and
    table, and what was downloaded. findings: by package label, where `census --verify` found a module loading
    otherwise outside the cells' sandbox than in it (the host offers what a cell does not see)."""
    made = (today or datetime.date.fromisoformat(run.finished[:10])).isoformat()
    lines = [
        f"{MADE_ON}{made} by `nox -s census` (run `{run.run_id}`, {len(run.cells)} cells, backend {run.backend}).",
        "",
    ]
    for package in packages:
        lines += [f"### {package.label}", "", f"**{package.line()}**", ""]
        for published in package.builds:
            lines += [_build_line(published), ""]
        measured = package.measured_beyond()
        if measured:
            lines += [f"Its metadata against the binary: it {measured}: it admits releases it cannot load on.", ""]
        unserved = sorted({p for b in package.builds for p in b.unserved})
        if unserved:
            lines += [f"No file of this release for CPython {', '.join(unserved)} on this platform: no cell there.", ""]
        lines += [*package.table(), ""]
        found = (findings or {}).get(package.label)
        if found:
            lines += [OUTSIDE, "", *(f"- {finding}" for finding in found), ""]
    return lines


def _build_line(published: PublishedBuild) -> str:
    """A file of the release: what it is, its declared torch requirement (and where that admits releases it cannot
    load on), its build torch B and how that was learnt, its target."""
    pin = published.torch_pin or "none"
    beyond = (
        f" Its metadata {published.declared_beyond}: it admits releases it cannot load on."
        if (published.declared_beyond)
        else ""
    )
    return (
        f"`{published.filename}` (sha256 `{published.sha256[:16]}…`), build `{published.build}`; "
        f"declared torch requirement: {pin} (reported, not obeyed).{beyond} "
        f"Build torch: {published.build_torch_from}. Target: {published.target_from}."
    )
