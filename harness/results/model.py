"""Cell results and their renderings: results.json, summary.md, junit.xml."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from harness.collect import CaseCounts, DocDifference
from harness.config import KnownBreak
from harness.core.errors import ExitCode, InfrastructureError
from harness.core.files import write_atomic
from harness.core.status import CONDITION_MEANING, Condition, Status
from harness.plan import Cell, PlanIdentity
from harness.provision.host import HostFacts
from harness.render.grid import NOT_RUN, NOT_RUN_MEANING, Grid
from harness.results.known_breaks import outcomes
from harness.results.prediction import CellPrediction
from harness.verdict import KEEPS_PROMISE, Expected, Promise, Verdict, judge, promise

# 2: each cell has its static prediction and findings; 3: and its doc_differences; 4: the run's plan identity
# (digest, every cell of the plan, the shard), each cell's attempts (--rerun-broken), the flaky verdict,
# each cell's expected_class (the condition that decided its promise) and its prediction's unmet conditions;
# 5: the Python of each cell's build and runtime; 6: the hosts the run ran on (OS, glibc, compiler, nvcc), the
# known_break verdict, each cell's known_break (the matrix's known_breaks entry that matched it), the run's
# known_breaks with their state, and its candidate.
RESULTS_SCHEMA_VERSION = 6

VERDICT_SYMBOL = {
    Verdict.KEPT: "✅",
    Verdict.BROKEN: "❌",
    Verdict.EXPECTED_FAILURE: "⛔",
    Verdict.UNEXPECTED_PASS: "❕",
    Verdict.SKIPPED: "⏭️",
    Verdict.ERROR: "⚠️",
    Verdict.FLAKY: "🔁",
    Verdict.KNOWN_BREAK: "🩹",
}
VERDICT_MEANING = {
    Verdict.KEPT: "promised to pass, and passed",
    Verdict.BROKEN: "**promise broken**: promised to pass, and did not",
    Verdict.EXPECTED_FAILURE: "failed where that is expected (by class below)",
    Verdict.UNEXPECTED_PASS: "passed where nothing was promised (reported, not failed)",
    Verdict.SKIPPED: "not run (reason given)",
    Verdict.ERROR: "the harness or its infrastructure failed; says nothing about the extension",
    Verdict.FLAKY: "**flaky**: broke the promise, then kept it on a retry (not kept; attempts listed below)",
    Verdict.KNOWN_BREAK: "a known break: broke the promise, acknowledged by a known_breaks entry until it expires",
}
FINDING_MARK = "🔎"
STATUS_SHORT = {
    Status.PASS: "pass",
    Status.TEST_FAILED: "test",
    Status.LOAD_FAILED: "load",
    Status.BUILD_FAILED: "build",
    Status.CRASHED: "crash",
    Status.TIMEOUT: "timeout",
    Status.SKIPPED: "skip",
    Status.ERROR: "error",
}


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of a cell that was run more than once (`run --rerun-broken N`)."""

    status: Status
    verdict: Verdict
    reason: str
    seconds: float | None
    logs: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, result: CellResult) -> Attempt:
        return cls(result.status, result.verdict, result.reason, result.durations.get("total"), result.logs)

    def to_json(self) -> dict[str, Any]:
        seconds = round(self.seconds, 3) if self.seconds is not None else None
        return {
            "status": self.status.value,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "seconds": seconds,
            "logs": dict(sorted(self.logs.items())),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        return cls(Status(data["status"]), Verdict(data["verdict"]), data["reason"], data["seconds"], data["logs"])

    def line(self, number: int) -> str:
        return f"attempt {number}: {self.status.value} ({self.verdict.value}): {self.reason}"


@dataclasses.dataclass(frozen=True)
class CellResult:
    id: str
    build_id: str
    runtime_id: str
    extension: str
    build_torch: str
    build_variant: str
    target: str | None
    runtime_torch: str
    runtime_variant: str
    backend: str
    device: str
    status: Status
    reason: str
    expected: Expected
    expected_why: str
    verdict: Verdict
    expected_class: Condition | None = None  # the condition that decided the promise; None in results before it
    build_python: str | None = None  # the CPython minor it was built with, "3.11"; None in results before 5
    runtime_python: str | None = None  # the runtime's CPython minor; None in results before 5
    tests: CaseCounts = dataclasses.field(default_factory=CaseCounts)
    failing_tests: tuple[str, ...] = ()
    missing_symbol: str | None = None
    durations: dict[str, float | None] = dataclasses.field(default_factory=dict)
    logs: dict[str, str] = dataclasses.field(default_factory=dict)
    prediction: CellPrediction | None = None  # the static prediction made before the cell ran
    findings: tuple[str, ...] = ()  # the outcome disagrees with the prediction; a prebuilt wheel with its claim
    doc_differences: tuple[DocDifference, ...] = ()  # what its tests saw the runtime do other than documented
    executor: str | None = None  # how its process started (fresh, forkserver, container); None: it did not start
    attempts: tuple[Attempt, ...] = ()  # every run of a cell run again (--rerun-broken), in order; else empty
    known_break: str | None = None  # the known_breaks entry matching its id, whatever its verdict (from version 6)

    @classmethod
    def judged(
        cls,
        cell: Cell,
        status: Status,
        reason: str,
        backend: str,
        runtime_torch: str,
        runtime_variant: str,
        expectation: Promise | None = None,
        **details: Any,
    ) -> CellResult:
        """A cell's result: its identity, what happened, and the promise it is judged against (expectation:
        the promise decided from the built artifact; else the plan's, from the matrix alone)."""
        expectation = expectation or promise(cell)
        return cls(
            id=cell.id,
            build_id=cell.build.id,
            runtime_id=cell.runtime.id,
            extension=cell.build.extension.name,
            build_torch=str(cell.build.torch),
            build_variant=cell.build.variant,
            target=str(cell.build.target) if cell.build.target else None,
            runtime_torch=runtime_torch,
            runtime_variant=runtime_variant,
            backend=backend,
            device=cell.runtime.device,
            status=status,
            reason=reason,
            expected=expectation.expected,
            expected_why=expectation.why,
            verdict=judge(expectation.expected, status),
            expected_class=expectation.condition,
            build_python=cell.build.python,
            runtime_python=cell.runtime.python,
            **details,
        )

    def retried(self, again: CellResult) -> CellResult:
        """This broken cell with one more attempt: flaky (the retry's result) if it kept the promise,
        else still broken with this result's status and reason."""
        attempts = (*(self.attempts or (Attempt.of(self),)), Attempt.of(again))
        if again.verdict in KEEPS_PROMISE:
            return dataclasses.replace(again, verdict=Verdict.FLAKY, attempts=attempts)
        return dataclasses.replace(self, attempts=attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "build": {
                "id": self.build_id,
                "extension": self.extension,
                "torch": self.build_torch,
                "variant": self.build_variant,
                "target": self.target,
                "python": self.build_python,
            },
            "runtime": {
                "id": self.runtime_id,
                "torch": self.runtime_torch,
                "variant": self.runtime_variant,
                "backend": self.backend,
                "device": self.device,
                "python": self.runtime_python,
            },
            "status": self.status.value,
            "reason": self.reason,
            "expected": self.expected.value,
            "expected_why": self.expected_why,
            "expected_class": self.expected_class.value if self.expected_class else None,
            "verdict": self.verdict.value,
            "tests": dataclasses.asdict(self.tests),
            "failing_tests": list(self.failing_tests),
            "missing_symbol": self.missing_symbol,
            "durations": {k: (round(v, 3) if v is not None else None) for k, v in sorted(self.durations.items())},
            "logs": dict(sorted(self.logs.items())),
            "prediction": self.prediction.to_json() if self.prediction else None,
            "findings": list(self.findings),
            "doc_differences": [d.to_json() for d in self.doc_differences],
            "executor": self.executor,
            "attempts": [a.to_json() for a in self.attempts],
            "known_break": self.known_break,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        build, runtime = data["build"], data["runtime"]
        return cls(
            id=data["id"],
            build_id=build["id"],
            runtime_id=runtime["id"],
            extension=build["extension"],
            build_torch=build["torch"],
            build_variant=build["variant"],
            target=build["target"],
            runtime_torch=runtime["torch"],
            runtime_variant=runtime["variant"],
            backend=runtime["backend"],
            device=runtime["device"],
            status=Status(data["status"]),
            reason=data["reason"],
            expected=Expected(data["expected"]),
            expected_why=data["expected_why"],
            verdict=Verdict(data["verdict"]),
            expected_class=Condition(data["expected_class"]) if data.get("expected_class") else None,  # from 4
            build_python=build.get("python"),  # from 5
            runtime_python=runtime.get("python"),  # from 5
            tests=CaseCounts(**data["tests"]),
            failing_tests=tuple(data["failing_tests"]),
            missing_symbol=data["missing_symbol"],
            durations=data["durations"],
            logs=data["logs"],
            prediction=CellPrediction.from_json(found) if (found := data.get("prediction")) else None,  # from 2
            findings=tuple(data.get("findings", ())),
            doc_differences=tuple(DocDifference.from_json(d) for d in data.get("doc_differences", ())),  # from 3
            executor=data.get("executor"),  # from 4
            attempts=tuple(Attempt.from_json(a) for a in data.get("attempts", ())),  # from 4
            known_break=data.get("known_break"),  # from 6
        )


@dataclasses.dataclass(frozen=True)
class RunResult:
    run_id: str
    started: str
    finished: str
    harness_version: str
    matrix: str
    backend: str  # venv | docker; "mixed" for a merge of shards run with different backends
    selectors: tuple[str, ...]
    cells: tuple[CellResult, ...]
    build_order: tuple[str, ...]
    runtime_order: tuple[str, ...]
    interrupted: bool = False
    plan: PlanIdentity | None = None  # None only in results.json older than version 4
    hosts: tuple[HostFacts, ...] = ()  # the machines it ran on (a merge: each shard's); empty before version 6
    known_breaks: tuple[KnownBreak, ...] = ()  # the matrix's known_breaks entries (from version 6)
    candidate: str | None = None  # `run --candidate`: the release tried as a build torch and a runtime (from 6)

    @property
    def exit_code(self) -> ExitCode:
        verdicts = {c.verdict for c in self.cells}
        if Verdict.BROKEN in verdicts:
            return ExitCode.BROKEN
        if Verdict.ERROR in verdicts or self.interrupted:
            return ExitCode.INFRASTRUCTURE
        return ExitCode.OK

    @property
    def failed_ids(self) -> set[str]:
        """The cells `run --rerun-failed` runs again: broken, or ended by an error."""
        return {c.id for c in self.cells if c.verdict in (Verdict.BROKEN, Verdict.ERROR)}

    def counts(self) -> dict[str, int]:
        out = {v.value: 0 for v in Verdict}
        for cell in self.cells:
            out[cell.verdict.value] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "run_id": self.run_id,
            "started": self.started,
            "finished": self.finished,
            "harness_version": self.harness_version,
            "matrix": self.matrix,
            "backend": self.backend,
            "selectors": list(self.selectors),
            "interrupted": self.interrupted,
            "plan": self.plan.to_json() if self.plan else None,
            "candidate": self.candidate,
            "known_breaks": [
                {**o.entry.to_json(), "state": o.state.value, "matched": list(o.cells)}
                for o in outcomes(self.known_breaks, self.cells)
            ],
            "exit_code": int(self.exit_code),
            "summary": self.counts(),
            "builds": list(self.build_order),
            "runtimes": list(self.runtime_order),
            "hosts": [h.to_json() for h in self.hosts],
            "cells": [c.to_json() for c in sorted(self.cells, key=lambda c: natural_key(c.id))],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            run_id=data["run_id"],
            started=data["started"],
            finished=data["finished"],
            harness_version=data["harness_version"],
            matrix=data["matrix"],
            backend=data["backend"],
            selectors=tuple(data["selectors"]),
            cells=tuple(CellResult.from_json(c) for c in data["cells"]),
            build_order=tuple(data["builds"]),
            runtime_order=tuple(data["runtimes"]),
            interrupted=data["interrupted"],
            plan=PlanIdentity.from_json(data["plan"]) if data.get("plan") else None,  # from 4
            hosts=tuple(HostFacts.from_json(h) for h in data.get("hosts", ())),  # from 6
            known_breaks=tuple(KnownBreak.from_json(k) for k in data.get("known_breaks", ())),  # from 6
            candidate=data.get("candidate"),  # from 6
        )


def summary_markdown(run: RunResult) -> str:
    counts = run.counts()
    grid = Grid.of(run)
    lines = [
        f"# Stable-ABI compatibility matrix: run {run.run_id}",
        "",
        f"Backend `{run.backend}`, matrix `{run.matrix}`, {len(run.cells)} cells"
        + (f", selectors `{' '.join(run.selectors)}`" if run.selectors else "")
        + (f", shard {run.plan.shard} of a plan of {len(run.plan.cells)} cells" if run.plan and run.plan.shard else "")
        + ".",
        "",
        f"**Result: {headline(run)}** (exit {int(run.exit_code)}). "
        + ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
        + ("; interrupted" if run.interrupted else ""),
        "",
        *grid.markdown(lambda cell: grid_mark(cell) + (f" {FINDING_MARK}" if cell.findings else "")),
    ]
    legend = "; ".join(f"{VERDICT_SYMBOL[v]} {VERDICT_MEANING[v]}" for v in Verdict)
    legend += f"; {NOT_RUN} {NOT_RUN_MEANING}" if grid.absent else ""
    lines += [
        "",
        f"Legend: {legend}; {FINDING_MARK} a finding: the outcome disagrees with the static prediction, "
        "or a prebuilt wheel's imports contradict what the matrix claims for it",
        "",
    ]
    groups = expected_failure_classes(run.cells)
    if groups:
        lines += ["Expected failures, by the condition that expects them:", ""]
        for group in groups:
            lines.append(f"- {VERDICT_SYMBOL[Verdict.EXPECTED_FAILURE]} {group.markdown()}")
        lines.append("")
    lines += known_breaks_markdown(run)
    findings = [c for c in sorted(run.cells, key=lambda c: natural_key(c.id)) if c.findings]
    predicted = sum(1 for c in run.cells if c.prediction is not None)
    verdict_line = f"{len(findings)} have findings:" if findings else "every prediction matched the outcome."
    lines += [
        "## Prediction vs outcome",
        "",
        f"{predicted} cells were predicted from ELF symbols before running; {verdict_line}",
        "",
    ]
    lines += [f"- {FINDING_MARK} `{c.id}`: {md_text(f)}" for c in findings for f in c.findings]
    lines.append("")
    lines += doc_differences_markdown(run.cells)
    explained = [
        c
        for c in sorted(run.cells, key=lambda c: natural_key(c.id))
        if c.status is not Status.PASS or c.verdict is not Verdict.KEPT
    ]
    if explained:
        lines += ["## Every cell that did not simply pass", ""]
        for cell in explained:
            lines.append(
                f"- {VERDICT_SYMBOL[cell.verdict]} `{cell.id}`: **{cell.status.value}** ({cell.verdict.value}): "
                f"{md_text(cell.reason)} "
                f"(expected {cell.expected.value}{_class_of(cell)}: {md_text(cell.expected_why)})"
            )
            lines += [f"  - {md_text(a.line(n))}" for n, a in enumerate(cell.attempts, 1)]
        lines.append("")
    return "\n".join(lines)


def headline(run: RunResult) -> str:
    """What the run says, in a few words: the summary's and the page's headline."""
    counts = run.counts()
    if run.exit_code is ExitCode.OK and counts["flaky"]:
        return "no promise broken for good: flaky cells"
    if run.exit_code is ExitCode.OK and counts["known_break"]:
        return "no promise broken but the known breaks"
    return {
        ExitCode.OK: "every promise kept",
        ExitCode.BROKEN: "a promise was broken",
        ExitCode.INFRASTRUCTURE: "the run had infrastructure errors",
    }[run.exit_code]


def known_breaks_markdown(run: RunResult) -> list[str]:
    """The matrix's known_breaks entries and what each came to in this run."""
    found = outcomes(run.known_breaks, run.cells)
    if not found:
        return []
    lines = ["## Known breaks", ""]
    lines += [f"- {'❌ ' if o.failing else ''}**{o.state.value}** {o.line()}" for o in found]
    return [*lines, ""]


def grid_mark(cell: CellResult) -> str:
    """A cell in the grid: its verdict's symbol and a word for its status (✅ pass, ⛔ load)."""
    return f"{VERDICT_SYMBOL[cell.verdict]} {STATUS_SHORT[cell.status]}"


# ANSI escape sequences (a coloured compiler error: ESC [ 3 1 m) and the C0/C1 control characters
# besides tab and newline. XML 1.0 allows none of them: one in a reason made junit.xml unparseable.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]|~])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def plain_text(text: str) -> str:
    """Text from a cell (a compiler's error, a test's message) without escape sequences or control characters."""
    return CONTROL.sub("", ANSI_ESCAPE.sub("", text))


def md_text(text: str) -> str:
    """Text from a cell as one line of markdown that renders as written: HTML (`<header>`) as text, markdown's
    punctuation escaped, control characters dropped."""
    one_line = " ".join(plain_text(text).replace("\r", "\n").split("\n"))
    escaped = html.escape(one_line, quote=False)
    return MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), escaped)


