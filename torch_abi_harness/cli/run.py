"""`run` and `plan`, and what `gate` shares with them: the commands that select cells of the matrix, and run them
or say how they would."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from rich.markup import escape

from torch_abi_harness.cli.args import (
    Command,
    existing_dir,
    positive_int,
    say_packaged,
)
from torch_abi_harness.cli.console import console, emit_json, notes
from torch_abi_harness.cli.reports import against_baseline
from torch_abi_harness.cli.run_options import (
    executing_options,
    matrix_options,
    selection_options,
    shard_count,
)
from torch_abi_harness.cli.run_output import (
    ConsoleObserver,
    annotate,
    finish,
    print_floor,
    print_grid,
    print_plan,
    print_preamble,
)
from torch_abi_harness.config import Matrix
from torch_abi_harness.config.defaults import ConfigKind, default_matrix_source
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.files import writable_dir
from torch_abi_harness.core.kinds import Backend
from torch_abi_harness.gate.candidate import Candidate, cached_candidate_env
from torch_abi_harness.gate.orchestrate import gate_matrix, release_option
from torch_abi_harness.plan import Build, Plan, Runtime, make_plan
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, cache_dir_of, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.results.diff import load_run
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.run.launch import (
    Executed,
    ExecuteOptions,
    MatrixRequest,
    execute_plan,
    load_plain_matrix,
)
from torch_abi_harness.run.shard import build_jobs, fan_out, measured_durations, plan_json, shard_plan, split


def add_run(command: Command) -> None:
    run = command("run", help="build, run and report the matrix")
    matrix_options(run)
    selection_options(run)
    executing_options(run)
    run.add_argument(
        "--prebuilt",
        type=existing_dir,
        default=None,
        metavar="DIR",
        help="take the builds from DIR, as `build --out DIR` jobs handed them on, instead of building here (no build "
        "torch env is made); a build missing there is ERROR in its cells",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="results.json's document on stdout when the run ends (the progress and the grid go to stderr)",
    )
    run.set_defaults(handler=cmd_run, make_candidate_env=True)


def add_plan(command: Command) -> None:
    plan = command("plan", help="print the selected cells and what each is promised; do nothing else")
    matrix_options(plan)
    selection_options(plan)
    plan.add_argument(
        "--shards",
        type=shard_count,
        default=None,
        metavar="N",
        help="how the selected cells split into N shards; with --json, a job matrix for a CI fan-out "
        "(--by runtime without --shards: one shard per runtime)",
    )
    plan.add_argument(
        "--build-jobs",
        action="store_true",
        help="with --json: the job matrix of the build jobs, one per build torch (each runs `build --torch T`)",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    plan.set_defaults(handler=cmd_plan)


def add_build(command: Command) -> None:
    build = command(
        "build",
        help="a CI graph's build job: make the plan's builds on one build torch and hand them on to `run --prebuilt`",
    )
    matrix_options(build)
    build.add_argument(
        "--torch", required=True, metavar="RELEASE", help="the build torch whose builds to make (`plan --build-jobs`)"
    )
    build.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="where each build's wheel, log and handoff.json go"
    )
    build.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="environments and builds (default: $HARNESS_CACHE_DIR or the user cache dir)",
    )
    build.add_argument(
        "-j", "--jobs", type=positive_int, default=os.cpu_count() or 1, help="builds at once (default: cores)"
    )
    build.set_defaults(
        handler=cmd_build, rerun_failed=None, shard=None, durations=None, by="cells", make_candidate_env=True
    )


def matrix_request(args: argparse.Namespace) -> MatrixRequest:
    """The matrix options of `run`, `gate`, `plan` and `build`, parsed once."""
    if args.matrix is None and args.project is None and args.wheel is None:
        source = default_matrix_source(Path())
        if source.kind is ConfigKind.MATRIX:
            say_packaged(source.path)
    return MatrixRequest(
        path=args.matrix,
        project=args.project,
        wheel=args.wheel,
        add_runtimes=tuple(args.add_runtime),
        extra_index_urls=tuple(args.extra_index_url),
        find_links=tuple(args.find_links),
        environments=tuple(args.use_env),
        backend=args.backend,
    )


def load_matrix_with_overrides(args: argparse.Namespace) -> Matrix:
    """The matrix as a command runs it: overrides applied, published wheels resolved (downloaded once into the
    cache); with --candidate, the gate's matrix (its probe from the candidate's env when one is made: `gate`
    makes it first)."""
    cache = cache_dir_of(getattr(args, "cache_dir", None))
    matrix = load_plain_matrix(matrix_request(args), cache)
    if not args.candidate:
        if args.previous:
            raise BadInputError("--previous RELEASE is the release a --candidate is compared with: add --candidate")
        return matrix
    candidate = Candidate.parse(args.candidate)
    previous = release_option("--previous", args.previous) if args.previous else None
    env = cached_candidate_env(matrix, candidate, cache, make=getattr(args, "make_candidate_env", False))
    return gate_matrix(matrix, candidate, previous, cache, env)


def durations_of(args: argparse.Namespace) -> dict[str, float] | None:
    """--durations: each cell's time in a previous run, to balance shards by (None: the cost model)."""
    return measured_durations(load_run(args.durations)) if args.durations else None


