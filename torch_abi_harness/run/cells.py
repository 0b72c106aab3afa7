"""One cell, from the request its backend runs to the CellResult it reports.

`run` and `mutate` build their requests here alike: the cell's timeout (`effective_timeout`), its
suite's test dependencies, the sandbox the backend gives every cell, and for a mutant the library its
process preloads (a request with a preload runs in a fresh interpreter, never a forked one).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.config import Matrix
from torch_abi_harness.core import commands, processes
from torch_abi_harness.core.kinds import Device
from torch_abi_harness.core.parallel import in_turn
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.execute.api import CellExecution, CellRequest, Executor, RuntimeHandle
from torch_abi_harness.plan import Cell, Plan
from torch_abi_harness.provision.host import nvidia_driver
from torch_abi_harness.provision.sources import uv_binary
from torch_abi_harness.results.model import CellResult, Durations, relative_logs
from torch_abi_harness.results.prediction import CellPrediction
from torch_abi_harness.run.collect import CellOutcome, classify
from torch_abi_harness.run.judge import Observed, judge_cell
from torch_abi_harness.run.kept import LEFT_OUT_FILE, keep_plain_files
from torch_abi_harness.run.prepare import Prepared, Preparer
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.artifact import RuntimeFacts, python_problem, wheel_tags
from torch_abi_harness.static.predict import Prediction, findings
from torch_abi_harness.verdict import Expected, Promise, promise

log = logging.getLogger(__name__)
NOT_RUN_REASON = "not run: the build failed (its build row says why)"
# Outcomes that would count against the extension: before one stands, what the cell ran on is checked again.
SUSPECT = {Status.TEST_FAILED, Status.LOAD_FAILED, Status.CRASHED, Status.TIMEOUT, Status.ERROR}


@dataclasses.dataclass(frozen=True)
class RunOptions:
    reports_dir: Path
    cache_dir: Path
    jobs: int
    cell_timeout: float | None = None  # overrides the matrix's settings.cell_timeout
    require_gpu: bool = False  # a cuda cell with no GPU is an ERROR, not SKIPPED (GPU runners)
    rerun_broken: int = 0  # run a broken cell again up to this many times; one that then keeps its promise is flaky
    require_toolchain: bool = False  # a build the machine lacks compiler/nvcc/CUDA headers for: ERROR, not SKIPPED
    prebuilt: Path | None = None  # the builds as a CI graph's build jobs handed them on, instead of building here


def effective_timeout(cell: Cell, options: RunOptions, matrix: Matrix) -> float:
    """A cell's timeout: --timeout if given (the person running it decides), else its extension's own
    `timeout:`, else the matrix's settings.cell_timeout."""
    if options.cell_timeout is not None:
        return options.cell_timeout
    return cell.build.extension.timeout or matrix.settings.cell_timeout


def timeouts_text(cells: Sequence[Cell], options: RunOptions, matrix: Matrix) -> str:
    """'timeout 300 s', or 'timeouts 120-600 s' where extensions set their own."""
    found = sorted({effective_timeout(c, options, matrix) for c in cells}) or [matrix.settings.cell_timeout]
    if len(found) == 1:
        return f"timeout {found[0]:.0f} s"
    return f"timeouts {found[0]:.0f}-{found[-1]:.0f} s"


def runtime_facts(cell: Cell, handle: RuntimeHandle) -> RuntimeFacts:
    """What the cell's runtime provides an artifact: its torch and CUDA as prepared, its Python, and whether this
    runner has the NVIDIA driver."""
    return RuntimeFacts.of(
        handle.torch_version, handle.variant, cell.runtime.python, driver=nvidia_driver() is not None
    )