def md_code(text: str) -> str:
    """Text from a cell as a markdown code span: no backtick or line break can end it early."""
    return "`" + " ".join(plain_text(text).replace("`", "'").split()) + "`"


def natural_key(text: str) -> tuple[str | int, ...]:
    """Ids in the order people read them: numbers by value (r2.9.1 before r2.10.0), the rest as text."""
    return tuple(int(part) if n % 2 else part for n, part in enumerate(re.split(r"(\d+)", text)))


def _class_of(cell: CellResult) -> str:
    return f" [{cell.expected_class.value}]" if cell.expected_class else ""


@dataclasses.dataclass(frozen=True)
class ClassGroup:
    """The expected failures of one class in a run: how many, what the class means, and their distinct reasons."""

    condition: Condition | None  # None: results written before classes existed
    cells: int
    whys: tuple[str, ...]

    EXAMPLES: ClassVar[int] = 3

    @property
    def name(self) -> str:
        return self.condition.value if self.condition else "unclassified"

    def text(self) -> str:
        meaning = CONDITION_MEANING[self.condition] if self.condition else "results written before classes existed"
        shown = "; ".join(self.whys[: self.EXAMPLES]) + (
            f" (+{len(self.whys) - self.EXAMPLES} more)" if len(self.whys) > self.EXAMPLES else ""
        )
        return f"{meaning} ({self.cells} cell(s): {shown})"

    def markdown(self) -> str:
        return f"**{self.name}**: {md_text(self.text())}"


