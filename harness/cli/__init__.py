"""python -m harness: the only module that prints; everything else logs."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness import __version__
from harness.build import BuildResult
from harness.candidate import with_candidate
from harness.config import DEFAULT_MATRIX, Matrix, Sources, load_matrix, with_overrides
from harness.core.errors import BadInputError, ExitCode, HarnessError
from harness.core.files import writable_dir, write_atomic
from harness.core.status import Condition
from harness.core.versions import ApiLevel
from harness.plan import Plan, Shard, make_plan
from harness.provision.catalog import (
    UNKNOWN,
    Catalog,
    Filters,
    PublishedRuntime,
    discover,
    host_platforms,
    sources_of,
)
from harness.provision.envs import Env, default_cache_dir
from harness.provision.sources import resolve_sources
from harness.render.grid import NOT_RUN, NOT_RUN_MEANING, Grid
from harness.results.diff import RunDiff, compare, load_run
from harness.results.known_breaks import State, outcomes
from harness.results.model import (
    VERDICT_SYMBOL,
    CellResult,
    ReportError,
    RunResult,
    expected_failure_classes,
    grid_mark,
    natural_key,
    plain_text,
)
from harness.shard import fan_out, measured_durations, partition, shard_plan
from harness.static.artifact import Unmet
from harness.verdict import Verdict, promise

# Off a terminal (CI logs, pipes) never wrap or cut cell ids: they are meant to be copied.
if TYPE_CHECKING:
    from harness.mutate.run import MutantCell

console = Console(highlight=False, width=None if sys.stdout.isatty() else 250)
notes = Console(highlight=False, stderr=True, soft_wrap=True)  # what must not mix with JSON on stdout
VERDICT_STYLE = {
    Verdict.KEPT: "green",
    Verdict.BROKEN: "bold red",
    Verdict.EXPECTED_FAILURE: "cyan",
    Verdict.UNEXPECTED_PASS: "yellow",
    Verdict.SKIPPED: "dim",
    Verdict.ERROR: "bold magenta",
    Verdict.FLAKY: "bold yellow",
    Verdict.KNOWN_BREAK: "blue",
}
PLAN_JSON_VERSION = 1  # `plan --json`; checked against harness/schemas/plan.schema.json
AUDIT_JSON_VERSION = 2  # `audit-guards --json` (2: chain, missing_at, header_findings)


def emit_json(data: object) -> None:
    """Machine-readable output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a bad value is a usage error, exit 2, before any work)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0 (0 or less would kill every cell at once)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds greater than 0")
    return value


def shard_spec(text: str) -> Shard:
    """argparse type: K/N, 1 <= K <= N."""
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def api_level(text: str) -> ApiLevel:
    """argparse type: a target such as 2.10."""
    try:
        return ApiLevel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def existing_file(text: str) -> Path:
    """argparse type: a file that exists (a directory or a typo is a usage error, not exit 3)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text}: {'is a directory' if path.is_dir() else 'no such file'}; pass a file"
        )
    return path


def wheel_directory(text: str) -> str:
    """argparse type: a directory of wheels (--find-links)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory; pass a directory of wheels")
    return text


def torch_include(text: str) -> Path:
    """argparse type: a release's torch/include. A wrong path would make every compile probe fail,
    which reads as 'not visible when compiled' for every declaration: a false all-clear."""
    path = Path(text)
    if not (path / "torch").is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: no torch/ directory in it; pass a release's torch/include "
            "(site-packages/torch/include of an env holding that release)"
        )
    return path


def release_specifier(text: str) -> SpecifierSet:
    """--releases: a PEP 440 specifier of torch releases."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a PEP 440 version specifier such as '>=2.11,<2.16' "
            "(one release: '==2.13.0'; a series: '==2.13.*')"
        ) from None


def python_specifier(text: str) -> SpecifierSet:
    """--python: a PEP 440 specifier of CPython versions."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a PEP 440 version specifier such as '>=3.10' (one version: '==3.12')"
        ) from None


def wheel_variant(text: str) -> str:
    """--variant: a torch wheel's local label (cpu, cu130, rocm6.4, xpu), or auto (no label)."""
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch variant such as cpu, cu130 or auto")
    return text.lower()


EXIT_MEANING = {
    ExitCode.OK: "every promise kept (check, abi-diff, audit-guards: no break found; diff: no new break)",
    ExitCode.BROKEN: "a promise was broken (check: a predicted load or call failure; abi-diff, audit-guards: a break; "
    "diff: a new break, or any change with --fail-on-change)",
    ExitCode.BAD_INPUT: "bad input: an argument, the matrix, a selector, a release the sources do not serve",
    ExitCode.INFRASTRUCTURE: "the harness or what it runs on failed (a cell ERROR, an interrupt): results incomplete",
}
EXIT_CODES_HELP = "exit codes:\n" + "\n".join(f"  {int(code)}  {text}" for code, text in EXIT_MEANING.items())
VERBOSE_HELP = "-v: stages and commands; -vv: debug (before or after the command; logs go to stderr)"


def invoked_as(argv0: str) -> str:
    """The program's name as the person typed it: `python -m harness`, or the installed script's name."""
    name = Path(argv0).name
    return "python -m harness" if name in {"__main__.py", ""} else name


