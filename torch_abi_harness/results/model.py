"""The result model: a cell's result, a run's result, and results.json read back (schema-checked).

Renderings of these records live in torch_abi_harness.render; this module loads no execution code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_abi_harness import __version__
from torch_abi_harness.config import HEADER_PROBE, Generated, KnownBreak
from torch_abi_harness.core.errors import BadInputError, ExitCode, InfrastructureError
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.core.text import natural_key
from torch_abi_harness.plan import PlanIdentity
from torch_abi_harness.provision.host import HostFacts
from torch_abi_harness.results.cases import CaseCounts, DocDifference, ModuleLoad, PublishedBuild
from torch_abi_harness.results.known_breaks import outcomes
from torch_abi_harness.results.prediction import CellPrediction
from torch_abi_harness.results.untrusted import own_files, published_builds
from torch_abi_harness.verdict import Expected, Verdict

# 2: each cell has its static prediction and findings; 3: and its doc_differences; 4: the run's plan identity
# (digest, every cell of the plan, the shard), each cell's attempts (--rerun-broken), the flaky verdict,
# each cell's expected_class (the condition that decided its promise) and its prediction's unmet conditions;
# 5: the Python of each cell's build and runtime; 6: the hosts the run ran on (OS, glibc, compiler, nvcc), the
# known_break verdict, each cell's known_break (the matrix's known_breaks entry that matched it), the run's
# known_breaks with their state, and its candidate; 7: the plan's inputs (matrix content, harness version, each
# extension's files), which its identity covers; 8: the builds as records (`build_results`: each build's verdict,
# reason, findings and the target it was really compiled for), the NOT_RUN status and verdict, exit code 4; each
# cell's modules (a published wheel's derived suite), the host-library class, and the run's published-wheel builds.
RESULTS_SCHEMA_VERSION = 9  # 9: a known break's acknowledge_all


@dataclasses.dataclass(frozen=True)
class BuildRow:
    """One build of a run, as the build row of the reports shows it: whether it built where promised (a build
    that failed where it should compile is one broken promise, its cells NOT_RUN), why not, and what was
    found about it (the target its compiler was really given, a prebuilt wheel's claim)."""

    id: str
    verdict: Verdict  # kept (built), broken (failed where promised to build), expected_failure, skipped, error
    reason: str  # why it failed or was not built; '' when it built
    expected_why: str
    findings: tuple[str, ...] = ()
    target: str | None = None  # the matrix's target (None: the build torch's own level)
    built_for: str | None = None  # the level it was really compiled for, where known

    @property
    def ok(self) -> bool:
        return self.verdict in (Verdict.KEPT, Verdict.UNEXPECTED_PASS)

    def line(self) -> str:
        """`<id>: <verdict>: <reason>`, with the level it was built for where that is not what was asked."""
        what = self.reason or "built"
        if self.target is not None and self.built_for is not None and self.built_for != self.target:
            what += f" (built for {self.built_for})"
        return f"{self.id}: {self.verdict.value}: {what}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "expected_why": self.expected_why,
            "findings": list(self.findings),
            "target": self.target,
            "built_for": self.built_for,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildRow:
        return cls(
            data["id"],
            Verdict(data["verdict"]),
            data["reason"],
            data["expected_why"],
            tuple(data["findings"]),
            data["target"],
            data["built_for"],
        )


STAGES = ("total", "build", "startup", "import_torch", "load", "tests")  # the stages a cell's durations time
LOG_NAMES = ("stdout", "stderr", "junit", "probe", "build")  # the logs a cell names


@dataclasses.dataclass(frozen=True, kw_only=True)
class Durations(Mapping[str, float | None]):
    """The seconds a cell's stages took. A stage it names with None was not reached (or not measured); one it
    does not name is left out of its JSON (a cell that never ran names only its build). Read as a mapping
    too, `durations.get("total")`, as results.json gives it."""

    total: float | None = None
    build: float | None = None
    startup: float | None = None
    import_torch: float | None = None
    load: float | None = None
    tests: float | None = None
    named: frozenset[str] = frozenset()  # which of the stages above it names
    extra: tuple[tuple[str, float | None], ...] = ()  # names a results.json gives beyond STAGES, kept as read

    @classmethod
    def ran(
        cls,
        *,
        total: float | None,
        build: float | None,
        startup: float | None,
        import_torch: float | None,
        load: float | None,
        tests: float | None,
    ) -> Durations:
        """A cell that ran: every stage named, None where it was not reached."""
        every = frozenset(STAGES)
        return cls(
            total=total, build=build, startup=startup, import_torch=import_torch, load=load, tests=tests, named=every
        )

    @classmethod
    def unrun(cls, build: float | None) -> Durations:
        """A cell that never ran: only its build's time."""
        return cls(build=build, named=frozenset({"build"}))

    def __getitem__(self, name: str) -> float | None:
        if name in self.named:
            value: float | None = getattr(self, name)
            return value
        return dict(self.extra)[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*(s for s in STAGES if s in self.named), *(name for name, _ in self.extra)])

    def __len__(self) -> int:
        return len(self.named) + len(self.extra)

    def to_json(self) -> dict[str, float | None]:
        return {k: (round(v, 3) if v is not None else None) for k, v in sorted(self.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, float | None]) -> Durations:
        known: dict[str, Any] = {k: v for k, v in data.items() if k in STAGES}
        extra = tuple((k, v) for k, v in data.items() if k not in STAGES)
        return dataclasses.replace(cls(named=frozenset(known), extra=extra), **known)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellLogs(Mapping[str, str]):
    """A cell's log files, each relative to the run directory; None: it has none of that kind. Read as a
    mapping too (name -> path, only those it has), as results.json gives them."""

    stdout: str | None = None
    stderr: str | None = None
    junit: str | None = None
    probe: str | None = None
    build: str | None = None
    extra: tuple[tuple[str, str], ...] = ()  # names a results.json gives beyond LOG_NAMES, kept as read

    def __getitem__(self, name: str) -> str:
        found: str | None = getattr(self, name) if name in LOG_NAMES else dict(self.extra).get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter([*(n for n in LOG_NAMES if getattr(self, n) is not None), *(n for n, _ in self.extra)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_json(self) -> dict[str, str]:
        return dict(sorted(self.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, str]) -> CellLogs:
        known: dict[str, Any] = {k: v for k, v in data.items() if k in LOG_NAMES}
        extra = tuple((k, v) for k, v in data.items() if k not in LOG_NAMES)
        return dataclasses.replace(cls(extra=extra), **known)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of a cell that was run more than once (`run --rerun-broken N`)."""

    status: Status
    verdict: Verdict
    reason: str
    seconds: float | None
    logs: CellLogs = dataclasses.field(default_factory=CellLogs)

    def to_json(self) -> dict[str, Any]:
        seconds = round(self.seconds, 3) if self.seconds is not None else None
        return {
            "status": self.status.value,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "seconds": seconds,
            "logs": self.logs.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], cell: str = "?") -> Attempt:
        logs = CellLogs.from_json(own_files(cell, data["logs"]))
        return cls(Status(data["status"]), Verdict(data["verdict"]), data["reason"], data["seconds"], logs)

    def line(self, number: int) -> str:
        return f"attempt {number}: {self.status.value} ({self.verdict.value}): {self.reason}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellResult:
    """A cell's result as recorded: what it was, what it did, its promise and its verdict. A plain record: the
    verdict is decided in torch_abi_harness/run/judge.py (and read back from results.json), never here."""

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
    durations: Durations = dataclasses.field(default_factory=Durations)
    logs: CellLogs = dataclasses.field(default_factory=CellLogs)
    prediction: CellPrediction | None = None  # the static prediction made before the cell ran
    findings: tuple[str, ...] = ()  # the outcome disagrees with the prediction; a prebuilt wheel with its claim
    doc_differences: tuple[DocDifference, ...] = ()  # what its tests saw the runtime do other than documented
    executor: str | None = None  # how its process started (fresh, forkserver, container); None: it did not start
    attempts: tuple[Attempt, ...] = ()  # every run of a cell run again (--rerun-broken), in order; else empty
    known_break: str | None = None  # the known_breaks entry matching its id, whatever its verdict (from version 6)
    modules: tuple[ModuleLoad, ...] = ()  # a published wheel's derived suite: how each extension module loaded
    generated: Generated | None = None  # a build the harness generated, not an extension of the matrix: 'header_probe'

    @property
    def missing_names(self) -> tuple[str, ...]:
        """Every symbol it was predicted to miss, else the one the loader named; () when none."""
        if self.prediction and self.prediction.missing:
            return tuple(m.name for m in self.prediction.missing)
        return (self.missing_symbol,) if self.missing_symbol else ()

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
                **({"generated": self.generated} if self.generated else {}),
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
            "durations": self.durations.to_json(),
            "logs": self.logs.to_json(),
            "prediction": self.prediction.to_json() if self.prediction else None,
            "findings": list(self.findings),
            "doc_differences": [d.to_json() for d in self.doc_differences],
            "executor": self.executor,
            "attempts": [a.to_json() for a in self.attempts],
            "known_break": self.known_break,
            "modules": [m.to_json() for m in self.modules],
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
            durations=Durations.from_json(data["durations"]),
            logs=CellLogs.from_json(own_files(data["id"], data["logs"])),
            prediction=CellPrediction.from_json(found) if (found := data.get("prediction")) else None,  # from 2
            findings=tuple(data.get("findings", ())),
            doc_differences=tuple(DocDifference.from_json(d) for d in data.get("doc_differences", ())),  # from 3
            executor=data.get("executor"),  # from 4
            attempts=tuple(Attempt.from_json(a, data["id"]) for a in data.get("attempts", ())),  # from 4
            known_break=data.get("known_break"),  # from 6
            modules=tuple(ModuleLoad.from_json(m) for m in data.get("modules", ())),  # from 8
            generated=build.get("generated", _generated_by_name(build["extension"])),
        )


def _generated_by_name(extension: str) -> Generated | None:
    """A results.json written before cells carried the marker knew the header probe by its name alone."""
    return HEADER_PROBE if extension == HEADER_PROBE else None


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
    published: tuple[PublishedBuild, ...] = ()  # the builds that are published wheels (from 8)
    builds: tuple[BuildRow, ...] = ()  # each build's outcome, the build rows (from 8)

    @property
    def exit_code(self) -> ExitCode:
        verdicts = {c.verdict for c in self.cells} | {b.verdict for b in self.builds}
        if Verdict.BROKEN in verdicts:
            return ExitCode.BROKEN
        if Verdict.ERROR in verdicts or self.interrupted:
            return ExitCode.INFRASTRUCTURE
        if self.unproven:
            return ExitCode.NOTHING_PROVEN
        return ExitCode.OK

    @property
    def unproven(self) -> str | None:
        """'nothing was proven: N cells skipped, M not run' when cells ran none of their promises; else None."""
        if not self.cells or any(c.verdict not in (Verdict.SKIPPED, Verdict.NOT_RUN) for c in self.cells):
            return None
        skipped = sum(c.verdict is Verdict.SKIPPED for c in self.cells)
        return f"nothing was proven: {skipped} cells skipped, {len(self.cells) - skipped} not run"

    def cell_findings(self, cell: CellResult) -> tuple[str, ...]:
        """A cell's findings but those of its build (the build row shows them once)."""
        of_build = {f for b in self.builds if b.id == cell.build_id for f in b.findings}
        return tuple(f for f in cell.findings if f not in of_build)

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
            "build_results": [b.to_json() for b in sorted(self.builds, key=lambda b: natural_key(b.id))],
            "runtimes": list(self.runtime_order),
            "hosts": [h.to_json() for h in self.hosts],
            "published": [p.to_json() for p in self.published],
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
            published=published_builds(data.get("published", ())),  # from 8
            builds=tuple(BuildRow.from_json(b) for b in data.get("build_results", ())),  # from 8
        )


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
    """Every reader of a results.json (report, diff, merge, the gate's baseline, census, --rerun-failed) comes here.
    A file of a newer schema is refused before it is read: its fields were read as this version's, so a newer
    harness's meaning passed for this one's (a version 99 file merged and reported without a word)."""
    data = json.loads(path.read_text())
    version = data.get("schema_version") if isinstance(data, dict) else None
    if type(version) is not int or version < 1:
        raise BadInputError(
            f"{path}: not a results.json of this harness: its schema_version is {version!r}, not a number"
        )
    if version > RESULTS_SCHEMA_VERSION:
        raise BadInputError(
            f"{path}: results.json of schema_version {version}, and this harness ({__version__}) reads up to "
            f"{RESULTS_SCHEMA_VERSION}: it was written by a newer harness; upgrade this one "
            "(pip install -U torch-abi-harness) to read it"
        )
    return RunResult.from_json(data)


def relative_logs(paths: Sequence[tuple[str, Path | None]], base: Path) -> CellLogs:
    """The logs that exist, relative to the run directory; one outside it is left out (a results.json names only
    its own files: read back, any other path is refused as bad input)."""
    out: dict[str, str] = {}
    for name, path in paths:
        if path is not None and path.exists() and path.is_relative_to(base):
            out[name] = str(path.relative_to(base))
    return CellLogs.from_json(out)