def expected_failure_classes(cells: Sequence[CellResult]) -> list[ClassGroup]:
    """The run's expected failures grouped by the condition that expects them, in Condition's order."""
    by_class: dict[Condition | None, list[CellResult]] = {}
    for cell in cells:
        if cell.verdict is Verdict.EXPECTED_FAILURE:
            by_class.setdefault(cell.expected_class, []).append(cell)
    order = [*Condition, None]
    return [
        ClassGroup(key, len(found), tuple(sorted({c.expected_why for c in found})))
        for key in sorted(by_class, key=order.index)
        for found in [by_class[key]]
    ]


def doc_differences_markdown(cells: Sequence[CellResult]) -> list[str]:
    """Behaviours the suites recorded as differing from PyTorch's documents, by key, with where each was seen."""
    by_key: dict[str, list[tuple[CellResult, DocDifference]]] = {}
    for cell in cells:
        for difference in cell.doc_differences:
            by_key.setdefault(difference.key, []).append((cell, difference))
    if not by_key:
        return []
    lines = [
        "## Where runtimes differ from PyTorch's documents",
        "",
        f"{len(by_key)} behaviour(s) recorded by the suites' tests (the `doc_difference` fixture):",
        "",
    ]
    for key, seen in sorted(by_key.items()):
        seen_cells = list({cell.id: cell for cell, _ in seen}.values())
        extensions = {cell.extension for cell in seen_cells}
        # The other cells whose suite could have seen it: same extension, and its tests ran.
        unseen = [c for c in cells if c.extension in extensions and c not in seen_cells and c.tests.total]
        tests = sorted({t for _, d in seen for t in d.tests})
        shown = ", ".join(md_code(t) for t in tests[:3]) + (f" (+{len(tests) - 3} more)" if len(tests) > 3 else "")
        lines += [f"### {md_code(key)}", "", *(f"> {md_text(text)}" for text in sorted({d.text for _, d in seen})), ""]
        lines.append(f"- seen in {len(seen_cells)} cell(s): {_where(seen_cells)}")
        elsewhere = f": {_where(unseen)}" if unseen else ""
        lines.append(f"- not seen in {len(unseen)} other cell(s) of the same suite{elsewhere}")
        lines += [f"- recorded by {shown}", ""]
    return lines


