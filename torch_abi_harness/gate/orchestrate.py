"""The gate, from its request to its decision: what `gate --candidate` asks, parsed once (GateRequest), turned into
the decision, its evidence, the run and the files written (GateOutcome).

The matrix is loaded once; the candidate's env is made first and handed to what reads its headers (the probe,
the audit) and its torch (the op schemas); the run is the run wing's (torch_abi_harness.run.launch); report.html
is rendered once, last, from the run, the baseline diff and the decision in hand. What the gate shows while it
goes is the caller's (GateHooks): the CLI prints, this module only logs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time
from pathlib import Path
from typing import Protocol

from packaging.version import Version

from torch_abi_harness.config import Matrix
from torch_abi_harness.core.errors import BadInputError, HarnessError
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.gate.candidate import Candidate, ensure_candidate_env, oldest_served, with_candidate
from torch_abi_harness.gate.decide import Gate, ReleaseEvidence, decide, previous_release
from torch_abi_harness.gate.ecosystem import on_both
from torch_abi_harness.gate.evidence import OpEvidence, header_claims, is_probe, op_evidence
from torch_abi_harness.gate.merged import read_executed
from torch_abi_harness.plan import Plan, make_plan
from torch_abi_harness.provision.envs import Env, cache_dir_of
from torch_abi_harness.results.diff import RunDiff, compare, load_run
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.run.launch import (
    Executed,
    ExecuteOptions,
    MatrixRequest,
    RunHooks,
    execute_plan,
    load_plain_matrix,
)
from torch_abi_harness.static.abi_diff import diff, surface
from torch_abi_harness.static.audit import GuardAudit, audit_guards
from torch_abi_harness.static.header_compiles import HeaderCompiler
from torch_abi_harness.static.manifest import Manifest, packaged_manifest
from torch_abi_harness.static.op_registry import diff_releases, packaged_op_schemas, with_release
from torch_abi_harness.static.visibility import OLDEST_TARGET, packaged_visibility

log = logging.getLogger(__name__)


class GateHooks(RunHooks, Protocol):
    """What the gate shows while it goes, besides its run's own."""

    def step(self, name: str, detail: str) -> None: ...  # a stage before the run: abi-diff, headers
    def compared(self, result: RunDiff) -> None: ...  # the run against the baseline
    def replaying(self, candidate: Version, previous: Version) -> None: ...  # `gate --replay`: the next pair


@dataclasses.dataclass(frozen=True, kw_only=True)
class GateRequest:
    """Everything the gate needs, parsed from the command line once. A replay (replay_from set) takes its
    candidates from the matrix: then candidate, previous, candidate_wheel and baseline are not given."""

    matrix: MatrixRequest
    execute: ExecuteOptions
    select: tuple[str, ...] = ()
    candidate: Candidate | None = None
    previous: Version | None = None  # None: the matrix's newest runtime below the candidate
    candidate_wheel: Path | None = None
    baseline: Path | None = None
    replay_from: Version | None = None  # `gate --replay`: every release of the matrix from this one on
    strict: bool = False  # --strict: what the candidate carries from earlier releases is a reason too
    from_run: Path | None = None  # `gate --from-run`: the merged run of the gate's graph, decided on, no cell run
    replay_rows: Path | None = None  # `gate --replay --replay-rows`: the rows the replay's graphs left, tabulated

    def __post_init__(self) -> None:
        if self.from_run is not None and (self.replay_from is not None or self.execute.prebuilt is None):
            raise BadInputError(
                "gate --from-run decides one candidate from its graph's merged run: it needs --prebuilt BUILT (the "
                "build jobs' hand-offs: what the builds call) and takes no --replay (each candidate has its own graph)"
            )
        if self.replay_rows is not None and self.replay_from is None:
            raise BadInputError("gate --replay-rows tabulates a replay's graphs: add --replay")
        if self.replay_from is not None:
            if self.candidate or self.previous or self.candidate_wheel or self.baseline:
                raise BadInputError(
                    "gate --replay takes its candidates from the matrix: drop --candidate, --previous, "
                    "--candidate-wheel and --baseline"
                )
        elif self.candidate is None:
            raise BadInputError("gate: --candidate RELEASE is required (the release to decide on, e.g. 2.16.0)")

    @property
    def cache_dir(self) -> Path:
        return cache_dir_of(self.execute.cache_dir)

    def on(self, candidate: Candidate, previous: Version) -> GateRequest:
        """One gate of a replay: this candidate against this previous release."""
        return dataclasses.replace(self, candidate=candidate, previous=previous, replay_from=None)


