"""`report`, `compat`, `merge` and `diff`: the commands that read the reports of runs already made."""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

from rich.markup import escape

from torch_abi_harness.cli.args import Command
from torch_abi_harness.cli.console import console, emit_json
from torch_abi_harness.cli.run_output import annotate, finish, print_diff, print_grid
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.files import writable_dir, write_atomic
from torch_abi_harness.results.compat import MARK_BEGIN, MARK_END, Claim, claims, document, markdown, splice
from torch_abi_harness.results.diff import RunDiff, compare, load_run
from torch_abi_harness.results.model import ReportError, RunResult


def add_report(command: Command) -> None:
    report = command(
        "report", help="write a run's report.html again from its results.json (and diff.json, gate.json beside it)"
    )
    report.add_argument("report", type=Path, metavar="REPORT", help="a reports/<run-id> directory or its results.json")
    report.set_defaults(handler=cmd_report)


def add_compat(command: Command) -> None:
    compat = command(
        "compat",
        help="per build, the runtimes it is proven to work on: a Markdown table and a one-line range for a README",
    )
    compat.add_argument("report", type=Path, metavar="REPORT", help="a reports/<run-id> directory or its results.json")
    compat.add_argument(
        "-k",
        "--build",
        action="append",
        default=[],
        metavar="SELECTOR",
        help="only builds whose id matches (any part, * ? [...] wildcards); repeatable",
    )
    keep = compat.add_mutually_exclusive_group()
    keep.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help=f"rewrite the table in FILE (a Markdown page), between a {MARK_BEGIN} line and a {MARK_END} line",
    )
    keep.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="exit 1 when the table between FILE's markers differs from what this run says (0: current)",
    )
    compat.set_defaults(handler=cmd_compat)


def add_merge(command: Command) -> None:
    merge = command("merge", help="combine the reports of a plan's shards into one report")
    merge.add_argument(
        "reports", nargs="+", type=Path, metavar="REPORT", help="a shard's results.json or reports/<run-id> directory"
    )
    merge.add_argument(
        "--reports-dir", type=Path, default=Path("reports"), help="where the merged report goes (default: %(default)s)"
    )
    merge.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a previous run (results.json or its directory): write diff.md/diff.json against it",
    )
    merge.add_argument(
        "--allow-missing",
        action="store_true",
        help='merge the shards that arrived: each cell of the plan in no report is ERROR ("shard K/N reported '
        'nothing"), exit 3 (a nightly: one lost runner does not lose the night)',
    )
    merge.add_argument(
        "--json", action="store_true", help="the merged results.json's document on stdout (the grid goes to stderr)"
    )
    merge.set_defaults(handler=cmd_merge)


def add_diff(command: Command) -> None:
    rundiff = command("diff", help="compare a run with a baseline run: new breaks, fixes, changes")
    rundiff.add_argument("baseline", type=Path, help="results.json or a reports/<run-id> directory")
    rundiff.add_argument("current", type=Path, help="results.json or a reports/<run-id> directory")
    rundiff.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    rundiff.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 on any difference in cells or statuses, not only new breaks (e.g. venv vs docker parity)",
    )
    rundiff.set_defaults(handler=cmd_diff)


def against_baseline(baseline: RunResult, run: RunResult, run_dir: Path) -> RunDiff:
    """diff.md and diff.json in the run's report, report.html again with them; printed."""
    from torch_abi_harness.render.html import write_html  # jinja2: only for the commands that write report.html

    result = compare(baseline, run)
    write_atomic(run_dir / "diff.md", result.markdown())
    write_atomic(run_dir / "diff.json", json.dumps(result.to_json(), indent=2) + "\n")
    write_html(run, run_dir)
    print_diff(result)
    return result