def _where(cells: Sequence[CellResult]) -> str:
    """'builds `a`, `b` on torch 2.9.1, 2.10.0': the builds and runtime releases of some cells."""
    builds = ", ".join(f"`{b}`" for b in sorted({c.build_id for c in cells}))
    torches = sorted({c.runtime_torch for c in cells}, key=_release_key)
    return f"builds {builds} on torch {', '.join(torches)}"


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.partition("+")[0]))


def junit_xml(run: RunResult) -> str:
    suite = ET.Element("testsuite", name="torch-stable-abi-matrix", tests=str(len(run.cells)))
    failures = errors = skipped = 0
    for cell in sorted(run.cells, key=lambda c: natural_key(c.id)):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=cell.build_id,
            name=cell.runtime_id,
            time=f"{cell.durations.get('total') or 0:.3f}",
        )
        message = plain_text(f"{cell.status.value}: {cell.reason}")
        if cell.verdict is Verdict.BROKEN:
            failures += 1
            ET.SubElement(case, "failure", message=message, type=cell.status.value).text = plain_text(cell.expected_why)
            _reruns(case, cell.attempts[1:], "rerun")
        elif cell.verdict is Verdict.FLAKY:  # passed, with each failed attempt as Maven Surefire writes it
            _reruns(case, cell.attempts[:-1], "flaky")
        elif cell.verdict is Verdict.ERROR:
            errors += 1
            ET.SubElement(case, "error", message=message, type=cell.status.value)
        elif cell.verdict in (Verdict.SKIPPED, Verdict.EXPECTED_FAILURE, Verdict.KNOWN_BREAK):
            skipped += 1
            prefix = {
                Verdict.EXPECTED_FAILURE: f"expected failure{_class_of(cell)}: ",
                Verdict.KNOWN_BREAK: f"known break {cell.known_break}: ",
            }.get(cell.verdict, "")
            ET.SubElement(case, "skipped", message=prefix + message)
        ET.SubElement(case, "system-out").text = f"{cell.verdict.value}: {message}"
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _reruns(case: ET.Element, attempts: Sequence[Attempt], kind: str) -> None:
    """Surefire's <flakyFailure>/<flakyError> (a test that passed on a rerun) or <rerunFailure>/<rerunError>
    (a failed test's reruns that failed too), one per attempt."""
    for attempt in attempts:
        tag = f"{kind}Error" if attempt.verdict is Verdict.ERROR else f"{kind}Failure"
        element = ET.SubElement(
            case, tag, message=plain_text(f"{attempt.status.value}: {attempt.reason}"), type=attempt.status.value
        )
        ET.SubElement(element, "system-out").text = plain_text(attempt.logs.get("stdout", ""))