def parser(prog: str = "python -m harness") -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=prog, description=__doc__, epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = top.add_subparsers(dest="command", required=True)
    # Global options are taken after the command too (`run -v`): a parent every command shares.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("-v", "--verbose", dest="verbose_after", action="count", default=0, help=VERBOSE_HELP)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[after],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="the matrix file (default: %(default)s)")
        p.add_argument(
            "-k",
            "--select",
            action="append",
            default=[],
            metavar="SELECTOR",
            help="matches any part of a cell id, * ? [...] as wildcards; repeat to add cells",
        )
        p.add_argument(
            "--backend",
            choices=["venv", "docker"],
            default="venv",
            help="where cells run: uv virtualenvs on this host, or hardened Docker containers (default: %(default)s)",
        )
        p.add_argument(
            "--add-runtime",
            action="append",
            default=[],
            metavar="RELEASE[:cuda]",
            help="a runtime besides the matrix's, e.g. a pre-release or a release candidate (repeatable)",
        )
        p.add_argument(
            "--candidate",
            default=None,
            metavar="RELEASE",
            help="a release candidate on both axes: a runtime, and the build torch of every stable extension "
            "at every target from its min_target to the candidate's level",
        )
        p.add_argument(
            "--extra-index-url",
            action="append",
            default=[],
            metavar="URL",
            help="another package index for torch (e.g. a nightly or test index; repeatable)",
        )
        p.add_argument(
            "--find-links",
            action="append",
            type=wheel_directory,
            default=[],
            metavar="DIR",
            help="a directory of wheels, e.g. a candidate torch wheel (repeatable)",
        )

    def selection(p: argparse.ArgumentParser) -> None:
        """After -k: --rerun-failed narrows the cells, then --shard takes one part of them."""
        p.add_argument(
            "--rerun-failed",
            type=Path,
            default=None,
            metavar="REPORT",
            help="only the cells broken or errored in REPORT (a results.json or reports/<run-id>), within -k",
        )
        p.add_argument(
            "--shard",
            type=shard_spec,
            default=None,
            metavar="K/N",
            help="only shard K of N: a deterministic part of the selected cells, balanced by estimated time",
        )
        p.add_argument(
            "--durations",
            type=Path,
            default=None,
            metavar="REPORT",
            help="balance shards by the cells' times in REPORT (others: the cost model); default: the cost model",
        )

    def executing(p: argparse.ArgumentParser) -> None:
        """What running cells takes: `run` and `gate`."""
        p.add_argument(
            "--rerun-broken",
            type=positive_int,
            default=0,
            metavar="N",
            help="run a broken cell again up to N times; one that then keeps its promise is flaky (exit 0, named)",
        )
        p.add_argument(
            "-j", "--jobs", type=positive_int, default=os.cpu_count() or 1, help="cells at once (default: cores)"
        )
        p.add_argument(
            "--reports-dir", type=Path, default=Path("reports"), help="where reports go (default: %(default)s)"
        )
        p.add_argument(
            "--cache-dir",
            type=Path,
            default=None,
            help="environments and builds (default: $HARNESS_CACHE_DIR or the user cache dir)",
        )
        p.add_argument(
            "--timeout",
            type=positive_seconds,
            default=None,
            help="seconds per cell, over the matrix's settings.cell_timeout and an extension's own timeout",
        )
        p.add_argument(
            "--require-gpu",
            action="store_true",
            help="a cuda cell that finds no GPU is an ERROR (exit 3), not SKIPPED: for GPU runners",
        )
        p.add_argument(
            "--require-toolchain",
            action="store_true",
            help="a build this machine lacks the C++ compiler, nvcc or CUDA headers for is an ERROR (exit 3), not "
            "SKIPPED (default: SKIPPED with the reason and the fix; --require-gpu implies it)",
        )
        p.add_argument(
            "--executor",
            choices=["forkserver", "fresh"],
            default=None,
            help="venv backend: fork each cell from one process per runtime that imported torch and pytest once, "
            "or start a fresh interpreter per cell (default: forkserver; cuda runtimes always run fresh)",
        )
        p.add_argument(
            "--docker-route",
            choices=["mounted", "baked"],
            default=None,
            help="docker backend: mount each release's host env read-only, or bake an image per release "
            "(default: the matrix's docker.route, else mounted)",
        )
        p.add_argument(
            "--keep-containers",
            action="store_true",
            help="docker backend, for debugging: leave each cell's container behind (stopped) instead of removing it",
        )
        p.add_argument(
            "--baseline",
            type=Path,
            default=None,
            help="a previous run (results.json or its directory): write diff.md/diff.json against it",
        )

    run = command("run", help="build, run and report the matrix")
    common(run)
    selection(run)
    executing(run)
    run.add_argument(
        "--json",
        action="store_true",
        help="results.json's document on stdout when the run ends (the progress and the grid go to stderr)",
    )

    gate = command(
        "gate",
        help="GO or NO-GO for a release candidate: abi-diff, the matrix with the candidate on both axes, "
        "the diff against the previous release's run",
    )
    common(gate)
    executing(gate)
    gate.set_defaults(rerun_failed=None, shard=None, durations=None)
    gate.add_argument(
        "--previous",
        default=None,
        metavar="RELEASE",
        help="the release abi-diff compares the candidate with (default: the matrix's newest runtime below it)",
    )
    gate.add_argument(
        "--candidate-wheel",
        type=existing_file,
        default=None,
        metavar="WHEEL",
        help="the candidate's torch wheel for abi-diff (default: one in --find-links, else the manifest's release)",
    )

    mutate = command(
        "mutate",
        help="detection power: run the selected stable builds' suites under each shim mutant of the catalogue "
        "(killed, survived, not applicable); mutation.json and mutation.md in the run's report directory",
    )
    mutate.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="the matrix file (default: %(default)s)")
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

    plan = command("plan", help="print the selected cells and what each is promised; do nothing else")
    common(plan)
    selection(plan)
    plan.add_argument(
        "--shards",
        type=positive_int,
        default=None,
        metavar="N",
        help="how the selected cells split into N shards; with --json, a job matrix for a CI fan-out",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    report = command(
        "report", help="write a run's report.html again from its results.json (and diff.json, gate.json beside it)"
    )
    report.add_argument("report", type=Path, metavar="REPORT", help="a reports/<run-id> directory or its results.json")

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
        "--json", action="store_true", help="the merged results.json's document on stdout (the grid goes to stderr)"
    )

    check = command("check", help="predict from ELF symbols alone where an artifact (.so or wheel) loads")
    check.add_argument("artifact", type=existing_file, help="a shared object or a wheel")
    check.add_argument(
        "--runtimes",
        default=None,
        metavar="LIST",
        help="releases to check: '2.10.0,2.13' or '2.10+' (default: every release in the manifest)",
    )
    check.add_argument(
        "--variant",
        default=None,
        metavar="VARIANT",
        type=torch_variant,
        help="the runtimes' torch wheel variant (cu128, cu130, cpu): check the CUDA its DT_NEEDED names against it",
    )
    check.add_argument(
        "--python",
        default=None,
        metavar="X.Y",
        type=cpython_version,
        help="the runtimes' CPython (3.12, 3.13t): check the wheel's tags against it",
    )
    check.add_argument(
        "--built-with",
        default=None,
        metavar="RELEASE",
        help="the torch release it was built with: judge its calls by op name against that release's schemas "
        "(default: only whether each op exists)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    abi = command(
        "abi-diff", help="stable exports, declarations and op schemas removed, added or changed between releases"
    )
    abi.add_argument("old", help="a release ('2.14' or '2.14.1') or a torch wheel")
    abi.add_argument("new", help="a release or a torch wheel (e.g. a release candidate)")
    abi.add_argument(
        "--op-namespace",
        action="append",
        default=None,
        metavar="NS",
        help="dispatcher op schemas of this namespace (repeatable; default: aten; 'all': every namespace)",
    )
    abi.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    rundiff = command("diff", help="compare a run with a baseline run: new breaks, fixes, changes")
    rundiff.add_argument("baseline", type=Path, help="results.json or a reports/<run-id> directory")
    rundiff.add_argument("current", type=Path, help="results.json or a reports/<run-id> directory")
    rundiff.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    rundiff.add_argument(
        "--fail-on-change",
        action="store_true",
        help="exit 1 on any difference in cells or statuses, not only new breaks (e.g. venv vs docker parity)",
    )

    audit = command("audit-guards", help="declarations visible at a target that the target release does not export")
    audit.add_argument("release", help="the release whose headers are audited, e.g. 2.12.1")
    audit.add_argument(
        "--min-target",
        type=api_level,
        default="2.9",
        help="the lowest target an extension may ask for (default: %(default)s)",
    )
    audit.add_argument(
        "--headers",
        type=torch_include,
        default=None,
        help="torch/include of that release for the compile probes (default: its harness env, if made)",
    )
    audit.add_argument(
        "--no-probe", action="store_true", help="skip the compile probes (confirmations, wrappers and macros)"
    )
    audit.add_argument("--json", action="store_true", help="machine-readable output on stdout")

    base = command(
        "base-image", help="docker backend: make (once) the base image cells run in, with debootstrap; print its name"
    )
    base.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="the matrix file (default: %(default)s)")
    base.add_argument("--cache-dir", type=Path, default=None, help="working space (default: the user cache dir)")

    found = command(
        "runtimes",
        help="list the torch releases x Pythons x variants the package sources serve (reads listings, no wheel)",
    )
    found.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help=f"the matrix file whose sources are read (default: {DEFAULT_MATRIX} if there is one; pip's "
        "configuration and the UV_* variables apply either way)",
    )
    found.add_argument(
        "--extra-index-url", action="append", default=[], metavar="URL", help="another index to list (repeatable)"
    )
    found.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR|URL",
        help="a directory of wheels or a page of links to list (repeatable)",
    )
    found.add_argument(
        "--releases", type=release_specifier, default=SpecifierSet(), metavar="SPEC", help="e.g. '>=2.11,<2.16'"
    )
    found.add_argument("--python", type=python_specifier, default=SpecifierSet(), metavar="SPEC", help="e.g. '>=3.10'")
    found.add_argument(
        "--variant",
        action="append",
        type=wheel_variant,
        default=[],
        metavar="NAME",
        help="cpu, cu130, ... or auto (no local label: the source's default build); repeatable",
    )
    found.add_argument("--pre", action="store_true", help="show pre-releases and development releases too")
    found.add_argument(
        "--all-platforms", action="store_true", help="show wheels for every platform, not only those this host installs"
    )
    found.add_argument(
        "--no-metadata",
        action="store_true",
        help="do not read the default builds' core metadata (PEP 658) for their CUDA major: shown as unknown",
    )
    found.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds for each request to a source (default: %(default)s)",
    )
    shape = found.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    shape.add_argument(
        "--matrix-entries",
        action="store_true",
        help="print matrix.yaml runtime entries, one per release x variant x Python, to paste under runtimes:",
    )
    return top


