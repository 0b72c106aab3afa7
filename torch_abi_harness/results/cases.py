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


@dataclasses.dataclass(frozen=True)
class ModuleLoad:
    """One extension module of a published wheel as its derived suite loaded it: its path in the wheel, the
    loader's error (None: it loaded), the symbol or library the loader named, and how many operators it registered."""

    path: str
    error: str | None
    missing_symbol: str | None = None
    missing_library: str | None = None
    registered: int = 0
    compared: bool = False  # its operators were compared with its build torch's (False: it did not load there)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModuleLoad:
        texts = (data["error"], data["missing_symbol"], data["missing_library"])
        return cls(data["path"], *texts, data["registered"], bool(data.get("compared", False)))


TEXTS = ("error", "missing_symbol", "missing_library")


TEXTS = ("error", "missing_symbol", "missing_library")


def module_loads(entries: object) -> tuple[ModuleLoad, ...]:
    """The probe's per-module records, by path; malformed entries are dropped, not fatal."""
    found = []
    for path, entry in sorted(entries.items()) if isinstance(entries, dict) else ():
        if not isinstance(entry, dict):
            continue
        error, symbol, library = (entry[k] if isinstance(entry.get(k), str) else None for k in TEXTS)
        registered = entry.get("registered")
        count = registered if isinstance(registered, int) else 0
        found.append(ModuleLoad(str(path), error, symbol, library, count, entry.get("compared") is True))
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class PublishedBuild:
    """A build that is a published wheel (`wheel: <requirement>`): what was downloaded, and where its build torch
    and target were read from; its declared torch requirement, reported beside the verdicts and never obeyed."""

    build: str  # the build id
    requirement: str
    filename: str
    url: str  # redacted
    sha256: str
    torch_pin: str | None
    build_torch_from: str
    target_from: str
    unserved: tuple[str, ...] = ()  # the runtimes' CPythons for which the sources serve no file of this release
    # B as the wheel says it (None: unknown, or not recorded: see build_torch_how) and how it was learnt: "pinned",
    # "read from <file>" or "unknown" (None: written before it was recorded)
    build_torch: str | None = None
    build_torch_how: str | None = None
    declared_beyond: str | None = None  # its torch requirement admits releases it cannot load on, in words

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "unserved": list(self.unserved)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PublishedBuild:
        optional = ("unserved", "build_torch", "build_torch_how", "declared_beyond")
        fields = {field.name: data[field.name] for field in dataclasses.fields(cls) if field.name not in optional}
        return cls(
            **fields,
            unserved=tuple(data.get("unserved", ())),
            build_torch=data.get("build_torch"),
            build_torch_how=data.get("build_torch_how"),
            declared_beyond=data.get("declared_beyond"),
        )
