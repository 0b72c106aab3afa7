"""Chain the stages for one matrix run: envs -> builds -> predictions -> cells -> verdicts -> report.

The stages live elsewhere: what the cells need is made in torch_abi_harness/run/prepare.py, each cell is run
in torch_abi_harness/run/cells.py, each cell and build is judged in torch_abi_harness/run/judge.py (which writes a
cell's result.json, once, when its verdict is final), the report directory is torch_abi_harness/results/rundir.py;
this is their order.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from elftools.common.exceptions import ELFError

from torch_abi_harness import __version__
from torch_abi_harness.builds import BuildResult
from torch_abi_harness.config import Matrix
from torch_abi_harness.core import processes
from torch_abi_harness.core.errors import HarnessError
from torch_abi_harness.core.kinds import Backend, ExecutorKind
from torch_abi_harness.core.parallel import parallel
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.execute.api import Executor, RuntimeHandle
from torch_abi_harness.execute.forkserver import ForkserverBackend
from torch_abi_harness.execute.venv import VenvBackend
from torch_abi_harness.plan import Build, Cell, Plan, Runtime
from torch_abi_harness.provision.host import HostFacts, missing_here
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.cases import PublishedBuild
from torch_abi_harness.results.model import BuildRow, CellResult, RunResult
from torch_abi_harness.results.rundir import new_run_dir, point_latest, with_build_log
from torch_abi_harness.run.cells import CellRunner, RunOptions, runtime_facts, timeouts_text
from torch_abi_harness.run.judge import Judge, judge_build, recorded, retried
from torch_abi_harness.run.prepare import Observer, Preparer
from torch_abi_harness.static.artifact import ArtifactFacts, unmet
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.op_calls import OpCall, fits
from torch_abi_harness.static.op_registry import packaged_op_schemas
from torch_abi_harness.static.predict import ArtifactImports, Predicted, Prediction, predict
from torch_abi_harness.static.symbols import read_artifact
from torch_abi_harness.verdict import Promise, Verdict, promise

log = logging.getLogger(__name__)
Artifacts = dict[Build, tuple[ArtifactImports, ArtifactFacts]]


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    """What `run` says of the backend beyond its name: the docker route, whether containers are kept, and how the
    venv backend starts a cell's process."""

    route: str | None = None  # docker: the matrix's route when None
    keep_containers: bool = False
    executor: ExecutorKind = ExecutorKind.FORKSERVER  # venv: forked from a server per runtime, or fresh


def _venv_backend(matrix: Matrix, cache_dir: Path, choice: BackendChoice) -> Executor:
    return VENV_EXECUTORS[choice.executor](matrix, cache_dir)


def _docker_backend(matrix: Matrix, cache_dir: Path, choice: BackendChoice) -> Executor:
    from torch_abi_harness.execute.container import require_sdk  # the docker SDK only when asked for

    require_sdk()
    from torch_abi_harness.execute.container.backend import DockerBackend
    from torch_abi_harness.execute.container.engine import connect

    route = choice.route
    settings = matrix.docker if route is None else dataclasses.replace(matrix.docker, route=route)  # type: ignore[arg-type]
    return DockerBackend(
        connect(), settings, cache_dir, resolve_sources(matrix.sources), keep_containers=choice.keep_containers
    )


# How the venv backend starts each cell's process (`run --executor`).
VENV_EXECUTORS: dict[ExecutorKind, Callable[[Matrix, Path], Executor]] = {
    ExecutorKind.FORKSERVER: lambda matrix, cache_dir: ForkserverBackend(matrix.settings.preload, cache_dir),
    ExecutorKind.FRESH: lambda matrix, cache_dir: VenvBackend(cache_dir),
}
# Where cells run (`run --backend`): each backend's factory.
BACKENDS: dict[Backend, Callable[[Matrix, Path, BackendChoice], Executor]] = {
    Backend.VENV: _venv_backend,
    Backend.DOCKER: _docker_backend,
}