def on_github() -> bool:
    """Running as a GitHub Actions step: its log folds groups and shows ::error:: lines as annotations."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def workflow_command(name: str, message: str, **properties: str) -> str:
    """One GitHub Actions workflow command line (`::error title=...::message`), escaped as the runner reads it."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    props = ",".join(f"{key}={prop(value)}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{data(message)}"


def annotate(run: RunResult) -> None:
    """On GitHub Actions, each broken or errored cell as an annotation on the run's page (flaky as a warning)."""
    if not on_github():
        return
    kinds = {Verdict.BROKEN: "error", Verdict.ERROR: "error", Verdict.FLAKY: "warning"}
    for cell in sorted(run.cells, key=lambda c: natural_key(c.id)):
        if cell.verdict in kinds:
            title = f"{cell.verdict.value} cell"
            line = workflow_command(kinds[cell.verdict], f"{cell.id}: {cell.status.value}: {cell.reason}", title=title)
            console.out(plain_text(line), highlight=False)


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
    for cell in sorted(run.cells, key=lambda c: natural_key(c.id)):
        for finding in cell.findings:
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


def load_matrix_with_overrides(args: argparse.Namespace) -> Matrix:
    matrix = with_overrides(load_matrix(args.matrix), args.add_runtime, args.extra_index_url, args.find_links)
    return with_candidate(matrix, args.candidate) if args.candidate else matrix


