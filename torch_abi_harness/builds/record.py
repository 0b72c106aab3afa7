"""What a build leaves on disk: build.json in its cache folder (BuildRecord), and handoff.json where a CI graph's
build job hands it on to its run jobs (Handoff). Each is written and read here, the JSON as it always was."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from torch_abi_harness.core.files import content_digest, file_digest, write_json

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
    torch: str | None  # the build torch's version
    compiler: str | None  # compiler_identity() for a compiled build; None for a prebuilt wheel
    target: str | None  # the matrix's target, as TORCH_TARGET_VERSION's hex
    findings: tuple[str, ...] = ()
    built_for: str | None = None  # the level it was really compiled for
    wheel_sha256: str | None = None
    site_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "ok": self.ok,
            "reason": self.reason,
            "wheel": self.wheel,
            "seconds": self.seconds,
            "torch": self.torch,
            "compiler": self.compiler,
            "target": self.target,
            "findings": list(self.findings),
            "built_for": self.built_for,
            "wheel_sha256": self.wheel_sha256,
            "site_sha256": self.site_sha256,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildRecord:
        return cls(
            key=data["key"],
            ok=data["ok"],
            reason=data["reason"],
            wheel=data["wheel"],
            seconds=data["seconds"],
            torch=data.get("torch"),
            compiler=data.get("compiler"),
            target=data.get("target"),
            findings=tuple(data.get("findings", ())),
            built_for=data.get("built_for"),
            wheel_sha256=data.get("wheel_sha256"),
            site_sha256=data.get("site_sha256"),
        )

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
        return {
            "format": HANDOFF_FORMAT,
            "build": self.build,
            "key": self.key,
            "ok": self.ok,
            "reason": self.reason,
            "wheel": self.wheel,
            "wheel_sha256": self.wheel_sha256,
            "seconds": self.seconds,
            "torch": self.torch,
            "compiler": self.compiler,
            "findings": list(self.findings),
            "infrastructure": self.infrastructure,
            "toolchain": self.toolchain,
            "built_for": self.built_for,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Handoff:
        return cls(
            build=data["build"],
            key=data["key"],
            ok=data["ok"],
            reason=data["reason"],
            wheel=data["wheel"],
            wheel_sha256=data["wheel_sha256"],
            seconds=data["seconds"],
            torch=data["torch"],
            compiler=data["compiler"],
            findings=tuple(data["findings"]),
            infrastructure=data["infrastructure"],
            toolchain=data["toolchain"],
            built_for=data.get("built_for"),
        )
