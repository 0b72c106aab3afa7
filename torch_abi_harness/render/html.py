"""report.html: a run's results as one self-contained page (no network: its CSS and JS are inline).

It is rendered from the run (as results.json holds it) with the grid laid out by torch_abi_harness.render.grid (the
same releases, Python/variant/device rows and order as summary.md), plus what lies beside it in the
run directory: the tails of each failing cell's logs, diff.json (a baseline diff) and gate.json (a
gate decision). The grid is server-rendered; one small script adds the filters and a cell's details,
which come from a JSON block in the page, so a grid of thousands of cells opens at once.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from torch_abi_harness.core.files import open_inside, run_relative, write_atomic
from torch_abi_harness.core.kinds import Backend
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.text import natural_key
from torch_abi_harness.render.grid import Grid
from torch_abi_harness.render.text import (
    FINDING_MARK,
    STATUS_SHORT,
    VERDICT_MEANING,
    VERDICT_SYMBOL,
    build_mark,
    expected_failure_classes,
    headline,
)
from torch_abi_harness.results.known_breaks import ACKNOWLEDGES_ALL, STATE_MEANING, outcomes
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.verdict import Verdict

FIRST = (Verdict.BROKEN, Verdict.FLAKY, Verdict.ERROR)  # what the page opens with, in this order
FIRST_SHOWN = 200  # rows of that list; the rest are a count (the verdict filter finds them)
TAIL_BYTES = 6000  # of each log of a cell that did not simply pass
TAIL_LINES = 40
LOGS_WITH_TAILS = ("stderr", "stdout", "build")
DIFF_FILE, GATE_FILE = "diff.json", "gate.json"


def page_template(name: str) -> jinja2.Template:
    """A page template of torch_abi_harness/templates: escaped, strict about undefined names, tidy whitespace."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("torch_abi_harness.render", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["safe_url"] = safe_url
    assert env.loader is not None
    source = env.loader.get_source(env, name)[0]
    return env.get_template(name, globals={"csp": content_security_policy(source)})


_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def content_security_policy(template_source: str) -> str:
    """The page's Content-Security-Policy: nothing fetched from anywhere, its own inline styles, and as script
    only the template's own inline scripts (by their SHA-256, taken from the template, not from the rendered
    page): a text a run's files bring into the page never runs, even if escaping missed it. Each script
    is static in its template (no template tags inside), so its rendered text is the hashed one."""
    hashes = [
        f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _INLINE_SCRIPT.findall(template_source)
    ]
    scripts = " ".join(hashes) or "'none'"
    return f"default-src 'none'; style-src 'unsafe-inline'; script-src {scripts}; base-uri 'none'; form-action 'none'"


def safe_url(text: str) -> str | None:
    """A link the page may follow: http(s) only (a known break's link is written by people)."""
    return text if text.startswith(("https://", "http://")) else None


def safe_path(text: str) -> str | None:
    """A link to a file of the run directory: a plain relative path (core.files.run_relative), no scheme, no '..'
    (a cell's logs come from results.json, which `report` and `merge` read from wherever it was written)."""
    return text if run_relative(text) else None