def durations_of(args: argparse.Namespace) -> dict[str, float] | None:
    """--durations: each cell's time in a previous run, to balance shards by (None: the cost model)."""
    return measured_durations(load_run(args.durations)) if args.durations else None


def selected_plan(args: argparse.Namespace) -> Plan:
    """The cells this invocation is about: -k selectors, then --rerun-failed, then --shard.
    When --rerun-failed leaves none, it says so (on stderr) and the plan is empty."""
    matrix = load_matrix_with_overrides(args)
    plan = make_plan(matrix, args.select, args.backend)
    durations = durations_of(args)
    if args.rerun_failed is not None:
        failed = load_run(args.rerun_failed).failed_ids
        gone = sorted(failed - {c.id for c in make_plan(matrix, (), args.backend).cells})
        if gone:
            notes.print(
                f"[yellow]warning[/]: {len(gone)} failed cell(s) of {escape(str(args.rerun_failed))} are not in "
                f"{escape(matrix.path.name)}: {escape(', '.join(gone))}"
            )
        plan = plan.only(failed)
        if not plan.cells:
            where = "of the matrix selected" if failed else "was broken or errored"
            notes.print(f"no cell of {escape(str(args.rerun_failed))} {where}: nothing to rerun (exit 0)")
    if args.shard is not None:
        plan = shard_plan(plan, args.shard, durations)
    return plan


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
    }[code]
    console.print(f"{message} (exit {int(code)})")
    return int(code)


def cmd_run(args: argparse.Namespace) -> int:
    plan = selected_plan(args)
    if args.rerun_failed is not None and not plan.cells:  # pytest --lf would run everything; this runs nothing
        return int(ExitCode.OK)
    baseline = load_run(args.baseline) if args.baseline else None  # a bad baseline fails before any work
    run, run_dir = execute(args, plan)
    if baseline is not None:
        against_baseline(baseline, run, run_dir)
    code = finish(run, run_dir)
    if args.json:
        emit_json(run.to_json())
    return code


def execute(args: argparse.Namespace, plan: Plan) -> tuple[RunResult, Path]:
    """Build, run and report the plan's cells (`run`, `gate`); the grid is printed, the report written."""
    from harness.cells import RunOptions
    from harness.pipeline import Pipeline, make_backend  # heavy imports only for `run`

    matrix = plan.matrix
    cache_dir = (args.cache_dir or default_cache_dir()).absolute()  # cells run in their own directory
    writable_dir(args.reports_dir, "--reports-dir")
    writable_dir(cache_dir, "--cache-dir" if args.cache_dir else "the cache directory ($HARNESS_CACHE_DIR)")
    options = RunOptions(
        reports_dir=args.reports_dir,
        cache_dir=cache_dir,
        jobs=args.jobs,
        cell_timeout=args.timeout,
        require_gpu=args.require_gpu,
        rerun_broken=args.rerun_broken,
        require_toolchain=args.require_toolchain or args.require_gpu,
    )
    if args.executor and args.backend != "venv":
        raise BadInputError(
            f"--executor {args.executor} is for the venv backend; --backend docker runs a container per cell"
        )
    executor = args.executor or "forkserver"
    backend = make_backend(args.backend, matrix, options.cache_dir, args.docker_route, args.keep_containers, executor)
    how = f"{executor} processes" if args.backend == "venv" else "one container per cell"
    shard = f", shard {plan.shard} of {len(plan.unsharded or ())}" if plan.shard else ""
    print_preamble(plan, f"(backend {args.backend}, {how}, {args.jobs} at a time{shard})")
    observer = ConsoleObserver()
    try:
        run, run_dir = Pipeline(plan, options, observer, backend).execute()
    except ReportError as exc:  # the results are in hand: show them, then say what could not be written
        observer.close()
        print_grid(exc.run)
        raise
    observer.close()
    print_grid(run)
    annotate(run)
    return run, run_dir


def against_baseline(baseline: RunResult, run: RunResult, run_dir: Path) -> RunDiff:
    """diff.md and diff.json in the run's report, report.html again with them; printed."""
    from harness.render.html import write_html

    result = compare(baseline, run)
    write_atomic(run_dir / "diff.md", result.markdown())
    write_atomic(run_dir / "diff.json", json.dumps(result.to_json(), indent=2) + "\n")
    write_html(run, run_dir)
    print_diff(result)
    return result


def cmd_mutate(args: argparse.Namespace) -> int:
    """Shim mutants against the selected stable builds (harness/mutate/run.py); exit 3 when the run proves
    nothing (a failing baseline, a sentinel not killed, a cell in error), 1 below --min-score."""
    from harness.cells import RunOptions
    from harness.mutate.catalogue import load_catalogue
    from harness.mutate.report import MutationReport, write_mutation_report
    from harness.mutate.run import default_cells, mutate

    catalogue = load_catalogue(args.catalogue).select(args.mutant)
    plan = make_plan(load_matrix(args.matrix), args.select)
    cells = default_cells(plan, args.runtime)
    if not cells:
        raise BadInputError(
            f"no cell of {args.matrix} to mutate: mutation needs a stable extension (not a control) promised to "
            f"pass on the runtime ({', '.join(args.runtime) or 'the newest'}); see `python -m harness plan`"
        )
    plan = dataclasses.replace(plan, cells=cells)
    cache_dir = (args.cache_dir or default_cache_dir()).absolute()
    writable_dir(args.reports_dir, "--reports-dir")
    options = RunOptions(reports_dir=args.reports_dir, cache_dir=cache_dir, jobs=args.jobs, cell_timeout=args.timeout)
    console.print(
        f"{len(catalogue.mutants)} mutant(s) x {len(cells)} cell(s): {escape(', '.join(c.id for c in cells))}"
    )
    observer = ConsoleObserver()

    def progress(cell: MutantCell, done: int, total: int) -> None:
        console.print(
            f"   [{done}/{total}] {cell.verdict.value if cell.verdict else '-':<9} {cell.seconds:5.1f} s  "
            f"{escape(str(cell.mutant))} ~ {escape(cell.cell)}"
        )

    report = MutationReport.of(mutate(plan, catalogue, options, observer, progress))
    json_path, md_path = write_mutation_report(report)
    for ext in report.extensions:
        score = report.score(ext)
        console.print(f"mutation score of {escape(ext)}: {score.text()}; test strength {score.strength_text()}")
    for survivor in report.survivors:
        console.print(
            f"   survived in {escape(survivor.extension)}: {escape(survivor.mutant.id)} ({escape(survivor.reason)})"
        )
    console.print(f"report: {md_path}, {json_path.name} ({report.run.seconds:.0f} s)")
    if args.json:
        emit_json(report.to_json())
    if not report.ok:
        for problem in report.to_json()["problems"]:
            notes.print(f"[bold magenta]error[/]: {escape(problem)}")
        notes.print(
            f"[bold magenta]the mutation run is in error[/]: {len(report.failed_baselines)} baseline(s) not passing, "
            f"{len(report.sentinel_problems)} sentinel problem(s), {len(report.errors)} mutant cell(s) in error "
            "(exit 3)"
        )
        return int(ExitCode.INFRASTRUCTURE)
    low = [
        e for e in report.extensions if args.min_score is not None and (report.score(e).adjusted or 0) < args.min_score
    ]
    if low:
        notes.print(f"[bold red]below --min-score {args.min_score}[/]: {escape(', '.join(low))} (exit 1)")
        return int(ExitCode.BROKEN)
    return int(ExitCode.OK)


