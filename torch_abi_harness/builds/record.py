"""What a build leaves on disk: build.json in its cache folder (BuildRecord), and handoff.json where a CI graph's
build job hands it on to its run jobs (Handoff). Each is written and read here, the JSON as it always was."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

from torch_abi_harness.core.files import content_digest, file_digest, run_relative, write_json

HANDOFF_FORMAT = 1  # what `export` writes and `adopt` reads (a CI graph's build job to its run jobs)
RECORD = "build.json"
HANDOFF = "handoff.json"


@dataclasses.dataclass(frozen=True)
class BuildRecord:
    """build.json: a build's outcome and the digests of what it made, beside its wheel, site/ and log."""

    key: str  # the cache key it was made under
    ok: bool
    reason: str  # why it failed, or ''
    wheel: str | None  # the wheel's path inside the build's folder (dist/<name>.whl)
    seconds: float
    torch: str | None = None  # the build torch's version
    compiler: str | None = None  # compiler_identity() for a compiled build; None for a prebuilt wheel
    target: str | None = None  # the matrix's target, as TORCH_TARGET_VERSION's hex
    findings: tuple[str, ...] = ()
    built_for: str | None = None  # the level it was really compiled for
    wheel_sha256: str | None = None
    site_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return _fields_json(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildRecord:
        return _from_fields(cls, data)

    def write(self, out: Path) -> None:
        write_json(out / RECORD, self.to_json())

    def damage(self, wheel: Path, site: Path) -> str | None:
        """What differs between a good build's files and the digests recorded when it was made."""
        if not wheel.is_file():
            return f"{wheel.name} is missing"
        if not site.is_dir():
            return "site/ is missing"
        if self.wheel_sha256 != file_digest(wheel):
            return f"{wheel.name} changed since it was built (sha256 differs)"
        if self.site_sha256 != content_digest(site):
            return "site/ (the unpacked wheel cells import) changed since it was built"
        return None


def read_record(out: Path) -> dict[str, Any]:
    """out/build.json as written (FileNotFoundError, OSError or ValueError when it cannot be read)."""
    data: dict[str, Any] = json.loads((out / RECORD).read_text())
    return data


@dataclasses.dataclass(frozen=True)
class Handoff:
    """handoff.json: a build's result as its build job hands it on, beside the wheel and the build log."""

    build: str  # the build's id
    key: str
    ok: bool
    reason: str
    wheel: str | None  # the wheel's file name, beside handoff.json
    wheel_sha256: str | None
    seconds: float
    torch: str | None
    compiler: str | None
    findings: tuple[str, ...]
    infrastructure: bool
    toolchain: str | None
    built_for: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": HANDOFF_FORMAT, **_fields_json(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Handoff:
        return _from_fields(cls, data)


Record = TypeVar("Record", BuildRecord, Handoff)


def _fields_json(record: BuildRecord | Handoff) -> dict[str, Any]:
    """A record's fields in their order, as its file holds them (a tuple as a list)."""
    values = ((f.name, getattr(record, f.name)) for f in dataclasses.fields(record))
    return {name: list(value) if isinstance(value, tuple) else value for name, value in values}


def _from_fields(cls: type[Record], data: dict[str, Any]) -> Record:
    """A record from its file: a field with a default may be absent (older files), one without may not (KeyError)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in data:
            values[field.name] = tuple(data[field.name]) if field.name == "findings" else data[field.name]
        elif field.default is dataclasses.MISSING:
            raise KeyError(field.name)
    wheel = values.get("wheel")
    if wheel is not None and not (isinstance(wheel, str) and run_relative(wheel)):
        # read back from a cache or a CI artifact: a path elsewhere ('../../etc/x') must not be judged or copied
        raise ValueError(f"wheel is {wheel!r}, not a path inside the build's folder")
    return cls(**values)
