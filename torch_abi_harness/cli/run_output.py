"""What a run prints: its progress, its plan, its grid and last lines, a diff of two runs, and GitHub Actions'
annotations for its broken cells."""

from __future__ import annotations

import collections
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from rich.markup import escape

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.cli.console import console, on_github, workflow_command
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.core.text import natural_key, plain_text
from torch_abi_harness.plan import Plan
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.render.grid import NOT_RUN, NOT_RUN_MEANING, Grid
from torch_abi_harness.render.text import VERDICT_SYMBOL, expected_failure_classes, grid_mark
from torch_abi_harness.results.diff import RunDiff
from torch_abi_harness.results.known_breaks import State, outcomes
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.run.floor import floor_of
from torch_abi_harness.verdict import Verdict, promise

VERDICT_STYLE = {
    Verdict.KEPT: "green",
    Verdict.BROKEN: "bold red",
    Verdict.EXPECTED_FAILURE: "cyan",
    Verdict.UNEXPECTED_PASS: "yellow",
    Verdict.SKIPPED: "dim",
    Verdict.ERROR: "bold magenta",
    Verdict.FLAKY: "bold yellow",
    Verdict.KNOWN_BREAK: "blue",
    Verdict.NOT_RUN: "dim",
}


def annotate(run: RunResult) -> None:
    """On GitHub Actions, each broken or errored cell as an annotation on the run's page (flaky as a warning)."""
    if not on_github():
        return
    kinds = {Verdict.BROKEN: "error", Verdict.ERROR: "error", Verdict.FLAKY: "warning"}
    cells = [c for c in sorted(run.cells, key=lambda c: natural_key(c.id)) if c.verdict in kinds]
    for kind in ("error", "warning"):
        lines = annotation_lines([c for c in cells if kinds[c.verdict] == kind], kind)
        for line in lines:
            console.out(plain_text(line), highlight=False)


ANNOTATIONS_PER_KIND = 10  # GitHub shows at most 10 error and 10 warning annotations of a step; the rest are lost


def annotation_lines(cells: Sequence[CellResult], kind: str) -> list[str]:
    """One workflow command per cell, capped at what GitHub shows: the first ones, then one that counts the
    rest and says where all of them are, so no cell is silently dropped from the page."""
    shown = cells if len(cells) <= ANNOTATIONS_PER_KIND else cells[: ANNOTATIONS_PER_KIND - 1]
    lines = [
        workflow_command(kind, f"{c.id}: {c.status.value}: {c.reason}", title=f"{c.verdict.value} cell") for c in shown
    ]
    if len(shown) < len(cells):
        rest = len(cells) - len(shown)
        lines.append(
            workflow_command(kind, f"{rest} more cell(s) like these: see the run's summary.md", title=f"{rest} more")
        )
    return lines


class ConsoleObserver:
    def __init__(self) -> None:
        self.folded = False  # a GitHub log group is open

    def stage(self, name: str, detail: str) -> None:
        if on_github():
            self.close()
            console.out(f"::group::== {name}: {plain_text(detail)}", highlight=False)
            self.folded = True
            return
        console.print(f"[bold]== {name}[/]: {detail}")

    def close(self) -> None:
        """End the open GitHub log group (before the grid, which is never folded)."""
        if self.folded:
            console.out("::endgroup::", highlight=False)
            self.folded = False

    def env_ready(self, env: Env) -> None:
        how = "reused" if env.reused else f"created in {env.created_seconds:.1f} s"
        if env.existing is not None:
            how = f"the existing env {escape(str(env.python))}"
        console.print(f"   env torch {env.torch_version} ({env.variant}, python {env.spec.python}): {how}")
        if env.repaired:
            console.print(f"      [yellow]the env was damaged and was made again[/]: {escape(env.repaired)}")

    def build_done(self, result: BuildResult) -> None:
        how = "cached" if result.cached else f"{result.seconds:.1f} s"
        if result.ok:
            state = "[green]built[/]"
        elif result.toolchain is not None:
            why = "this machine lacks its toolchain: the machine's trouble, not the extension's"
            state = f"[dim]NOT BUILT ({why})[/]: {escape(result.reason)}"
        elif result.infrastructure:
            state = f"[bold magenta]NOT BUILT[/] (not the extension's fault; not cached): {escape(result.reason)}"
        else:
            state = f"[red]BUILD FAILED[/]: {escape(result.reason)}"
        console.print(f"   {escape(result.build.id)}: {state} ({how})")
        for finding in result.findings:
            console.print(f"      [yellow]finding[/]: {escape(finding)}")
        if result.repaired:
            console.print(
                f"      [yellow]the cached build was damaged and was built again[/]: {escape(result.repaired)}"
            )

    def cell_done(self, result: CellResult, done: int, total: int) -> None:
        style = VERDICT_STYLE[result.verdict]
        seconds = result.durations.get("total")
        timing = f"{seconds:5.1f} s" if seconds is not None else "   -   "
        width = len(str(total))
        console.print(
            f"   [{done:>{width}}/{total}] [{style}]{result.status.value:<12} {result.verdict.value:<16}[/] "
            f"{timing}  {escape(result.id)}"
            + (f"  [dim]{escape(result.reason)}[/]" if result.verdict is not Verdict.KEPT else "")
        )


