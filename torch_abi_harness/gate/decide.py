"""The release gate: GO or NO-GO for a torch release candidate, each reason with its evidence.

Six sources of evidence, combined:

1. `abi-diff` of the previous release against the candidate (its wheel, or the manifest's release):
   a removed stable export or a changed signature breaks every binary that uses it.
2. The matrix run with the candidate on both axes (`run --candidate`): a broken promise in either
   direction, an old build on the candidate (backward) or a build on the candidate's headers on an
   older release (forward), with the missing symbols or failing tests that show it. A known break
   that holds is listed apart; one that expired is a reason, by name.
3. The diff against the previous release's run (a baseline): which broken cells are new, what got fixed.
4. The candidate's headers (torch_abi_harness.gate.evidence): every declaration visible at a target whose
   release does not export it, unless a known break's `symbols:` acknowledge it; the header probe's cells
   (built from those headers, run on each older release), which name the symbols the headers lied about.
   What the candidate brings is a reason; what it carries from earlier releases (the previous release's
   headers showed it too) is listed with the release that introduced it, and is a reason only when the
   gate is strict (`--strict`): a gate red for the same old declarations release after release teaches its
   readers to ignore it, while a release engineer can act on what the candidate changed.
5. Its op schemas against the previous release's: a removed or incompatibly changed op that an extension
   of the matrix calls by name; the other breaking changes are listed by name, as at risk.
6. Its published wheels (torch_abi_harness.gate.ecosystem): a module that loaded on the previous release and not
   on the candidate, lost to a removed export (a reason), to the default build's switch of CUDA (stated), or to
   the host (never counted); those cells are judged there alone.

NO-GO when any reason stands (exit 1); GO when none does and every cell reached a verdict (exit 0);
UNDECIDED when no reason stands but some cell errored or the run was interrupted (exit 3): the
harness could not look everywhere, so it says nothing either way.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.text import md_text
from torch_abi_harness.gate.broken import BrokenCell, evidence_of, on_candidate
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.ecosystem import Ecosystem, apart, compare
from torch_abi_harness.gate.evidence import HeaderClaim, OpEvidence, ProbeCell, is_probe, probe_cells
from torch_abi_harness.results.diff import RunDiff
from torch_abi_harness.results.known_breaks import Outcome, State, outcomes
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.static.abi_diff import AbiDiff, SignatureChange
from torch_abi_harness.verdict import Verdict

# 2: headers, probe_cells, op_schemas, counts, removed_exports, broken_cells, timings; 3: carried (was
# inherited), strict, operators named, ecosystem (published wheels)
GATE_JSON_VERSION = 3


class Decision(enum.StrEnum):
    GO = "GO"
    NO_GO = "NO-GO"
    UNDECIDED = "UNDECIDED"


EXIT = {Decision.GO: ExitCode.OK, Decision.NO_GO: ExitCode.BROKEN, Decision.UNDECIDED: ExitCode.INFRASTRUCTURE}


@dataclasses.dataclass(frozen=True)
class Reason:
    """One reason against the candidate and the evidence for it (one line per export, signature or cell)."""

    title: str
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "evidence": list(self.evidence)}


@dataclasses.dataclass(frozen=True)
class GateEvidence:
    """gate.json's evidence as data: what a dashboard, a release tool or the replay reads instead of the prose."""

    counts: dict[str, int]
    removed_exports: tuple[str, ...]
    changed_signatures: tuple[SignatureChange, ...]
    broken_cells: tuple[BrokenCell, ...]
    headers_audited: bool
    headers: tuple[HeaderClaim, ...]
    probe_cells: tuple[ProbeCell, ...]
    op_schemas: OpEvidence | None
    timings: dict[str, float]
    ecosystem: Ecosystem | None = None  # the published wheels, previous -> candidate (None: the matrix has none)

    @classmethod
    def of(cls, abi: AbiDiff, run: RunResult, release: ReleaseEvidence, ecosystem: Ecosystem | None) -> GateEvidence:
        return cls(
            counts=run.counts(),
            removed_exports=tuple(abi.removed_exports),
            changed_signatures=tuple(abi.changed_signatures),
            broken_cells=tuple(BrokenCell.of(c) for c in run.cells if c.verdict is Verdict.BROKEN),
            headers_audited=release.headers_audited,
            headers=tuple(release.headers),
            probe_cells=probe_cells(run.cells, release.headers),
            op_schemas=release.ops,
            timings=dict(release.timings),
            ecosystem=ecosystem,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "removed_exports": list(self.removed_exports),
            "changed_signatures": [{"name": c.name, "old": c.old, "new": c.new} for c in self.changed_signatures],
            "broken_cells": [c.to_json() for c in self.broken_cells],
            "headers": {"audited": self.headers_audited, "findings": [c.to_json() for c in self.headers]},
            "probe_cells": [p.to_json() for p in self.probe_cells],
            "op_schemas": self.op_schemas.to_json() if self.op_schemas else None,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
            "ecosystem": self.ecosystem.to_json() if self.ecosystem else None,
        }


