"""A run as junit.xml: one testcase per cell, and one per build that broke its promise to compile, for CI's
test views."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime

from torch_abi_harness.core.text import natural_key, plain_text
from torch_abi_harness.render.text import class_of
from torch_abi_harness.results.model import Attempt, RunResult
from torch_abi_harness.verdict import Verdict


def junit_xml(run: RunResult) -> str:
    broken_builds = [b for b in sorted(run.builds, key=lambda b: natural_key(b.id)) if b.verdict is Verdict.BROKEN]
    suite = ET.Element("testsuite", name="torch-stable-abi-matrix", tests=str(len(run.cells) + len(broken_builds)))
    _header(suite, run)
    failures = errors = skipped = 0
    for build in broken_builds:  # the promise a failed build breaks, said once; its cells are skipped as not run
        failures += 1
        case = ET.SubElement(suite, "testcase", classname=build.id, name="build", time="0.000")
        ET.SubElement(
            case, "failure", message=plain_text(f"BUILD_FAILED: {build.reason}"), type="BUILD_FAILED"
        ).text = plain_text(build.expected_why)
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
        elif cell.verdict in (Verdict.SKIPPED, Verdict.NOT_RUN, Verdict.EXPECTED_FAILURE, Verdict.KNOWN_BREAK):
            skipped += 1
            prefix = {
                Verdict.EXPECTED_FAILURE: f"expected failure{class_of(cell)}: ",
                Verdict.KNOWN_BREAK: f"known break {cell.known_break}: ",
            }.get(cell.verdict, "")
            ET.SubElement(case, "skipped", message=prefix + message)
        ET.SubElement(case, "system-out").text = f"{cell.verdict.value}: {message}"
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _header(suite: ET.Element, run: RunResult) -> None:
    """What CI test views read from the root (dorny/test-reporter, Jenkins, GitLab): the run's wall time,
    its start (ISO 8601, no zone suffix, as the junit schema has it), the machine that wrote the report, and
    the run's identity as properties (a run id, the harness that made it, the plan's digest: one for all shards)."""
    started, finished = _instant(run.started), _instant(run.finished)
    suite.set("time", f"{max(0.0, (finished - started).total_seconds()):.3f}" if started and finished else "0.000")
    suite.set("timestamp", started.replace(tzinfo=None).isoformat(timespec="seconds") if started else run.started)
    suite.set("hostname", socket.gethostname() or "localhost")
    properties = ET.SubElement(suite, "properties")
    facts = {"run_id": run.run_id, "harness_version": run.harness_version, "matrix": run.matrix}
    if run.plan is not None:
        facts["plan_digest"] = run.plan.digest
    for name, value in facts.items():
        ET.SubElement(properties, "property", name=name, value=value)


def _instant(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _reruns(case: ET.Element, attempts: Sequence[Attempt], kind: str) -> None:
    """Surefire's <flakyFailure>/<flakyError> (a test that passed on a rerun) or <rerunFailure>/<rerunError>
    (a failed test's reruns that failed too), one per attempt."""
    for attempt in attempts:
        tag = f"{kind}Error" if attempt.verdict is Verdict.ERROR else f"{kind}Failure"
        element = ET.SubElement(
            case, tag, message=plain_text(f"{attempt.status.value}: {attempt.reason}"), type=attempt.status.value
        )
        ET.SubElement(element, "system-out").text = plain_text(attempt.logs.get("stdout", ""))
