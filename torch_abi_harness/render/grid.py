"""The compatibility grid laid out for people: builds x runtimes, the runtimes grouped by torch release.

Releases go in numeric order (2.9.1 before 2.10.0), each heading its runtimes, with a header row
beneath for each of Python, variant and device that tells runtimes apart (only those). The terminal
gets it folded into blocks of whole releases that fit its width, each block repeating the build ids;
summary.md gets one table with the same header rows.

The grouping is read from the results (each cell's runtime torch, variant, Python and device), never
from the matrix file: a report merged from shards, or written by an older harness, renders the same.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

from packaging.version import InvalidVersion, Version
from rich.cells import cell_len

from torch_abi_harness.core.versions import release_of
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.verdict import Verdict

AXES = ("python", "variant", "device")  # what can tell the runtimes of one release apart, in header order
CORNER = "build \\ runtime"
GAP = "  "  # between two runtimes of one release
DIVIDER = " │ "  # before each release's runtimes
NOT_RUN = "·"  # a build x runtime the run left out
NOT_RUN_MEANING = "not in this run (the build's `runtimes:` or the selection left it out)"
PYTHON_SUFFIX = re.compile(r"-py(\d+\.\d+\w*)$")  # r2.12.1-cpu-py3.10: a Python other than the matrix's
RELEASE_PREFIX = re.compile(r"^r(\d+(?:\.\d+)*)")

Mark = Callable[["CellResult"], str]  # a cell's text in the grid
Segment = tuple[str, Verdict | None]  # some text of a line, and the verdict of the cell it shows (else None)


@dataclasses.dataclass(frozen=True)
class Column:
    """One runtime of the grid, as its results describe it."""

    runtime_id: str
    release: str  # the torch release, without its local version: 2.10.0
    python: str | None  # None: not recorded (results before schema_version 5) and not in the id
    variant: str  # as installed: cpu, cu128...
    device: str

    @classmethod
    def of(cls, cell: CellResult) -> Column:
        python = cell.runtime_python
        if python is None:  # an older results.json: the id names a Python only when not the matrix's
            found = PYTHON_SUFFIX.search(cell.runtime_id)
            python = found.group(1) if found else None
        return cls(cell.runtime_id, _release(cell), python, cell.runtime_variant, cell.device)

    def label(self, axis: str) -> str:
        if axis == "python":
            return f"py{self.python}" if self.python else "py?"
        if axis == "variant":
            return f"+{self.variant}" if self.variant else "+?"
        return self.device

    @property
    def order(self) -> tuple[tuple[int, Version | str], tuple[int, Version | str]]:
        return _version_key(self.release), _version_key(self.python or "")


@dataclasses.dataclass(frozen=True)
class Group:
    """Runtimes of one torch release: the whole release, or the part of it that fits in a block."""

    release: str
    columns: tuple[Column, ...]


@dataclasses.dataclass(frozen=True)
class Block:
    """Lines of the folded grid: the header rows, then one line per build, each starting with its id."""

    first: int  # the runtimes it shows, counted from 1 over the whole grid
    last: int
    header: tuple[str, ...]
    body: tuple[tuple[Segment, ...], ...]

    def lines(self) -> list[str]:
        return [*self.header, *("".join(text for text, _ in line) for line in self.body)]


@dataclasses.dataclass(frozen=True)
class Grid:
    """A run's cells as rows of builds and columns of runtimes, the runtimes grouped by release."""

    rows: tuple[str, ...]  # build ids, in the run's order
    groups: tuple[Group, ...]  # releases in numeric order
    axes: tuple[str, ...]  # the header rows beneath the releases: what tells runtimes apart
    cells: Mapping[tuple[str, str], CellResult]  # by (build id, runtime id)

    @classmethod
    def of(cls, run: RunResult, always: Sequence[str] = ()) -> Grid:
        """The run's cells by build (the run's order) and runtime (by release, then Python, then the run's order).

        Python and device rows are shown when either differs anywhere in the grid; the variant row only
        when it tells runtimes of one release apart (the variant each release installs differs anyway);
        the axes in `always` in any case (report.html names every runtime's variant)."""
        cells = {(c.build_id, c.runtime_id): c for c in run.cells}
        built = {build for build, _ in cells}
        rows = tuple(dict.fromkeys([*(b for b in run.build_order if b in built), *(b for b, _ in cells)]))
        first = {c.runtime_id: Column.of(c) for c in reversed(run.cells)}  # the first cell's view of its runtime
        position = {runtime: n for n, runtime in enumerate(run.runtime_order)}
        columns = sorted(
            first.values(), key=lambda c: (c.order, position.get(c.runtime_id, len(position)), c.runtime_id)
        )
        releases = dict.fromkeys(c.release for c in columns)
        groups = tuple(Group(r, tuple(c for c in columns if c.release == r)) for r in releases)

        def differs(axis: str, among: Sequence[Column]) -> bool:
            return len({c.label(axis) for c in among}) > 1

        axes = tuple(
            axis
            for axis in AXES
            if axis in always
            or (any(differs(axis, g.columns) for g in groups) if axis == "variant" else differs(axis, columns))
        )
        return cls(rows, groups, axes, cells)

    @property
    def columns(self) -> tuple[Column, ...]:
        return tuple(c for g in self.groups for c in g.columns)

    @property
    def absent(self) -> int:
        """How many places of the grid hold no cell: combinations the run left out (a build's `runtimes:`,
        a selection), shown as NOT_RUN so that no blank hides one."""
        return len(self.rows) * len(self.columns) - len(self.cells)

    def markdown(self, mark: Mark, label: Callable[[str], str] | None = None) -> list[str]:
        """A Markdown table: a release heads the first of its runtimes, the axes' rows beneath; `label`: what a
        build row shows beside its id (its own verdict, its findings)."""
        columns = self.columns
        lines = [
            _md_row([CORNER, *(g.release if n == 0 else "" for g in self.groups for n in range(len(g.columns)))]),
            "|---|" + "---|" * len(columns),
        ]
        lines += [_md_row([f"*{axis}*", *(c.label(axis) for c in columns)]) for axis in self.axes]
        for row in self.rows:
            found = [self.cells.get((row, c.runtime_id)) for c in columns]
            beside = label(row) if label else ""
            name = f"`{row}`" + (f" {beside}" if beside else "")
            lines.append(_md_row([name, *(mark(cell) if cell else NOT_RUN for cell in found)]))
        return lines

    def blocks(self, width: int, mark: Mark) -> list[Block]:
        """The grid folded into blocks no wider than width, whole releases where they fit (a release
        wider than the width alone is split): each block repeats the build ids and the header rows.
        A block holds at least one runtime, so only a width narrower than an id and one cell is exceeded."""
        marks = {key: mark(cell) for key, cell in self.cells.items()}
        widths = {
            c.runtime_id: max(
                [
                    1,
                    *(cell_len(c.label(a)) for a in self.axes),
                    *(cell_len(marks.get((r, c.runtime_id), NOT_RUN)) for r in self.rows),
                ]
            )
            for c in self.columns
        }
        for group in self.groups:  # the release's name fits over its runtimes
            short = cell_len(group.release) - _span(group.columns, widths)
            if short > 0:
                widths[group.columns[-1].runtime_id] += short
        label = max(cell_len(text) for text in (CORNER, *self.axes, *self.rows))
        room = width - label
        out: list[Block] = []
        done = 0
        for part in _pack(self.groups, widths, room):
            count = sum(len(g.columns) for g in part)
            out.append(self._block(part, widths, label, marks, done + 1, done + count))
            done += count
        return out

    def _block(
        self,
        groups: Sequence[Group],
        widths: Mapping[str, int],
        label: int,
        marks: Mapping[tuple[str, str], str],
        first: int,
        last: int,
    ) -> Block:
        header = [_pad(CORNER, label) + "".join(DIVIDER + _pad(g.release, _span(g.columns, widths)) for g in groups)]
        for axis in self.axes:
            header.append(
                _pad(axis, label)
                + "".join(
                    DIVIDER + GAP.join(_pad(c.label(axis), widths[c.runtime_id]) for c in g.columns) for g in groups
                )
            )
        body = []
        for row in self.rows:
            line: list[Segment] = [(_pad(row, label), None)]
            for group in groups:
                line.append((DIVIDER, None))
                for n, column in enumerate(group.columns):
                    cell = self.cells.get((row, column.runtime_id))
                    text = marks.get((row, column.runtime_id), NOT_RUN)
                    line += [(GAP, None)] if n else []
                    line += [
                        (text, cell.verdict if cell else None),
                        (" " * (widths[column.runtime_id] - cell_len(text)), None),
                    ]
            body.append(_rstrip(line))
        return Block(first, last, tuple(h.rstrip() for h in header), tuple(body))


