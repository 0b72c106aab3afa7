"""A run against a baseline run: what broke since, what was fixed, what changed, what appeared or went."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.text import md_text, natural_key
from torch_abi_harness.results.model import CellResult, RunResult, load_results
from torch_abi_harness.verdict import Verdict

DIFF_JSON_VERSION = 1  # `diff --json` and diff.json
GOOD = {Verdict.KEPT, Verdict.EXPECTED_FAILURE, Verdict.UNEXPECTED_PASS}


@dataclasses.dataclass(frozen=True)
class CellChange:
    id: str
    before: str  # "VERDICT (STATUS)" or "absent"
    after: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RunDiff:
    baseline: str
    current: str
    new_breaks: tuple[CellChange, ...]  # broken now, not broken in the baseline (or new and broken)
    fixed: tuple[CellChange, ...]  # broken in the baseline, not broken now
    changed: tuple[CellChange, ...]  # any other change of status or verdict
    known_breaks: tuple[CellChange, ...]  # broken now under a known_breaks entry that holds: neither new nor fixed
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": DIFF_JSON_VERSION,
            "baseline": self.baseline,
            "current": self.current,
            "new_breaks": [c.to_json() for c in self.new_breaks],
            "fixed": [c.to_json() for c in self.fixed],
            "changed": [c.to_json() for c in self.changed],
            "known_breaks": [c.to_json() for c in self.known_breaks],
            "added": list(self.added),
            "removed": list(self.removed),
        }

    def markdown(self) -> str:
        lines = [f"# Against baseline {md_text(self.baseline)}", ""]
        if not (self.new_breaks or self.fixed or self.changed or self.known_breaks or self.added or self.removed):
            return "\n".join([*lines, "No cell changed.", ""])
        for title, changes in self.sections():
            if changes:
                lines += [f"## {title} ({len(changes)})", ""]
                lines += [f"- `{c.id}`: {c.before} -> **{c.after}**: {md_text(c.reason)}" for c in changes]
                lines.append("")
        for title, ids in (("New cells", self.added), ("Cells no longer run", self.removed)):
            if ids:
                lines += [f"## {title} ({len(ids)})", "", *(f"- `{i}`" for i in ids), ""]
        return "\n".join(lines)

    def sections(self) -> tuple[tuple[str, tuple[CellChange, ...]], ...]:
        return (
            ("New breaks", self.new_breaks),
            ("Fixed", self.fixed),
            ("Known breaks (acknowledged, not new)", self.known_breaks),
            ("Changed", self.changed),
        )


def load_run(path: Path) -> RunResult:
    """A results.json, or a run directory holding one."""
    file = path / "results.json" if path.is_dir() else path
    try:
        return load_results(file)
    except FileNotFoundError as exc:
        raise BadInputError(
            f"{file}: no such results file (pass a results.json or a reports/<run-id> directory)"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInputError(f"{file}: not a results.json of this harness ({type(exc).__name__}: {exc})") from exc
    except BadInputError as exc:  # a path it names outside the run or the cache: the file is named too
        raise BadInputError(f"{file}: {exc}") from exc


def _state(cell: CellResult) -> str:
    return f"{cell.verdict.value} ({cell.status.value})"


def _counted(cell: CellResult) -> str:
    tests = cell.tests
    return (
        f"{_state(cell)}: {tests.passed} passed, {tests.failed} failed, {tests.skipped} skipped, {tests.errors} errors"
    )


def compare(baseline: RunResult, current: RunResult) -> RunDiff:
    before = {c.id: c for c in baseline.cells}
    after = {c.id: c for c in current.cells}
    new_breaks: list[CellChange] = []
    fixed: list[CellChange] = []
    changed: list[CellChange] = []
    known: list[CellChange] = []
    for cell_id in sorted(after, key=natural_key):
        now = after[cell_id]
        old = before.get(cell_id)
        if now.verdict is Verdict.KNOWN_BREAK:  # acknowledged: kept apart whether it broke now or before
            state = _state(old) if old else "absent"
            known.append(CellChange(cell_id, state, _state(now), f"known break {now.known_break}: {now.reason}"))
            continue
        if old is None:
            if now.verdict is Verdict.BROKEN:
                new_breaks.append(CellChange(cell_id, "absent", _state(now), now.reason))
            continue
        if (old.verdict, old.status, old.tests) == (now.verdict, now.status, now.tests):
            continue
        if (old.verdict, old.status) == (now.verdict, now.status):  # the same outcome from other test counts
            change = CellChange(cell_id, _counted(old), _counted(now), now.reason)
        else:
            change = CellChange(cell_id, _state(old), _state(now), now.reason)
        if now.verdict is Verdict.BROKEN and old.verdict is not Verdict.BROKEN:
            new_breaks.append(change)
        elif old.verdict in (Verdict.BROKEN, Verdict.KNOWN_BREAK) and now.verdict in GOOD:
            fixed.append(change)
        else:
            changed.append(change)
    return RunDiff(
        baseline=baseline.run_id,
        current=current.run_id,
        new_breaks=tuple(new_breaks),
        fixed=tuple(fixed),
        changed=tuple(changed),
        known_breaks=tuple(known),
        added=tuple(sorted(set(after) - set(before), key=natural_key)),
        removed=tuple(sorted(set(before) - set(after), key=natural_key)),
    )