def make_backend(name: Backend, matrix: Matrix, cache_dir: Path, choice: BackendChoice = BackendChoice()) -> Executor:
    """The backend cells run in; for docker, the engine is checked here, before any work."""
    return BACKENDS[name](matrix, cache_dir, choice)


class Pipeline:
    def __init__(
        self, plan: Plan, options: RunOptions, observer: Observer, backend: Executor | None = None, *, html: bool = True
    ) -> None:
        self.plan = plan
        self.html = html  # False: report.html is the caller's (the gate renders it once, with its decision)
        self.options = options
        self.observer = observer
        self.backend = backend or VenvBackend()
        self.preparer = Preparer(plan, options.cache_dir, options.jobs, observer, self.backend, options.prebuilt)
        self.identity = plan.identity  # what the cells run from, read before any of them runs
        self.op_calls: dict[str, frozenset[OpCall]] = {}  # per extension: the ops its builds call by name (the gate)
        self.build_seconds: dict[str, float] = {}  # per extension: the time its builds took in this run (0: cached)
        self.build_rows: tuple[BuildRow, ...] = ()  # the builds' rows of the report, once they are made

    def execute(self) -> tuple[RunResult, Path]:
        """The whole run; the report is written even when it is interrupted (ReportError if it cannot be)."""
        started = datetime.datetime.now(datetime.UTC)
        if not self.plan.cells:  # a shard of a plan with fewer cells than shards: nothing to prepare or run
            run_id, run_dir = new_run_dir(self.options.reports_dir)
            return self._report(run_id, run_dir, started, (), interrupted=False), run_dir
        processes.REGISTRY.reset()
        cells = self.execution_order()
        self.backend.begin_run(cells)
        try:  # the envs are held from the moment they are ensured until the last cell has ended
            prepared = self.preparer.prepare()
            run_id, run_dir = new_run_dir(self.options.reports_dir)
            builds = {build: with_build_log(run_dir, result) for build, result in prepared.builds.items()}
            prepared = dataclasses.replace(prepared, builds=builds)
            artifacts = read_artifacts(builds)
            self.record_builds(builds, artifacts)
            predictions = self.predict_cells(prepared.handles, artifacts)
            promises = self.promises(prepared.handles, artifacts, builds)
            self.build_rows = tuple(judge_build(builds[b]) for b in self.plan.builds if b in builds)
            runner = CellRunner(self.plan, self.options, self.backend, self.preparer, prepared, run_dir)
            timeouts = timeouts_text(cells, self.options, self.plan.matrix)
            self.observer.stage("run", f"{len(cells)} cell(s), {self.options.jobs} at a time, {timeouts}")
            judge = Judge(self.plan.matrix.known_breaks, started.date())  # the run's start decides what expired
            results, interrupted = self.run_cells(runner, cells, predictions, promises, judge)
        finally:
            self.preparer.release()
        in_plan_order = tuple(results[c.id] for c in self.plan.cells)
        return self._report(run_id, run_dir, started, in_plan_order, interrupted=interrupted), run_dir

    def record_builds(self, builds: dict[Build, BuildResult], artifacts: Artifacts) -> None:
        """What the gate reads of the builds: per extension, the time they took and the ops they call."""
        for build, result in builds.items():
            seconds = 0.0 if result.cached else result.seconds
            self.build_seconds[build.extension.name] = self.build_seconds.get(build.extension.name, 0.0) + seconds
        for build, (imports, _facts) in artifacts.items():
            name = build.extension.name
            self.op_calls[name] = self.op_calls.get(name, frozenset()) | frozenset(imports.calls)

    def run_cells(
        self,
        runner: CellRunner,
        cells: tuple[Cell, ...],
        predictions: dict[str, Prediction],
        promises: dict[str, Promise],
        judge: Judge,
    ) -> tuple[dict[str, CellResult], bool]:
        """Every cell (and --rerun-broken's attempts), each judged to its final verdict and then recorded, once;
        the cells an interrupt left unrun say so. Also: interrupted?"""
        results: dict[str, CellResult] = {}
        pending: set[str] = set()  # broken cells --rerun-broken runs again: final once their attempts are in
        interrupted = False

        def held(result: CellResult) -> bool:
            return self.options.rerun_broken > 0 and result.verdict is Verdict.BROKEN

        def one(cell: Cell, attempt: int = 1) -> CellResult:  # in a worker: the cell, and its result.json written
            result = runner.run_cell(cell, predictions.get(cell.id), attempt, promises[cell.id])
            if attempt > 1:
                return recorded(result, runner.cell_dir(cell.id, attempt))  # the attempt's own result.json
            return result if held(result) else judge.final(result, runner.cell_dir(cell.id))

        def done(result: CellResult) -> None:
            if held(result):
                pending.add(result.id)
            results[result.id] = result
            self.observer.cell_done(result, len(results), len(cells))

        def redone(retry: CellResult) -> None:  # a broken cell's next attempt: flaky if it kept the promise
            results[retry.id] = retried(results[retry.id], retry)
            self.observer.cell_done(results[retry.id], len(results), len(cells))

        workers = 2 * self.options.jobs  # -j cells run at once (CellRunner.slots); as many more are being recorded
        try:
            parallel(workers, one, cells, done, on_interrupt=self.backend.stop_all)
            for attempt in range(2, 2 + self.options.rerun_broken):  # --rerun-broken: the broken cells again
                again = [c for c in cells if results[c.id].verdict is Verdict.BROKEN]
                if not again:
                    break
                self.observer.stage("rerun", f"{len(again)} broken cell(s), attempt {attempt}")
                parallel(workers, functools.partial(one, attempt=attempt), again, redone, self.backend.stop_all)
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: %d of %d cells finished; writing the report", len(results), len(cells))
        finally:
            self.backend.end_run()
        for cell in cells:
            if cell.id not in results:
                results[cell.id] = runner.unrun(cell, "not run: the run was interrupted", promises[cell.id])
            elif cell.id not in pending:
                continue
            results[cell.id] = judge.final(results[cell.id], runner.cell_dir(cell.id))
        return results, interrupted

    def _report(
        self,
        run_id: str,
        run_dir: Path,
        started: datetime.datetime,
        cells: tuple[CellResult, ...],
        *,
        interrupted: bool,
    ) -> RunResult:
        run = RunResult(
            run_id=run_id,
            started=started.isoformat(timespec="seconds"),
            finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            harness_version=__version__,
            matrix=str(self.plan.matrix.path),
            backend=self.backend.name,
            selectors=self.plan.selectors,
            cells=cells,
            build_order=tuple(b.id for b in self.plan.builds),
            runtime_order=tuple(r.id for r in self.plan.runtimes),
            interrupted=interrupted,
            plan=self.identity,
            hosts=(HostFacts.probe(),),
            known_breaks=self.plan.matrix.known_breaks,
            candidate=self.plan.matrix.candidate,
            published=published_builds(self.plan.builds),
            builds=self.build_rows,
        )
        write_report(run, run_dir, html=self.html)
        point_latest(self.options.reports_dir, run_dir)
        return run

    def execution_order(self) -> tuple[Cell, ...]:
        """The plan's cells one runtime after another (the report keeps the plan's order): a runtime's
        cells run together, so what a backend holds per runtime (a forkserver) is held briefly."""
        position = {runtime: index for index, runtime in enumerate(self.plan.runtimes)}
        return tuple(sorted(self.plan.cells, key=lambda cell: position[cell.runtime]))

    def promises(
        self, handles: dict[Runtime, RuntimeHandle], artifacts: Artifacts, builds: dict[Build, BuildResult]
    ) -> dict[str, Promise]:
        """Every cell's promise, now that its artifact and runtime are known: the plan's (torch ABI) after what
        the artifact needs of the runtime (Python ABI, CUDA major), at the level the build was really compiled
        for (which its recipe may have set itself). A build that failed keeps the plan's."""
        return {
            cell.id: promise(
                cell,
                artifacts[cell.build][1] if cell.build in artifacts else None,
                runtime_facts(cell, handles[cell.runtime]),
                builds[cell.build].built_for,
            )
            for cell in self.plan.cells
        }

    def predict_cells(
        self,
        handles: dict[Runtime, RuntimeHandle],
        artifacts: Artifacts,
    ) -> dict[str, Prediction]:
        """Every cell predicted from ELF (the build's imports and DT_NEEDED, the runtime's exports, its CUDA
        and Python) before any runs. A runtime whose libraries cannot be read leaves its cells unpredicted."""
        started = time.monotonic()
        manifest = packaged_manifest()
        op_schemas = packaged_op_schemas()
        exports: dict[Runtime, frozenset[str] | None] = {}
        predictions: dict[str, Prediction] = {}
        for cell in self.plan.cells:
            if cell.build not in artifacts:
                continue
            handle = handles[cell.runtime]
            if cell.runtime not in exports:
                try:
                    exports[cell.runtime] = handle.exports()
                except (ELFError, OSError, HarnessError) as exc:
                    log.warning(
                        "torch %s: cannot read its libraries' ELF symbols, no prediction: %s", handle.torch_version, exc
                    )
                    exports[cell.runtime] = None
            found = exports[cell.runtime]
            if found is not None:
                imports, facts = artifacts[cell.build]
                lacks = unmet(facts, runtime_facts(cell, handle))
                calls = fits(imports.calls, op_schemas, release_of(handle.torch_version), str(cell.build.torch))
                predictions[cell.id] = predict(
                    imports, handle.torch_version, found, manifest, lacks, calls, full_exports=True
                )
        failing = sum(p.outcome is Predicted.LOAD_FAILED for p in predictions.values())
        self.observer.stage(
            "predict",
            f"{len(predictions)} cell(s) from ELF symbols in {time.monotonic() - started:.1f} s: "
            f"{len(predictions) - failing} predicted to load, {failing} not",
        )
        return predictions