def read_page(path: Path, markers: tuple[str, str] = (MARK_BEGIN, MARK_END), what: str = "compatibility table") -> str:
    """The text of a page whose table `compat` (or `census`) --update/--check keeps, checked for its markers
    before any work."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read it as a UTF-8 text file ({exc}); name a Markdown page") from None
    splice(text, [], str(path), markers, what)  # refuses a page without its two markers
    return text


def keep_page(args: argparse.Namespace, run: RunResult, found: list[Claim], holes: int) -> int:
    """--update: the page's table rewritten (not when a claim has holes); --check: exit 1 when it is stale."""
    path: Path = args.update or args.check
    text = read_page(path)
    fresh = splice(text, document(run, found), str(path))
    if fresh == text:
        console.print(f"{escape(str(path))}: the compatibility table is current")
        return int(ExitCode.OK)
    if args.check:
        for line in difflib.unified_diff(text.splitlines(), fresh.splitlines(), str(path), "this run", lineterm=""):
            console.print(escape(line), soft_wrap=True, highlight=False)
        console.print(
            f"[bold red]{escape(str(path))}: the compatibility table is stale[/]: it differs from run "
            f"{escape(run.run_id)}; run `python -m torch_abi_harness compat {escape(str(args.report))} --update "
            f"{escape(str(path))}` (exit 1)",
            soft_wrap=True,
        )
        return int(ExitCode.BROKEN)
    if holes:
        console.print(f"[bold red]{escape(str(path))} not updated[/]: a claim with holes is not written")
        return int(ExitCode.BROKEN)
    target = path.resolve()  # a page reached through a link is written where it lies, the link kept
    write_atomic(target, fresh)  # keeps the file's mode
    console.print(f"{escape(str(path))}: the compatibility table updated from run {escape(run.run_id)}")
    return int(ExitCode.OK)


def cmd_compat(args: argparse.Namespace) -> int:
    page = args.update or args.check
    if page is not None:
        read_page(page)  # a page without its markers is bad input, found before the run is read
    if args.update is not None:
        writable_dir(args.update.resolve().parent, "--update: the folder of")
    run = load_run(args.report)
    found = claims(run, args.build)
    if not found:
        raise BadInputError(f"{args.report}: no build matches {' '.join(args.build)!r}")
    for line in markdown(found):
        console.print(escape(line), soft_wrap=True)
    console.print()
    holes = 0
    for claim in found:
        console.print(f"{escape(claim.build)}: {escape(claim.line())}", soft_wrap=True)
        for cell in claim.holes:
            holes += 1
            console.print(
                f"   [bold red]hole[/]: not proven on {escape(cell.runtime_id)} ({escape(cell.runtime_torch)}, "
                f"CPython {escape(cell.runtime_python or '?')}), inside that range: {cell.status.value} "
                f"({cell.verdict.value}): {escape(cell.reason)}",
                soft_wrap=True,
            )
    if holes:
        console.print(f"[bold red]{holes} hole(s)[/]: the one-line ranges above would hide them (exit 1)")
    code = keep_page(args, run, found, holes) if page is not None else int(ExitCode.OK)
    return int(ExitCode.BROKEN) if holes else code


def cmd_report(args: argparse.Namespace) -> int:
    from torch_abi_harness.render.html import write_html  # jinja2: only for the commands that write report.html

    run = load_run(args.report)
    path = write_html(run, args.report if args.report.is_dir() else args.report.parent)
    console.print(f"report: {path} ({len(run.cells)} cells)")
    return int(ExitCode.OK)


def cmd_merge(args: argparse.Namespace) -> int:
    from torch_abi_harness.run.merge import merge_reports  # the report writers (jinja2): only for `merge`

    writable_dir(args.reports_dir, "--reports-dir")
    baseline = load_run(args.baseline) if args.baseline else None  # a bad baseline fails before any work
    try:
        merged = merge_reports(args.reports, args.reports_dir, allow_missing=args.allow_missing)
    except ReportError as exc:
        print_grid(exc.run)
        raise
    run = merged.run
    console.print(
        f"[bold]merged {len(args.reports)} report(s)[/]: {len(run.cells)} cells of {escape(run.matrix)}, "
        f"backend {run.backend}"
    )
    print_grid(run)
    annotate(run)
    if merged.skipped:
        console.print(f"[yellow]{len(merged.skipped)} file(s) of the shards not copied[/] (links, special or huge):")
        for item in merged.skipped:
            console.print(f"   {escape(item)}")
    if baseline is not None:
        against_baseline(baseline, run, merged.run_dir)
    code = finish(run, merged.run_dir)
    if args.json:
        emit_json(run.to_json())
    return code


def cmd_diff(args: argparse.Namespace) -> int:
    result = compare(load_run(args.baseline), load_run(args.current))
    if args.json:
        emit_json(result.to_json())
    else:
        print_diff(result)
    differs = result.new_breaks or (
        args.fail_on_change and (result.fixed or result.changed or result.added or result.removed)
    )
    return int(ExitCode.BROKEN if differs else ExitCode.OK)