def cmd_gate(args: argparse.Namespace) -> int:
    """abi-diff, then the matrix with the candidate on both axes, then the baseline diff: GO or NO-GO."""
    from harness.render.html import write_html
    from harness.results.gate import candidate_ref, decide, previous_release
    from harness.static.abi_diff import diff, surface
    from harness.static.manifest import packaged_manifest

    if not args.candidate:
        raise BadInputError("gate: --candidate RELEASE is required (the release to decide on, e.g. 2.16.0)")
    plan = selected_plan(args)  # every input is checked before any work: matrix, selectors, baseline, wheel
    baseline = load_run(args.baseline) if args.baseline else None
    manifest = packaged_manifest()
    previous = args.previous or previous_release(
        args.candidate, [str(r.torch) for r in plan.matrix.runtimes if str(r.torch) != args.candidate]
    )
    ref = candidate_ref(args.candidate, args.candidate_wheel, plan.matrix.sources.find_links, manifest.releases)
    console.print(f"[bold]== abi-diff[/]: {escape(previous)} -> {escape(ref)}")
    abi = diff(surface(manifest, previous), surface(manifest, ref))
    run, run_dir = execute(args, plan)
    result = against_baseline(baseline, run, run_dir) if baseline is not None else None
    gate = decide(args.candidate, previous, abi, run, result)
    write_atomic(run_dir / "gate.md", gate.markdown())
    write_atomic(run_dir / "gate.json", json.dumps(gate.to_json(), indent=2, ensure_ascii=False) + "\n")
    write_html(run, run_dir)
    console.print()
    console.print(escape(gate.markdown()), soft_wrap=True)
    style = {ExitCode.OK: "bold green", ExitCode.BROKEN: "bold red"}.get(gate.exit_code, "bold magenta")
    console.print(f"report: {run_dir}/gate.md, gate.json, report.html, summary.md, results.json")
    console.print(f"[{style}]{gate.decision.value}[/] for torch {escape(args.candidate)} (exit {int(gate.exit_code)})")
    return int(gate.exit_code)


def cmd_compat(args: argparse.Namespace) -> int:
    from harness.results.compat import claims, markdown

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
        return int(ExitCode.BROKEN)
    return int(ExitCode.OK)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.render.html import write_html

    run = load_run(args.report)
    path = write_html(run, args.report if args.report.is_dir() else args.report.parent)
    console.print(f"report: {path} ({len(run.cells)} cells)")
    return int(ExitCode.OK)


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.results.merge import merge_reports

    writable_dir(args.reports_dir, "--reports-dir")
    baseline = load_run(args.baseline) if args.baseline else None  # a bad baseline fails before any work
    try:
        merged = merge_reports(args.reports, args.reports_dir)
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


def cmd_base_image(args: argparse.Namespace) -> int:
    from harness.execute.container.engine import connect
    from harness.execute.container.images import ensure_base

    settings = load_matrix(args.matrix).docker
    cache = (args.cache_dir or default_cache_dir()).absolute()
    writable_dir(cache, "--cache-dir")
    engine = connect()
    name = ensure_base(engine, cache, settings.base_image, settings.debian_mirror)
    size = engine.client.images.get(name).attrs.get("Size", 0)
    console.print(f"{name} ({size / 1e6:.0f} MB) in the engine at {engine.address}")
    return int(ExitCode.OK)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.shards is not None and args.shard is not None:
        raise BadInputError("plan: --shards N (the whole partition) and --shard K/N (one part) exclude each other")
    plan = selected_plan(args)
    durations = durations_of(args)
    if args.json:
        emit_json(fan_out(plan, args.shards, durations) if args.shards else plan_json(plan))
        return int(ExitCode.OK)
    print_preamble(plan, "(dry run: nothing is built or run)")
    if args.shards:
        for part in partition(plan.cells, args.shards, durations):
            console.print(
                f"   shard {part.shard}: {len(part.cells)} cell(s), {part.builds} build(s), ~{part.seconds:.0f} s"
            )
        return int(ExitCode.OK)
    print_plan(plan)
    return int(ExitCode.OK)


def plan_json(plan: Plan) -> dict[str, object]:
    identity = plan.identity
    return {
        "schema_version": PLAN_JSON_VERSION,
        "matrix": identity.matrix,
        "digest": identity.digest,
        "shard": identity.shard.to_json() if identity.shard else None,
        "cells": [
            {
                "id": cell.id,
                "build": cell.build.id,
                "runtime": cell.runtime.id,
                "expected": p.expected.value,
                "why": p.why,
            }
            for cell in plan.cells
            for p in [promise(cell)]
        ],
    }


