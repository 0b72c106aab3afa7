"""The judge: the one place where what a cell did becomes its verdict, and what a build did, its build row's.

A cell is judged in this order, each step here alone:

1. its outcome (status, reason and what was observed) against its promise (`judge_cell`, by `judge`);
2. a broken cell run again (`run --rerun-broken N`): flaky if a retry keeps the promise (`retried`);
3. the matrix's known breaks, as of the run's start date, which decides whether one has expired
   (`known_break`: a broken cell under an entry that holds is a known break);
4. its result.json, written once, after all of that (`recorded`): a cell whose file cannot be written is
   ERROR, naming the file.

A cell of the plan no shard reported is ERROR (`unreported`); a mutant on a cell is killed, survived, not
applicable or error (`judge_mutant`). Everything else only reads verdicts: results.json read back keeps
the verdict stored in it.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.config import KnownBreak
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import Cell, cell_id_parts
from torch_abi_harness.results.cases import CaseCounts, DocDifference, ModuleLoad
from torch_abi_harness.results.known_breaks import matches
from torch_abi_harness.results.model import Attempt, BuildRow, CellLogs, CellResult, Durations
from torch_abi_harness.results.prediction import CellPrediction
from torch_abi_harness.results.rundir import RESULT_FILE, write_cell
from torch_abi_harness.verdict import Expected, Promise, Verdict, build_promise, promise

log = logging.getLogger(__name__)

CONTROL_EXPECTATIONS = {Expected.TEST_FAILED: "TEST_FAILED", Expected.CRASHED: "CRASHED", Expected.TIMEOUT: "TIMEOUT"}
KEEPS_PROMISE = frozenset({Verdict.KEPT, Verdict.EXPECTED_FAILURE})  # a retry ending so makes a broken cell flaky
_FAILURES = {Status.TEST_FAILED, Status.LOAD_FAILED, Status.BUILD_FAILED, Status.CRASHED, Status.TIMEOUT}


def judge(expected: Expected, status: Status) -> Verdict:
    """The verdict of a status against a promise."""
    if status is Status.ERROR:
        return Verdict.ERROR
    if status is Status.SKIPPED:
        return Verdict.SKIPPED
    if status is Status.NOT_RUN:
        return Verdict.NOT_RUN
    if expected is Expected.PASS:
        return Verdict.KEPT if status is Status.PASS else Verdict.BROKEN
    if expected in CONTROL_EXPECTATIONS:  # a control that fails otherwise proves nothing: broken
        return Verdict.EXPECTED_FAILURE if status.value == CONTROL_EXPECTATIONS[expected] else Verdict.BROKEN
    if status is Status.PASS:
        return Verdict.UNEXPECTED_PASS
    assert status in _FAILURES
    return Verdict.EXPECTED_FAILURE


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observed:
    """What a cell was seen to do, before it is judged: its status and why, where it ran, and what it left."""

    status: Status
    reason: str
    backend: str
    runtime_torch: str
    runtime_variant: str
    tests: CaseCounts = dataclasses.field(default_factory=CaseCounts)
    failing_tests: tuple[str, ...] = ()
    missing_symbol: str | None = None
    durations: Durations = dataclasses.field(default_factory=Durations)
    logs: CellLogs = dataclasses.field(default_factory=CellLogs)
    prediction: CellPrediction | None = None
    findings: tuple[str, ...] = ()
    doc_differences: tuple[DocDifference, ...] = ()
    executor: str | None = None
    modules: tuple[ModuleLoad, ...] = ()


def judge_cell(cell: Cell, observed: Observed, expectation: Promise | None = None) -> CellResult:
    """A cell's result: its identity, what it was seen to do, and its verdict against its promise (expectation:
    the promise decided from the built artifact; else the plan's, from the matrix alone)."""
    expectation = expectation or promise(cell)
    return CellResult(
        id=cell.id,
        build_id=cell.build.id,
        runtime_id=cell.runtime.id,
        extension=cell.build.extension.name,
        build_torch=str(cell.build.torch),
        build_variant=cell.build.variant,
        target=str(cell.build.target) if cell.build.target else None,
        runtime_torch=observed.runtime_torch,
        runtime_variant=observed.runtime_variant,
        backend=observed.backend,
        device=cell.runtime.device,
        status=observed.status,
        reason=observed.reason,
        expected=expectation.expected,
        expected_why=expectation.why,
        verdict=judge(expectation.expected, observed.status),
        expected_class=expectation.condition,
        build_python=cell.build.python,
        runtime_python=cell.runtime.python,
        generated=cell.build.extension.generated,
        tests=observed.tests,
        failing_tests=observed.failing_tests,
        missing_symbol=observed.missing_symbol,
        durations=observed.durations,
        logs=observed.logs,
        prediction=observed.prediction,
        findings=observed.findings,
        doc_differences=observed.doc_differences,
        executor=observed.executor,
        modules=observed.modules,
    )


