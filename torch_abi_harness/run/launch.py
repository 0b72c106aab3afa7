"""One run as a command asks for it, parsed once: the matrix with the command line's overrides, and the options
that run a plan's cells (`run`, `gate`). What a run shows while it goes is the caller's (RunHooks): the CLI
prints, the gate passes it on, tests record."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import NamedTuple, Protocol

from torch_abi_harness.builds.published import with_published
from torch_abi_harness.config import Matrix
from torch_abi_harness.config.author import load_author_config
from torch_abi_harness.config.defaults import ConfigKind, default_matrix_source
from torch_abi_harness.config.matrix import load_matrix, with_overrides
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.files import writable_dir
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.plan import Plan
from torch_abi_harness.provision.envs import cache_dir_of
from torch_abi_harness.results.model import ReportError, RunResult
from torch_abi_harness.run.cells import RunOptions
from torch_abi_harness.run.floor import imports_measured
from torch_abi_harness.run.pipeline import BackendChoice, Pipeline, make_backend
from torch_abi_harness.run.prepare import Observer
from torch_abi_harness.static.op_calls import OpCall


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatrixRequest:
    """The matrix file (or an author's project: --project, --wheel) and what the command line adds to it
    (--add-runtime, --extra-index-url, --find-links, --use-env), with the backend the cells will run on (--use-env
    is for venv only). No path and no project: config.defaults decides."""

    path: Path | None = None
    project: Path | None = None  # an extension's source tree with a [tool.torch-abi-harness] table
    wheel: Path | None = None  # its built wheel (a path or glob), tested instead of a build from its sources
    add_runtimes: tuple[str, ...] = ()
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    environments: tuple[str, ...] = ()
    backend: Backend = Backend.VENV


def load_plain_matrix(request: MatrixRequest, cache_dir: Path) -> Matrix:
    """The matrix as a command runs it, before any candidate: overrides applied, published wheels resolved
    (downloaded once into the cache)."""
    if request.environments and request.backend is not Backend.VENV:
        raise BadInputError("--use-env is for the venv backend: the docker backend runs the envs it makes or images")
    source = default_matrix_source(Path.cwd(), request.path, request.project, request.wheel)
    if source.kind is ConfigKind.AUTHOR:
        plain = load_author_config(source.path, request.wheel).matrix
    else:
        plain = load_matrix(source.path)
    matrix = with_overrides(
        plain,
        request.add_runtimes,
        request.extra_index_urls,
        request.find_links,
        request.environments,
    )
    return with_published(matrix, cache_dir)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecuteOptions:
    """What running a plan's cells takes (the executing options of `run` and `gate`)."""

    reports_dir: Path = Path("reports")
    cache_dir: Path | None = None  # None: $HARNESS_CACHE_DIR or the user cache dir
    jobs: int = 1
    backend: Backend = Backend.VENV
    timeout: float | None = None
    rerun_broken: int = 0
    no_python_downloads: bool = False
    require_gpu: bool = False
    require_toolchain: bool = False
    executor: ExecutorKind | None = None  # venv backend: forkserver (default) or fresh
    docker_route: str | None = None
    keep_containers: bool = False
    prebuilt: Path | None = None  # `run --prebuilt`: the builds as a CI graph's build jobs handed them on


class Executed(NamedTuple):
    """A run as `run` and `gate` read it: its results, its report directory, and what its builds showed."""

    run: RunResult
    run_dir: Path
    op_calls: dict[str, frozenset[OpCall]]  # per extension: the ops its builds call by name
    build_seconds: dict[str, float]  # per extension: the time its builds took (0 when cached)
    imports: dict[str, float]  # per runtime id: one `import torch` as the run measured it (the floor's part)


class RunHooks(Protocol):
    """What a run shows while it goes: the CLI prints; the run's own code only logs."""

    def starting(self, plan: Plan, how: str) -> None: ...  # before any work: the plan and how it runs
    def observer(self) -> Observer: ...  # the run's progress
    def ended(self, run: RunResult, *, written: bool) -> None: ...  # its results (written: the report is whole)


def execute_plan(plan: Plan, options: ExecuteOptions, hooks: RunHooks, *, html: bool = True) -> Executed:
    """Build, run and report the plan's cells; html=False leaves report.html to the caller (the gate writes it
    once, with its decision)."""
    if options.no_python_downloads:
        os.environ["UV_PYTHON_DOWNLOADS"] = "never"  # uv's own switch: the interpreter lookup and uv itself read it
    cache_dir = cache_dir_of(options.cache_dir)
    writable_dir(options.reports_dir, "--reports-dir")
    writable_dir(cache_dir, "--cache-dir" if options.cache_dir else "the cache directory ($HARNESS_CACHE_DIR)")
    run_options = RunOptions(
        reports_dir=options.reports_dir,
        cache_dir=cache_dir,
        jobs=options.jobs,
        cell_timeout=options.timeout,
        require_gpu=options.require_gpu,
        rerun_broken=options.rerun_broken,
        require_toolchain=options.require_toolchain or options.require_gpu,
        prebuilt=options.prebuilt,
    )
    if options.executor and options.backend is not Backend.VENV:
        raise BadInputError(
            f"--executor {options.executor} is for the venv backend; --backend docker runs a container per cell"
        )
    executor = options.executor or ExecutorKind.FORKSERVER
    choice = BackendChoice(options.docker_route, options.keep_containers, executor)
    backend = make_backend(options.backend, plan.matrix, cache_dir, choice)
    how = f"{executor} processes" if options.backend is Backend.VENV else "one container per cell"
    off = backend.guarantees_off()
    how += f"; cells without {'; '.join(off)}" if off else ""
    shard = f", shard {plan.shard} of {len(plan.unsharded or ())}" if plan.shard else ""
    hooks.starting(plan, f"(backend {options.backend}, {how}, {options.jobs} at a time{shard})")
    pipeline = Pipeline(plan, run_options, hooks.observer(), backend, html=html)
    try:
        run, run_dir = pipeline.execute()
    except ReportError as exc:  # the results are in hand: show them, then say what could not be written
        hooks.ended(exc.run, written=False)
        raise
    hooks.ended(run, written=True)
    imports = {**imports_measured(run.cells), **backend.warmups()}
    return Executed(run, run_dir, pipeline.op_calls, pipeline.build_seconds, imports)
