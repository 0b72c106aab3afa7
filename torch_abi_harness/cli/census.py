"""`census`: the published wheels of a run, package by package (torch_abi_harness.results.census), kept in a docs page
(--update/--check) and held against a plain load in every runtime (--verify)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from rich.markup import escape

from torch_abi_harness.cli.args import Command
from torch_abi_harness.cli.console import console
from torch_abi_harness.cli.reports import read_page
from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.files import file_digest, write_atomic
from torch_abi_harness.execute.plain_load import host_difference, plain_load
from torch_abi_harness.plan import cell_id_parts
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, cache_dir_of
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.results.census import (
    MADE_ON,
    MARK_BEGIN,
    MARK_END,
    OUTSIDE,
    PackageCensus,
    RuntimeRow,
    census,
    document,
)
from torch_abi_harness.results.compat import splice
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.static.prebuilt import SHARED_OBJECT, extension_modules
from torch_abi_harness.static.symbols import read_artifact
from torch_abi_harness.static.wheelfile import open_wheel


def add_census(command: Command) -> None:
    parser = command(
        "census",
        help="for each published wheel of a run (`wheel: <requirement>` builds): where each of its modules loads and "
        "registers the same operators, a table per package and one line",
    )
    parser.add_argument("report", type=Path, metavar="REPORT", help="a reports/<run-id> directory or its results.json")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument(
        "--update",
        type=Path,
        metavar="FILE",
        help=f"rewrite the census in FILE (a Markdown page), between a {MARK_BEGIN} line and a {MARK_END} line",
    )
    keep.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="exit 1 when the census between FILE's markers differs from this run's",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="load every module again the plain way (`import torch; ctypes.CDLL(module)`) in each runtime's env, "
        "in the cells' sandbox, and exit 1 where that disagrees with the run's record",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="environments and wheels (default: $HARNESS_CACHE_DIR or the user cache dir)",
    )
    parser.set_defaults(handler=cmd_census)


def cmd_census(args: argparse.Namespace) -> int:
    page: Path | None = args.update or args.check
    markers = (MARK_BEGIN, MARK_END)
    text = read_page(page, markers, "census") if page is not None else None
    run = load_run(args.report)
    packages = census(run)
    if not packages:
        raise BadInputError(f"{args.report}: the run has no published wheel (a build `wheel: <requirement>`)")
    code, findings = int(ExitCode.OK), dict[str, list[str]]()
    if args.verify:
        code, findings = verify(run, packages, cache_dir_of(args.cache_dir))
    lines = document(run, packages, findings=findings)
    for line in lines:
        console.print(escape(line), soft_wrap=True, highlight=False)
    if page is None or text is None:
        return code
    fresh = splice(text, lines, str(page), markers, "census")
    if _content(fresh) == _content(text):  # which run made it, and when, is not what --check compares
        console.print(f"{escape(str(page))}: the census is current")
        return code
    if args.check:
        console.print(
            f"[bold red]{escape(str(page))}: the census is stale[/]: it differs from run {escape(run.run_id)} (exit 1)"
        )
        return int(ExitCode.BROKEN)
    write_atomic(page.resolve(), fresh)
    console.print(f"{escape(str(page))}: the census updated from run {escape(run.run_id)}")
    return code


def _content(text: str) -> list[str]:
    """What `--check` compares of a page: not its "Made on" line, nor what this host loaded outside the sandbox
    (findings about the machine that only `--verify` makes, which a check without it cannot make again)."""
    lines, kept, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith(OUTSIDE):  # the block: the sentence, a blank line, its list, a blank line
            i += 1
            while i < len(lines) and (not lines[i] or lines[i].startswith("- ")):
                i += 1
            continue
        if not lines[i].startswith(MADE_ON):
            kept.append(lines[i])
        i += 1
    return kept


def verify(run: RunResult, packages: list[PackageCensus], cache: Path) -> tuple[int, dict[str, list[str]]]:
    """Every module of every cell loaded the plain way in that cell's runtime env: where the plain load and the
    run's record (loaded, or not) disagree, said and exit 1. Each is loaded outside the sandbox too: where that
    differs, a finding per package (the host offers what a cell does not see), said, never a disagreement."""
    envs = EnvManager(cache, resolve_sources(Sources()))
    findings: dict[str, list[str]] = {}
    try:
        disagreements, checked = _verify(packages, cache, envs, findings)
    finally:
        envs.release()
    for label, found in findings.items():
        for finding in found:
            console.print(f"[yellow]host[/] {escape(label)}: {escape(finding)}", soft_wrap=True)
    if disagreements:
        console.print(f"[bold red]{disagreements} of {checked} plain loads disagree with the run[/] (exit 1)")
        return int(ExitCode.BROKEN), findings
    console.print(f"verified: {checked} plain loads (`import torch; ctypes.CDLL(module)`) agree with the run")
    return int(ExitCode.OK), findings


def _verify_file(
    wheel: Path, rows: list[RuntimeRow], cache: Path, envs: EnvManager, findings: list[str]
) -> tuple[int, int]:
    """One published file's modules, extracted, loaded the plain way on each of its cells' runtimes, in the sandbox
    (held against the run) and outside it (a difference is appended to findings)."""
    disagreements = checked = 0
    with tempfile.TemporaryDirectory(prefix="census-verify-", dir=cache / "tmp") as tmp:
        with open_wheel(wheel) as archive:  # every shared object: a module finds its siblings beside it
            for member in (m for m in archive.namelist() if SHARED_OBJECT.search(m.rsplit("/", 1)[-1])):
                archive.extract(member, Path(tmp))
        paths = sorted(Path(tmp) / m.name for m in extension_modules(read_artifact(wheel)))  # as the suite loads them
        for row in rows:
            parts = cell_id_parts(row.cell.id) or {}
            python = row.cell.runtime_python or DEFAULT_PYTHON
            env = envs.ensure(EnvSpec(Version(row.release), parts.get("runtime_variant") or "auto", python))
            inside = plain_load(Path(env.python), paths, Path(tmp))
            outside = plain_load(Path(env.python), paths, Path(tmp), sandboxed=False)
            findings += [
                f"{row.cell.id} {path.name}: {differs}"
                for path in paths
                if (differs := host_difference(str(path), inside, outside))
            ]
            plain = inside.errors
            recorded = {m.name: m.error is None for m in row.cell.modules}
            for path in paths:
                loaded = plain[str(path)] is None
                checked += 1
                if path.name in recorded:
                    said, agrees = ("loaded" if recorded[path.name] else "did not load"), recorded[path.name] == loaded
                else:
                    said, agrees = f"not loaded by the run ({row.cell.verdict.value}: {row.cell.reason})", not loaded
                if not agrees:
                    disagreements += 1
                    plainly = "loads" if loaded else f"fails: {plain[str(path)]}"
                    console.print(
                        f"[bold red]disagrees[/] {escape(row.cell.id)} {escape(path.name)}: "
                        f"the run says {escape(said)}, the plain load {escape(plainly)}",
                        soft_wrap=True,
                    )
    return disagreements, checked


def _verify(
    packages: list[PackageCensus], cache: Path, envs: EnvManager, findings: dict[str, list[str]]
) -> tuple[int, int]:
    disagreements = checked = 0
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    for package in packages:
        for published in package.builds:
            wheel = cache / "wheels" / canonicalize_name(Requirement(published.requirement).name) / published.filename
            if not wheel.is_file() or file_digest(wheel) != published.sha256:
                raise BadInputError(
                    f"{wheel}: not the file the run used (sha256 {published.sha256[:16]}); run the census again"
                )
            rows = [r for r in package.rows if r.cell.build_id == published.build]
            found = _verify_file(wheel, rows, cache, envs, findings.setdefault(package.label, []))
            disagreements, checked = disagreements + found[0], checked + found[1]
    return disagreements, checked
