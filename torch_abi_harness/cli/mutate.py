"""`mutate`: the detection power of the selected stable builds' suites, under the shim mutants of a catalogue."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from torch_abi_harness.cli.args import (
    Command,
    add_matrix_option,
    existing_file,
    matrix_of,
    positive_int,
    positive_seconds,
)
from torch_abi_harness.cli.console import console, emit_json, notes
from torch_abi_harness.cli.run_output import ConsoleObserver
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.files import writable_dir
from torch_abi_harness.plan import make_plan
from torch_abi_harness.provision.envs import cache_dir_of

if TYPE_CHECKING:
    from torch_abi_harness.mutate.report import MutationReport
    from torch_abi_harness.mutate.run import MutantCell


def add_mutate(command: Command) -> None:
    mutate = command(
        "mutate",
        help="detection power: run the selected stable builds' suites under each shim mutant of the catalogue "
        "(killed, survived, not applicable); mutation.json and mutation.md in the run's report directory",
    )
    add_matrix_option(mutate)
    mutate.add_argument(
        "-k", "--select", action="append", default=[], metavar="SELECTOR", help="only cells whose id matches (as run)"
    )
    mutate.add_argument(
        "--runtime",
        action="append",
        default=[],
        metavar="RELEASE",
        help="the torch release(s) to run on (repeatable; default: the matrix's newest)",
    )
    mutate.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="GLOB",
        help="only mutants whose id matches (the sentinel stays)",
    )
    mutate.add_argument(
        "--catalogue", type=existing_file, default=None, help="a catalogue of your own (default: the packaged one)"
    )
    mutate.add_argument(
        "--min-score",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit 1 when an extension's score (justified equivalents aside) is below this, e.g. 0.9",
    )
    mutate.add_argument("-j", "--jobs", type=positive_int, default=os.cpu_count() or 1, help="cells at once")
    mutate.add_argument("--reports-dir", type=Path, default=Path("reports"), help="where reports go")
    mutate.add_argument("--cache-dir", type=Path, default=None, help="envs, builds and interposers (default: as run)")
    mutate.add_argument("--timeout", type=positive_seconds, default=None, help="seconds per cell")
    mutate.add_argument("--json", action="store_true", help="mutation.json's document on stdout")
    mutate.set_defaults(handler=cmd_mutate)


def cmd_mutate(args: argparse.Namespace) -> int:
    """Shim mutants against the selected stable builds (torch_abi_harness/mutate/run.py); exit 3 when the run proves
    nothing (a failing baseline, a sentinel not killed, a cell in error), 1 below --min-score."""
    # The mutation machinery and the pipeline load only for `mutate`.
    from torch_abi_harness.mutate.catalogue import load_catalogue
    from torch_abi_harness.mutate.output import write_mutation_report
    from torch_abi_harness.mutate.report import MutationReport
    from torch_abi_harness.mutate.run import default_cells, mutate
    from torch_abi_harness.run.cells import RunOptions

    catalogue = load_catalogue(args.catalogue).select(args.mutant)
    matrix = load_matrix(matrix_of(args.matrix))
    plan = make_plan(matrix, args.select)
    cells = default_cells(plan, args.runtime)
    if not cells:
        raise BadInputError(
            f"no cell of {matrix.path} to mutate: mutation needs a stable extension (not a control) promised to "
            f"pass on the runtime ({', '.join(args.runtime) or 'the newest'}); see `python -m torch_abi_harness plan`"
        )
    plan = dataclasses.replace(plan, cells=cells)
    cache_dir = cache_dir_of(args.cache_dir)
    writable_dir(args.reports_dir, "--reports-dir")
    options = RunOptions(reports_dir=args.reports_dir, cache_dir=cache_dir, jobs=args.jobs, cell_timeout=args.timeout)
    console.print(
        f"{len(catalogue.mutants)} mutant(s) x {len(cells)} cell(s): {escape(', '.join(c.id for c in cells))}"
    )
    report = MutationReport.of(mutate(plan, catalogue, options, ConsoleObserver(), print_progress))
    json_path, md_path = write_mutation_report(report)
    print_scores(report)
    console.print(f"report: {md_path}, {json_path.name} ({report.run.seconds:.0f} s)")
    if args.json:
        emit_json(report.to_json())
    return mutation_exit(report, args.min_score)


def print_progress(cell: MutantCell, done: int, total: int) -> None:
    console.print(
        f"   [{done}/{total}] {cell.verdict.value if cell.verdict else '-':<9} {cell.seconds:5.1f} s  "
        f"{escape(str(cell.mutant))} ~ {escape(cell.cell)}"
    )


def print_scores(report: MutationReport) -> None:
    for ext in report.extensions:
        score = report.score(ext)
        console.print(f"mutation score of {escape(ext)}: {score.text()}; test strength {score.strength_text()}")
    for survivor in report.survivors:
        console.print(
            f"   survived in {escape(survivor.extension)}: {escape(survivor.mutant.id)} ({escape(survivor.reason)})"
        )


def mutation_exit(report: MutationReport, min_score: float | None) -> int:
    """3 when the run proves nothing, 1 when an extension scores below min_score, else 0; said on stderr."""
    if not report.ok:
        for problem in report.to_json()["problems"]:
            notes.print(f"[bold magenta]error[/]: {escape(problem)}")
        if report.interruption:
            notes.print(
                "[bold red]interrupted[/]: mutation.json and mutation.md keep the mutant cells that finished (exit 3)"
            )
            return int(ExitCode.INFRASTRUCTURE)
        notes.print(
            f"[bold magenta]the mutation run is in error[/]: {len(report.failed_baselines)} baseline(s) not passing, "
            f"{len(report.sentinel_problems)} sentinel problem(s), {len(report.errors)} mutant cell(s) in error "
            "(exit 3)"
        )
        return int(ExitCode.INFRASTRUCTURE)
    low = [e for e in report.extensions if min_score is not None and (report.score(e).adjusted or 0) < min_score]
    if low:
        notes.print(f"[bold red]below --min-score {min_score}[/]: {escape(', '.join(low))} (exit 1)")
        return int(ExitCode.BROKEN)
    return int(ExitCode.OK)