@dataclasses.dataclass(frozen=True)
class Gate:
    candidate: Candidate
    previous: str
    decision: Decision
    reasons: tuple[Reason, ...]
    evidence: tuple[str, ...]  # what was looked at and what it showed, for GO and NO-GO alike
    known_breaks: tuple[str, ...]  # accepted known breaks: listed apart, never reasons
    warnings: tuple[str, ...]  # fixed or unmatched known_breaks entries
    run_id: str
    baseline: str | None
    facts: GateEvidence  # the structured evidence of gate.json
    carried: tuple[str, ...] = ()  # header findings and probe cells the candidate carries from earlier releases
    strict: bool = False  # --strict: what is carried is a reason too

    @property
    def exit_code(self) -> ExitCode:
        return EXIT[self.decision]

    @property
    def summary(self) -> str:
        if self.decision is Decision.GO and self.carried:
            return (
                f"torch {self.candidate} brings no new break of the stable-ABI promise: GO; it carries "
                f"{len(self.carried)} from earlier releases (listed; --strict makes them reasons)."
            )
        if self.decision is Decision.GO:
            return f"torch {self.candidate} keeps the stable-ABI promise in both directions: GO."
        if self.decision is Decision.NO_GO:
            return f"torch {self.candidate} breaks the stable-ABI promise: NO-GO ({len(self.reasons)} reason(s))."
        return f"torch {self.candidate}: no break found, but the run is incomplete: UNDECIDED (exit 3)."

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": GATE_JSON_VERSION,
            "candidate": str(self.candidate),
            "previous": self.previous,
            "decision": self.decision.value,
            "exit_code": int(self.exit_code),
            "summary": self.summary,
            "reasons": [r.to_json() for r in self.reasons],
            "evidence": list(self.evidence),
            "known_breaks": list(self.known_breaks),
            "strict": self.strict,
            "carried": list(self.carried),
            "warnings": list(self.warnings),
            "run_id": self.run_id,
            "baseline": self.baseline,
            **self.facts.to_json(),
        }

    def markdown(self) -> str:
        """gate.md, which workflows post to the job summary: every text that comes from a cell (its reason, the
        tests it names) is escaped as summary.md escapes it (core.text), so it cannot inject markup."""
        title = f"# Release gate: torch {md_text(str(self.candidate))} (against {md_text(self.previous)})"
        lines = [f"{title}: **{self.decision.value}**", "", md_text(self.summary), ""]
        if self.reasons:
            lines += ["## Why not", ""]
            for reason in self.reasons:
                lines.append(f"- ❌ **{md_text(reason.title)}**")
                lines += [f"  - {md_text(item)}" for item in reason.evidence]
            lines.append("")
        lines += ["## Evidence", "", *(f"- {md_text(item)}" for item in self.evidence), ""]
        if self.facts.ecosystem is not None:
            lines += self.facts.ecosystem.markdown()
        if self.known_breaks:
            lines += ["## Known breaks (accepted until they expire; not reasons)", ""]
            lines += [f"- 🩹 {md_text(item)}" for item in self.known_breaks]
            lines.append("")
        lines += self._carried_section()
        lines += _ops_section(self.facts.op_schemas)
        if self.warnings:
            lines += ["## Warnings", "", *(f"- ⚠️ {md_text(item)}" for item in self.warnings), ""]
        return "\n".join(lines)

    def _carried_section(self) -> list[str]:
        if not self.carried:
            return []
        why = "reasons: the gate is strict" if self.strict else "not reasons; `--strict` makes them reasons"
        head = f"## Carried from earlier releases ({len(self.carried)}; {why})"
        return [head, "", *(f"- {md_text(item)}" for item in self.carried), ""]


