"""A run as Markdown: summary.md (the grid, the legend, what broke and why, expected failures by class)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import ClassVar

from torch_abi_harness.config import HEADER_PROBE
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.core.status import CONDITION_MEANING, Condition, Status
from torch_abi_harness.core.text import md_code, md_text, natural_key
from torch_abi_harness.render.grid import NOT_RUN, NOT_RUN_MEANING, Grid
from torch_abi_harness.results.cases import DocDifference
from torch_abi_harness.results.known_breaks import outcomes
from torch_abi_harness.results.model import BuildRow, CellResult, RunResult
from torch_abi_harness.verdict import Verdict

VERDICT_SYMBOL = {
    Verdict.KEPT: "✅",
    Verdict.BROKEN: "❌",
    Verdict.EXPECTED_FAILURE: "➖",  # neutral: the promise said it fails, and it did
    Verdict.UNEXPECTED_PASS: "❕",
    Verdict.SKIPPED: "⏭️",
    Verdict.ERROR: "⚠️",
    Verdict.FLAKY: "🔁",
    Verdict.KNOWN_BREAK: "🩹",
    Verdict.NOT_RUN: "⛔",
}


VERDICT_MEANING = {
    Verdict.KEPT: "promised to pass, and passed",
    Verdict.BROKEN: "**promise broken**: promised to pass, and did not",
    Verdict.EXPECTED_FAILURE: "failed where that is expected (by class below)",
    Verdict.UNEXPECTED_PASS: "passed where nothing was promised (reported, not failed)",
    Verdict.SKIPPED: "not run (reason given)",
    Verdict.ERROR: "the harness or its infrastructure failed; says nothing about the extension",
    Verdict.FLAKY: "**flaky**: broke the promise, then kept it on a retry (not kept; attempts listed below)",
    Verdict.KNOWN_BREAK: "a known break: broke the promise, acknowledged by a known_breaks entry until it expires",
    Verdict.NOT_RUN: "not run: its build failed where promised to build (the failure is counted once, on the build)",
}


FINDING_MARK = "🔎"


STATUS_SHORT = {
    Status.PASS: "pass",
    Status.TEST_FAILED: "test",
    Status.LOAD_FAILED: "load",
    Status.BUILD_FAILED: "build",
    Status.CRASHED: "crash",
    Status.TIMEOUT: "timeout",
    Status.SKIPPED: "skip",
    Status.ERROR: "error",
    Status.NOT_RUN: "no build",
}


def summary_markdown(run: RunResult) -> str:
    lines = _summary_head(run)
    lines += _expected_failures_markdown(run)
    lines += builds_markdown(run)
    lines += known_breaks_markdown(run)
    lines += header_probe_markdown(run)
    lines += _predictions_markdown(run)
    lines += doc_differences_markdown(run.cells)
    lines += _not_simply_passed_markdown(run)
    return "\n".join(lines)


def _summary_head(run: RunResult) -> list[str]:
    """The title, what ran, the result in a line, the grid and its legend."""
    counts = run.counts()
    grid = Grid.of(run)
    builds = {b.id: b for b in run.builds}
    lines = [
        f"# Stable-ABI compatibility matrix: run {run.run_id}",
        "",
        f"Backend `{run.backend}`, matrix `{run.matrix}`, {len(run.cells)} cells"
        + (f", selectors `{' '.join(run.selectors)}`" if run.selectors else "")
        + (f", shard {run.plan.shard} of a plan of {len(run.plan.cells)} cells" if run.plan and run.plan.shard else "")
        + ".",
        "",
        f"**Result: {headline(run)}** (exit {int(run.exit_code)}). "
        + ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
        + ("; interrupted" if run.interrupted else ""),
        "",
        *grid.markdown(
            lambda cell: grid_mark(cell) + (f" {FINDING_MARK}" if cell.findings else ""),
            lambda build: build_mark(builds.get(build))[0],
        ),
    ]
    legend = "; ".join(f"{VERDICT_SYMBOL[v]} {VERDICT_MEANING[v]}" for v in Verdict)
    legend += f"; {NOT_RUN} {NOT_RUN_MEANING}" if grid.absent else ""
    return [
        *lines,
        "",
        f"Legend: {legend}; {FINDING_MARK} a finding: the outcome disagrees with the static prediction, "
        "or a build is not what the matrix says (the target its compiler was given, a prebuilt wheel's imports)",
        "",
    ]


def _expected_failures_markdown(run: RunResult) -> list[str]:
    """The expected failures, grouped by the condition that expects them (nothing when there are none)."""
    groups = expected_failure_classes(run.cells)
    if not groups:
        return []
    lines = ["Expected failures, by the condition that expects them:", ""]
    for group in groups:
        lines.append(f"- {VERDICT_SYMBOL[Verdict.EXPECTED_FAILURE]} {group.markdown()}")
    lines.append("")
    return lines


def _predictions_markdown(run: RunResult) -> list[str]:
    """How many cells were predicted, and every finding: a cell whose outcome disagrees with its prediction."""
    findings = [c for c in sorted(run.cells, key=lambda c: natural_key(c.id)) if run.cell_findings(c)]
    predicted = sum(1 for c in run.cells if c.prediction is not None)
    verdict_line = f"{len(findings)} have findings:" if findings else "every prediction matched the outcome."
    lines = [
        "## Prediction vs outcome",
        "",
        f"{predicted} cells were predicted from ELF symbols before running; {verdict_line}",
        "",
    ]
    lines += [f"- {FINDING_MARK} `{c.id}`: {md_text(f)}" for c in findings for f in run.cell_findings(c)]
    lines.append("")
    return lines


def _not_simply_passed_markdown(run: RunResult) -> list[str]:
    """Every cell that did not pass as promised, with its reason, its expectation and each attempt."""
    explained = [
        c
        for c in sorted(run.cells, key=lambda c: natural_key(c.id))
        if c.status is not Status.PASS or c.verdict is not Verdict.KEPT
    ]
    if not explained:
        return []
    lines = ["## Every cell that did not simply pass", ""]
    for cell in explained:
        lines.append(
            f"- {VERDICT_SYMBOL[cell.verdict]} `{cell.id}`: **{cell.status.value}** ({cell.verdict.value}): "
            f"{md_text(cell.reason)} "
            f"(expected {cell.expected.value}{class_of(cell)}: {md_text(cell.expected_why)})"
        )
        lines += [f"  - {md_text(a.line(n))}" for n, a in enumerate(cell.attempts, 1)]
    lines.append("")
    return lines


def headline(run: RunResult) -> str:
    """What the run says, in a few words: the summary's and the page's headline."""
    counts = run.counts()
    if run.exit_code is ExitCode.OK and counts["flaky"]:
        return "no promise broken for good: flaky cells"
    if run.exit_code is ExitCode.OK and counts["known_break"]:
        return "no promise broken but the known breaks"
    return {
        ExitCode.OK: "every promise kept",
        ExitCode.BROKEN: "a promise was broken",
        ExitCode.INFRASTRUCTURE: "the run had infrastructure errors",
        ExitCode.NOTHING_PROVEN: run.unproven or "nothing was proven",
    }[run.exit_code]


def header_probe_markdown(run: RunResult) -> list[str]:
    """The header probe's cells, classed apart: they test the candidate's headers, not an extension."""
    probes = [c for c in run.cells if c.generated == HEADER_PROBE]
    if not probes:
        return []
    failing = sorted((c for c in probes if c.verdict in (Verdict.BROKEN, Verdict.KNOWN_BREAK)), key=lambda c: c.id)
    lines = [
        "## Header probe",
        "",
        f"`{HEADER_PROBE}` is generated from torch {md_text(run.candidate or '?')}'s public stable headers: at each "
        f"target it references every declaration they show there. {len(probes)} cell(s), {len(failing)} failing "
        "to load (the headers show a declaration that release does not export):",
        "",
    ]
    lines += [f"- `{c.id}`: missing {md_text(', '.join(c.missing_names) or c.reason)}" for c in failing]
    return [*lines, ""]


def known_breaks_markdown(run: RunResult) -> list[str]:
    """The matrix's known_breaks entries and what each came to in this run."""
    found = outcomes(run.known_breaks, run.cells)
    if not found:
        return []
    lines = ["## Known breaks", ""]
    lines += [f"- {'❌ ' if o.failing else ''}**{o.state.value}** {o.line()}" for o in found]
    return [*lines, ""]


