"""A compatibility table for an extension's README, from a run's results: where each build is proven to work.

A build is *proven* on a runtime when its cell there passed (kept its promise, or passed where nothing was
promised); a retry that passed (flaky), a known break, a skip or an error proves nothing. Per build, the
one-line claim is the smallest box holding every proven runtime: a torch range, a CPython range, and the
CUDA majors (or CPU) of the torch builds it passed on. A runtime the run tested inside that box where the
build was not proven is a *hole*: the line would hide it, so the command fails naming it. (Combinations
inside the box that the run never tested are not checked: the table shows which releases were tested.)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Sequence

from packaging.version import InvalidVersion, Version

from harness.core.status import Status
from harness.core.text import natural_key
from harness.core.versions import release_of
from harness.results.model import CellResult, RunResult
from harness.verdict import Verdict

PROVING = frozenset({Verdict.KEPT, Verdict.UNEXPECTED_PASS})
CUDA_LABEL = re.compile(r"^cu(\d+?)(\d)$")  # cu128 -> 12, cu130 -> 13


def proven(cell: CellResult) -> bool:
    return cell.status is Status.PASS and cell.verdict in PROVING


def cell_release(cell: CellResult) -> Version:
    try:
        return Version(release_of(cell.runtime_torch))
    except InvalidVersion:
        return Version("0")


def minor(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def cuda_of(cell: CellResult) -> str:
    """'CUDA 13' for cu130/cu132, 'CPU' for a build without CUDA; the variant itself when it says neither."""
    found = CUDA_LABEL.match(cell.runtime_variant)
    if found:
        return f"CUDA {found.group(1)}"
    return "CPU" if cell.runtime_variant == "cpu" else cell.runtime_variant


def _python_key(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or ""))


@dataclasses.dataclass(frozen=True)
class Claim:
    """What one build is proven on, as a box, and what the box would hide."""

    build: str
    cells: tuple[CellResult, ...]

    @property
    def proofs(self) -> list[CellResult]:
        return [c for c in self.cells if proven(c)]

    def inside(self, cell: CellResult) -> bool:
        proofs = self.proofs
        if not proofs:
            return False
        releases = [cell_release(c) for c in proofs]
        pythons = [_python_key(c.runtime_python) for c in proofs]
        return (
            min(releases) <= cell_release(cell) <= max(releases)
            and min(pythons) <= _python_key(cell.runtime_python) <= max(pythons)
            and cuda_of(cell) in {cuda_of(c) for c in proofs}
        )

    @property
    def holes(self) -> list[CellResult]:
        """Runtimes tested inside the claimed box where the build was not proven."""
        return sorted((c for c in self.cells if not proven(c) and self.inside(c)), key=lambda c: natural_key(c.id))

    def line(self) -> str:
        """'torch 2.10-2.15, CPython 3.10-3.13, CUDA 12/13 or CPU' (with en dashes): the paste-able range."""
        proofs = self.proofs
        if not proofs:
            return "proven on no runtime of this run"
        releases = sorted({minor(cell_release(c)) for c in proofs}, key=_python_key)
        pythons = sorted({c.runtime_python or "?" for c in proofs}, key=_python_key)
        kinds = sorted({cuda_of(c) for c in proofs})
        cuda = [k.removeprefix("CUDA ") for k in kinds if k.startswith("CUDA ")]
        other = [k for k in kinds if not k.startswith("CUDA ")]
        builds = ([f"CUDA {'/'.join(cuda)}"] if cuda else []) + other
        return f"torch {_span(releases)}, CPython {_span(pythons)}, {' or '.join(builds)}"

    def by_release(self) -> dict[str, str]:
        """Per torch minor: ✅ proven on every runtime of it tested, ❌ on none, else ⚠️ proven/tested."""
        out: dict[str, str] = {}
        for key in sorted({minor(cell_release(c)) for c in self.cells}, key=_python_key):
            mine = [c for c in self.cells if minor(cell_release(c)) == key]
            good = sum(proven(c) for c in mine)
            out[key] = "✅" if good == len(mine) else "❌" if not good else f"⚠️ {good}/{len(mine)}"
        return out


def _span(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}"


def claims(run: RunResult, builds: Sequence[str] = ()) -> list[Claim]:
    """One claim per build of the run (in its order), or of the builds whose ids match one of `builds` (globs)."""
    by_build: dict[str, list[CellResult]] = {}
    for cell in run.cells:
        by_build.setdefault(cell.build_id, []).append(cell)
    order = [b for b in run.build_order if b in by_build] + sorted(set(by_build) - set(run.build_order))
    chosen = [b for b in order if not builds or any(fnmatch.fnmatchcase(b, f"*{s}*") for s in builds)]
    return [Claim(b, tuple(by_build[b])) for b in chosen]


def markdown(found: Sequence[Claim]) -> list[str]:
    """The compact table: a row per build, a column per torch minor, and its one-line range."""
    releases = sorted({r for claim in found for r in claim.by_release()}, key=_python_key)
    lines = [
        "| build | " + " | ".join(f"torch {r}" for r in releases) + " | proven on |",
        "|---|" + "---|" * len(releases) + "---|",
    ]
    for claim in found:
        marks = claim.by_release()
        row = [f"`{claim.build}`", *(marks.get(r, "—") for r in releases), claim.line()]
        lines.append("| " + " | ".join(row) + " |")
    return lines