def _ops_section(ops: OpEvidence | None) -> list[str]:
    """Every removed overload and BC-breaking schema change, by name: the ones the matrix calls first."""
    if ops is None or not ops.breaking:
        return []
    called = len(ops.breaking_called)
    head = f"## Operators removed or changed incompatibly ({len(ops.breaking)}; {called} called by the matrix's builds)"
    return [head, "", *(f"- {md_text(line)}" for line in ops.families()), ""]


@dataclasses.dataclass(frozen=True)
class ReleaseEvidence:
    """What the gate read besides abi-diff and the matrix: the candidate's headers and op schemas."""

    headers: tuple[HeaderClaim, ...] = ()
    headers_audited: bool = False
    ops: OpEvidence | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)


def decide(
    candidate: Candidate,
    previous: str,
    abi: AbiDiff,
    run: RunResult,
    diff: RunDiff | None,
    release: ReleaseEvidence | None = None,
    *,
    strict: bool = False,
) -> Gate:
    """NO-GO on any reason (the stable surface, what the candidate's headers bring, a broken promise, a called
    op broken, an expired known break; what its headers carry from earlier releases only when strict); else
    UNDECIDED when a cell errored or the run was interrupted (the matrix did not say everything); else GO."""
    read = _release_evidence(release, run) if release is not None else []
    release = release or ReleaseEvidence()
    known = outcomes(run.known_breaks, run.cells)
    ecosystem = compare(run, candidate.version, Version(previous))  # the published wheels: judged there, once
    probes = probe_cells(run.cells, release.headers)
    reasons = [
        *_abi_reasons(abi),
        *_header_reasons(release.headers, strict=strict),
        *_probe_reasons(run, probes, strict=strict),
        *_matrix_reasons(apart(run), candidate, diff, known),
        *_op_reasons(release.ops),
        *(Reason(title, lines) for title, lines in (ecosystem.reasons() if ecosystem else [])),
    ]
    evidence = [_abi_evidence(abi), *read, *_matrix_evidence(run, candidate, diff)]
    evidence += [ecosystem.evidence()] if ecosystem else []
    errors = [c for c in run.cells if c.verdict is Verdict.ERROR]
    if reasons:
        decision = Decision.NO_GO
    elif errors or run.interrupted:
        decision = Decision.UNDECIDED
        evidence.append(
            f"incomplete: {len(errors)} cell(s) ended in a harness error"
            + (" and the run was interrupted" if run.interrupted else "")
            + ": "
            + ", ".join(c.id for c in errors[:5])
        )
    else:
        decision = Decision.GO
    acknowledged = [
        f"header finding {c.name} (targets {', '.join(c.targets)}): acknowledged by known break {c.acknowledged_by}"
        for c in release.headers
        if c.acknowledged_by
    ]
    return Gate(
        candidate=candidate,
        previous=previous,
        decision=decision,
        reasons=tuple(reasons),
        evidence=tuple(evidence),
        known_breaks=tuple(o.line() for o in known if o.state is State.ACCEPTED) + tuple(acknowledged),
        warnings=tuple(o.line() for o in known if o.state in (State.FIXED, State.UNMATCHED)),
        run_id=run.run_id,
        baseline=diff.baseline if diff else None,
        facts=GateEvidence.of(abi, run, release, ecosystem),
        carried=carried_lines(release.headers, probes),
        strict=strict,
    )


def _header_reasons(claims: Sequence[HeaderClaim], *, strict: bool) -> list[Reason]:
    """What the candidate's headers bring, a reason; what they carry, one only when strict; expired known breaks."""
    open_claims = [c for c in claims if not c.acknowledged_by]
    plain = [c for c in open_claims if not c.expired]
    new = [c for c in plain if not c.carried]
    carried = [c for c in plain if c.carried]
    reasons: list[Reason] = []
    if new:
        reasons.append(
            Reason(
                f"the candidate's headers show {len(new)} new declaration(s) at a target whose release does not "
                "export them: a build for that target compiles, then fails to load there",
                tuple(c.line() for c in new),
            )
        )
    if carried and strict:
        reasons.append(
            Reason(
                f"strict: the candidate's headers still show {len(carried)} declaration(s) carried from earlier "
                "releases at a target whose release does not export them",
                tuple(c.line() for c in carried),
            )
        )
    for name in sorted({c.expired for c in open_claims if c.expired}):
        mine = [c for c in open_claims if c.expired == name]
        reasons.append(
            Reason(f"known break {name} expired: {len(mine)} header finding(s) again", tuple(c.line() for c in mine))
        )
    return reasons


