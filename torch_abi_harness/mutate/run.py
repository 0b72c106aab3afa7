"""Run shim mutants: every selected stable build's own suite, once plain (the baseline) and once per mutant.

A mutant cell is an ordinary cell, prepared and run as `run` runs its cells (torch_abi_harness/run/cells.py: the same
test dependencies, timeout, sandbox and logs), whose request preloads the mutant's interposer (LD_PRELOAD).
Such a request runs in a fresh interpreter whatever the executor: a forkserver has imported torch before
any cell, so a library preloaded into a cell forked from it would come too late. Verdicts: the suite
fails, crashes, hangs or cannot load -> killed; it passes -> survived; the build imports none of the
mutant's functions -> not applicable; the cell could not say (the harness failed, or the interposer
found no real function to forward to) -> error, as the run's judge decides (torch_abi_harness/run/judge.py).
A baseline that does not pass is an error of the run, never a kill: its build's mutants are not run.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from torch_abi_harness.core import processes
from torch_abi_harness.core.kinds import Backend
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.execute.api import PRELOAD_TRACE, Executor
from torch_abi_harness.mutate.catalogue import Catalogue, Mutant
from torch_abi_harness.mutate.interposer import Interposer, build_interposer
from torch_abi_harness.plan import Cell, Plan
from torch_abi_harness.results.rundir import new_run_dir
from torch_abi_harness.run.cells import CellRunner, RunOptions, runtime_facts, timeouts_text
from torch_abi_harness.run.collect import read_untrusted
from torch_abi_harness.run.judge import MutantVerdict as MutantVerdict  # importers find it here too
from torch_abi_harness.run.judge import judge_mutant
from torch_abi_harness.run.pipeline import make_backend
from torch_abi_harness.run.prepare import Observer, Prepared, Preparer
from torch_abi_harness.static.artifact import ArtifactFacts
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.symbols import read_artifact
from torch_abi_harness.verdict import Expected, promise

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MutantCell:
    """One mutant on one cell (build x runtime), or the cell's baseline (mutant None)."""

    mutant: str | None
    cell: str
    extension: str
    build: str
    runtime: str
    verdict: MutantVerdict | None  # None for a baseline
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
    planned: int = 0  # mutant cells the run meant to run (the applicable ones), to say how many finished
    interrupted: bool = False  # stopped by an interrupt after some mutant cells finished: `cells` holds those


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


class MutantExecutor:
    """Runs baseline and mutant cells through the run's cell path, each in a directory of its own under cells/."""

    def __init__(self, runner: CellRunner) -> None:
        self.runner = runner

    def run(self, cell: Cell, mutant: Mutant | None, library: Path | None) -> MutantCell:
        name = f"{mutant.id if mutant else 'baseline'}~{cell.id}"
        out = self.runner.run_dir / "cells" / name
        out.mkdir(parents=True, exist_ok=True)
        request = self.runner.request(cell, out, (library,) if library is not None else ())
        execution, outcome = self.runner.execute(request)
        outcome = self.runner.reconsider(request, execution, outcome)
        trace = (read_untrusted(out / PRELOAD_TRACE, 1 << 20) or b"").decode(errors="replace").split()
        failing = f" ({', '.join(outcome.failing[:3])}{', ...' if len(outcome.failing) > 3 else ''})"
        reason = outcome.reason + (failing if outcome.failing else "")
        verdict: MutantVerdict | None = None  # a baseline is not judged: it passes, or its mutants are not run
        if mutant is not None:
            verdict, reason = judge_mutant(outcome.status, reason, trace)
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
            str(out.relative_to(self.runner.run_dir)),
        )


def not_applicable(cell: Cell, mutant: Mutant, why: str) -> MutantCell:
    verdict, why = judge_mutant(None, why, ())
    return MutantCell(
        mutant.id,
        cell.id,
        cell.build.extension.name,
        cell.build.id,
        cell.runtime.id,
        verdict,
        None,
        why,
    )


@dataclasses.dataclass(frozen=True)
class Selection:
    """The plan's cells a mutation run can use: built, and promised to pass by what the artifact needs."""

    runnable: tuple[Cell, ...]
    skipped: tuple[str, ...]
    imports: dict[str, frozenset[str]]  # cell id -> every symbol its build imports

    @classmethod
    def of(cls, plan: Plan, prepared: Prepared) -> Selection:
        runnable: list[Cell] = []
        skipped: list[str] = []
        imports: dict[str, frozenset[str]] = {}
        for cell in plan.cells:
            result = prepared.builds[cell.build]
            if not result.ok or result.wheel is None:
                skipped.append(f"{cell.id}: not built ({result.reason})")
                continue
            objects = read_artifact(result.wheel)
            facts = runtime_facts(cell, prepared.handles[cell.runtime])
            kept = promise(cell, ArtifactFacts.of(result.wheel, objects), facts)
            if kept.expected is not Expected.PASS:
                skipped.append(f"{cell.id}: not promised to pass here ({kept.why})")
                continue
            imports[cell.id] = frozenset(name for o in objects for name in o.imports)
            runnable.append(cell)
        return cls(tuple(runnable), tuple(skipped), imports)