def selected_plan(args: argparse.Namespace) -> Plan:
    """The cells this invocation is about: -k selectors, then --rerun-failed, then --shard.
    When --rerun-failed leaves none, it says so (on stderr) and the plan is empty."""
    matrix = load_matrix_with_overrides(args)
    plan = make_plan(matrix, args.select, Backend(args.backend))
    durations = durations_of(args)
    if args.rerun_failed is not None:
        failed = load_run(args.rerun_failed).failed_ids
        gone = sorted(failed - {c.id for c in make_plan(matrix, (), Backend(args.backend)).cells})
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
        shard = dataclasses.replace(args.shard, by=args.by)
        plan = shard_plan(plan, shard, durations)
    return plan


def cmd_run(args: argparse.Namespace) -> int:
    plan = selected_plan(args)
    if args.rerun_failed is not None and not plan.cells:  # pytest --lf would run everything; this runs nothing
        return int(ExitCode.OK)
    baseline = load_run(args.baseline) if args.baseline else None  # a bad baseline fails before any work
    executed = execute(args, plan)
    run, run_dir = executed.run, executed.run_dir
    if baseline is not None:
        against_baseline(baseline, run, run_dir)
    print_floor(run, run_dir, executed.imports, args.jobs)
    code = finish(run, run_dir)
    if args.json:
        emit_json(run.to_json())
    return code


def execute_options(args: argparse.Namespace) -> ExecuteOptions:
    """The executing options of `run` and `gate`, parsed once: each field is the option of its name (a command
    without one, e.g. `gate` without --prebuilt, keeps the field's default)."""
    names = [f.name for f in dataclasses.fields(ExecuteOptions)]
    return ExecuteOptions(**{name: getattr(args, name) for name in names if hasattr(args, name)})


class ConsoleHooks:
    """A run shown on the console: its preamble, its progress, its grid and the CI annotations."""

    def __init__(self) -> None:
        self._observer = ConsoleObserver()

    def starting(self, plan: Plan, how: str) -> None:
        print_preamble(plan, how)

    def observer(self) -> ConsoleObserver:
        return self._observer

    def ended(self, run: RunResult, *, written: bool) -> None:
        self._observer.close()
        print_grid(run)
        if written:
            annotate(run)


def execute(args: argparse.Namespace, plan: Plan) -> Executed:
    """Build, run and report the plan's cells (`run`); the grid is printed, the report written."""
    return execute_plan(plan, execute_options(args), ConsoleHooks())


def cmd_build(args: argparse.Namespace) -> int:
    """Make the builds of one build torch and hand them on; exit 3 when one failed for the infrastructure's sake."""
    from torch_abi_harness.execute.venv import VenvBackend  # the executors only for the commands that build or run
    from torch_abi_harness.run.prepare import Preparer

    plan = selected_plan(args)
    cache_dir = cache_dir_of(args.cache_dir)
    writable_dir(cache_dir, "--cache-dir" if args.cache_dir else "the cache directory ($HARNESS_CACHE_DIR)")
    args.out.mkdir(parents=True, exist_ok=True)
    writable_dir(args.out, "--out")
    observer = ConsoleObserver()
    try:
        results = Preparer(plan, cache_dir, args.jobs, observer, VenvBackend()).build_on(args.torch, args.out)
    finally:
        observer.close()
    console.print(f"{len(results)} build(s) of torch {escape(args.torch)} handed on in {escape(str(args.out))}")
    failed = [r for r in results.values() if r.infrastructure]
    return int(ExitCode.INFRASTRUCTURE if failed else ExitCode.OK)


def print_existing_envs(plan: Plan) -> None:
    """`plan --use-env`: each existing env asked what it holds, and the builds and runtimes it serves (a mismatch is
    exit 2 here, before any run)."""
    if not plan.matrix.sources.environments:
        return
    envs = EnvManager(default_cache_dir(), resolve_sources(plan.matrix.sources))
    items: tuple[Build | Runtime, ...] = (*plan.needed_builds, *plan.needed_runtimes)
    specs = [EnvSpec(x.torch, x.variant, x.python, x.interpreter) for x in items]
    envs.check_existing(specs)
    for found in envs.existing_envs():
        served = [
            x.id
            for x, s in zip(items, specs, strict=True)
            if found.mismatch(s.torch, s.variant, s.python, s.interpreter) is None
        ]
        console.print(f"== existing env {escape(found.describe())} serves: {escape(', '.join(served))}")


def cmd_plan(args: argparse.Namespace) -> int:
    if args.shards is not None and args.shard is not None:
        raise BadInputError("plan: --shards N (the whole partition) and --shard K/N (one part) exclude each other")
    if args.build_jobs and not args.json:
        raise BadInputError("plan: --build-jobs is a job matrix: add --json")
    plan = selected_plan(args)
    durations = durations_of(args)
    fans_out = args.shards is not None or (args.by == "runtime" and args.shard is None)
    if args.json:
        if args.build_jobs:
            emit_json(build_jobs(plan))
        else:
            emit_json(fan_out(plan, args.shards, durations, args.by) if fans_out else plan_json(plan))
        return int(ExitCode.OK)
    print_preamble(plan, "(dry run: nothing is built or run)")
    print_existing_envs(plan)
    if fans_out:
        for part in split(plan, args.shards, args.by, durations):
            console.print(
                f"   shard {part.shard}: {len(part.cells)} cell(s), {part.builds} build(s), ~{part.seconds:.0f} s"
            )
        return int(ExitCode.OK)
    print_plan(plan)
    return int(ExitCode.OK)
