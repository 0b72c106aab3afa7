"""What the gate reads besides the matrix: the candidate's headers, its header probe cells, its op schemas.

- **Header findings**: every declaration the candidate's public stable headers leave visible at a
  target T (from the oldest target to its own) that release T does not export (`audit-guards`), and
  every header-only wrapper or macro a build at T cannot use. Each says whether the previous release's
  headers showed it too (inherited) or the candidate brings it (new), and which known break, if any,
  acknowledges it (matrix.yaml `known_breaks:` with `symbols:`).
- **Probe cells**: the header probe (torch_abi_harness.gate.probe_extension) built on the candidate at each target and
  run on that target's release and later; a broken one names the symbols its headers lied about.
- **Op schemas**: the dispatcher schemas of the previous release and the candidate; a removed or
  incompatibly changed op that an extension of the matrix calls by name breaks it; the other breaking
  changes are at risk for extensions that call them, counted by namespace.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from torch_abi_harness.config import HEADER_PROBE, KnownBreak
from torch_abi_harness.results.known_breaks import symbol_acknowledged
from torch_abi_harness.results.model import CellResult
from torch_abi_harness.static.audit import GuardAudit
from torch_abi_harness.static.op_calls import OpCall
from torch_abi_harness.static.op_registry import OpChange
from torch_abi_harness.static.op_schema import Change
from torch_abi_harness.verdict import Verdict


@dataclasses.dataclass(frozen=True)
class HeaderClaim:
    """One declaration the candidate's headers show at targets whose releases do not export it."""

    name: str
    targets: tuple[str, ...]  # every target that sees it while its release does not export it
    chain: tuple[str, ...]  # the headers that make it visible, from the one an extension includes
    first_exported: str | None
    kind: str  # 'declaration' (a C shim), else the header finding's kind: 'wrapper', 'macro' or 'headers'
    detail: str  # one line: what the audit says
    inherited: bool  # the previous release's headers showed it at those targets too
    acknowledged_by: str | None = None  # the known break whose symbols match it, while it holds
    expired: str | None = None  # a matching known break that expired

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "targets": list(self.targets),
            "chain": list(self.chain),
            "first_exported": self.first_exported,
            "inherited": self.inherited,
            "acknowledged_by": self.acknowledged_by,
            "expired_known_break": self.expired,
            "detail": self.detail,
        }

    def line(self) -> str:
        origin = "inherited from the previous release" if self.inherited else "new in the candidate"
        return f"{self.detail} [{origin}]"


def header_claims(
    audit: GuardAudit, previous: GuardAudit | None, entries: Sequence[KnownBreak], today: datetime.date
) -> tuple[HeaderClaim, ...]:
    """The audit's findings as claims, each marked inherited (same name and a shared target in the previous
    release's audit) and acknowledged by the first holding known break whose symbols match its name."""
    before: dict[str, set[str]] = {}
    if previous is not None:
        for item in previous.breaks:
            before.setdefault(item.name, set()).update(str(t) for t in item.missing_at or (item.visible_from,))
        for finding in previous.header_findings:
            before.setdefault(finding.name, set()).add(str(finding.target))
    claims: list[HeaderClaim] = []
    for item in audit.breaks:
        if item.confirmed is False:  # compiling disproved it
            continue
        targets = tuple(str(t) for t in item.missing_at or (item.visible_from,))
        claims.append(
            HeaderClaim(
                item.name,
                targets,
                item.chain,
                item.first_exported,
                "declaration",
                item.describe(),
                bool(before.get(item.name, set()) & set(targets)),
            )
        )
    for finding in audit.header_findings:
        target = str(finding.target)
        claims.append(
            HeaderClaim(
                finding.name,
                (target,),
                (),
                None,
                finding.kind,
                finding.describe(),
                target in before.get(finding.name, set()),
            )
        )
    return tuple(_acknowledged(c, entries, today) for c in claims)


def _acknowledged(claim: HeaderClaim, entries: Sequence[KnownBreak], today: datetime.date) -> HeaderClaim:
    matching = [e for e in entries if e.symbols and symbol_acknowledged(e, claim.name)]
    holding = [e for e in matching if e.expires >= today]
    if holding:
        return dataclasses.replace(claim, acknowledged_by=holding[0].name)
    if matching:
        return dataclasses.replace(claim, expired=matching[0].name)
    return claim


@dataclasses.dataclass(frozen=True)
class ProbeCell:
    """A header probe cell: where the probe built at a target ran, and what it could not resolve."""

    id: str
    target: str | None
    runtime: str
    verdict: str
    missing: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"missing": list(self.missing)}


FAILED = (Verdict.BROKEN, Verdict.KNOWN_BREAK)  # a probe cell that did not load, acknowledged or not


def is_probe(cell: CellResult) -> bool:
    """A cell of the header probe: its build is marked generated as the probe (not known by its name)."""
    return cell.generated == HEADER_PROBE


def probe_cells(cells: Iterable[CellResult]) -> tuple[ProbeCell, ...]:
    return tuple(
        ProbeCell(c.id, c.target, c.runtime_torch, c.verdict.value, c.missing_names if c.verdict in FAILED else ())
        for c in cells
        if is_probe(c)
    )


@dataclasses.dataclass(frozen=True)
class OpEvidence:
    """The op schema diff from the previous release to the candidate, read against what the matrix calls."""

    compared: bool  # both releases' schemas are recorded
    why_not: str  # when not compared
    breaking_called: tuple[tuple[OpChange, tuple[str, ...]], ...]  # each change with the extensions that call it
    at_risk: dict[str, int]  # breaking changes no extension of the matrix calls, by namespace
    compatible: int  # new overloads and compatible schema changes
    called_ops: int  # distinct ops the matrix's extensions call

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "why_not": self.why_not or None,
            "breaking_called": [c.to_json() | {"called_by": list(by)} for c, by in self.breaking_called],
            "at_risk_by_namespace": dict(sorted(self.at_risk.items())),
            "compatible_changes": self.compatible,
            "called_ops": self.called_ops,
        }


def op_evidence(
    changes: Sequence[OpChange] | None, calls: dict[str, frozenset[OpCall]], why_not: str = ""
) -> OpEvidence:
    """changes: diff_releases(previous, candidate), None when not both recorded; calls: per extension name."""
    called_ops = {call.op for found in calls.values() for call in found}
    if changes is None:
        return OpEvidence(
            compared=False, why_not=why_not, breaking_called=(), at_risk={}, compatible=0, called_ops=len(called_ops)
        )
    breaking = [c for c in changes if c.change is Change.BREAKING]
    hit: list[tuple[OpChange, tuple[str, ...]]] = []
    at_risk: Counter[str] = Counter()
    for change in breaking:
        users = tuple(sorted(name for name, found in calls.items() if _calls(found, change.op)))
        if users:
            hit.append((change, users))
        else:
            at_risk[change.op.split("::", 1)[0]] += 1
    compatible = sum(c.change is not Change.BREAKING for c in changes)
    return OpEvidence(
        compared=True,
        why_not="",
        breaking_called=tuple(hit),
        at_risk=dict(at_risk),
        compatible=compatible,
        called_ops=len(called_ops),
    )


def _calls(found: Iterable[OpCall], key: str) -> bool:
    """key is 'ns::op.overload' (or 'ns::op' for the default overload): does a call name that overload?"""
    op, _, overload = key.partition(".")
    return any(call.op == op and (call.overload is None or (call.overload or "") == overload) for call in found)