def _pack(groups: Sequence[Group], widths: Mapping[str, int], room: int) -> list[list[Group]]:
    """Groups into as few blocks as fit in room columns of text (a group too wide alone is split into
    parts), as even as they can be: the least limit that needs no more blocks than room does."""
    parts = [p for g in groups for p in _split(g, widths, room)]
    costs = [len(DIVIDER) + _span(p.columns, widths) for p in parts]
    fewest = len(_fill(costs, room))
    limit = max(costs, default=0)
    while len(_fill(costs, limit)) > fewest:
        limit += 1
    bounds = _fill(costs, limit)
    return [parts[start:end] for start, end in itertools.pairwise([0, *bounds])]


def _fill(costs: Sequence[int], limit: int) -> list[int]:
    """Where each block ends, filling each in turn up to limit (a part costing more gets a block alone)."""
    ends: list[int] = []
    used = 0
    for n, cost in enumerate(costs):
        if n and used + cost > limit:
            ends.append(n)
            used = 0
        used += cost
    return [*ends, len(costs)] if costs else []


def _split(group: Group, widths: Mapping[str, int], room: int) -> Iterator[Group]:
    """The group whole when it fits in room, else in parts that do (at least one runtime each)."""
    part: list[Column] = []
    for column in group.columns:
        if part and len(DIVIDER) + _span((*part, column), widths) > room:
            yield Group(group.release, tuple(part))
            part = []
        part.append(column)
    yield Group(group.release, tuple(part))


def _span(columns: Sequence[Column], widths: Mapping[str, int]) -> int:
    return sum(widths[c.runtime_id] for c in columns) + len(GAP) * (len(columns) - 1)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - cell_len(text))


def _rstrip(line: list[Segment]) -> tuple[Segment, ...]:
    while line and line[-1][1] is None and not line[-1][0].strip():
        line.pop()
    if line and line[-1][1] is None:
        line[-1] = (line[-1][0].rstrip(), None)
    return tuple(line)


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _release(cell: CellResult) -> str:
    """2.10.0+cu128 -> 2.10.0; from the runtime id when its torch is not a version (r2.10.0-cpu -> 2.10.0)."""
    try:
        return release_of(cell.runtime_torch)
    except InvalidVersion:
        found = RELEASE_PREFIX.match(cell.runtime_id)
        return found.group(1) if found else cell.runtime_torch


def _version_key(text: str) -> tuple[int, Version | str]:
    """Numeric order (2.9.1 before 2.10.0); text that is no version after every version."""
    try:
        return 0, Version(text)
    except InvalidVersion:
        return 1, text