def select_releases(manifest_releases: Sequence[str], spec: str | None) -> list[str]:
    if not spec:
        return list(manifest_releases)
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        newer = item.endswith("+")
        try:
            level = ApiLevel.parse(".".join(item.rstrip("+").split(".")[:2]))
        except ValueError as exc:
            raise BadInputError(f"--runtimes: {item!r} is not a release such as '2.10.0' or '2.10+'") from exc
        found = [
            r
            for r in manifest_releases
            if (ApiLevel.of(Version(r)) >= level if newer else ApiLevel.of(Version(r)) == level)
        ]
        if not found:
            raise BadInputError(
                f"--runtimes: {item!r} matches no release of the manifest ({', '.join(manifest_releases)})"
            )
        chosen += [r for r in found if r not in chosen]
    return sorted(chosen, key=Version)


def torch_variant(text: str) -> str:
    """--variant: a torch wheel variant as the matrix writes it (cpu, cuXYZ, rocmX.Y)."""
    if not re.fullmatch(r"cpu|cu[0-9]{2,3}|rocm[0-9.]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch variant such as cpu, cu128 or cu130")
    return text


def cpython_version(text: str) -> str:
    """--python: a CPython version X.Y, with a t when free-threaded."""
    if not re.fullmatch(r"3\.[0-9]+t?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython version such as 3.12 or 3.13t")
    return text


def cmd_check(args: argparse.Namespace) -> int:
    from harness.static.artifact import ArtifactFacts, RuntimeFacts, fits_which_python, unmet
    from harness.static.manifest import packaged_manifest
    from harness.static.op_calls import DISPATCHER_SHIMS, Fit, fits
    from harness.static.op_registry import packaged_op_schemas
    from harness.static.predict import ArtifactImports, Predicted, predict
    from harness.static.symbols import read_artifact

    manifest = packaged_manifest()
    releases = select_releases(manifest.releases, args.runtimes)
    objects = read_artifact(args.artifact)
    imports, facts = ArtifactImports.of(objects), ArtifactFacts.of(args.artifact, objects)

    def lacks(release: str) -> list[Unmet]:
        """What the artifact needs of a runtime of this release besides symbols, as far as --variant and
        --python say what the runtime is (neither given: nothing is checked)."""
        runtime = RuntimeFacts.of(f"{release}+{args.variant}", args.variant or "", args.python or "3.11")
        checked = {Condition.PYTHON_ABI} if args.python else set()
        checked |= {Condition.NO_CUDA, Condition.CUDA_MAJOR} if args.variant else set()
        return [u for u in unmet(facts, runtime) if u.condition in checked]

    schemas = packaged_op_schemas()
    built_with = schemas.release(args.built_with) if args.built_with else None
    predictions = [
        predict(
            imports,
            r,
            manifest.exported_by(r),
            manifest,
            full_exports=False,
            unmet=lacks(r),
            ops=fits(imports.calls, schemas, r, built_with),
        )
        for r in releases
    ]
    loads = [p.runtime for p in predictions if p.outcome is Predicted.LOADS]
    loads_from = next(
        (
            r
            for r in releases
            if all(p.outcome is Predicted.LOADS for p in predictions if Version(p.runtime) >= Version(r))
        ),
        None,
    )
    failing = any(p.outcome is Predicted.LOAD_FAILED or p.failing_ops for p in predictions)
    if args.json:
        emit_json(
            {
                "schema_version": 1,
                "artifact": str(args.artifact),
                "built_with": built_with,
                "unseen_calls": "op names built at run time leave no string: not judged"
                if imports.stable & DISPATCHER_SHIMS
                else None,
                "imports": imports.to_json(),
                "needs": facts.to_json(),
                "predictions": [{"runtime": p.runtime, **p.to_json()} for p in predictions],
                "loads_from": loads_from,
            }
        )
        return int(ExitCode.BROKEN if failing else ExitCode.OK)
    floor = ", ".join(f"{k} {v}" for k, v in imports.floor.items()) or "nothing versioned"
    console.print(
        f"[bold]{escape(args.artifact.name)}[/]: {len(imports.stable)} stable shims, "
        f"{len(imports.unstable)} unstable C++ symbols, {len(imports.python)} Python C API, "
        f"{len(imports.system)} system; needs {floor}"
    )
    for mangled, readable in imports.unstable.items():
        console.print(f"   [yellow]unstable[/] {escape(readable)}  [dim]{escape(mangled)}[/]")
    if facts.cuda_libraries:
        majors = sorted({major for _, major in facts.cuda_majors})
        which = f"a torch of CUDA {', '.join(map(str, majors))}" if majors else "a CUDA build of torch"
        checked = f"checked against {args.variant}" if args.variant else "give --variant to check it"
        console.print(f"   needs {which}: {escape(', '.join(facts.cuda_libraries))} ({checked})")
    if facts.tags:
        checked = f"checked against CPython {args.python}" if args.python else "give --python to check it"
        console.print(f"   its wheel tags fit {escape(fits_which_python(facts.tags))} ({checked})")
    if imports.calls:
        against = f"judged against torch {built_with}'s schemas" if built_with else "give --built-with to judge fit"
        console.print(f"   calls {len(imports.calls)} op(s) through the dispatcher ({against}):")
        for call in imports.calls:
            console.print(f"      {escape(call.shown)}  [dim]{call.via.value}: {escape(call.source)}[/]")
    if imports.stable & DISPATCHER_SHIMS:
        console.print("   [dim]an op name built at run time leaves no string to read: such calls are not judged[/]")
    style = {Predicted.LOADS: "green", Predicted.LOAD_FAILED: "red", Predicted.UNKNOWN: "yellow"}
    for p in predictions:
        console.print(f"   {p.runtime:<8} [{style[p.outcome]}]{p.outcome.value:<12}[/] {escape(p.symbol_summary)}")
        for op in p.ops:
            if op.fit is not Fit.FITS:
                mark = "red" if op.fit is Fit.FAILS else "yellow"
                console.print(f"            [{mark}]call {op.fit.value}[/] {escape(op.call.shown)}: {escape(op.why)}")
    if loads_from:
        console.print(f"predicted to load on {loads_from} and every newer release checked")
    elif not loads:
        console.print("[red]predicted to load on none of the releases checked[/]")
    return int(ExitCode.BROKEN if failing else ExitCode.OK)


