"""What the gate reads besides the matrix: the candidate's headers, its header probe cells, its op schemas.

- **Header findings**: every declaration the candidate's public stable headers leave visible at a
  target T (from the oldest target to its own) that release T does not export (`audit-guards`), and
  every header-only wrapper or macro a build at T cannot use. Each says whether the previous release's
  headers showed it too at every one of those targets (carried, with the release that introduced it, found
  by walking back through the earlier releases' audits) or the candidate brings it (new), and which known
  break, if any, acknowledges it (matrix.yaml `known_breaks:` with `symbols:`). A release engineer acts on
  what the candidate changed: a carried finding is listed and counted, a reason only under `--strict`.
- **Probe cells**: the header probe (torch_abi_harness.gate.probe_extension) built on the candidate at each target and
  run on that target's release and later; a broken one names the symbols its headers lied about, and is carried
  when every one of them is a carried finding.
- **Op schemas**: the dispatcher schemas of the previous release and the candidate; a removed or
  incompatibly changed op that an extension of the matrix calls by name breaks it; the other breaking
  changes are at risk for extensions that call them, each named (a family of overloads sharing a cause on
  one line).
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
    carried: bool  # the previous release's headers showed it at every one of those targets too
    acknowledged_by: str | None = None  # the known break whose symbols match it, while it holds
    expired: str | None = None  # a matching known break that expired
    since: str | None = None  # carried: the release whose headers first showed it ('<=2.9.1': the oldest audited)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "targets": list(self.targets),
            "chain": list(self.chain),
            "first_exported": self.first_exported,
            "carried": self.carried,
            "carried_since": self.since,
            "acknowledged_by": self.acknowledged_by,
            "expired_known_break": self.expired,
            "detail": self.detail,
        }

    def line(self) -> str:
        origin = f"carried since {self.since}" if self.carried else "new in the candidate"
        return f"{self.detail} [{origin}]"


def header_claims(
    audit: GuardAudit,
    earlier: Sequence[GuardAudit],
    entries: Sequence[KnownBreak],
    today: datetime.date,
) -> tuple[HeaderClaim, ...]:
    """The audit's findings as claims, each acknowledged by the first holding known break whose symbols match its
    name, and carried when the previous release's audit (earlier[0]; earlier: the releases before the candidate,
    newest first, as far back as the harness can audit) showed the same name at every one of its targets.
    Without earlier (the previous release not audited) every claim is new: nothing shows it carried."""
    shown = [_shown(a) for a in earlier]
    claims: list[HeaderClaim] = []
    for item in audit.breaks:
        if item.confirmed is False:  # compiling disproved it
            continue
        targets = tuple(str(t) for t in item.missing_at or (item.visible_from,))
        claim = HeaderClaim(
            item.name, targets, item.chain, item.first_exported, "declaration", item.describe(), carried=False
        )
        claims.append(_carried(claim, shown, earlier))
    for finding in audit.header_findings:
        target = str(finding.target)
        claim = HeaderClaim(finding.name, (target,), (), None, finding.kind, finding.describe(), carried=False)
        claims.append(_carried(claim, shown, earlier))
    return tuple(_acknowledged(c, entries, today) for c in claims)


def _shown(audit: GuardAudit) -> dict[str, set[str]]:
    """Every name an audit found, with the targets it found it at."""
    found: dict[str, set[str]] = {}
    for item in audit.breaks:
        found.setdefault(item.name, set()).update(str(t) for t in item.missing_at or (item.visible_from,))
    for finding in audit.header_findings:
        found.setdefault(finding.name, set()).add(str(finding.target))
    return found


def _carried(claim: HeaderClaim, shown: Sequence[dict[str, set[str]]], earlier: Sequence[GuardAudit]) -> HeaderClaim:
    """Walk back from the previous release while each release's headers showed the claim at all its targets: the
    last one that did introduced it ('<=R' when the walk ran out of audited releases before it ended)."""
    back = 0
    while back < len(shown) and set(claim.targets) <= shown[back].get(claim.name, set()):
        back += 1
    if back == 0:
        return claim
    since = earlier[back - 1].release
    return dataclasses.replace(claim, carried=True, since=f"<={since}" if back == len(shown) else since)


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
    """A header probe cell: where the probe built at a target ran, and what it could not resolve; carried: those
    of its missing names that are carried header findings (all of them: the cell fails for nothing new)."""

    id: str
    target: str | None
    runtime: str
    verdict: str
    missing: tuple[str, ...]
    carried: tuple[str, ...] = ()

    @property
    def failing(self) -> bool:
        return self.verdict in FAILED

    @property
    def carried_only(self) -> bool:
        """It failed, naming what it misses, and every name is a carried finding."""
        return self.failing and bool(self.missing) and set(self.missing) <= set(self.carried)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"missing": list(self.missing), "carried": list(self.carried)}


FAILED = (Verdict.BROKEN, Verdict.KNOWN_BREAK)  # a probe cell that did not load, acknowledged or not


def is_probe(cell: CellResult) -> bool:
    """A cell of the header probe: its build is marked generated as the probe (not known by its name)."""
    return cell.generated == HEADER_PROBE


def probe_cells(cells: Iterable[CellResult], claims: Sequence[HeaderClaim] = ()) -> tuple[ProbeCell, ...]:
    """The probe's cells, each failing one's missing names attributed: carried when claims has it carried."""
    carried = {c.name for c in claims if c.carried}
    found: list[ProbeCell] = []
    for cell in cells:
        if not is_probe(cell):
            continue
        missing = cell.missing_names if cell.verdict in FAILED else ()
        found.append(
            ProbeCell(
                cell.id,
                cell.target,
                cell.runtime_torch,
                cell.verdict.value,
                missing,
                tuple(m for m in missing if m in carried),
            )
        )
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class OpEvidence:
    """The op schema diff from the previous release to the candidate, read against what the matrix calls."""

    compared: bool  # both releases' schemas are recorded
    why_not: str  # when not compared
    breaking_called: tuple[tuple[OpChange, tuple[str, ...]], ...]  # each change with the extensions that call it
    at_risk: dict[str, int]  # breaking changes no extension of the matrix calls, by namespace
    compatible: int  # new overloads and compatible schema changes
    called_ops: int  # distinct ops the matrix's extensions call
    breaking: tuple[OpChange, ...] = ()  # every removed overload and BC-breaking schema change, called or not

    def callers(self, change: OpChange) -> tuple[str, ...]:
        """The matrix's extensions that call the changed overload (none: at risk only)."""
        return next((by for c, by in self.breaking_called if c == change), ())

    def families(self) -> tuple[str, ...]:
        """Every breaking change named, the overloads of one op that share a cause on one line ('aten::all (2
        overloads: .dimname, .dimname_out): overload removed'; one alone by its full name), the ones the matrix
        calls first, marked."""
        groups: dict[tuple[str, str], list[OpChange]] = {}
        for change in self.breaking:
            groups.setdefault((change.op.partition(".")[0], change.what), []).append(change)
        lines: list[tuple[bool, str]] = []
        for (op, what), changes in groups.items():
            overloads = ", .".join(c.op.partition(".")[2] or "default" for c in changes)
            named = changes[0].op if len(changes) == 1 else f"{op} ({len(changes)} overloads: .{overloads})"
            by = sorted({name for c in changes for name in self.callers(c)})
            called = f" (called by {', '.join(by)})" if by else ""
            lines.append((not by, f"{named}: {what}{called}"))
        return tuple(line for _, line in sorted(lines, key=lambda item: item[0]))

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "why_not": self.why_not or None,
            "breaking_called": [c.to_json() | {"called_by": list(by)} for c, by in self.breaking_called],
            "breaking": [c.to_json() | {"called_by": list(self.callers(c))} for c in self.breaking],
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
        breaking=tuple(breaking),
    )


def _calls(found: Iterable[OpCall], key: str) -> bool:
    """key is 'ns::op.overload' (or 'ns::op' for the default overload): does a call name that overload?"""
    op, _, overload = key.partition(".")
    return any(call.op == op and (call.overload is None or (call.overload or "") == overload) for call in found)
