"""Chain the stages for one matrix run: envs -> builds -> cells -> verdicts -> report."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from elftools.common.exceptions import ELFError

from harness import __version__
from harness.build import Builder, BuildResult
from harness.collect import classify
from harness.config import Matrix
from harness.core import commands, processes
from harness.core.errors import BadInputError, HarnessError
from harness.core.files import write_json
from harness.core.status import Status
from harness.execute.api import CellRequest, Executor, RuntimeHandle
from harness.execute.forkserver import ForkserverBackend
from harness.execute.venv import VenvBackend
from harness.plan import Build, Cell, Plan, Runtime
from harness.provision import interpreters
from harness.provision.envs import Env, EnvManager, EnvSpec
from harness.provision.host import HostFacts
from harness.provision.sources import resolve_sources, uv_binary
from harness.provision.testdeps import Conflict, Overlay, OverlayManager
from harness.render.report import write_report
from harness.results.known_breaks import acknowledge
from harness.results.model import CellResult, RunResult, relative_logs
from harness.results.rundir import new_run_dir, point_latest
from harness.static.artifact import ArtifactFacts, RuntimeFacts, python_problem, unmet, wheel_tags
from harness.static.manifest import packaged_manifest
from harness.static.op_calls import fits
from harness.static.op_registry import packaged_op_schemas, release_of
from harness.static.predict import ArtifactImports, Predicted, Prediction, findings, predict
from harness.static.symbols import read_artifact
from harness.verdict import Promise, Verdict, judge, promise

log = logging.getLogger(__name__)
# Outcomes that would count against the extension: before one stands, what the cell ran on is checked again.
SUSPECT = {Status.TEST_FAILED, Status.LOAD_FAILED, Status.CRASHED, Status.TIMEOUT, Status.ERROR}
LOW_DISK_BYTES = 16 * 2**20  # less free space than this where a cell writes: its failure proves nothing
T = TypeVar("T")
R = TypeVar("R")


class Observer(Protocol):
    """How the pipeline reports progress; the CLI prints, tests record."""

    def stage(self, name: str, detail: str) -> None: ...
    def env_ready(self, env: Env) -> None: ...
    def build_done(self, result: BuildResult) -> None: ...
    def cell_done(self, result: CellResult, done: int, total: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class RunOptions:
    reports_dir: Path
    cache_dir: Path
    jobs: int
    cell_timeout: float | None = None  # overrides the matrix's settings.cell_timeout
    require_gpu: bool = False  # a cuda cell with no GPU is an ERROR, not SKIPPED (GPU runners)
    rerun_broken: int = 0  # run a broken cell again up to this many times; one that then keeps its promise is flaky
    require_toolchain: bool = False  # a build the machine lacks compiler/nvcc/CUDA headers for: ERROR, not SKIPPED


def make_backend(
    name: str,
    matrix: Matrix,
    cache_dir: Path,
    route: str | None = None,
    keep_containers: bool = False,
    executor: str = "forkserver",
) -> Executor:
    """The backend cells run in; for docker, the engine is checked here, before any work."""
    if name == "venv":
        return ForkserverBackend(matrix.settings.preload) if executor == "forkserver" else VenvBackend()
    from harness.execute.container.backend import DockerBackend  # the docker SDK only when asked for
    from harness.execute.container.engine import connect

    settings = matrix.docker if route is None else dataclasses.replace(matrix.docker, route=route)  # type: ignore[arg-type]
    return DockerBackend(connect(), settings, cache_dir, resolve_sources(matrix.sources), keep_containers)


def env_spec(item: Build | Runtime) -> EnvSpec:
    return EnvSpec(item.torch, item.variant, item.python, item.interpreter)


def _parallel(
    jobs: int,
    fn: Callable[[T], R],
    items: Iterable[T],
    done: Callable[[R], None],
    on_interrupt: Callable[[], None] | None = None,
) -> list[R]:
    """Run fn over items in threads.

    On an interrupt (or any error) every command the run started is stopped and on_interrupt
    runs, both *before* waiting for the workers; then the results of items that finished
    meanwhile still reach done(), so nothing finished is lost, and the exception goes on.
    """
    results: list[R] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(fn, item) for item in items]
    reported: set[concurrent.futures.Future[R]] = set()
    try:
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            reported.add(future)
            results.append(result)
            done(result)
    except BaseException:
        for future in futures:
            future.cancel()
        processes.REGISTRY.stop_all()
        if on_interrupt is not None:
            on_interrupt()
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future not in reported and future.done() and not future.cancelled() and future.exception() is None:
                results.append(future.result())
                done(future.result())
        raise
    pool.shutdown(wait=True)
    return results


class Pipeline:
    def __init__(self, plan: Plan, options: RunOptions, observer: Observer, backend: Executor | None = None) -> None:
        self.plan = plan
        self.options = options
        self.observer = observer
        self.backend = backend or VenvBackend()
        self.envs = EnvManager(options.cache_dir, resolve_sources(plan.matrix.sources))
        self.builder = Builder(options.cache_dir, plan.matrix.settings.build_timeout, verify_env=self.envs.verify)
        self.overlays = OverlayManager(options.cache_dir, self.envs.sources)
        self.timeout = options.cell_timeout if options.cell_timeout is not None else plan.matrix.settings.cell_timeout

    def provision(self) -> dict[EnvSpec, Env]:
        runtimes = [r for r in self.plan.needed_runtimes if self.backend.needs_env(r)]
        needed: list[Build | Runtime] = [*self.plan.needed_builds, *runtimes]
        specs = list(dict.fromkeys(env_spec(x) for x in needed))
        todo = [s for s in specs if self.envs.cached(s) is None]
        if todo:  # every interpreter a new env needs, before any work: a missing one is bad input (exit 2)
            found = interpreters.find_all(s.interpreter or s.python for s in todo)
            self.observer.stage("python", ", ".join(i.describe() for i in found.values()))
        self.observer.stage("resolve", f"{len(specs)} torch environment(s)")
        self.envs.resolve(specs)
        self.observer.stage("envs", f"{len(specs)} torch environment(s) in {self.envs.root}")
        envs = _parallel(min(2, self.options.jobs), self.envs.ensure, specs, self.observer.env_ready)
        return {env.spec: env for env in envs}

    def test_deps(self, envs: dict[EnvSpec, Env]) -> dict[tuple[str, Runtime], Overlay]:
        """The overlay of every extension that declares test_requires, on each runtime its cells run on.

        Made before any build: requirements that cannot be met beside a runtime's env (they would
        replace its torch, numpy...) are bad input, every conflict named at once (exit 2)."""
        wanted = {(c.build.extension, c.runtime) for c in self.plan.cells if c.build.extension.test_requires}
        if not wanted:
            return {}
        problems = [
            f"  - {ext.name} on {runtime.id}: the runtime is the image {runtime.image}, which holds its own packages: "
            "install the test dependencies in the image (test_requires needs a runtime the harness makes)"
            for ext, runtime in sorted(wanted, key=lambda pair: (pair[0].name, pair[1].id))
            if not self.backend.needs_env(runtime)
        ]
        jobs = {(ext.test_requires, env_spec(runtime)) for ext, runtime in wanted if self.backend.needs_env(runtime)}
        self.observer.stage("test deps", f"test_requires resolved against {len(jobs)} runtime env(s)")

        def one(job: tuple[tuple[str, ...], EnvSpec]) -> tuple[tuple[tuple[str, ...], EnvSpec], Overlay | str]:
            requirements, spec = job
            try:
                return job, self.overlays.ensure(requirements, envs[spec])
            except Conflict as exc:
                return job, str(exc)

        made = dict(_parallel(min(2, self.options.jobs), one, sorted(jobs, key=str), lambda _: None))
        for (requirements, spec), outcome in sorted(made.items(), key=str):
            if isinstance(outcome, str):
                users = sorted({e.name for e, r in wanted if e.test_requires == requirements and env_spec(r) == spec})
                problems.append(
                    f"  - test_requires of {', '.join(users)} ({', '.join(requirements)}) cannot be installed beside "
                    f"torch {envs[spec].torch_version} (python {spec.python}) without replacing what its env holds: "
                    f"{outcome}"
                )
            else:
                how = "reused" if outcome.reused else f"made in {outcome.seconds:.1f} s"
                log.info("test deps on torch %s: %s (%s)", envs[spec].torch_version, outcome.describe(), how)
                self.observer.stage("test deps", f"torch {envs[spec].torch_version}: {outcome.describe()} ({how})")
        if problems:
            raise BadInputError(
                "test dependencies that cannot run on every runtime:\n"
                + "\n".join(problems)
                + "\n  what a runtime's env holds (torch, numpy, pytest and their dependencies) is never replaced: "
                "relax the requirement, or limit the extension's builds to the runtimes it fits (a build's `runtimes:`)"
            )
        return {
            (ext.name, runtime): overlay
            for ext, runtime in wanted
            if isinstance(overlay := made[(ext.test_requires, env_spec(runtime))], Overlay)
        }

    def build_all(self, envs: dict[EnvSpec, Env]) -> dict[Build, BuildResult]:
        builds = self.plan.needed_builds
        self.observer.stage("build", f"{len(builds)} build(s)")
        results = _parallel(
            self.options.jobs, lambda b: self.builder.build(b, envs[env_spec(b)]), builds, self.observer.build_done
        )
        return {r.build: r for r in results}

    def execute(self) -> tuple[RunResult, Path]:
        """The whole run; the report is written even when it is interrupted (ReportError if it cannot be)."""
        started = datetime.datetime.now(datetime.UTC)
        if not self.plan.cells:  # a shard of a plan with fewer cells than shards: nothing to prepare or run
            run_id, run_dir = new_run_dir(self.options.reports_dir)
            return self._report(run_id, run_dir, started, (), interrupted=False), run_dir
        processes.REGISTRY.reset()
        cells = self.execution_order()
        self.backend.begin_run(cells)
        envs = self.provision()
        overlays = self.test_deps(envs)
        runtimes = self.plan.needed_runtimes
        self.observer.stage("backend", f"{self.backend.name}: preparing {len(runtimes)} runtime(s)")
        handles = self.backend.prepare({runtime: envs.get(env_spec(runtime)) for runtime in runtimes})
        builds = self.build_all(envs)
        run_id, run_dir = new_run_dir(self.options.reports_dir)
        builds = {build: _with_log_in(run_dir, result) for build, result in builds.items()}
        artifacts = self.read_artifacts(builds)
        predictions = self.predict_cells(handles, artifacts)
        promises = self.promises(handles, artifacts)
        self.observer.stage("run", f"{len(cells)} cell(s), {self.options.jobs} at a time, timeout {self.timeout:.0f} s")
        threads = max(1, (os.cpu_count() or 1) // self.options.jobs)
        results: dict[str, CellResult] = {}
        interrupted = False

        def one(cell: Cell, attempt: int = 1) -> CellResult:
            return self.run_cell(
                cell,
                handles[cell.runtime],
                builds[cell.build],
                run_dir,
                threads,
                predictions.get(cell.id),
                attempt,
                promises[cell.id],
                overlays.get((cell.build.extension.name, cell.runtime)),
            )

        def done(result: CellResult) -> None:
            results[result.id] = result
            self.observer.cell_done(result, len(results), len(cells))

        def redone(retry: CellResult) -> None:  # a broken cell's next attempt: flaky if it kept the promise
            results[retry.id] = self._record(results[retry.id].retried(retry), run_dir / "cells" / retry.id)
            self.observer.cell_done(results[retry.id], len(results), len(cells))

        try:
            _parallel(self.options.jobs, one, cells, done, on_interrupt=self.backend.stop_all)
            for attempt in range(2, 2 + self.options.rerun_broken):  # --rerun-broken: the broken cells again
                again = [c for c in cells if results[c.id].verdict is Verdict.BROKEN]
                if not again:
                    break
                self.observer.stage("rerun", f"{len(again)} broken cell(s), attempt {attempt}")
                _parallel(
                    self.options.jobs, functools.partial(one, attempt=attempt), again, redone, self.backend.stop_all
                )
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: %d of %d cells finished; writing the report", len(results), len(cells))
        finally:
            self.backend.end_run()
        for cell in cells:
            if cell.id not in results:
                handle = handles[cell.runtime]
                result = self.unrun(
                    cell, builds[cell.build], "not run: the run was interrupted", handle, run_dir, promises[cell.id]
                )
                results[cell.id] = self._record(result, run_dir / "cells" / cell.id)
        in_plan_order = tuple(results[c.id] for c in self.plan.cells)
        return self._report(run_id, run_dir, started, in_plan_order, interrupted), run_dir

    def _report(
        self,
        run_id: str,
        run_dir: Path,
        started: datetime.datetime,
        cells: tuple[CellResult, ...],
        interrupted: bool,
    ) -> RunResult:
        known = self.plan.matrix.known_breaks
        acknowledged = acknowledge(cells, known, started.date())
        cells = tuple(  # a cell an entry names says so in its own result.json too
            self._record(after, run_dir / "cells" / after.id) if after != before else before
            for before, after in zip(cells, acknowledged, strict=True)
        )
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
            plan=self.plan.identity,
            hosts=(HostFacts.probe(),),
            known_breaks=known,
            candidate=self.plan.matrix.candidate,
        )
        write_report(run, run_dir)
        point_latest(self.options.reports_dir, run_dir)
        return run

    def execution_order(self) -> tuple[Cell, ...]:
        """The plan's cells one runtime after another (the report keeps the plan's order): a runtime's
        cells run together, so what a backend holds per runtime (a forkserver) is held briefly."""
        position = {runtime: index for index, runtime in enumerate(self.plan.runtimes)}
        return tuple(sorted(self.plan.cells, key=lambda cell: position[cell.runtime]))

    def read_artifacts(self, builds: dict[Build, BuildResult]) -> dict[Build, tuple[ArtifactImports, ArtifactFacts]]:
        """Each built wheel's ELF, read once: the torch symbols it imports (for prediction) and its DT_NEEDED
        and tags (for the promise and prediction). A file that cannot be read as ELF (a damaged library) is
        left out, with a warning: its cells keep the plan's promise and go unpredicted, and still run."""
        artifacts: dict[Build, tuple[ArtifactImports, ArtifactFacts]] = {}
        for build, result in builds.items():
            if result.ok and result.wheel:
                try:
                    objects = read_artifact(result.wheel)
                    artifacts[build] = (ArtifactImports.of(objects), ArtifactFacts.of(result.wheel, objects))
                except (ELFError, OSError, HarnessError) as exc:
                    log.warning("%s: cannot read the built wheel's ELF symbols, no prediction: %s", build.id, exc)
        return artifacts

    def promises(
        self, handles: dict[Runtime, RuntimeHandle], artifacts: dict[Build, tuple[ArtifactImports, ArtifactFacts]]
    ) -> dict[str, Promise]:
        """Every cell's promise, now that its artifact and runtime are known: the plan's (torch ABI) after what
        the artifact needs of the runtime (Python ABI, CUDA major). A build that failed keeps the plan's."""
        return {
            cell.id: promise(
                cell,
                artifacts[cell.build][1] if cell.build in artifacts else None,
                runtime_facts(cell, handles[cell.runtime]),
            )
            for cell in self.plan.cells
        }

    def predict_cells(
        self,
        handles: dict[Runtime, RuntimeHandle],
        artifacts: dict[Build, tuple[ArtifactImports, ArtifactFacts]],
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
                predictions[cell.id] = predict(imports, handle.torch_version, found, manifest, True, lacks, calls)
        failing = sum(p.outcome is Predicted.LOAD_FAILED for p in predictions.values())
        self.observer.stage(
            "predict",
            f"{len(predictions)} cell(s) from ELF symbols in {time.monotonic() - started:.1f} s: "
            f"{len(predictions) - failing} predicted to load, {failing} not",
        )
        return predictions

    def run_cell(
        self,
        cell: Cell,
        runtime: RuntimeHandle,
        build: BuildResult,
        run_dir: Path,
        threads: int,
        prediction: Prediction | None = None,
        attempt: int = 1,
        expectation: Promise | None = None,
        overlay: Overlay | None = None,
    ) -> CellResult:
        """One cell, whatever happens: a fault of the harness on this cell makes it ERROR, and the run goes on.
        A cell run again (--rerun-broken) writes attempt K into attempt-K/<id>/: as deep as cells/<id>/, so
        what a backend derives from a cell's directory (the run's directory, to protect) stays true."""
        out = run_dir / ("cells" if attempt == 1 else f"attempt-{attempt}") / cell.id
        try:
            out.mkdir(parents=True, exist_ok=True)
            result = self._run_cell(cell, runtime, build, out, run_dir, threads, prediction, expectation, overlay)
        except processes.Interrupted:
            result = self.unrun(cell, build, "not run: the run was interrupted", runtime, run_dir, expectation)
        except Exception as exc:  # never let one cell's fault of the harness lose the run
            log.warning("%s: the harness failed on this cell", cell.id, exc_info=True)
            result = self.unrun(
                cell,
                build,
                f"the harness failed on this cell: {type(exc).__name__}: {exc}",
                runtime,
                run_dir,
                expectation,
            )
        return self._record(result, out)

    def _record(self, result: CellResult, out: Path) -> CellResult:
        """Write the cell's result.json (atomically, replacing whatever a cell planted there); a cell
        whose result cannot be written is ERROR, naming the path, and the run goes on."""
        target = out / "result.json"
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_json(target, result.to_json())
        except OSError as exc:
            log.warning("%s: cannot write %s: %s", result.id, target, exc)
            if result.status is not Status.ERROR:
                result = dataclasses.replace(
                    result,
                    status=Status.ERROR,
                    verdict=judge(result.expected, Status.ERROR),
                    reason=f"could not write {target}: {exc.strerror or exc} (the cell ended {result.status.value}: "
                    f"{result.reason})",
                )
        return result

    def _run_cell(
        self,
        cell: Cell,
        runtime: RuntimeHandle,
        build: BuildResult,
        out: Path,
        run_dir: Path,
        threads: int,
        prediction: Prediction | None,
        expectation: Promise | None,
        overlay: Overlay | None = None,
    ) -> CellResult:
        if build.toolchain is not None:  # the machine's trouble, never the extension's
            if self.options.require_toolchain:
                return self.unrun(cell, build, f"--require-toolchain: {build.reason}", runtime, run_dir, expectation)
            return self.unrun(cell, build, build.reason, runtime, run_dir, expectation, status=Status.SKIPPED)
        if not build.ok:
            status = Status.ERROR if build.infrastructure else Status.BUILD_FAILED
            return self.unrun(cell, build, build.reason, runtime, run_dir, expectation, status=status)
        refused = installer_refusal(build.wheel, cell.runtime.python) if build.wheel else None
        if refused:  # as a user's pip would: the wheel never reaches this CPython, so no cell runs
            result = self.unrun(cell, build, refused, runtime, run_dir, expectation, status=Status.LOAD_FAILED)
            return dataclasses.replace(result, prediction=prediction.to_json() if prediction else None)
        timeout = self.cell_timeout(cell)
        designed = cell.build.extension.expect
        site_dirs = (overlay.site,) if overlay is not None and overlay.site is not None else ()
        execution = self.backend.execute(CellRequest(cell, runtime, build, out, timeout, threads, site_dirs))
        outcome = classify(execution, timeout)
        if cell.runtime.device == "cuda" and outcome.status is Status.SKIPPED and self.options.require_gpu:
            outcome = dataclasses.replace(outcome, status=Status.ERROR, reason=f"--require-gpu: {outcome.reason}")
        stopped = processes.REGISTRY.stopping.is_set() or self.backend.stopping
        if stopped and outcome.status not in {Status.PASS, Status.SKIPPED}:
            outcome = dataclasses.replace(
                outcome,
                status=Status.ERROR,
                reason=f"interrupted after {execution.seconds:.0f} s: the run was stopped while this cell ran",
            )
        elif outcome.status in SUSPECT:
            damage = self._damage(runtime, build, out, overlay)
            if damage:
                outcome = dataclasses.replace(
                    outcome,
                    status=Status.ERROR,
                    reason=f"{damage} (the cell ended {outcome.status.value}: {outcome.reason})",
                )
        probe = outcome.probe
        startup = probe.plugin_started
        return self._result(
            cell,
            outcome.status,
            outcome.reason,
            runtime_torch=probe.torch_version or runtime.torch_version,
            runtime_variant=runtime.variant,
            expectation=expectation,
            tests=outcome.tests,
            failing_tests=outcome.failing,
            missing_symbol=outcome.missing_symbol,
            durations={
                "total": execution.seconds,
                "build": build.seconds,
                "startup": (startup - execution.launched_at) if startup else None,
                "import_torch": probe.import_torch_s,
                "load": probe.load_s,
                "tests": outcome.tests_seconds,
            },
            prediction=prediction.to_json() if prediction else None,
            doc_differences=probe.doc_differences,
            executor=execution.executor,
            findings=(
                *build.findings,
                *findings(prediction, outcome.status.value, outcome.reason, outcome.missing_symbol, designed),
            ),
            logs=relative_logs(
                [
                    ("stdout", execution.stdout),
                    ("stderr", execution.stderr),
                    ("junit", execution.junit),
                    ("probe", execution.probe),
                    ("build", build.log),
                ],
                run_dir,
            ),
        )

    def cell_timeout(self, cell: Cell) -> float:
        """--timeout if given (the person running it decides), else the extension's own, else the matrix's."""
        if self.options.cell_timeout is not None:
            return self.options.cell_timeout
        return cell.build.extension.timeout or self.timeout

    def _damage(self, runtime: RuntimeHandle, build: BuildResult, out: Path, overlay: Overlay | None) -> str | None:
        """After a cell failed: is what it ran on still as verified at the start, and did it have room
        to write? If not, the failure is no evidence about the extension. (An image is the engine's to keep.)"""
        damage = self.envs.verify(runtime.env) if runtime.env is not None else None
        if damage:
            return f"the torch {runtime.torch_version} env was damaged during the run: {damage}"
        damage = self.builder.verify(build)
        if damage:
            return f"the build {build.build.id} was damaged during the run: {damage}"
        damage = self.overlays.verify(overlay) if overlay is not None else None
        if damage:
            return f"the test dependencies ({overlay and overlay.describe()}) were damaged during the run: {damage}"
        try:
            free = shutil.disk_usage(out).free
        except OSError:
            free = None
        if free is not None and free < LOW_DISK_BYTES:
            return f"the disk holding {out} is full ({free} bytes free)"
        return None

    def unrun(
        self,
        cell: Cell,
        build: BuildResult,
        reason: str,
        runtime: RuntimeHandle,
        run_dir: Path,
        expectation: Promise | None = None,
        status: Status = Status.ERROR,
    ) -> CellResult:
        """A cell that did not run: its build failed, or the run was interrupted first."""
        return self._result(
            cell,
            status,
            reason,
            runtime_torch=runtime.torch_version,
            runtime_variant=runtime.variant,
            expectation=expectation,
            durations={"build": build.seconds},
            logs=relative_logs([("build", build.log)], run_dir),
        )

    def _result(
        self, cell: Cell, status: Status, reason: str, runtime_torch: str, runtime_variant: str, **details: Any
    ) -> CellResult:
        """A cell's result: its identity, what happened, and the promise it is judged against."""
        return CellResult.judged(cell, status, reason, self.backend.name, runtime_torch, runtime_variant, **details)


@functools.lru_cache(maxsize=256)
def installer_refusal(wheel: Path, python: str) -> str | None:
    """Why the installer will not put this wheel on CPython `python`, in its words; None when it would.

    The wheel's tags decide first (packaging's rules, pip's); only a wheel they refuse is put to uv
    (`uv pip install --dry-run --python-version`), whose refusal is the evidence the cell reports. A
    cp311-cp311 wheel whose library torch loads by path would otherwise load on 3.10, where no user
    can install it."""
    why = python_problem(wheel_tags(wheel), python)
    if why is None:
        return None
    with tempfile.TemporaryDirectory(prefix="harness-install-check-") as target:
        argv = [uv_binary(), "pip", "install", "--dry-run", "--no-deps", "--offline", "--python-version", python]
        proc = commands.run([*argv, "--target", target, wheel], check=False, timeout=120)
    if proc.returncode == 0:
        log.warning("%s: its tags do not fit CPython %s (%s), yet uv would install it", wheel.name, python, why)
        return None
    evidence = commands.uv_explanation(proc.stdout, prefer=("hint", "cause")) or f"exit {proc.returncode}"
    return f"not installable on CPython {python}: {why}; uv refuses it ({evidence})"


def runtime_facts(cell: Cell, handle: RuntimeHandle) -> RuntimeFacts:
    """What the cell's runtime provides an artifact: its torch and CUDA as prepared, and its Python."""
    return RuntimeFacts.of(handle.torch_version, handle.variant, cell.runtime.python)


def _with_log_in(run_dir: Path, result: BuildResult) -> BuildResult:
    """A copy of the build log in the run's report, so the report stands on its own (if it can be copied)."""
    log_copy = run_dir / "builds" / f"{result.build.id}.log"
    try:
        log_copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(result.log, log_copy)
    except OSError as exc:
        log.warning("%s: build log not copied into the report: %s", result.build.id, exc)
        return result
    return dataclasses.replace(result, log=log_copy)