def read_artifacts(builds: dict[Build, BuildResult]) -> Artifacts:
    """Each built wheel's ELF, read once: the torch symbols it imports (for prediction) and its DT_NEEDED
    and tags (for the promise and prediction), and which host libraries it needs that this machine's loader
    lacks (a condition of every runtime alike, decided here, before any cell runs). A file that cannot be read
    as ELF (a damaged library) is left out, with a warning: its cells keep the plan's promise and go unpredicted,
    and still run."""
    artifacts: Artifacts = {}
    for build, result in builds.items():
        if result.ok and result.wheel:
            try:
                objects = read_artifact(result.wheel)
                facts = ArtifactFacts.of(result.wheel, objects)
                facts = dataclasses.replace(facts, host_missing=missing_here(facts.host))  # before any cell: on all
                artifacts[build] = (ArtifactImports.of(objects), facts)
            except (ELFError, OSError, HarnessError) as exc:
                log.warning("%s: cannot read the built wheel's ELF symbols, no prediction: %s", build.id, exc)
    return artifacts


def published_builds(builds: Sequence[Build]) -> tuple[PublishedBuild, ...]:
    """What the plan's published-wheel builds are, as the report gives them."""
    found = []
    for build in builds:
        facts = build.extension.published
        if facts is not None:
            found.append(
                PublishedBuild(
                    build.id,
                    facts.requirement,
                    facts.filename,
                    facts.url,
                    facts.sha256,
                    facts.torch_pin,
                    facts.build_torch_from,
                    facts.target_from,
                    facts.unserved,
                    facts.build_torch,
                    facts.build_torch_how,
                    facts.declared_beyond,
                )
            )
    return tuple(found)
