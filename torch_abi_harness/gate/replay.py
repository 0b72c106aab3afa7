"""`gate --replay`: every release of the matrix from a first one on, as the candidate against the one before it; a
table of decisions with the evidence behind each NO-GO (replay.md, replay.json), its rows read from each gate's
typed evidence."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError, ExitCode, HarnessError
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.core.text import md_code, md_text
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.decide import Decision, Gate, GateEvidence
from torch_abi_harness.gate.orchestrate import GateHooks, GateRequest, gate_on
from torch_abi_harness.run.launch import load_plain_matrix

log = logging.getLogger(__name__)

REPLAY_JSON_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    """One release replayed: its decision, and the gate behind it (None: it did not get as far as a decision)."""

    candidate: Version
    previous: Version
    decision: Decision
    reasons: tuple[str, ...]
    run_dir: Path | None
    seconds: float
    gate: Gate | None = None

    @classmethod
    def decided(cls, gate: Gate, run_dir: Path, seconds: float) -> ReplayRow:
        reasons = tuple(r.title for r in gate.reasons)
        previous = Version(gate.previous)
        return cls(gate.candidate.version, previous, gate.decision, reasons, run_dir, seconds, gate)

    @classmethod
    def failed(cls, candidate: Version, previous: Version, error: HarnessError) -> ReplayRow:
        return cls(candidate, previous, Decision.UNDECIDED, (f"error: {error}",), None, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": str(self.candidate),
            "previous": str(self.previous),
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "evidence": list(self.gate.evidence) if self.gate else [],
            "run_dir": str(self.run_dir) if self.run_dir else "",
            "seconds": self.seconds,
            "data": self.gate.to_json() if self.gate else {},
        }


@dataclasses.dataclass(frozen=True)
class ReplayOutcome:
    rows: tuple[ReplayRow, ...]
    markdown: str
    written: tuple[Path, ...]

    @property
    def exit_code(self) -> ExitCode:
        undecided = any(r.decision is Decision.UNDECIDED for r in self.rows)
        return ExitCode.INFRASTRUCTURE if undecided else ExitCode.OK


def replay_pairs(runtimes: list[Version], first: Version) -> list[tuple[Version, Version]]:
    """(candidate, previous) for every release of the matrix from first on, each against the one before it."""
    releases = sorted(set(runtimes))
    return [(new, old) for old, new in itertools.pairwise(releases) if new >= first]


def run_replay(request: GateRequest, hooks: GateHooks) -> ReplayOutcome:
    """Each release as the candidate against the one before it (the matrix loaded once for all of them): the
    table, replay.md and replay.json."""
    assert request.replay_from is not None  # GateRequest: a replay has where it starts
    plain = load_plain_matrix(request.matrix, request.cache_dir)  # the selectors are checked against each plan
    pairs = replay_pairs([r.torch for r in plain.runtimes], request.replay_from)
    if not pairs:
        raise BadInputError(
            f"no runtime of {plain.path.name} from {request.replay_from} on has an older one to compare with"
        )
    rows: list[ReplayRow] = []
    started = time.monotonic()
    for new, old in pairs:
        began = time.monotonic()
        hooks.replaying(new, old)
        try:
            candidate = Candidate.parse(str(new))
            outcome = gate_on(request.on(candidate, old), plain, None, hooks)
        except HarnessError as exc:
            rows.append(ReplayRow.failed(new, old, exc))
            continue
        rows.append(ReplayRow.decided(outcome.gate, outcome.run_dir, time.monotonic() - began))
    text, written = write_replay(request.execute.reports_dir, rows, time.monotonic() - started)
    return ReplayOutcome(tuple(rows), text, written)


def write_replay(out: Path, rows: list[ReplayRow], seconds: float) -> tuple[str, tuple[Path, Path]]:
    """replay.md and replay.json (torch_abi_harness/schemas/replay.schema.json) in out: the table's text, and both
    files."""
    text = replay_markdown(rows, seconds)
    write_atomic(out / "replay.md", text)
    payload = {"schema_version": REPLAY_JSON_VERSION, "seconds": round(seconds, 1), "rows": [r.to_json() for r in rows]}
    write_atomic(out / "replay.json", json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    return text, (out / "replay.md", out / "replay.json")


def replay_markdown(rows: list[ReplayRow], seconds: float) -> str:
    """The replay table: each release's decision and the evidence behind it, counted new apart from carried, with
    the latent breaks the release introduced (its headers' new findings), named."""
    today = datetime.date.today().isoformat()
    lines = [
        f"# Release gate replayed ({today}, {seconds / 60:.1f} min)",
        "",
        "| candidate | against | decision | header findings: new / carried / acknowledged "
        "| probe cells failing: new / carried | removed exports | called ops broken | other broken cells "
        "| introduced here | published wheels: modules kept / lost / gained |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        head = f"| {row.candidate} | {row.previous} | **{row.decision.value}** |"
        if row.gate is None:  # the gate did not get as far as a decision
            lines.append(f"{head} | | | | | {md_text('; '.join(row.reasons))} | |")
        else:
            lines.append(f"{head} {_counted(row.gate.facts)} |")
    return "\n".join(lines) + "\n"


def _counted(facts: GateEvidence) -> str:
    """A decided row's cells after its decision: the evidence counted, the new declarations named (four)."""
    findings = facts.headers
    new = [c.name for c in findings if not c.carried]
    acknowledged = sum(1 for c in findings if c.acknowledged_by)
    called = len(facts.op_schemas.breaking_called) if facts.op_schemas else 0
    others = [c for c in facts.broken_cells if not c.probe]
    shown = ", ".join(md_code(n) for n in new[:4]) + (f" (+{len(new) - 4})" if len(new) > 4 else "")
    return (
        f"{len(new)} / {len(findings) - len(new)} / {acknowledged} | {_probes_counted(facts)} | "
        f"{len(facts.removed_exports)} | {called} | {len(others)} | {shown or 'none'} | {_ecosystem(facts)}"
    )


def _probes_counted(facts: GateEvidence) -> str:
    """'1 / 2 of 38': the failing probe cells that miss something the candidate brings, those missing only
    carried declarations, of all the probe's cells."""
    failing = [p for p in facts.probe_cells if p.failing]
    carried = sum(p.carried_only for p in failing)
    return f"{len(failing) - carried} / {carried} of {len(facts.probe_cells)}"


def _ecosystem(facts: GateEvidence) -> str:
    """The published wheels' modules from the previous release to this one: kept / lost / gained, the lost ones
    counted against the candidate and those lost to its default build's switch named by number."""
    if facts.ecosystem is None:
        return "no published wheel"
    n = facts.ecosystem.counts()
    why = [f"{n['lost_counted']} counted"] if n["lost_counted"] else []
    why += [f"{n['lost_to_build_switch']} to the build switch"] if n["lost_to_build_switch"] else []
    why += [f"{n['lost_to_host']} to the host"] if n["lost_to_host"] else []
    return f"{n['kept']} / {n['lost']} / {n['gained']}" + (f" ({', '.join(why)})" if why else "")