def release_option(option: str, text: str) -> Version:
    """--previous or --replay-from RELEASE as a version (bad input when it is none)."""
    try:
        return Version(text)
    except ValueError as exc:
        raise BadInputError(f"{option} {text!r}: not a release such as 2.10.0") from exc


@dataclasses.dataclass(frozen=True)
class GateOutcome:
    """The decision (with its evidence, gate.facts), the run it read, the baseline diff and the files written."""

    gate: Gate
    executed: Executed
    diff: RunDiff | None
    written: tuple[Path, ...]

    @property
    def run(self) -> RunResult:
        return self.executed.run

    @property
    def run_dir(self) -> Path:
        return self.executed.run_dir


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What the gate made before the run: the candidate located, the release it is compared with, its env, the
    plan with the candidate on both axes."""

    candidate: Candidate
    previous: Version
    env: Env
    plan: Plan
    plain: Matrix
    manifest: Manifest


def run_gate(request: GateRequest, hooks: GateHooks) -> GateOutcome:
    """`gate --candidate`: every input checked before any work, the matrix loaded once, then the decision."""
    baseline = load_run(request.baseline) if request.baseline else None
    plain = load_plain_matrix(request.matrix, request.cache_dir)
    return gate_on(request, plain, baseline, hooks)


def gate_on(request: GateRequest, plain: Matrix, baseline: RunResult | None, hooks: GateHooks) -> GateOutcome:
    """abi-diff, the header audit, the matrix (with the header probe) on both axes, the op schema diff, the
    baseline diff: the decision, written as gate.md and gate.json beside the run's report."""
    prepared = prepare(request, plain)
    merged = merged_run(request, prepared.plan, hooks)  # --from-run: read and checked before any work
    candidate, previous = prepared.candidate, prepared.previous
    timings: dict[str, float] = {}
    started = time.monotonic()
    hooks.step("abi-diff", f"{previous} -> {candidate.ref}")
    abi = diff(surface(prepared.manifest, str(previous)), surface(prepared.manifest, candidate.ref))
    timings["abi_diff"] = time.monotonic() - started
    started = time.monotonic()
    oldest = oldest_served(plain)
    hooks.step("headers", f"torch {candidate} at every target from {oldest}")
    audit, earlier = header_audits(prepared, oldest, HeaderCompiler(request.cache_dir))
    if audit.cuda is not None:
        hooks.step("headers", audit.cuda.note())
    timings["header_audit"] = time.monotonic() - started
    started = time.monotonic()
    executed = merged or execute_plan(prepared.plan, request.execute, hooks, html=False)  # report.html: last, once
    timings["matrix_run"] = time.monotonic() - started
    timings |= probe_timings(executed, prepared.plan)
    try:
        started = time.monotonic()
        ops = op_schema_evidence(prepared, executed)
        timings["op_schema_diff"] = time.monotonic() - started
        result = against(baseline, executed, hooks)
        claims = header_claims(audit, earlier, executed.run.known_breaks, datetime.date.today())
        gate = decide(
            candidate,
            str(previous),
            abi,
            executed.run,
            result,
            ReleaseEvidence(claims, headers_audited=True, ops=ops, timings=timings),
            strict=request.strict,
        )
        gate = with_cuda_side(gate, audit)
    except HarnessError:
        write_report_page(executed, None, None)  # the run's page, as far as the gate got
        raise
    return GateOutcome(gate, executed, result, written(gate, executed, result))