def cmd_abi_diff(args: argparse.Namespace) -> int:
    from harness.static.abi_diff import diff, surface, with_ops
    from harness.static.manifest import packaged_manifest
    from harness.static.op_registry import packaged_op_schemas

    manifest = packaged_manifest()
    namespaces = tuple(args.op_namespace or ["aten"])
    result = with_ops(
        diff(surface(manifest, args.old), surface(manifest, args.new)),
        packaged_op_schemas(),
        () if "all" in namespaces else namespaces,
    )
    code = int(ExitCode.BROKEN if result.breaking or result.breaking_ops else ExitCode.OK)
    if args.json:
        emit_json(result.to_json())
        return code
    console.print(f"[bold]stable surface {escape(result.old)} -> {escape(result.new)}[/]")
    sections: list[tuple[str, str, Sequence[str]]] = [
        ("red", "removed exports (binaries that use them stop loading)", result.removed_exports),
        ("red", "changed signatures", [f"{c.name}: {c.old}  ->  {c.new}" for c in result.changed_signatures]),
        ("yellow", "removed declarations (source break)", result.removed_declarations),
        ("yellow", "changed version guards", [f"{n}: {o} -> {w}" for n, o, w in result.changed_guards]),
        ("green", "added exports", result.added_exports),
        ("green", "added declarations", result.added_declarations),
    ]
    if result.op_changes is not None:
        scope = ", ".join(result.op_namespaces) or "every namespace"
        sections += [
            (
                "red",
                f"op schemas ({scope}): breaking changes (calls by name built on {result.old} may fail)",
                [f"{c.op}: {c.what}" for c in result.breaking_ops],
            ),
            (
                "green",
                f"op schemas ({scope}): compatible changes",
                [f"{c.op}: {c.what}" for c in result.compatible_ops],
            ),
        ]
    for style, title, items in sections:
        console.print(f"[{style}]{title}: {len(items)}[/]")
        for item in items:
            console.print(f"   {escape(item)}")
    if result.op_changes is None:
        console.print("[dim]op schemas: not compared (recorded for the manifest's releases, not for a wheel)[/]")
    verdict = (
        "[bold red]breaking[/]"
        if result.breaking or result.breaking_ops
        else "[green]no removal, no signature change, no breaking op schema change[/]"
    )
    console.print(f"{verdict} (exit {code})")
    return code


def cmd_audit_guards(args: argparse.Namespace) -> int:
    import tempfile

    from harness.config import DEFAULT_PYTHON
    from harness.provision.envs import EnvManager, EnvSpec
    from harness.provision.sources import ResolvedSources
    from harness.static.audit import confirm, exports_by_target, find_latent_breaks
    from harness.static.header_probe import HeaderFinding, probe_headers
    from harness.static.manifest import packaged_manifest
    from harness.static.visibility import OLDEST_TARGET, find_cuda_include, packaged_visibility, scan_include

    manifest = packaged_manifest()
    release = manifest.release(args.release)
    if ApiLevel.of(Version(release)) < OLDEST_TARGET:
        raise BadInputError(
            f"{release} is older than the oldest target a build can ask for ({OLDEST_TARGET}): no target of its "
            f"headers to audit; audit {OLDEST_TARGET} or later"
        )
    include = args.headers
    if include is None:
        env = EnvManager(default_cache_dir(), ResolvedSources(None, (), (), "")).cached(
            EnvSpec(Version(release), "auto", DEFAULT_PYTHON)
        )
        include = env.torch_lib.parent / "include" if env else None
    visibility = packaged_visibility().get(release)
    if visibility is None:
        if include is None:
            raise BadInputError(
                f"{release}: its headers were never preprocessed (not in harness/data/stable_visibility.json) "
                "and there are none here; pass --headers <torch/include> of that release"
            )
        visibility = scan_include(include, release, cuda_include=find_cuda_include())
    breaks = find_latent_breaks(manifest, release, args.min_target, visibility)
    probed = include is not None and not args.no_probe
    header_findings: list[HeaderFinding] = []
    if probed and include is not None:
        if breaks:
            breaks = confirm(breaks, include)
        exports = exports_by_target(manifest, visibility.targets)
        with tempfile.TemporaryDirectory(prefix="audit-headers-") as tmp:
            for target in (t for t in visibility.targets if t >= args.min_target and t in exports):
                header_findings += probe_headers(include, target, exports[target], Path(tmp))
    # A claim that compiling disproved is no break; an unprobed one still counts.
    broken = any(b.confirmed is not False for b in breaks) or bool(header_findings)
    code = int(ExitCode.BROKEN if broken else ExitCode.OK)
    if args.json:
        emit_json(
            {
                "schema_version": AUDIT_JSON_VERSION,
                "release": release,
                "min_target": str(args.min_target),
                "probed": probed,
                "latent_breaks": [b.to_json() for b in breaks],
                "header_findings": [f.to_json() for f in header_findings],
            }
        )
        return code
    console.print(
        f"[bold]{release}[/]: {len(breaks)} declaration(s) visible to the preprocessor at a target whose release "
        "does not export them" + ("" if probed else " [dim](not confirmed by compiling: no headers; pass --headers)[/]")
    )
    for item in breaks:
        mark = {True: "[red]confirmed[/]", False: "[green]not visible when compiled[/]", None: "[dim]unprobed[/]"}
        console.print(f"   {mark[item.confirmed]} {escape(item.describe())}")
    if probed:
        console.print(
            f"[bold]{release}[/]: {len(header_findings)} header-only wrapper(s)/macro(s) that a build at a target "
            "cannot use (does not compile, or imports what that release does not export)"
        )
        for finding in header_findings:
            console.print(f"   [red]finding[/] {escape(finding.describe())}")
    return code