def print_preamble(plan: Plan, verb: str) -> None:
    builds, runtimes = plan.needed_builds, plan.needed_runtimes
    console.print(
        f"[bold]{plan.matrix.path.name}[/]: {len(builds)} build(s) x {len(runtimes)} runtime(s) -> "
        f"[bold]{len(plan.cells)} cells selected[/] {verb}"
        + (f" (selectors: {' '.join(plan.selectors)})" if plan.selectors else "")
    )
    for note in plan.matrix.notes:  # an author's table: the defaults it took from the project
        console.print(f"   [dim]{escape(note)}[/]")


def print_plan(plan: Plan) -> None:
    width = max((len(cell.id) for cell in plan.cells), default=0)
    for cell in plan.cells:
        p = promise(cell)
        console.print(
            f"{escape(cell.id):<{width}}  {p.expected.value:<12}  {p.condition.value:<10}  [dim]{escape(p.why)}[/]"
        )
    console.print(
        "[dim]the promise from the matrix alone; what each build needs of its runtime (the Python ABI of its "
        "wheel tags, the CUDA major its libraries name) is decided after the build, against the runtime as "
        "prepared[/]"
    )


def print_grid(run: RunResult) -> None:
    """The grid folded to the terminal's width (COLUMNS, else 120 off a terminal), then its legends and
    the cells a person must look at."""
    grid = Grid.of(run)
    blocks = grid.blocks(shutil.get_terminal_size(fallback=(120, 24)).columns, grid_mark)
    for number, block in enumerate(blocks):
        part = f" (runtimes {block.first}-{block.last} of {len(grid.columns)})" if len(blocks) > 1 else ""
        console.print(("\n" if number else "") + f"[bold]compatibility matrix{part}[/]", soft_wrap=True)
        for line in block.header:
            console.print(f"[bold]{escape(line)}[/]", soft_wrap=True)
        for segments in block.body:
            console.print("".join(_painted(text, verdict) for text, verdict in segments), soft_wrap=True)
    if not blocks:
        console.print("[bold]compatibility matrix[/]: no cells")
    console.print(
        "   "
        + "  ".join(f"{VERDICT_SYMBOL[v]} [{VERDICT_STYLE[v]}]{v.value}[/]" for v in Verdict)
        + (f"  {NOT_RUN} {escape(NOT_RUN_MEANING)}" if grid.absent else "")
    )
    for group in expected_failure_classes(run.cells):
        style = VERDICT_STYLE[Verdict.EXPECTED_FAILURE]
        console.print(f"   {VERDICT_SYMBOL[Verdict.EXPECTED_FAILURE]} [{style}]{group.name}[/]: {escape(group.text())}")
    for build in sorted(run.builds, key=lambda b: natural_key(b.id)):
        for finding in build.findings:
            console.print(f"   [yellow]finding[/] {escape(build.id)}: {escape(finding)}")
        if build.verdict in (Verdict.BROKEN, Verdict.ERROR, Verdict.UNEXPECTED_PASS):
            style = VERDICT_STYLE[build.verdict]
            console.print(
                f"   [{style}]{build.verdict.value}[/] {escape(build.id)}: build failed: {escape(build.reason)}"
            )
    for cell in sorted(run.cells, key=lambda c: natural_key(c.id)):
        for finding in run.cell_findings(cell):
            console.print(f"   [yellow]finding[/] {escape(cell.id)}: {escape(finding)}")
        if cell.verdict in (Verdict.BROKEN, Verdict.ERROR, Verdict.UNEXPECTED_PASS, Verdict.FLAKY):
            style = VERDICT_STYLE[cell.verdict]
            line = f"{escape(cell.id)}: {cell.status.value}: {escape(cell.reason)}"
            console.print(f"   [{style}]{cell.verdict.value}[/] {line}")
            for number, attempt in enumerate(cell.attempts, 1):
                console.print(f"      {escape(attempt.line(number))}")
    for outcome in outcomes(run.known_breaks, run.cells):
        paint = {State.EXPIRED: "bold red", State.ACCEPTED: VERDICT_STYLE[Verdict.KNOWN_BREAK]}
        console.print(f"   [{paint.get(outcome.state, 'yellow')}]known break[/] {escape(outcome.line())}")
    seen = collections.Counter(d.key for cell in run.cells for d in cell.doc_differences)
    for key, cells in sorted(seen.items()):
        console.print(f"   [cyan]differs from the documents[/] {escape(key)}: in {cells} cell(s), see summary.md")