def script_json(data: object) -> str:
    """JSON safe inside <script type="application/json">: no '<' can close the element."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def tail(run_dir: Path, relative: str) -> str | None:
    """The last lines of a log of the run directory, read as a hostile file: never through a link, a regular
    file only, at most TAIL_BYTES from its end. None when it is not there or not such a file."""
    try:
        fd = open_inside(run_dir, relative)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        os.lseek(fd, max(0, info.st_size - TAIL_BYTES), os.SEEK_SET)
        data = os.read(fd, TAIL_BYTES)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    cut = info.st_size > TAIL_BYTES or len(lines) > TAIL_LINES
    return ("…\n" if cut else "") + "\n".join(lines[-TAIL_LINES:])


def reproduce(run: RunResult, cell: CellResult) -> str:
    """The command that runs this one cell again, from the repository the matrix lives in."""
    words = ["python", "-m", "torch_abi_harness", "run", "--matrix", run.matrix, "-k", cell.id]
    if run.candidate:
        words += ["--candidate", run.candidate]
    if cell.backend == Backend.DOCKER:
        words += ["--backend", "docker"]
    return shlex.join(words)


def details(run: RunResult, cell: CellResult, run_dir: Path | None) -> dict[str, Any]:
    """What the page shows when the cell is clicked."""
    prediction = cell.prediction
    plain = cell.status is Status.PASS and cell.verdict is Verdict.KEPT
    tails = {}
    # The build's log says something only when the build is what failed (or the harness did).
    names = LOGS_WITH_TAILS if cell.status in (Status.BUILD_FAILED, Status.ERROR) else LOGS_WITH_TAILS[:2]
    if run_dir is not None and not plain:
        for name in names:
            if name in cell.logs and (text := tail(run_dir, cell.logs[name])):
                tails[name] = text
    return {
        "id": cell.id,
        "build": cell.build_id,
        "runtime": cell.runtime_id,
        "torch": cell.runtime_torch,
        "python": cell.runtime_python,
        "variant": cell.runtime_variant,
        "device": cell.device,
        "status": cell.status.value,
        "verdict": cell.verdict.value,
        "symbol": VERDICT_SYMBOL[cell.verdict],
        "reason": cell.reason,
        "expected": cell.expected.value,
        "why": cell.expected_why,
        "class": cell.expected_class.value if cell.expected_class else None,
        "known_break": cell.known_break,
        "tests": f"{cell.tests.passed} passed, {cell.tests.failed} failed, {cell.tests.skipped} skipped, "
        f"{cell.tests.errors} errors",
        "failing": list(cell.failing_tests),
        "missing_symbol": cell.missing_symbol,
        "missing": [m.to_json() for m in prediction.missing] if prediction else [],
        "prediction": prediction.outcome.value if prediction else None,
        "unmet": [u.why for u in prediction.unmet] if prediction else [],
        "findings": list(cell.findings),
        "docs": [{"key": d.key, "text": d.text} for d in cell.doc_differences],
        "attempts": [a.line(n) for n, a in enumerate(cell.attempts, 1)],
        "logs": dict(sorted(cell.logs.items())),
        "links": {name: path for name, path in sorted(cell.logs.items()) if safe_path(path)},
        "tails": tails,
        "seconds": cell.durations.get("total"),
        "reproduce": reproduce(run, cell),
    }


@dataclasses.dataclass(frozen=True)
class GridCell:
    """One cell of the page's grid: where its details are, its column, its verdict and its text."""

    index: int
    column: int
    verdict: str
    text: str
    title: str

    @classmethod
    def of(cls, cell: CellResult, index: int, column: int) -> GridCell:
        text = f"{VERDICT_SYMBOL[cell.verdict]} {STATUS_SHORT[cell.status]}" + (
            f" {FINDING_MARK}" if cell.findings else ""
        )
        return cls(index, column, cell.verdict.value, text, f"{cell.id}: {cell.verdict.value} ({cell.status.value})")


@dataclasses.dataclass(frozen=True)
class Problem:
    """A cell the page opens with, above the grid: it broke its promise or errored."""

    index: int  # of its details
    cell: CellResult

    @property
    def symbol(self) -> str:
        return VERDICT_SYMBOL[self.cell.verdict]

    @property
    def missing(self) -> str:
        """The symbol the loader named, else those the prediction named (the loader names only the first)."""
        if self.cell.missing_symbol:
            return self.cell.missing_symbol
        prediction = self.cell.prediction
        return ", ".join(m.name for m in prediction.missing) if prediction else ""

    @property
    def runtime(self) -> str:
        """torch with its variant as the matrix resolved it (cpu, cu126...), CPython, device."""
        cell = self.cell
        torch = cell.runtime_torch
        if not torch.endswith(f"+{cell.runtime_variant}"):
            torch += f" ({cell.runtime_variant})"
        return f"torch {torch}, CPython {cell.runtime_python or '?'}, device {cell.device}"


def problems(cells: Sequence[tuple[int, CellResult]]) -> list[Problem]:
    """The cells that broke a promise (broken, flaky) or errored, worst first, each by its details' index."""
    found = [Problem(index, cell) for index, cell in cells if cell.verdict in FIRST]
    return sorted(found, key=lambda p: (FIRST.index(p.cell.verdict), natural_key(p.cell.id)))


@dataclasses.dataclass(frozen=True)
class GridRow:
    build: str
    extension: str
    cells: tuple[GridCell | None, ...]
    candidate: bool = False  # built on the run's candidate (`--candidate`)
    mark: str = ""  # the build's own verdict or findings, beside its id
    note: str = ""  # ...said in words (the mark's title)

    @property
    def verdicts(self) -> str:
        """The verdicts in the row, for the verdict filter."""
        return " ".join(sorted({c.verdict for c in self.cells if c is not None}))


def _read_json(run_dir: Path | None, name: str) -> dict[str, Any] | None:
    if run_dir is None or not (run_dir / name).is_file():
        return None
    data: dict[str, Any] = json.loads((run_dir / name).read_text())
    return data