def build_mark(build: BuildRow | None) -> tuple[str, str]:
    """A build row's own mark beside its id (its verdict where it did not simply build, 🔎 for findings) and the
    same in words; ('', '') for a build that built as promised with nothing found."""
    if build is None:
        return "", ""
    marks, words = [], []
    if build.verdict is not Verdict.KEPT:
        marks.append(f"{VERDICT_SYMBOL[build.verdict]} build")
        words.append(f"build {build.verdict.value}: {build.reason or 'built'}")
    if build.findings:
        marks.append(FINDING_MARK)
        words.extend(build.findings)
    return " ".join(marks), "; ".join(words)


def builds_markdown(run: RunResult) -> list[str]:
    """The builds that did not simply build as promised, or have findings: each once, with why."""
    shown = [
        b for b in sorted(run.builds, key=lambda b: natural_key(b.id)) if b.findings or b.verdict is not Verdict.KEPT
    ]
    if not shown:
        return []
    lines = ["## Builds", ""]
    for build in shown:
        what = f": {md_text(build.reason)}" if build.reason else ""
        promised = f" (expected: {md_text(build.expected_why)})" if build.verdict is not Verdict.KEPT else ""
        lines.append(f"- {VERDICT_SYMBOL[build.verdict]} `{build.id}`: **{build.verdict.value}**{what}{promised}")
        lines += [f"  - {FINDING_MARK} {md_text(f)}" for f in build.findings]
    return [*lines, ""]