def _painted(text: str, verdict: Verdict | None) -> str:
    return f"[{VERDICT_STYLE[verdict]}]{escape(text)}[/]" if verdict else escape(text)


def print_diff(result: RunDiff) -> None:
    console.print(
        f"against baseline {escape(result.baseline)}: [bold red]{len(result.new_breaks)} new break(s)[/], "
        f"[green]{len(result.fixed)} fixed[/], {len(result.known_breaks)} known break(s), "
        f"{len(result.changed)} changed, "
        f"{len(result.added)} new cell(s), {len(result.removed)} no longer run"
    )
    for title, changes in (
        ("new break", result.new_breaks),
        ("fixed", result.fixed),
        ("known break", result.known_breaks),
        ("changed", result.changed),
    ):
        for change in changes:
            console.print(
                f"   {title}: {escape(change.id)}: {change.before} -> {change.after}: {escape(change.reason)}"
            )


def print_floor(run: RunResult, run_dir: Path, imports: Mapping[str, float], jobs: int) -> None:
    """One line: the run's wall time against its floor from its own cells (run/floor.py), so a run that grows
    slower than its cells shows at once."""
    try:
        wall = (datetime.fromisoformat(run.finished) - datetime.fromisoformat(run.started)).total_seconds()
    except ValueError:
        return
    floor = floor_of(run.cells, run_dir, imports, min(jobs, max(1, len(run.cells))), wall)
    if floor.cells:
        console.print(f"time: {escape(floor.text())}")


def finish(run: RunResult, run_dir: Path) -> int:
    """The last lines of `run` and `merge`: where the report is, what the run says, its exit code."""
    console.print(f"report: {run_dir}/summary.md, results.json, junit.xml, report.html")
    flaky = [c.id for c in run.cells if c.verdict is Verdict.FLAKY]
    if flaky:
        console.print(
            f"[bold yellow]{len(flaky)} flaky cell(s)[/]: broke their promise, then kept it on a retry "
            f"(not kept; they do not fail the run): {escape(', '.join(flaky))}"
        )
    code = run.exit_code
    message = {
        ExitCode.OK: "[green]every promise kept[/]" + (" (but for the flaky cells)" if flaky else ""),
        ExitCode.BROKEN: "[bold red]a promise was broken[/]",
        ExitCode.INFRASTRUCTURE: "[bold magenta]infrastructure errors: the run is incomplete[/]",
        ExitCode.NOTHING_PROVEN: f"[bold yellow]{escape(run.unproven or 'nothing was proven')}[/]",
    }[code]
    console.print(f"{message} (exit {int(code)})")
    return int(code)
