"""Known breaks: broken cells acknowledged until a date (matrix.yaml `known_breaks:`).

A broken cell that an entry's selectors match is a `known_break` while the entry holds: it is
reported apart and does not fail the run. After its `expires` date the cell is broken again and the
run names the entry. An entry whose cells all keep their promise now is *fixed* (remove it); one that
matches no cell of the run is a warning (a typo, or the matrix changed under it).

Each cell records the entry that matched it (`known_break`, given by the judge: torch_abi_harness/run/judge.py);
an entry's state is read back from its cells' verdicts, so a report merged from shards, or read from
results.json, says the same.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from collections.abc import Sequence
from typing import Protocol

from torch_abi_harness.config import KnownBreak, selector_pattern
from torch_abi_harness.verdict import Verdict


class Judged(Protocol):
    """What a known break reads of a cell (a CellResult; the model renders outcomes, so it cannot be imported)."""

    @property
    def id(self) -> str: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def known_break(self) -> str | None: ...
    @property
    def missing_names(self) -> tuple[str, ...]: ...


# A cell that ends so keeps its promise: a known break matching only such cells is fixed.
PROMISE_KEPT = frozenset({Verdict.KEPT, Verdict.EXPECTED_FAILURE, Verdict.UNEXPECTED_PASS})


class State(enum.StrEnum):
    ACCEPTED = "accepted"  # its cells are broken, and it holds: they are known breaks
    EXPIRED = "expired"  # its cells are broken, and it expired: they fail the run again
    FIXED = "fixed"  # its cells keep their promise now: remove the entry
    UNMATCHED = "unmatched"  # no cell of the run matches it: a warning
    UNCONFIRMED = "unconfirmed"  # its cells did not run to a verdict (skipped, error, flaky): nothing to say yet


STATE_MEANING = {
    State.ACCEPTED: "accepted until it expires: its broken cells do not fail the run",
    State.EXPIRED: "expired: its cells are broken again and fail the run; renew it with a reason or fix the break",
    State.FIXED: "fixed: every cell it matches keeps its promise now; remove the entry",
    State.UNMATCHED: "matches no cell of this run: a typo in its selector, or the matrix changed under it",
    State.UNCONFIRMED: "its cells were skipped, errored or flaky: neither broken nor fixed in this run",
}


# Said of an entry with `acknowledge_all: true` wherever the run's known breaks are listed: one that matches
# everything must never pass unseen.
ACKNOWLEDGES_ALL = "acknowledge_all: it acknowledges every break its wildcard matches, on purpose"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one entry came to in a run: its state and the ids of the cells it matched."""

    entry: KnownBreak
    state: State
    cells: tuple[str, ...]

    @property
    def failing(self) -> bool:
        return self.state is State.EXPIRED

    def line(self) -> str:
        """'classic-2.12 (expired 2026-01-31): 1 cell(s): why; link'."""
        shown = ", ".join(self.cells[:3]) + (f" (+{len(self.cells) - 3} more)" if len(self.cells) > 3 else "")
        cells = f"{len(self.cells)} cell(s): {shown}" if self.cells else f"selectors {', '.join(self.entry.cells)}"
        return (
            f"{self.entry.name} ({self.state.value}, expires {self.entry.expires.isoformat()}): "
            f"{STATE_MEANING[self.state]}; {cells}; {self.entry.reason} ({self.entry.link})"
            + (f"; {ACKNOWLEDGES_ALL}" if self.entry.acknowledge_all else "")
        )


def matches(entry: KnownBreak, cell: Judged) -> bool:
    """A selector matches the cell's id, or the entry's symbols match every symbol the broken cell misses."""
    if any(fnmatch.fnmatchcase(cell.id, selector_pattern(s)) for s in entry.cells):
        return True
    missing = cell.missing_names
    return bool(entry.symbols and missing and cell.verdict is Verdict.BROKEN) and all(
        symbol_acknowledged(entry, name) for name in missing
    )


def symbol_acknowledged(entry: KnownBreak, name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in entry.symbols)


def outcomes(entries: Sequence[KnownBreak], cells: Sequence[Judged]) -> list[Outcome]:
    """Each entry's state, read from the verdicts of the cells that recorded it."""
    result: list[Outcome] = []
    for entry in entries:
        mine = sorted((c for c in cells if c.known_break == entry.name), key=lambda c: c.id)
        verdicts = {c.verdict for c in mine}
        if Verdict.KNOWN_BREAK in verdicts:
            state = State.ACCEPTED
        elif Verdict.BROKEN in verdicts:
            state = State.EXPIRED
        elif not mine:  # an entry of symbols is judged at the gate too, against the candidate's headers
            state = State.UNCONFIRMED if entry.symbols else State.UNMATCHED
        elif verdicts <= PROMISE_KEPT:
            state = State.FIXED
        else:
            state = State.UNCONFIRMED
        shown = [c for c in mine if c.verdict in (Verdict.KNOWN_BREAK, Verdict.BROKEN)] or mine
        result.append(Outcome(entry, state, tuple(c.id for c in shown)))
    return result