def write_report(run: RunResult, out_dir: Path) -> dict[str, Path]:
    """results.json, summary.md, junit.xml and report.html, each whole or not at all; every one is tried, and a
    failure names the files that could not be written (ReportError, after the others are written)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "results": out_dir / "results.json",
        "summary": out_dir / "summary.md",
        "junit": out_dir / "junit.xml",
        "html": out_dir / "report.html",
    }
    from harness.render.html import render as html  # it lays out what this module defines

    render: dict[str, Callable[[], str]] = {
        "results": lambda: json.dumps(run.to_json(), indent=2, ensure_ascii=False) + "\n",
        "summary": lambda: summary_markdown(run),
        "junit": lambda: junit_xml(run),
        "html": lambda: html(run, out_dir),
    }
    failed: list[str] = []
    for name, path in files.items():
        try:
            write_atomic(path, render[name]())
        except OSError as exc:
            failed.append(f"{path}: {exc.strerror or exc}")
    if failed:
        raise ReportError(run, out_dir, failed)
    return files


class ReportError(InfrastructureError):
    """Some report files could not be written; the run's results are still in hand (and on the terminal)."""

    def __init__(self, run: RunResult, out_dir: Path, failed: Sequence[str]) -> None:
        self.run = run
        self.out_dir = out_dir
        self.failed = list(failed)
        super().__init__(
            f"the report in {out_dir} is incomplete: could not write\n"
            + "\n".join(f"  - {f}" for f in self.failed)
            + "\n  free disk space or fix the directory's permissions, then run again"
        )


def load_results(path: Path) -> RunResult:
    return RunResult.from_json(json.loads(path.read_text()))


def relative_logs(paths: Sequence[tuple[str, Path | None]], base: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in paths:
        if path is not None and path.exists():
            try:
                out[name] = str(path.relative_to(base))
            except ValueError:
                out[name] = str(path)
    return out