def prepare(request: GateRequest, plain: Matrix) -> _Prepared:
    """The candidate located and compared with its previous release, its env made (once: the probe, the audit,
    the op schemas read it), the plan with the candidate on both axes and its header probe."""
    assert request.candidate is not None  # GateRequest: a gate that is no replay has its candidate
    manifest = packaged_manifest()
    previous = request.previous or previous_release(request.candidate, [r.torch for r in plain.runtimes])
    variants = [r.variant for r in plain.runtimes]
    candidate = request.candidate.located(
        request.candidate_wheel, plain.sources.find_links, manifest.releases, variants
    )
    env = ensure_candidate_env(plain, candidate, request.cache_dir)
    matrix = gate_matrix(plain, candidate, previous, request.cache_dir, env)
    plan = make_plan(matrix, request.select, request.matrix.backend)
    return _Prepared(candidate, previous, env, plan, plain, manifest)


def gate_matrix(
    plain: Matrix, candidate: Candidate, previous: Version | None, cache_dir: Path, env: Env | None
) -> Matrix:
    """The gate's matrix, one rule for `gate` and for the jobs of its CI graph (`plan`, `build`, `run` with
    --candidate and --previous): the candidate on both axes with its header probe (headers from env when the
    packaged data lacks them), each published wheel on the previous release and the candidate only (previous
    None: the matrix's newest runtime below the candidate)."""
    previous = previous or previous_release(candidate, [r.torch for r in plain.runtimes])
    matrix = with_candidate(plain, candidate, cache_dir / "header-probes", env)
    return on_both(matrix, (previous, candidate.version))  # a published wheel: on these two releases only


def merged_run(request: GateRequest, plan: Plan, hooks: GateHooks) -> Executed | None:
    """--from-run: the matrix with the candidate on both axes as the gate's CI graph ran it (its merged run, which
    must be this very plan, and what its builds call); None: the gate runs the matrix here."""
    if request.from_run is None:
        return None
    assert request.execute.prebuilt is not None  # GateRequest: --from-run comes with --prebuilt
    hooks.step("matrix", f"the graph's merged run {request.from_run}, its builds from {request.execute.prebuilt}")
    return read_executed(plan, request.from_run, request.execute.prebuilt)


def header_audits(
    prepared: _Prepared, oldest: ApiLevel, compiler: HeaderCompiler
) -> tuple[GuardAudit, tuple[GuardAudit, ...]]:
    """The candidate's headers audited at every target from the oldest the matrix serves, each claim confirmed
    by compiling against its env's torch/include; then, from the packaged data, the previous release's and each
    earlier one's, newest first, as long as the harness preprocessed their headers: the walk back that tells a
    carried finding from a new one, and finds the release that introduced it (empty: the previous release's
    headers were never preprocessed)."""
    include = prepared.env.torch_lib.parent / "include"
    manifest = prepared.manifest
    audit = audit_guards(manifest, str(prepared.candidate), oldest, include, probe=True, compiler=compiler)
    return audit, tuple(audit_guards(manifest, r, oldest, None, probe=False) for r in earlier_audited(prepared))


def earlier_audited(prepared: _Prepared) -> list[str]:
    """The previous release and the manifest's releases before it, newest first, up to the first the harness
    cannot audit (headers never preprocessed, or older than the oldest target)."""
    visible = packaged_visibility()
    older = sorted((Version(r) for r in prepared.manifest.releases if Version(r) <= prepared.previous), reverse=True)
    found: list[str] = []
    if not older or older[0] != prepared.previous:  # a previous release the manifest does not know
        return found
    for release in older:
        if str(release) not in visible or ApiLevel.of(release) < OLDEST_TARGET:
            break
        found.append(str(release))
    return found