def interposers(
    catalogue: Catalogue, passing: Sequence[Cell], prepared: Prepared, options: RunOptions, observer: Observer
) -> dict[tuple[str, str], Interposer]:
    """Every mutant's interposer for each torch release the passing cells run on: (mutant id, release) -> it."""
    releases = {release_of(prepared.handles[c.runtime].torch_version): prepared.handles[c.runtime] for c in passing}
    observer.stage("interposers", f"{len(catalogue.mutants)} mutant(s) x {len(releases)} runtime release(s)")
    manifest = packaged_manifest()
    cache_dir = options.cache_dir

    def compile_one(job: tuple[Mutant, str]) -> tuple[tuple[str, str], Interposer]:
        mutant, release = job
        include = releases[release].torch_lib.parent / "include"
        return (mutant.id, release), build_interposer(mutant, release, include, manifest, cache_dir)

    with concurrent.futures.ThreadPoolExecutor(max(1, options.jobs)) as pool:
        return dict(pool.map(compile_one, [(m, r) for m in catalogue.mutants for r in releases]))


def run_mutants(
    executor: MutantExecutor,
    backend: Executor,
    todo: Sequence[tuple[Cell, Mutant, Path]],
    jobs: int,
    progress: Callable[[MutantCell, int, int], None],
) -> tuple[list[MutantCell], bool]:
    """Every mutant cell, `jobs` at a time, and whether an interrupt stopped them: then the running ones are
    stopped, the rest never start, and the cells that finished are returned, so the report keeps them."""
    cells: list[MutantCell] = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(executor.run, cell, mutant, library) for cell, mutant, library in todo]
        try:
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                cells.append(future.result())
                progress(cells[-1], done, len(todo))
        except (KeyboardInterrupt, processes.Interrupted):
            for future in futures:
                future.cancel()
            backend.stop_all()
            return cells, True
        except BaseException:
            for future in futures:
                future.cancel()
            backend.stop_all()
            raise
    return cells, False


def mutate(
    plan: Plan,
    catalogue: Catalogue,
    options: RunOptions,
    observer: Observer,
    progress: Callable[[MutantCell, int, int], None] = lambda cell, done, total: None,
) -> MutationRun:
    """The whole mutation run over the plan's cells (choose them with default_cells)."""
    started_at, started = datetime.datetime.now(datetime.UTC), time.monotonic()
    backend = make_backend(Backend.VENV, plan.matrix, options.cache_dir)
    preparer = Preparer(plan, options.cache_dir, options.jobs, observer, backend)
    prepared = preparer.prepare()
    run_id, run_dir = new_run_dir(options.reports_dir)
    runner = CellRunner(plan, options, backend, preparer, prepared, run_dir)
    executor = MutantExecutor(runner)
    selection = Selection.of(plan, prepared)
    jobs = max(1, options.jobs)
    observer.stage("baseline", f"{len(selection.runnable)} cell(s) without a mutant")
    backend.begin_run(selection.runnable)
    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            baselines = list(pool.map(lambda c: executor.run(c, None, None), selection.runnable))
        passing = [c for c, b in zip(selection.runnable, baselines, strict=True) if b.status == Status.PASS.value]
        made = interposers(catalogue, passing, prepared, options, observer)
        todo: list[tuple[Cell, Mutant, Path]] = []
        cells: list[MutantCell] = []
        for cell in passing:
            release = release_of(prepared.handles[cell.runtime].torch_version)
            for mutant in catalogue.mutants:
                library = made[(mutant.id, release)].library
                if not mutant.applies_to(selection.imports[cell.id]):
                    why = f"the build imports none of {', '.join(mutant.functions)}"
                    cells.append(not_applicable(cell, mutant, why))
                elif library is None:
                    cells.append(not_applicable(cell, mutant, f"torch {release} declares none of its functions"))
                else:
                    todo.append((cell, mutant, library))
        timeouts = timeouts_text(passing, options, plan.matrix)
        observer.stage("mutants", f"{len(todo)} mutant cell(s), {jobs} at a time, {timeouts}")
        finished, interrupted = run_mutants(executor, backend, todo, jobs, progress)
        cells += finished
    finally:
        backend.end_run()
        preparer.release()
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
        selection.skipped,
        planned=len(todo),
        interrupted=interrupted,
    )
