"""A compatibility table for an extension's README, from a run's results: where each build is proven to work.

A build is *proven* on a runtime only when its cell there kept a promise to pass (KEPT): an unexpected pass
(a cell nothing was promised on, e.g. an unstable C++ extension that happened to load) proves nothing, and
neither does a retry that passed (flaky), a known break, a skip or an error.

Per build, the one-line claim names exactly what was proven, release by release: each torch minor with the
CPython versions and variants (cpu, cu128, ... as the run resolved them) its proofs ran on, consecutive
minors with the same ones joined into a span. A span never covers a torch minor, a CPython or a variant the
run did not prove: a minor between two proven ones is named "not tested" (no cell of the build ran there)
or "not proven". A runtime the run tested inside the build's box (its proven torch range, CPython range and
CUDA majors or CPU) where the build was not proven is a *hole*: the command fails naming it.

`splice` keeps the table current in a documentation file, between MARK_BEGIN and MARK_END.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
from collections.abc import Sequence
from pathlib import PurePath

from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.text import natural_key
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.verdict import Verdict

PROVING = frozenset({Verdict.KEPT})  # a promise to pass, kept: the only evidence a claim may rest on
CUDA_LABEL = re.compile(r"^cu(\d+?)(\d)$")  # cu128 -> 12, cu130 -> 13
NOT_TESTED = "not tested"  # a torch minor of the table where the build has no cell
MARK_BEGIN, MARK_END = "<!-- compat:begin -->", "<!-- compat:end -->"


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


def _next(version: str) -> str:
    """The minor after this one, of the same major: 2.12 -> 2.13, 3.10 -> 3.11."""
    major, number = _python_key(version)[:2]
    return f"{major}.{number + 1}"


def _runs(values: Sequence[str]) -> list[list[str]]:
    """Sorted major.minor versions cut where one does not follow the last: [2.10, 2.11, 2.13] -> [[2.10, 2.11],
    [2.13]]."""
    out: list[list[str]] = []
    for value in values:
        if out and _next(out[-1][-1]) == value:
            out[-1].append(value)
        else:
            out.append([value])
    return out


def _spans(values: Sequence[str]) -> str:
    """'2.10-2.11 and 2.13' (with an en dash): a span only over versions that follow each other."""
    return " and ".join(_span(run) for run in _runs(values))


def _where(places: frozenset[tuple[str, str]]) -> str:
    """The (CPython, variant) pairs of one release's proofs: 'CPython 3.10-3.11, cu130' when they are every
    combination of their Pythons and variants, else each pair ('CPython 3.10 cpu, 3.11 cu130')."""
    pythons = sorted({p for p, _ in places}, key=_python_key)
    variants = sorted({v for _, v in places}, key=natural_key)
    if len(places) == len(pythons) * len(variants):
        known = [p for p in pythons if p != "?"]  # "?": results that did not record the runtime's Python
        text = " and ".join([_spans(known)] * bool(known) + ["?"] * (len(known) < len(pythons)))
        return f"CPython {text}, {'/'.join(variants)}"
    pairs = sorted(places, key=lambda pv: (_python_key(pv[0]), natural_key(pv[1])))
    return "CPython " + ", ".join(f"{p} {v}" for p, v in pairs)


@dataclasses.dataclass(frozen=True)
class Claim:
    """What one build is proven on, release by release, and what its box would hide."""

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
        """Runtimes tested inside the proven box where the build was not proven."""
        return sorted((c for c in self.cells if not proven(c) and self.inside(c)), key=lambda c: natural_key(c.id))

    def places(self) -> dict[str, frozenset[tuple[str, str]]]:
        """Per proven torch minor (in order): the (CPython, variant) pairs it was proven on."""
        found: dict[str, set[tuple[str, str]]] = {}
        for cell in self.proofs:
            found.setdefault(minor(cell_release(cell)), set()).add((cell.runtime_python or "?", cell.runtime_variant))
        return {key: frozenset(found[key]) for key in sorted(found, key=_python_key)}

    def line(self) -> str:
        """'torch 2.10-2.11 (CPython 3.11, cu128/cu130), 2.13 (CPython 3.11, cpu); torch 2.12 not tested' (en dashes):
        what a README may claim, and no more."""
        places = self.places()
        if not places:
            return "proven on no runtime of this run"
        segments: list[tuple[list[str], frozenset[tuple[str, str]]]] = []
        for key, where in places.items():
            if segments and segments[-1][1] == where and _next(segments[-1][0][-1]) == key:
                segments[-1][0].append(key)
            else:
                segments.append(([key], where))
        text = "torch " + ", ".join(f"{_span(keys)} ({_where(where)})" for keys, where in segments)
        pythons = sorted({p for where in places.values() for p, _ in where if p != "?"}, key=_python_key)
        gaps = [
            *_between("torch", list(places), {minor(cell_release(c)) for c in self.cells}),
            *_between("CPython", pythons, {c.runtime_python or "?" for c in self.cells}),
        ]
        return "; ".join([text, *gaps])

    def by_release(self) -> dict[str, str]:
        """Per torch minor: ✅ proven on every runtime of it tested, ❌ on none, else ⚠️ proven/tested."""
        out: dict[str, str] = {}
        for key in sorted({minor(cell_release(c)) for c in self.cells}, key=_python_key):
            mine = [c for c in self.cells if minor(cell_release(c)) == key]
            good = sum(proven(c) for c in mine)
            out[key] = "✅" if good == len(mine) else "❌" if not good else f"⚠️ {good}/{len(mine)}"
        return out


def _between(axis: str, proven_values: Sequence[str], tested: set[str]) -> list[str]:
    """What lies between proven versions of an axis and was not proven there: 'torch 2.12 not tested' (no cell of
    the build ran on it), 'CPython 3.12 not proven' (cells ran there, none kept its promise)."""
    gaps = [gap for run in _gaps(proven_values) for gap in run]
    out = []
    for names, what in (
        ([g for g in gaps if g not in tested], NOT_TESTED),
        ([g for g in gaps if g in tested], "not proven"),
    ):
        if names:
            out.append(f"{axis} {', '.join(names)} {what}")
    return out


def _gaps(keys: Sequence[str]) -> list[list[str]]:
    """The minors missing between sorted major.minor versions of one major: [2.10, 2.13] -> [[2.11, 2.12]]."""
    out: list[list[str]] = []
    for low, high in itertools.pairwise(keys):
        missing: list[str] = []
        step = _next(low)
        while _python_key(step) < _python_key(high) and _python_key(step)[0] == _python_key(high)[0]:
            missing.append(step)
            step = _next(step)
        if missing:
            out.append(missing)
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
        row = [f"`{claim.build}`", *(marks.get(r, NOT_TESTED) for r in releases), claim.line()]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def document(run: RunResult, found: Sequence[Claim]) -> list[str]:
    """What `compat --update` writes between the markers: a line on what the marks mean, then the table (its
    last column is each build's line to paste)."""
    return [
        f"Generated by `python -m torch_abi_harness compat --update` from run `{run.run_id}` ({len(run.cells)} cells, "
        f"matrix `{PurePath(run.matrix).name}`). Proven: the cell kept a promise to pass; an unexpected pass "
        "proves nothing. ✅ proven on every runtime of that torch minor the run tested, ❌ on none, "
        f"⚠️ on some (proven/tested); {NOT_TESTED}: no cell of the build ran there.",
        "",
        *markdown(found),
    ]


def splice(
    text: str,
    block: Sequence[str],
    source: str,
    markers: tuple[str, str] = (MARK_BEGIN, MARK_END),
    what: str = "compatibility table",
) -> str:
    """text with what lies between its markers replaced by block (the markers' own lines kept). A text without
    exactly one begin marker followed by one end marker is refused, naming source and the lines to add."""
    begin, end = markers
    begins, ends = text.count(begin), text.count(end)
    start, stop = text.find(begin), text.find(end)
    if begins != 1 or ends != 1 or stop < start:
        found = f"{begins} {begin!r} and {ends} {end!r}" + (", the end first" if stop < start else "")
        raise BadInputError(
            f"{source}: needs exactly one {begin} line followed by one {end} line around the "
            f"{what} (found {found}); add the two lines where the table belongs and run again"
        )
    head = text[: start + len(begin)]
    tail = text[stop:]
    return head + "\n" + "".join(f"{line}\n" for line in block) + tail
