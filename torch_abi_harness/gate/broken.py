"""A broken cell as the gate's evidence: which way it tests the candidate (built on it, run on it), what it
misses and who first exports each symbol, its failing tests; and as gate.json lists it."""

from __future__ import annotations

import dataclasses
from typing import Any

from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.versions import release_of
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.evidence import is_probe
from torch_abi_harness.results.model import CellResult


@dataclasses.dataclass(frozen=True)
class BrokenCell:
    """A broken cell as gate.json lists it; probe: a cell of the header probe (not written)."""

    id: str
    status: str
    reason: str
    missing: tuple[str, ...]
    probe: bool = False

    @classmethod
    def of(cls, cell: CellResult) -> BrokenCell:
        return cls(cell.id, cell.status.value, cell.reason, cell.missing_names, is_probe(cell))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "reason": self.reason, "missing": list(self.missing)}


def direction(cell: CellResult, candidate: Candidate) -> str:
    """Which way a cell tests the candidate: built on it (forward), run on it (backward), or neither."""
    built, runs = on_candidate(cell.build_torch, candidate), on_candidate(cell.runtime_torch, candidate)
    if built and runs:
        return "built and run on the candidate"
    if built:
        return (
            f"forward: built on the candidate for target {cell.target or 'its own level'}, run on {cell.runtime_torch}"
        )
    if runs:
        return f"backward: built on {cell.build_torch}, run on the candidate"
    return "not the candidate's cell"


def evidence_of(cell: CellResult, candidate: Candidate, *, new: bool | None) -> str:
    """A broken cell as evidence: what happened, the symbols it misses (and who first exports each), the tests."""
    parts = [f"{cell.id}: {cell.status.value}: {cell.reason}", direction(cell, candidate)]
    missing = cell.prediction.missing if cell.prediction else ()
    if missing:
        parts.append(
            "missing " + ", ".join(f"{m.name} (first exported by {m.introduced or 'no release'})" for m in missing)
        )
    elif cell.missing_symbol:
        parts.append(f"missing {cell.missing_symbol}")
    if cell.failing_tests:
        shown = ", ".join(cell.failing_tests[:5]) + (
            f" (+{len(cell.failing_tests) - 5})" if len(cell.failing_tests) > 5 else ""
        )
        parts.append(f"failing tests {shown}")
    if new is not None:
        parts.append("new since the baseline" if new else "broken in the baseline too")
    return "; ".join(parts)


def on_candidate(torch: str, candidate: Candidate) -> bool:
    """A cell's torch (as its result writes it, '2.13.0+cpu' too) is the candidate's release."""
    try:
        return Version(release_of(torch)) == candidate.version
    except InvalidVersion:
        return False