def unreported(cell_id: str, reason: str, backend: str) -> CellResult:
    """ERROR for a cell of the plan that no shard reported (`merge --allow-missing`): what is known of it is
    its id; its promise is unknown (none), since the shard that would have decided it from the artifact is lost."""
    parts = cell_id_parts(cell_id)
    if parts is None:
        raise ValueError(f"{cell_id!r} is not a cell id")
    return CellResult(
        id=cell_id,
        build_id=cell_id.rpartition("~")[0],
        runtime_id=cell_id.rpartition("~")[2],
        extension=parts["extension"] or "",
        build_torch=parts["build_torch"] or "",
        build_variant=parts["build_variant"] or "auto",
        target=parts["target"],
        runtime_torch=parts["runtime_torch"] or "",
        runtime_variant=parts["runtime_variant"] or "auto",
        backend=backend,
        device=parts["device"] or "cpu",
        status=Status.ERROR,
        reason=reason,
        expected=Expected.NONE,
        expected_why="unknown: its shard reported nothing",
        verdict=Verdict.ERROR,
        build_python=parts["build_python"],
        runtime_python=parts["runtime_python"],
    )


def _attempt(result: CellResult) -> Attempt:
    return Attempt(result.status, result.verdict, result.reason, result.durations.total, result.logs)


def retried(first: CellResult, again: CellResult) -> CellResult:
    """A broken cell with one more attempt: flaky (the retry's result) if the retry kept the promise, else
    still broken with the first result's status and reason. Every attempt is kept, in order."""
    attempts = (*(first.attempts or (_attempt(first),)), _attempt(again))
    if again.verdict in KEEPS_PROMISE:
        return dataclasses.replace(again, verdict=Verdict.FLAKY, attempts=attempts)
    return dataclasses.replace(first, attempts=attempts)


def known_break(result: CellResult, entries: Sequence[KnownBreak], today: datetime.date) -> CellResult:
    """The cell with the known_breaks entry that matches it (one that holds `today` first) and, for a broken
    cell under an entry that holds, the known_break verdict. A broken cell under an expired entry stays broken."""
    matching = [e for e in entries if matches(e, result)]
    if not matching:
        return result
    holding = [e for e in matching if e.expires >= today]
    verdict = Verdict.KNOWN_BREAK if result.verdict is Verdict.BROKEN and holding else result.verdict
    return dataclasses.replace(result, known_break=(holding or matching)[0].name, verdict=verdict)


def acknowledge(cells: Sequence[CellResult], entries: Sequence[KnownBreak], today: datetime.date) -> list[CellResult]:
    """Each cell as the known breaks leave it (known_break)."""
    return [known_break(cell, entries, today) for cell in cells]


def recorded(result: CellResult, out: Path) -> CellResult:
    """The cell once its result.json is written into `out`; a cell whose result cannot be written is ERROR,
    naming the file (the cell is not lost: results.json still reports it), and the run goes on."""
    target = out / RESULT_FILE
    try:
        write_cell(result, out)
    except OSError as exc:
        log.warning("%s: cannot write %s: %s", result.id, target, exc)
        if result.status is not Status.ERROR:
            return dataclasses.replace(
                result,
                status=Status.ERROR,
                verdict=judge(result.expected, Status.ERROR),
                reason=f"could not write {target}: {exc.strerror or exc} (the cell ended {result.status.value}: "
                f"{result.reason})",
            )
    return result


@dataclasses.dataclass(frozen=True)
class Judge:
    """The last steps of one run's cells: its known breaks as of `today` (the date the run started, which
    decides whether an entry has expired), then the cell's result.json, written once."""

    known_breaks: tuple[KnownBreak, ...]
    today: datetime.date

    def final(self, result: CellResult, out: Path) -> CellResult:
        """The cell's final verdict, recorded: a known break acknowledges it, then its result.json is written."""
        return recorded(known_break(result, self.known_breaks, self.today), out)


def judge_build(result: BuildResult) -> BuildRow:
    """A build's row of the report: its verdict against the build's promise (compile where its target is not
    newer than its build torch), why it failed, and what was found about it."""
    build = result.build
    expectation = build_promise(build, result.built_for)
    if result.toolchain is not None:
        verdict = Verdict.SKIPPED
    elif result.infrastructure:
        verdict = Verdict.ERROR
    elif result.ok:
        verdict = Verdict.UNEXPECTED_PASS if expectation.expected is Expected.BUILD_FAILED else Verdict.KEPT
    else:
        verdict = judge(expectation.expected, Status.BUILD_FAILED)
    built_for = result.built_for or (build.effective_target if result.ok else None)
    return BuildRow(
        build.id,
        verdict,
        result.reason,
        expectation.why,
        result.findings,
        str(build.target) if build.target else None,
        str(built_for) if built_for else None,
    )


class MutantVerdict(enum.StrEnum):
    KILLED = "killed"
    SURVIVED = "survived"
    NOT_APPLICABLE = "not_applicable"
    ERROR = "error"


MUTANT_KILLS = frozenset({Status.TEST_FAILED, Status.CRASHED, Status.TIMEOUT, Status.LOAD_FAILED})


def judge_mutant(status: Status | None, reason: str, trace: Sequence[str]) -> tuple[MutantVerdict, str]:
    """A mutant on a cell, and why: not run on it (status None: the build imports none of its functions, or the
    runtime declares none) -> not applicable; the interposer found no real function to forward to -> error;
    the suite passes -> survived; it fails, crashes, hangs or cannot load -> killed; else (the harness
    failed) -> error. `trace`: the words the interposer wrote."""
    if status is None:
        return MutantVerdict.NOT_APPLICABLE, reason
    if "unresolved" in trace:
        return MutantVerdict.ERROR, "the interposer found no real function to forward to: " + reason
    if status is Status.PASS:
        return MutantVerdict.SURVIVED, reason
    if status in MUTANT_KILLS:
        return MutantVerdict.KILLED, reason
    return MutantVerdict.ERROR, reason
