"""Run shim mutants: every selected stable build's own suite, once plain (the baseline) and once per mutant.

A mutant cell is an ordinary cell (the venv backend's isolation, timeout and logs) whose process starts
with the mutant's interposer in LD_PRELOAD. It runs as a fresh interpreter: a forkserver has imported
torch before any cell, so a library preloaded into a cell forked from it would come too late (one
forkserver per mutant and runtime would import torch once per mutant anyway). Verdicts: the suite
fails, crashes, hangs or cannot load -> killed; it passes -> survived; the build imports none of the
mutant's functions -> not applicable; the cell could not say (the harness failed, or the interposer
found no real function to forward to) -> error. A baseline that does not pass is an error of the run,
never a kill: its build's mutants are not run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import enum
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.build import BuildResult
from harness.collect import classify, read_untrusted
from harness.core import commands
from harness.core.status import Status
from harness.execute.api import CellRequest, CellView, RuntimeHandle
from harness.execute.venv import VenvBackend
from harness.mutate.catalogue import Catalogue, Mutant
from harness.mutate.interposer import Interposer, build_interposer
from harness.pipeline import Observer, Pipeline, RunOptions, env_spec, runtime_facts
from harness.plan import Cell, Plan
from harness.results.rundir import new_run_dir
from harness.static.artifact import ArtifactFacts
from harness.static.manifest import packaged_manifest
from harness.static.symbols import read_artifact
from harness.verdict import Expected, promise

log = logging.getLogger(__name__)
TRACE = "mutant-trace.txt"


class Verdict(enum.StrEnum):
    KILLED = "killed"
    SURVIVED = "survived"
    NOT_APPLICABLE = "not_applicable"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class MutantCell:
    """One mutant on one cell (build x runtime), or the cell's baseline (mutant None)."""

    mutant: str | None
    cell: str
    extension: str
    build: str
    runtime: str
    verdict: Verdict | None  # None for a baseline
    status: str | None  # the cell's status as a run would report it (None: not run)
    reason: str
    hit: bool = False  # the interposer changed a behaviour at least once
    seconds: float = 0.0
    logs: str | None = None  # the cell's directory, relative to the report

    def to_json(self) -> dict[str, object]:
        return {
            "mutant": self.mutant,
            "cell": self.cell,
            "extension": self.extension,
            "build": self.build,
            "runtime": self.runtime,
            "verdict": self.verdict.value if self.verdict else None,
            "status": self.status,
            "reason": self.reason,
            "hit": self.hit,
            "seconds": round(self.seconds, 3),
            "logs": self.logs,
        }


@dataclasses.dataclass(frozen=True)
class MutationRun:
    run_id: str
    run_dir: Path
    started: str
    seconds: float
    catalogue: Catalogue
    baselines: tuple[MutantCell, ...]
    cells: tuple[MutantCell, ...]
    skipped: tuple[str, ...]  # cells of the selection not run, each with why (promised to fail on this runtime)


def default_cells(plan: Plan, releases: Sequence[str]) -> tuple[Cell, ...]:
    """The cells a mutation run uses: stable extensions that are no negative control, on the chosen runtime
    releases (default: the newest of the matrix, on the matrix's Python), where the matrix promises that the
    suite passes."""
    pythons = {c.runtime.python for c in plan.cells} if releases else {plan.matrix.python}
    if not releases:
        newest = max((c.runtime.torch for c in plan.cells if c.runtime.python in pythons), default=None)
        releases = [str(newest)] if newest is not None else []
    return tuple(
        c
        for c in plan.cells
        if str(c.runtime.torch) in releases
        and c.runtime.python in pythons
        and c.build.extension.stable
        and c.build.extension.expect is None
        and promise(c).expected is Expected.PASS
    )


class PreloadingBackend(VenvBackend):
    """The venv backend, fresh processes, with each mutant cell's interposer preloaded from its start."""

    def __init__(self) -> None:
        super().__init__()
        self.preloads: dict[Path, Path] = {}  # a cell's directory -> the library its process preloads

    def view(self, request: CellRequest) -> CellView:
        view = super().view(request)
        environ = dict(view.environ, HARNESS_MUTANT_TRACE=str(request.out_dir / TRACE))
        library = self.preloads.get(request.out_dir)
        if library is not None:
            environ["LD_PRELOAD"] = str(library)
        where = view.command.split("\n", 1)[1:]  # the sandbox line stays as the backend wrote it
        command = "\n".join([commands.shell_line(list(view.argv), environ, request.out_dir), *where])
        return dataclasses.replace(view, environ=environ, command=command)