class CellRunner:
    """Runs the cells of one run through its backend, each in a directory of its own under run_dir."""

    def __init__(
        self,
        plan: Plan,
        options: RunOptions,
        backend: Executor,
        preparer: Preparer,
        prepared: Prepared,
        run_dir: Path,
    ) -> None:
        self.plan = plan
        self.options = options
        self.backend = backend
        self.preparer = preparer
        self.prepared = prepared
        self.run_dir = run_dir
        self.threads = max(1, (os.cpu_count() or 1) // max(1, options.jobs))
        # The run's -j: a cell holds a slot only while its process runs, so what is read and judged of it after
        # (its junit and probe, the sweep, a damage check, its result.json) overlaps the next cell's run.
        self.slots = threading.BoundedSemaphore(max(1, options.jobs))

    def request(self, cell: Cell, out: Path, preload: tuple[Path, ...] = ()) -> CellRequest:
        """The cell as its backend runs it: its timeout, its suite's test dependencies, what it preloads."""
        overlay = self.prepared.overlay(cell)
        return CellRequest(
            cell,
            self.prepared.handles[cell.runtime],
            self.prepared.builds[cell.build],
            out,
            effective_timeout(cell, self.options, self.plan.matrix),
            self.threads,
            (overlay.site,) if overlay is not None and overlay.site is not None else (),
            preload,
            self.plan.matrix.limits,
        )

    def execute(self, request: CellRequest) -> tuple[CellExecution, CellOutcome]:
        """Run the request; what it left, and the outcome classified from it. Then its directory keeps only
        plain files within the caps (after classify: the disk rule measures free space before any is freed)."""
        with in_turn():  # the cells take their slots in the run's order (a runtime's cells together), not the threads'
            self.slots.acquire()
        try:
            execution = self.backend.execute(request)
        finally:
            self.slots.release()
        outcome = classify(execution, request.timeout)
        left_out = keep_plain_files(request.out_dir)
        if left_out:
            log.warning("%s: left out of the report: %s", request.cell.id, "; ".join(map(str, left_out)))
        return execution, outcome

    def cell_dir(self, cell_id: str, attempt: int = 1) -> Path:
        """Where a cell runs and its result.json goes. A cell run again (--rerun-broken) runs attempt K in
        attempt-K/<id>/: as deep as cells/<id>/, so what a backend derives from a cell's directory (the run's
        directory, to protect) stays true."""
        return self.run_dir / ("cells" if attempt == 1 else f"attempt-{attempt}") / cell_id

    def run_cell(
        self, cell: Cell, prediction: Prediction | None, attempt: int, expectation: Promise | None
    ) -> CellResult:
        """One cell, whatever happens, judged against its promise: a fault of the harness on this cell makes it
        ERROR, and the run goes on. Its result.json is the caller's to have written, once it is final."""
        out = self.cell_dir(cell.id, attempt)
        try:
            out.mkdir(parents=True, exist_ok=True)
            return self.not_runnable(cell, prediction, expectation) or self._run(
                self.request(cell, out), prediction, expectation
            )
        except processes.Interrupted:
            return self.unrun(cell, "not run: the run was interrupted", expectation)
        except Exception as exc:  # never let one cell's fault of the harness lose the run
            log.warning("%s: the harness failed on this cell", cell.id, exc_info=True)
            return self.unrun(cell, f"the harness failed on this cell: {type(exc).__name__}: {exc}", expectation)

    def not_runnable(self, cell: Cell, prediction: Prediction | None, expectation: Promise | None) -> CellResult | None:
        """The result of a cell that cannot run: no toolchain, a failed build, a wheel no installer puts there."""
        build = self.prepared.builds[cell.build]
        if build.toolchain is not None:  # the machine's trouble, never the extension's
            if self.options.require_toolchain:
                return self.unrun(cell, f"--require-toolchain: {build.reason}", expectation)
            return self.unrun(cell, build.reason, expectation, status=Status.SKIPPED)
        if not build.ok:
            if build.infrastructure:
                return self.unrun(cell, build.reason, expectation)
            if (
                expectation or promise(cell)
            ).expected is Expected.BUILD_FAILED:  # the promise said so: each cell shows it
                return self.unrun(cell, build.reason, expectation, status=Status.BUILD_FAILED)
            # A build that should have compiled broke one promise, the build's: its cells say only that they did not run
            return self.unrun(cell, NOT_RUN_REASON, expectation, status=Status.NOT_RUN)
        refused = installer_refusal(build.wheel, cell.runtime.python) if build.wheel else None
        if refused:  # as a user's pip would: the wheel never reaches this CPython, so no cell runs
            result = self.unrun(cell, refused, expectation, status=Status.LOAD_FAILED)
            return dataclasses.replace(result, prediction=CellPrediction.of(prediction) if prediction else None)
        return None

    def _run(self, request: CellRequest, prediction: Prediction | None, expectation: Promise | None) -> CellResult:
        cell, build = request.cell, request.build
        execution, outcome = self.execute(request)
        outcome = self.reconsider(request, execution, outcome)
        probe = outcome.probe
        expectation = host_library_promise(outcome, expectation) or expectation
        startup = probe.plugin_started
        observed = Observed(
            status=outcome.status,
            reason=outcome.reason,
            backend=self.backend.name,
            runtime_torch=probe.torch_version or request.runtime.torch_version,
            runtime_variant=request.runtime.variant,
            tests=outcome.tests,
            failing_tests=outcome.failing,
            missing_symbol=outcome.missing_symbol,
            durations=Durations.ran(
                total=execution.seconds,
                build=build.seconds,
                startup=(startup - execution.launched_at) if startup else None,
                import_torch=probe.import_torch_s,
                load=probe.load_s,
                tests=outcome.tests_seconds,
            ),
            prediction=CellPrediction.of(prediction) if prediction else None,
            doc_differences=probe.doc_differences,
            modules=probe.modules,
            executor=execution.executor,
            findings=(
                *build.findings,
                *(
                    ()  # the class says why it did not load: a library no torch provides, not a symbol
                    if expectation is not None and expectation.condition is Condition.HOST_LIBRARY
                    else findings(
                        prediction,
                        outcome.status.value,
                        outcome.reason,
                        outcome.missing_symbol,
                        cell.build.extension.expect,
                    )
                ),
            ),
            logs=relative_logs(
                [
                    ("stdout", execution.stdout),
                    ("stderr", execution.stderr),
                    ("junit", execution.junit),
                    ("probe", execution.probe),
                    ("build", build.log),
                    ("left_out", request.out_dir / LEFT_OUT_FILE),
                ],
                self.run_dir,
            ),
        )
        return judge_cell(cell, observed, expectation)

    def reconsider(self, request: CellRequest, execution: CellExecution, outcome: CellOutcome) -> CellOutcome:
        """The outcome as evidence: no GPU where one is required, a cell the run's stop cut short, or one
        that failed on a damaged env, build or test dependencies is ERROR, not the extension's (a full disk: collect's
        disk_full rule)."""
        if request.cell.runtime.device == Device.CUDA and outcome.status is Status.SKIPPED and self.options.require_gpu:
            return dataclasses.replace(outcome, status=Status.ERROR, reason=f"--require-gpu: {outcome.reason}")
        stopped = processes.REGISTRY.stopping.is_set() or self.backend.stopping
        if stopped and outcome.status not in {Status.PASS, Status.SKIPPED}:
            return dataclasses.replace(
                outcome,
                status=Status.ERROR,
                reason=f"interrupted after {execution.seconds:.0f} s: the run was stopped while this cell ran",
            )
        if outcome.status in SUSPECT:
            damage = self.preparer.damage(request, self.prepared.overlay(request.cell))
            if damage:
                reason = f"{damage} (the cell ended {outcome.status.value}: {outcome.reason})"
                return dataclasses.replace(outcome, status=Status.ERROR, reason=reason)
        return outcome

    def unrun(
        self, cell: Cell, reason: str, expectation: Promise | None = None, status: Status = Status.ERROR
    ) -> CellResult:
        """A cell that did not run: its build failed, or the run was interrupted first."""
        build, handle = self.prepared.builds[cell.build], self.prepared.handles[cell.runtime]
        observed = Observed(
            status=status,
            reason=reason,
            backend=self.backend.name,
            runtime_torch=handle.torch_version,
            runtime_variant=handle.variant,
            durations=Durations.unrun(build.seconds),
            logs=relative_logs([("build", build.log)], self.run_dir),
        )
        return judge_cell(cell, observed, expectation)


def host_library_promise(outcome: CellOutcome, decided: Promise | None = None) -> Promise | None:
    """A cell that failed to load only for want of host libraries (neither torch's nor CUDA's) is an expected
    failure of class host-library, naming the library; None when anything else kept it from loading. A promise of
    that class decided before the run (this machine's loader lacks a library: artifact.unmet) stands as it is: it
    names every cause, a CUDA major the loader may have stopped at first among them."""
    if decided is not None and decided.condition is Condition.HOST_LIBRARY:
        return decided
    if outcome.status is not Status.LOAD_FAILED:
        return None
    probe = outcome.probe
    ours = {m.name for m in probe.modules}  # a module that needs a sibling which did not load fails with it
    errors = [m.error or "" for m in probe.modules if m.error is not None and m.missing_library not in ours]
    libraries = [host_libraries.missing_host_library(e) for e in errors or ["\n".join(probe.error_chain)]]
    if not all(libraries):
        return None
    named = sorted({lib for lib in libraries if lib})
    return Promise(Expected.LOAD_FAILED, "; ".join(map(host_libraries.describe, named)), Condition.HOST_LIBRARY)


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