def runtime_sources(args: argparse.Namespace) -> Sources:
    """The matrix's sources (none when no --matrix is given and there is no matrix.yaml here) and the
    command line's."""
    if args.matrix is None and not DEFAULT_MATRIX.is_file():
        notes.print(f"[dim]no {DEFAULT_MATRIX} here: pip's configuration and the UV_* variables name the sources[/]")
        sources = Sources()
    else:
        sources = load_matrix(args.matrix or DEFAULT_MATRIX).sources
    return dataclasses.replace(
        sources,
        extra_index_urls=(*sources.extra_index_urls, *args.extra_index_url),
        find_links=(*sources.find_links, *args.find_links),
    )


def cmd_runtimes(args: argparse.Namespace) -> int:
    sources = sources_of(resolve_sources(runtime_sources(args)))
    filters = Filters(
        releases=args.releases,
        pythons=args.python,
        variants=frozenset(args.variant),
        pre=args.pre,
        platforms=None if args.all_platforms else host_platforms(),
    )
    catalog = discover(sources, filters, timeout=args.timeout, metadata=not args.no_metadata)
    if args.json:
        emit_json(catalog.to_json())
    elif args.matrix_entries:
        console.print(f"# torch on {escape(', '.join(map(str, sources)))}; paste under runtimes:")
        for line in catalog.matrix_entries():
            console.print(escape(line))
    else:
        print_catalog(catalog, args.all_platforms, metadata=not args.no_metadata)
    if not catalog.runtimes:
        served = f"; variants served: {', '.join(catalog.variants_seen)}" if args.variant else ""
        notes.print(f"[yellow]no torch wheel of these sources passes the filters[/]{escape(served)}")
    return int(ExitCode.OK)


def print_catalog(catalog: Catalog, all_platforms: bool, metadata: bool) -> None:
    """One section per release; a row per variant and source, with the Pythons it serves."""
    rows: dict[tuple[Version, str, str], list[PublishedRuntime]] = {}
    for runtime in catalog.runtimes:
        rows.setdefault((runtime.release, runtime.variant, runtime.source.location), []).append(runtime)
    where = "every platform" if all_platforms else "this host's platform (--all-platforms: every one)"
    console.print(f"[bold]torch[/] for {where} on {escape(', '.join(map(str, catalog.sources)))}")
    columns = ["release", "variant", "CUDA", "Python", *(["platforms"] if all_platforms else []), "source"]
    table = Table(*columns)
    keys = list(rows)
    for position, (release, variant, source) in enumerate(keys):
        found = rows[(release, variant, source)]
        first = position == 0 or keys[position - 1][0] != release
        last = position == len(keys) - 1 or keys[position + 1][0] != release
        platforms = sorted({p for r in found for p in r.platforms})
        table.add_row(
            str(release) if first else "",
            variant,
            "/".join(sorted({r.cuda for r in found})),
            " ".join(r.python_label for r in found),
            *([" ".join(platforms)] if all_platforms else []),
            escape(source),
            end_section=last,
        )
    console.print(table)
    releases = len({r.release for r in catalog.runtimes})
    console.print(f"{releases} release(s), {len(catalog.runtimes)} runtime(s) (release x variant x Python x source)")
    if catalog.hidden:
        console.print(f"[dim]torch wheel files not shown: {escape(catalog.hidden_text())}[/]")
    if any(r.cuda == UNKNOWN for r in catalog.runtimes):
        why = "not read (--no-metadata)" if not metadata else "not served by its source"
        console.print(f"[dim]CUDA unknown: a default build (no label) whose core metadata (PEP 658) was {why}[/]")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: Sequence[str] | None = None) -> int:
    """Data (JSON, the grid, a listing) on stdout; errors, warnings and logs on stderr. With --json, stdout holds
    the JSON document alone: every human line goes to stderr."""
    args = parser(invoked_as(sys.argv[0]) if argv is None else "python -m harness").parse_args(argv)
    verbosity = args.verbose + args.verbose_after
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")  # on stderr
    # A CI job that is cancelled gets SIGTERM: stop like on Ctrl-C, so cells and containers are
    # killed and the report is still written.
    signal.signal(signal.SIGTERM, _interrupt)
    if getattr(args, "json", False):
        console.file = sys.stderr
    try:
        commands = {
            "run": cmd_run,
            "plan": cmd_plan,
            "check": cmd_check,
            "abi-diff": cmd_abi_diff,
            "audit-guards": cmd_audit_guards,
            "diff": cmd_diff,
            "base-image": cmd_base_image,
            "merge": cmd_merge,
            "report": cmd_report,
            "gate": cmd_gate,
            "compat": cmd_compat,
            "runtimes": cmd_runtimes,
            "mutate": cmd_mutate,
        }
        return commands[args.command](args)
    except HarnessError as exc:
        notes.print(f"[bold red]error[/]: {escape(str(exc))}", soft_wrap=True)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        notes.print("[bold red]interrupted[/] before any cell ran; nothing was reported")
        return int(ExitCode.INFRASTRUCTURE)
    except Exception as exc:  # never let a harness bug exit 1, which means "a promise was broken"
        logging.getLogger("harness").debug("internal error", exc_info=True)
        message = f"{type(exc).__name__}: {escape(str(exc))}"
        notes.print(f"[bold red]internal error[/]: {message} (run with -vv for the traceback)")
        return int(ExitCode.INFRASTRUCTURE)
    finally:
        console.file = None  # type: ignore[assignment]  # back to sys.stdout, whatever it is then
