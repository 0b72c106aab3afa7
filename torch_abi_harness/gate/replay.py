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

from torch_abi_harness.config import Matrix
from torch_abi_harness.core.errors import BadInputError, ExitCode, HarnessError
from torch_abi_harness.core.files import writable_dir, write_atomic
from torch_abi_harness.core.text import md_code, md_text
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.decide import Decision, Gate, GateEvidence
from torch_abi_harness.gate.orchestrate import GateHooks, GateOutcome, GateRequest, gate_on, run_gate
from torch_abi_harness.run.launch import load_plain_matrix

log = logging.getLogger(__name__)

REPLAY_JSON_VERSION = 2  # 2: each row's columns of replay.md (a graph's decide job leaves its row)
ROW_FILE = "replay-row.json"


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    """One release replayed: its decision, and the gate behind it (None: it did not get as far as a decision, or the
    row was read back from a graph's replay-row.json); columns: its cells of replay.md after the decision."""

    candidate: Version
    previous: Version
    decision: Decision
    reasons: tuple[str, ...]
    run_dir: Path | None
    seconds: float
    gate: Gate | None = None
    columns: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)  # gate.json, when read back

    @classmethod
    def decided(cls, gate: Gate, run_dir: Path, seconds: float) -> ReplayRow:
        reasons = tuple(r.title for r in gate.reasons)
        previous = Version(gate.previous)
        columns = f" {_counted(gate.facts)} |"
        return cls(gate.candidate.version, previous, gate.decision, reasons, run_dir, seconds, gate, columns)

    @classmethod
    def failed(cls, candidate: Version, previous: Version, error: HarnessError | str) -> ReplayRow:
        reasons = (f"error: {error}",)
        return cls(candidate, previous, Decision.UNDECIDED, reasons, None, 0.0, columns=_failed_columns(reasons))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplayRow:
        """A row as a decide job of the gate's graph left it (replay-row.json)."""
        return cls(
            Version(data["candidate"]),
            Version(data["previous"]),
            Decision(data["decision"]),
            tuple(data["reasons"]),
            Path(data["run_dir"]) if data["run_dir"] else None,
            float(data["seconds"]),
            columns=str(data["columns"]),
            data=dict(data["data"]),
        )

    @property
    def line(self) -> str:
        """Its row of replay.md."""
        return f"| {self.candidate} | {self.previous} | **{self.decision.value}** |{self.columns}"

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": str(self.candidate),
            "previous": str(self.previous),
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "evidence": list(self.gate.evidence) if self.gate else self.data.get("evidence", []),
            "run_dir": str(self.run_dir) if self.run_dir else "",
            "seconds": self.seconds,
            "data": self.gate.to_json() if self.gate else self.data,
            "columns": self.columns,
        }


def _failed_columns(reasons: tuple[str, ...]) -> str:
    return f" | | | | | {md_text('; '.join(reasons))} | |"


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


def replayed_pairs(request: GateRequest) -> tuple[Matrix, list[tuple[Version, Version]]]:
    """The matrix (loaded once for every candidate) and its (candidate, previous) pairs from --replay-from on."""
    assert request.replay_from is not None  # GateRequest: a replay has where it starts
    plain = load_plain_matrix(request.matrix, request.cache_dir)  # the selectors are checked against each plan
    pairs = replay_pairs([r.torch for r in plain.runtimes], request.replay_from)
    if not pairs:
        raise BadInputError(
            f"no runtime of {plain.path.name} from {request.replay_from} on has an older one to compare with"
        )
    return plain, pairs


def replay_jobs(request: GateRequest) -> dict[str, list[dict[str, str]]]:
    """`gate --replay --pairs`: the job matrix of ci/gate-replay.yml, one gate graph per (candidate, previous)."""
    _, pairs = replayed_pairs(request)
    return {"include": [{"candidate": str(new), "previous": str(old)} for new, old in pairs]}


def run_replay(request: GateRequest, hooks: GateHooks) -> ReplayOutcome:
    """Each release as the candidate against the one before it, gated here or (--replay-rows) as the graphs of
    ci/gate-replay.yml decided it: the table, replay.md and replay.json."""
    plain, pairs = replayed_pairs(request)
    writable_dir(request.execute.reports_dir, "--reports-dir")  # before any work
    started = time.monotonic()
    if request.replay_rows is not None:
        rows = gathered(pairs, request.replay_rows)
    else:
        rows = [gated(request, plain, new, old, hooks) for new, old in pairs]
    out = request.execute.reports_dir
    out.mkdir(parents=True, exist_ok=True)  # --replay-rows runs nothing that made it
    text, written = write_replay(out, rows, time.monotonic() - started)
    return ReplayOutcome(tuple(rows), text, written)


def write_replay(out: Path, rows: list[ReplayRow], seconds: float) -> tuple[str, tuple[Path, Path]]:
    """replay.md and replay.json (torch_abi_harness/schemas/replay.schema.json) in out: the table's text, and both
    files."""
    text = replay_markdown(rows, seconds)
    write_atomic(out / "replay.md", text)
    payload = {"schema_version": REPLAY_JSON_VERSION, "seconds": round(seconds, 1), "rows": [r.to_json() for r in rows]}
    write_atomic(out / "replay.json", json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    return text, (out / "replay.md", out / "replay.json")


def gated(request: GateRequest, plain: Matrix, new: Version, old: Version, hooks: GateHooks) -> ReplayRow:
    """One release gated here as the candidate against the one before it (an error: its row says so)."""
    began = time.monotonic()
    hooks.replaying(new, old)
    try:
        outcome = gate_on(request.on(Candidate.parse(str(new)), old), plain, None, hooks)
    except HarnessError as exc:
        return ReplayRow.failed(new, old, exc)
    return ReplayRow.decided(outcome.gate, outcome.run_dir, time.monotonic() - began)


def gathered(pairs: list[tuple[Version, Version]], folder: Path) -> list[ReplayRow]:
    """The rows the decide jobs of the replay's graphs left (each a replay-row.json in a folder of its own under
    folder: one artifact each); a pair without one is UNDECIDED: its graph reported no decision."""
    found: dict[tuple[Version, Version], ReplayRow] = {}
    for path in sorted(folder.glob(f"*/{ROW_FILE}")):
        try:
            row = ReplayRow.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadInputError(f"{path}: not a replay row of this harness ({type(exc).__name__}: {exc})") from exc
        found[row.candidate, row.previous] = row
    lost = f"its gate's graph left no decision ({ROW_FILE} in no folder of {folder})"
    return [found.get((new, old)) or ReplayRow.failed(new, old, lost) for new, old in pairs]


def decide_from_run(request: GateRequest, hooks: GateHooks) -> GateOutcome:
    """`gate --from-run`: the decision from the graph's merged run, and its replay row beside gate.json
    (replay-row.json), for ci/gate-replay.yml's table of every candidate's graph."""
    began = time.monotonic()
    outcome = run_gate(request, hooks)
    row = ReplayRow.decided(outcome.gate, outcome.run_dir, time.monotonic() - began)
    path = outcome.run_dir / ROW_FILE
    write_atomic(path, json.dumps(row.to_json(), indent=2, ensure_ascii=False, default=str) + "\n")
    return dataclasses.replace(outcome, written=(*outcome.written, path))


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
    lines += [row.line for row in rows]
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