def grid_mark(cell: CellResult) -> str:
    """A cell in the grid: its verdict's symbol and a word for its status ("pass", "load")."""
    return f"{VERDICT_SYMBOL[cell.verdict]} {STATUS_SHORT[cell.status]}"


def class_of(cell: CellResult) -> str:
    return f" [{cell.expected_class.value}]" if cell.expected_class else ""


@dataclasses.dataclass(frozen=True)
class ClassGroup:
    """The expected failures of one class in a run: how many, what the class means, and their distinct reasons."""

    condition: Condition | None  # None: results written before classes existed
    cells: int
    whys: tuple[str, ...]

    EXAMPLES: ClassVar[int] = 3

    @property
    def name(self) -> str:
        return self.condition.value if self.condition else "unclassified"

    def text(self) -> str:
        meaning = CONDITION_MEANING[self.condition] if self.condition else "results written before classes existed"
        shown = "; ".join(self.whys[: self.EXAMPLES]) + (
            f" (+{len(self.whys) - self.EXAMPLES} more)" if len(self.whys) > self.EXAMPLES else ""
        )
        return f"{meaning} ({self.cells} cell(s): {shown})"

    def markdown(self) -> str:
        return f"**{self.name}**: {md_text(self.text())}"


def expected_failure_classes(cells: Sequence[CellResult]) -> list[ClassGroup]:
    """The run's expected failures grouped by the condition that expects them, in Condition's order."""
    by_class: dict[Condition | None, list[CellResult]] = {}
    for cell in cells:
        if cell.verdict is Verdict.EXPECTED_FAILURE:
            by_class.setdefault(cell.expected_class, []).append(cell)
    order = [*Condition, None]
    return [
        ClassGroup(key, len(found), tuple(sorted({c.expected_why for c in found})))
        for key in sorted(by_class, key=order.index)
        for found in [by_class[key]]
    ]


def doc_differences_markdown(cells: Sequence[CellResult]) -> list[str]:
    """Behaviours the suites recorded as differing from PyTorch's documents, by key, with where each was seen."""
    by_key: dict[str, list[tuple[CellResult, DocDifference]]] = {}
    for cell in cells:
        for difference in cell.doc_differences:
            by_key.setdefault(difference.key, []).append((cell, difference))
    if not by_key:
        return []
    lines = [
        "## Where runtimes differ from PyTorch's documents",
        "",
        f"{len(by_key)} behaviour(s) recorded by the suites' tests (the `doc_difference` fixture):",
        "",
    ]
    for key, seen in sorted(by_key.items()):
        seen_cells = list({cell.id: cell for cell, _ in seen}.values())
        extensions = {cell.extension for cell in seen_cells}
        # The other cells whose suite could have seen it: same extension, and its tests ran.
        unseen = [c for c in cells if c.extension in extensions and c not in seen_cells and c.tests.total]
        tests = sorted({t for _, d in seen for t in d.tests})
        shown = ", ".join(md_code(t) for t in tests[:3]) + (f" (+{len(tests) - 3} more)" if len(tests) > 3 else "")
        lines += [f"### {md_code(key)}", "", *(f"> {md_text(text)}" for text in sorted({d.text for _, d in seen})), ""]
        lines.append(f"- seen in {len(seen_cells)} cell(s): {_where(seen_cells)}")
        elsewhere = f": {_where(unseen)}" if unseen else ""
        lines.append(f"- not seen in {len(unseen)} other cell(s) of the same suite{elsewhere}")
        lines += [f"- recorded by {shown}", ""]
    return lines


def _where(cells: Sequence[CellResult]) -> str:
    """'builds `a`, `b` on torch 2.9.1, 2.10.0': the builds and runtime releases of some cells."""
    builds = ", ".join(f"`{b}`" for b in sorted({c.build_id for c in cells}))
    torches = sorted({c.runtime_torch for c in cells}, key=_release_key)
    return f"builds {builds} on torch {', '.join(torches)}"


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.partition("+")[0]))