def _probe_reasons(run: RunResult, probes: Sequence[ProbeCell], *, strict: bool) -> list[Reason]:
    """Broken probe cells: those missing anything the candidate brings are a reason; those missing only carried
    declarations are one only when strict."""
    carried_only = {p.id for p in probes if p.carried_only}
    broken = sorted((c for c in run.cells if is_probe(c) and c.verdict is Verdict.BROKEN), key=lambda c: c.id)
    new = [c for c in broken if c.id not in carried_only]
    reasons: list[Reason] = []
    if new:
        reasons.append(
            Reason(
                f"the header probe fails to load in {len(new)} cell(s): declarations its headers show at the "
                "build's target are missing from that target's release or a later one",
                tuple(f"{c.id}: {c.status.value}: missing {', '.join(c.missing_names) or c.reason}" for c in new),
            )
        )
    old = [c for c in broken if c.id in carried_only]
    if old and strict:
        reasons.append(
            Reason(
                f"strict: the header probe fails to load in {len(old)} cell(s) only for declarations carried from "
                "earlier releases",
                tuple(f"{c.id}: {c.status.value}: missing {', '.join(c.missing_names)}" for c in old),
            )
        )
    return reasons


def carried_lines(claims: Sequence[HeaderClaim], probes: Sequence[ProbeCell]) -> tuple[str, ...]:
    """What the candidate carries from earlier releases, one line each: the header findings (with the release
    that introduced each), then the probe cells that fail only for them."""
    findings = [f"header finding {c.line()}" for c in claims if c.carried and not c.acknowledged_by]
    cells = [
        f"header probe cell {p.id}: {p.verdict}: missing only carried {', '.join(p.missing)}"
        for p in probes
        if p.carried_only and p.verdict == Verdict.BROKEN
    ]
    return tuple(findings + cells)


def _op_reasons(ops: OpEvidence | None) -> list[Reason]:
    if ops is None or not ops.breaking_called:
        return []
    return [
        Reason(
            f"{len(ops.breaking_called)} op(s) that an extension of the matrix calls by name were removed or changed "
            "incompatibly",
            tuple(f"{c.op}: {c.what} (called by {', '.join(by)})" for c, by in ops.breaking_called),
        )
    ]