def with_cuda_side(gate: Gate, audit: GuardAudit) -> Gate:
    """The gate's evidence says how the CUDA side of the headers was audited, after the header audit's line; a
    side not audited (no CUDA headers here) is a warning too: its findings would be missing, not absent."""
    if audit.cuda is None:
        return gate
    note = f"header audit: {audit.cuda.note()}"
    evidence = list(gate.evidence)
    at = next((i + 1 for i, line in enumerate(evidence) if line.startswith("header audit:")), len(evidence))
    evidence.insert(at, note)
    warnings = gate.warnings if audit.cuda.include is not None else (*gate.warnings, note)
    return dataclasses.replace(gate, evidence=tuple(evidence), warnings=warnings)


def generated_names(plan: Plan) -> frozenset[str]:
    """The extensions the harness generated for this plan (the header probe), by their mark."""
    return frozenset(b.extension.name for b in plan.builds if b.extension.generated is not None)


def probe_timings(executed: Executed, plan: Plan) -> dict[str, float]:
    """What the header probe added to the run: its builds, and its cells' time (summed over cells)."""
    cells = [c for c in executed.run.cells if is_probe(c)]
    seconds = sum(c.durations.get("total") or 0.0 for c in cells)  # 'build' is the build's time, per cell
    builds = sum(executed.build_seconds.get(name, 0.0) for name in generated_names(plan))
    return {"probe_builds": builds, "probe_cells": seconds}


def op_schema_evidence(prepared: _Prepared, executed: Executed) -> OpEvidence:
    """The op schema diff previous -> candidate against what the matrix's builds call; a candidate the data
    file does not record is read from its own torch (a few seconds: it imports torch)."""
    previous, candidate = str(prepared.previous), str(prepared.candidate)
    schemas = packaged_op_schemas()
    generated = generated_names(prepared.plan)
    calls = {name: found for name, found in executed.op_calls.items() if name not in generated}
    if candidate not in schemas.releases:
        schemas = with_release(schemas, candidate, prepared.env.python)
    missing = [r for r in (previous, candidate) if r not in schemas.releases]
    if missing:
        why = (
            f"no op schemas recorded for torch {', '.join(missing)} (torch_abi_harness/data/op_schemas.json; "
            "regenerate with python tools/gen_op_schemas.py --ensure)"
        )
        return op_evidence(None, calls, why)
    return op_evidence(diff_releases(schemas, previous, candidate), calls)


def against(baseline: RunResult | None, executed: Executed, hooks: GateHooks) -> RunDiff | None:
    """diff.md and diff.json in the run's report (when a baseline was given), shown."""
    if baseline is None:
        return None
    result = compare(baseline, executed.run)
    write_atomic(executed.run_dir / "diff.md", result.markdown())
    write_atomic(executed.run_dir / "diff.json", json.dumps(result.to_json(), indent=2) + "\n")
    hooks.compared(result)
    return result


def written(gate: Gate, executed: Executed, result: RunDiff | None) -> tuple[Path, ...]:
    """gate.md, gate.json, then report.html rendered once with the diff and the decision in hand."""
    run_dir = executed.run_dir
    write_atomic(run_dir / "gate.md", gate.markdown())
    write_atomic(run_dir / "gate.json", json.dumps(gate.to_json(), indent=2, ensure_ascii=False) + "\n")
    page = write_report_page(executed, result, gate)
    diffs = (run_dir / "diff.md", run_dir / "diff.json") if result is not None else ()
    return (run_dir / "gate.md", run_dir / "gate.json", page, *diffs)


def write_report_page(executed: Executed, result: RunDiff | None, gate: Gate | None) -> Path:
    """report.html from the objects in hand (nothing is read back from the run directory but the logs' tails)."""
    from torch_abi_harness.render.html import Beside, write_html  # jinja2: only for the commands that write it

    beside = Beside(result.to_json() if result else None, gate.to_json() if gate else None)
    return write_html(executed.run, executed.run_dir, beside)