class MutantExecutor:
    """Runs baseline and mutant cells, each in a directory of its own under the run's cells/."""

    def __init__(self, run_dir: Path, timeout: float) -> None:
        self.backend = PreloadingBackend()
        self.run_dir = run_dir
        self.timeout = timeout

    def run(
        self, cell: Cell, handle: RuntimeHandle, build: BuildResult, mutant: Mutant | None, library: Path | None
    ) -> MutantCell:
        name = f"{mutant.id if mutant else 'baseline'}~{cell.id}"
        out = self.run_dir / "cells" / name
        out.mkdir(parents=True, exist_ok=True)
        if library is not None:
            self.backend.preloads[out] = library
        execution = self.backend.execute(CellRequest(cell, handle, build, out, self.timeout))
        outcome = classify(execution, self.timeout)
        trace = (read_untrusted(out / TRACE, 1 << 20) or b"").decode(errors="replace").split()
        failing = f" ({', '.join(outcome.failing[:3])}{', ...' if len(outcome.failing) > 3 else ''})"
        reason = outcome.reason + (failing if outcome.failing else "")
        verdict: Verdict | None = None
        if mutant is not None:
            if "unresolved" in trace:
                verdict, reason = Verdict.ERROR, "the interposer found no real function to forward to: " + reason
            elif outcome.status is Status.PASS:
                verdict = Verdict.SURVIVED
            elif outcome.status in {Status.TEST_FAILED, Status.CRASHED, Status.TIMEOUT, Status.LOAD_FAILED}:
                verdict = Verdict.KILLED
            else:
                verdict = Verdict.ERROR
        return MutantCell(
            mutant.id if mutant else None,
            cell.id,
            cell.build.extension.name,
            cell.build.id,
            cell.runtime.id,
            verdict,
            outcome.status.value,
            reason,
            "hit" in trace,
            execution.seconds,
            str(out.relative_to(self.run_dir)),
        )


def not_applicable(cell: Cell, mutant: Mutant, why: str) -> MutantCell:
    return MutantCell(
        mutant.id,
        cell.id,
        cell.build.extension.name,
        cell.build.id,
        cell.runtime.id,
        Verdict.NOT_APPLICABLE,
        None,
        why,
    )


def mutate(
    plan: Plan,
    catalogue: Catalogue,
    options: RunOptions,
    observer: Observer,
    progress: Callable[[MutantCell, int, int], None] = lambda cell, done, total: None,
) -> MutationRun:
    """The whole mutation run over the plan's cells (choose them with default_cells)."""
    started_at, started = datetime.datetime.now(datetime.UTC), time.monotonic()
    pipeline = Pipeline(plan, options, observer)
    envs = pipeline.provision()
    handles = pipeline.backend.prepare({r: envs.get(env_spec(r)) for r in plan.needed_runtimes})
    builds = pipeline.build_all(envs)
    run_id, run_dir = new_run_dir(options.reports_dir)
    timeout = options.cell_timeout if options.cell_timeout is not None else plan.matrix.settings.cell_timeout
    executor = MutantExecutor(run_dir, timeout)
    manifest = packaged_manifest()

    runnable: list[Cell] = []
    skipped: list[str] = []
    imports: dict[str, frozenset[str]] = {}
    for cell in plan.cells:
        result = builds[cell.build]
        if not result.ok or result.wheel is None:
            skipped.append(f"{cell.id}: not built ({result.reason})")
            continue
        objects = read_artifact(result.wheel)
        kept = promise(cell, ArtifactFacts.of(result.wheel, objects), runtime_facts(cell, handles[cell.runtime]))
        if kept.expected is not Expected.PASS:
            skipped.append(f"{cell.id}: not promised to pass here ({kept.why})")
            continue
        imports[cell.id] = frozenset(name for o in objects for name in o.imports)
        runnable.append(cell)

    jobs = max(1, options.jobs)
    observer.stage("baseline", f"{len(runnable)} cell(s) without a mutant")
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        baselines = list(pool.map(lambda c: executor.run(c, handles[c.runtime], builds[c.build], None, None), runnable))
    passing = [c for c, b in zip(runnable, baselines, strict=True) if b.status == Status.PASS.value]

    releases = {handles[c.runtime].torch_version.split("+")[0]: handles[c.runtime] for c in passing}
    observer.stage("interposers", f"{len(catalogue.mutants)} mutant(s) x {len(releases)} runtime release(s)")

    def compile_one(job: tuple[Mutant, str]) -> tuple[tuple[str, str], Interposer]:
        mutant, release = job
        include = releases[release].torch_lib.parent / "include"
        return (mutant.id, release), build_interposer(mutant, release, include, manifest, options.cache_dir)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        interposers = dict(pool.map(compile_one, [(m, r) for m in catalogue.mutants for r in releases]))

    todo: list[tuple[Cell, Mutant, Path]] = []
    cells: list[MutantCell] = []
    for cell in passing:
        release = handles[cell.runtime].torch_version.split("+")[0]
        for mutant in catalogue.mutants:
            interposer = interposers[(mutant.id, release)]
            if not mutant.applies_to(imports[cell.id]):
                cells.append(not_applicable(cell, mutant, f"the build imports none of {', '.join(mutant.functions)}"))
            elif interposer.library is None:
                cells.append(not_applicable(cell, mutant, f"torch {release} declares none of its functions"))
            else:
                todo.append((cell, mutant, interposer.library))
    observer.stage("mutants", f"{len(todo)} mutant cell(s), {jobs} at a time, timeout {timeout:.0f} s")
    total = len(todo)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [
            pool.submit(executor.run, cell, handles[cell.runtime], builds[cell.build], mutant, library)
            for cell, mutant, library in todo
        ]
        try:
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                cells.append(future.result())
                progress(cells[-1], done, total)
        except BaseException:
            for future in futures:
                future.cancel()
            executor.backend.stop_all()
            raise
    order = {m.id: i for i, m in enumerate(catalogue.mutants)}
    cells.sort(key=lambda c: (order[c.mutant or ""], c.cell))
    return MutationRun(
        run_id,
        run_dir,
        started_at.isoformat(timespec="seconds"),
        time.monotonic() - started,
        catalogue,
        tuple(baselines),
        tuple(cells),
        tuple(skipped),
    )