def _release_evidence(release: ReleaseEvidence, run: RunResult) -> list[str]:
    lines: list[str] = []
    if release.headers_audited:
        claims = release.headers
        acknowledged = sum(c.acknowledged_by is not None for c in claims)
        new = sum(not c.carried for c in claims)
        lines.append(
            f"header audit: {len(claims)} finding(s) ({new} new in the candidate, {len(claims) - new} carried from "
            f"earlier releases, {acknowledged} acknowledged by a known break)"
        )
    else:
        lines.append("header audit: not run")
    probes = probe_cells(run.cells, release.headers)
    if probes:
        failing = [p for p in probes if p.failing]
        carried = sum(p.carried_only for p in failing)
        lines.append(
            f"header probe: {len(probes)} cell(s), {len(failing)} failing to load ({len(failing) - carried} for "
            f"what the candidate brings, {carried} only for carried declarations)"
        )
    ops = release.ops
    if ops is None:
        lines.append("op schemas: not compared")
    elif not ops.compared:
        lines.append(f"op schemas: not compared: {ops.why_not}")
    else:
        risk = ", ".join(f"{ns} {n}" for ns, n in sorted(ops.at_risk.items())) or "none"
        lines.append(
            f"op schemas: {len(ops.breaking_called)} breaking change(s) to ops the matrix calls ({ops.called_ops} "
            f"op(s) called); at risk for extensions that call them: {risk} (each named below); "
            f"{ops.compatible} compatible change(s)"
        )
    if release.timings:
        lines.append("gate timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in release.timings.items()))
    return lines


def _abi_reasons(abi: AbiDiff) -> list[Reason]:
    reasons: list[Reason] = []
    if abi.removed_exports:
        reasons.append(
            Reason(
                f"the candidate removes {len(abi.removed_exports)} stable export(s) of {abi.old}: "
                "binaries that use them stop loading",
                abi.removed_exports,
            )
        )
    if abi.changed_signatures:
        reasons.append(
            Reason(
                f"{len(abi.changed_signatures)} stable shim signature(s) changed since {abi.old}",
                tuple(f"{c.name}: {c.old} -> {c.new}" for c in abi.changed_signatures),
            )
        )
    return reasons


def _abi_evidence(abi: AbiDiff) -> str:
    return (
        f"abi-diff {abi.old} -> {abi.new}: {len(abi.removed_exports)} removed export(s), "
        f"{len(abi.changed_signatures)} changed signature(s), {len(abi.added_exports)} added export(s), "
        f"{len(abi.added_declarations)} added declaration(s), {len(abi.changed_guards)} changed version guard(s)"
    )


def _matrix_reasons(
    run: RunResult, candidate: Candidate, diff: RunDiff | None, known: Sequence[Outcome]
) -> list[Reason]:
    """Broken promises not acknowledged by a known break, and known breaks that expired (each its own reason)."""
    new_ids = {c.id for c in diff.new_breaks} if diff else None
    expired = {o.entry.name: o for o in known if o.state is State.EXPIRED}
    broken = sorted((c for c in run.cells if c.verdict is Verdict.BROKEN and not is_probe(c)), key=lambda c: c.id)
    plain = [c for c in broken if c.known_break not in expired]
    reasons: list[Reason] = []
    if plain:
        reasons.append(
            Reason(
                f"{len(plain)} broken promise(s) in the matrix with the candidate on both axes",
                tuple(evidence_of(c, candidate, new=None if new_ids is None else c.id in new_ids) for c in plain),
            )
        )
    for name, outcome in sorted(expired.items()):
        cells = [c for c in broken if c.known_break == name]
        reasons.append(
            Reason(
                f"known break {name} expired on {outcome.entry.expires.isoformat()}: {len(cells)} cell(s) broken "
                f"again ({outcome.entry.link})",
                tuple(evidence_of(c, candidate, new=None) for c in cells),
            )
        )
    return reasons


def _matrix_evidence(run: RunResult, candidate: Candidate, diff: RunDiff | None) -> list[str]:
    forward = [c for c in run.cells if on_candidate(c.build_torch, candidate)]
    backward = [c for c in run.cells if on_candidate(c.runtime_torch, candidate)]
    evidence = [f"matrix run {run.run_id}: {len(run.cells)} cells: {_counted(run.cells)}"]
    for label, cells in (("built on the candidate (forward)", forward), ("run on the candidate (backward)", backward)):
        evidence.append(f"{label}: {len(cells)} cells, {_counted(cells)}")
    if diff is not None:
        evidence.append(
            f"against baseline {diff.baseline}: {len(diff.new_breaks)} new break(s), {len(diff.fixed)} fixed, "
            f"{len(diff.known_breaks)} known break(s), {len(diff.changed)} changed, {len(diff.added)} new cell(s)"
        )
        evidence += [f"fixed since the baseline: {c.id}: {c.before} -> {c.after}" for c in diff.fixed]
    return evidence


def previous_release(candidate: Candidate, runtimes: Sequence[Version]) -> Version:
    """The newest of the matrix's runtimes older than the candidate: the release it is compared with."""
    older = sorted({r for r in runtimes if r < candidate.version})
    if not older:
        raise BadInputError(f"no runtime of the matrix is older than the candidate {candidate}: pass --previous")
    return older[-1]


def _counted(cells: Sequence[CellResult]) -> str:
    """'28 kept, 21 expected failure, 0 broken': every verdict that occurs, and broken always."""
    counts = {v: sum(c.verdict is v for c in cells) for v in Verdict}
    return ", ".join(f"{n} {v.value.replace('_', ' ')}" for v, n in counts.items() if n or v is Verdict.BROKEN)