@dataclasses.dataclass(frozen=True)
class Beside:
    """What the page shows beside the run: a baseline diff (diff.json's document) and a gate decision
    (gate.json's), handed over by whoever made them, or read from the run directory (`report`)."""

    diff: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None

    @classmethod
    def read(cls, run_dir: Path | None) -> Beside:
        return cls(_read_json(run_dir, DIFF_FILE), _read_json(run_dir, GATE_FILE))

    @property
    def carried(self) -> list[str]:
        """What the gate's candidate carries from earlier releases: gate.json's lines from version 3 on; before
        it, its header findings marked 'inherited' (the same notion, by its old name)."""
        if self.gate is None:
            return []
        if "carried" in self.gate:
            return [str(line) for line in self.gate["carried"]]
        findings = (self.gate.get("headers") or {}).get("findings") or []
        return [f"header finding {f.get('detail', f.get('name'))} [inherited]" for f in findings if f.get("inherited")]


def render(run: RunResult, run_dir: Path | None = None, beside: Beside | None = None) -> str:
    """The page for a run; run_dir (where results.json lies) adds log tails, and diff.json and gate.json from
    it unless beside gives them."""
    beside = beside if beside is not None else Beside.read(run_dir)
    grid = Grid.of(run, always=("variant",))
    columns = grid.columns
    rows, cells, indexed = _grid_rows(run, grid, run_dir)
    counts = run.counts()
    known = outcomes(run.known_breaks, run.cells)
    first = problems(indexed)
    return page_template("report.html.j2").render(
        problems=first[:FIRST_SHOWN],
        problems_left=max(0, len(first) - FIRST_SHOWN),
        run=run,
        headline=headline(run),
        exit_code=int(run.exit_code),
        counts=[(v, counts[v.value]) for v in Verdict if counts[v.value]],
        legend=[(v, VERDICT_SYMBOL[v], VERDICT_MEANING[v].replace("**", "")) for v in Verdict],
        groups=[(g.release, len(g.columns)) for g in grid.groups],
        runtime_options=[
            (g.release, [(n, c.runtime_id) for n, c in enumerate(columns) if c.release == g.release])
            for g in grid.groups
        ],
        axes=[(axis, [c.label(axis) for c in columns]) for axis in grid.axes],
        columns=columns,
        rows=rows,
        extensions=sorted({r.extension for r in rows}),
        classes=expected_failure_classes(run.cells),
        known=known,
        acknowledges_all=ACKNOWLEDGES_ALL,
        state_meaning=STATE_MEANING,
        diff=beside.diff,
        gate=beside.gate,
        gate_carried=beside.carried,
        cells_json=script_json(cells),
        finding_mark=FINDING_MARK,
        builds=_builds_shown(run),
    )


def _grid_rows(
    run: RunResult, grid: Grid, run_dir: Path | None
) -> tuple[list[GridRow], list[dict[str, Any]], list[tuple[int, CellResult]]]:
    """The page's rows of the grid, each cell's details (by the index its grid cell carries), and the cells with
    that index."""
    extensions = {c.build_id: c.extension for c in run.cells}
    builds = {b.id: b for b in run.builds}
    on_candidate = {c.build_id for c in run.cells if run.candidate and c.build_torch == run.candidate}
    cells: list[dict[str, Any]] = []
    indexed: list[tuple[int, CellResult]] = []
    rows: list[GridRow] = []
    for row in grid.rows:
        marks: list[GridCell | None] = []
        for number, column in enumerate(grid.columns):
            found = grid.cells.get((row, column.runtime_id))
            marks.append(None if found is None else GridCell.of(found, len(cells), number))
            if found is not None:
                indexed.append((len(cells), found))
                cells.append(details(run, found, run_dir))
        mark, note = build_mark(builds.get(row))
        rows.append(GridRow(row, extensions[row], tuple(marks), row in on_candidate, mark, note))
    return rows, cells, indexed


def _builds_shown(run: RunResult) -> list[dict[str, Any]]:
    """The builds the page lists: those with findings or not simply kept, in natural order."""
    return [
        {
            "id": b.id,
            "mark": build_mark(b)[0],
            "verdict": b.verdict,
            "reason": b.reason,
            "expected_why": b.expected_why,
            "findings": b.findings,
        }
        for b in sorted(run.builds, key=lambda b: natural_key(b.id))
        if b.findings or b.verdict is not Verdict.KEPT
    ]


def write_html(run: RunResult, run_dir: Path, beside: Beside | None = None) -> Path:
    """report.html in the run directory, whole or not at all."""
    path = run_dir / "report.html"
    write_atomic(path, render(run, run_dir, beside))
    return path
