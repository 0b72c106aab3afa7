"""What a cell's tests counted and recorded, as the result model keeps it: case counts and the runtime
behaviours that differ from PyTorch's documents."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class CaseCounts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped + self.errors


@dataclasses.dataclass(frozen=True)
class DocDifference:
    """A runtime doing something other than PyTorch's documents say, as a test recorded it."""

    key: str  # names the behaviour; the report groups by it
    text: str  # what is documented and what happened instead
    tests: tuple[str, ...]  # the tests that saw it

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "tests": list(self.tests)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DocDifference:
        return cls(data["key"], data["text"], tuple(data["tests"]))


def doc_differences(entries: object) -> tuple[DocDifference, ...]:
    """The probe's records merged by (key, text), sorted; malformed entries are dropped, not fatal."""
    tests: dict[tuple[str, str], list[str]] = {}
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("key", "text", "test")):
            continue
        seen = tests.setdefault((entry["key"], entry["text"]), [])
        if entry["test"] not in seen:
            seen.append(entry["test"])
    return tuple(DocDifference(key, text, tuple(names)) for (key, text), names in sorted(tests.items()))
