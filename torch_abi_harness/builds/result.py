"""What a build yields (BuildResult) and how it is cached: the key made of its sources, recipe, target, build
torch, Python and compiler, and what is left out of its sources."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from pathlib import Path

from torch_abi_harness.builds.derived import DERIVED_SUITE_FORMAT
from torch_abi_harness.builds.record import BuildRecord, Handoff
from torch_abi_harness.core.files import content_digest, file_digest
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import BUILD_OUTPUTS, Build

# 2: reasons with shortened paths; 3: digests of the wheel and site/, failures say why; 4: the level it was really
# built for (its compiler's -DTORCH_TARGET_VERSION) and the findings about it, a sources_root's files; 5: that
# level is what the compiler was given, never raised by a newer import (4 raised it, hiding leaking guards); 6: a link
# error's reason is the linker's own first error, a good build whose recipe climbs out of its folder has a finding
BUILD_FORMAT = 6
IGNORED = BUILD_OUTPUTS  # never copied into a build, never part of its sources' digest
ROOT_IGNORED = (*IGNORED, ".git")  # ...and of a sources_root (a repository's root, often)


@dataclasses.dataclass(frozen=True)
class BuildResult:
    build: Build
    ok: bool
    reason: str  # one line: why it failed, or '' when it built
    wheel: Path | None
    site: Path | None  # the wheel unpacked, put on the runtime's path by each cell
    log: Path
    seconds: float
    cached: bool
    key: str
    findings: tuple[str, ...] = ()  # a prebuilt wheel whose imports contradict what the matrix claims for it
    # The build did not finish for a reason that says nothing about the extension (a timeout, a
    # compiler killed by a signal, a damaged env): its cells are ERROR, never BUILD_FAILED, and
    # it is not cached, so the next run tries again.
    infrastructure: bool = False
    repaired: str | None = None  # a cached build found damaged and built again: what was wrong
    # Not attempted: this machine lacks what the recipe needs (a compiler, nvcc, the CUDA headers). The
    # machine's trouble, not the extension's: its cells are SKIPPED (ERROR with --require-toolchain).
    toolchain: str | None = None
    # The stable-ABI level it was compiled for, as its compiler was given it (and at least what its imports need);
    # None: not compiled here (a prebuilt wheel is promised what it claims) or not built
    built_for: ApiLevel | None = None

    @classmethod
    def built(
        cls,
        build: Build,
        *,
        key: str,
        out: Path,
        wheel: Path,
        seconds: float,
        findings: tuple[str, ...] = (),
        built_for: ApiLevel | None = None,
    ) -> BuildResult:
        """Built here, now, in its folder out: its wheel unpacked into out/site, its log out/build.log."""
        site, log = out / "site", out / "build.log"
        return cls(
            build,
            reason="",
            wheel=wheel,
            site=site,
            log=log,
            seconds=seconds,
            key=key,
            findings=findings,
            ok=True,
            cached=False,
            built_for=built_for,
        )

    @classmethod
    def failed(cls, build: Build, *, key: str, reason: str, log: Path, seconds: float) -> BuildResult:
        """Its recipe failed (or made no single wheel): a verdict about the extension, cached like a good build."""
        return cls(
            build, reason=reason, wheel=None, site=None, log=log, seconds=seconds, key=key, ok=False, cached=False
        )

    @classmethod
    def skipped(cls, build: Build, *, key: str, lacking: str, log: Path) -> BuildResult:
        """Not attempted: this machine lacks what the recipe needs (its cells are SKIPPED); never cached."""
        return cls(
            build,
            reason=f"not built: {lacking}",
            wheel=None,
            site=None,
            log=log,
            seconds=0.0,
            key=key,
            ok=False,
            cached=False,
            toolchain=lacking,
        )

    @classmethod
    def errored(cls, build: Build, *, key: str, reason: str, log: Path, seconds: float = 0.0) -> BuildResult:
        """Not built for a reason that says nothing about the extension (its cells are ERROR); never cached."""
        return cls(
            build,
            reason=reason,
            wheel=None,
            site=None,
            log=log,
            seconds=seconds,
            key=key,
            ok=False,
            cached=False,
            infrastructure=True,
        )

    @classmethod
    def recorded(cls, build: Build, record: BuildRecord, out: Path) -> BuildResult:
        """The result build.json records in its folder out: a cached build."""
        return cls(
            build,
            ok=record.ok,
            reason=record.reason,
            wheel=out / record.wheel if record.wheel else None,
            site=out / "site" if record.ok else None,
            log=out / "build.log",
            seconds=record.seconds,
            cached=True,
            key=record.key,
            findings=record.findings,
            built_for=ApiLevel.parse(record.built_for) if record.built_for else None,
        )

    @classmethod
    def handed_on(cls, build: Build, handoff: Handoff, log: Path) -> BuildResult:
        """A build job's trouble (its infrastructure failed, or it lacked a toolchain), as that job said it."""
        return cls(
            build,
            ok=False,
            reason=handoff.reason,
            wheel=None,
            site=None,
            log=log,
            seconds=handoff.seconds,
            cached=False,
            key=handoff.key,
            infrastructure=handoff.infrastructure,
            toolchain=handoff.toolchain,
        )


def compiler_identity() -> str:
    """The C++ compiler and the CUDA toolkit (nvcc, CUDA_HOME): part of every build's cache key, so a
    build that failed for want of a toolkit is tried again once one is installed."""
    parts = []
    for tool, pick in ((os.environ.get("CXX", "c++"), 0), ("nvcc", -1)):
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            parts.append(f"{tool}: not found")
            continue
        lines = out.strip().splitlines()
        parts.append(lines[pick] if lines else tool)
    if os.environ.get("CUDA_HOME"):
        parts.append(f"CUDA_HOME={os.environ['CUDA_HOME']}")
    return "; ".join(parts)


def cache_key(build: Build, torch_version: str | None, compiler: str) -> str:
    wheel, ext = build.extension.wheel, build.extension
    material = {
        "format": BUILD_FORMAT,
        # The extension's files, its test directory left out: tests do not change the binary.
        "sources": (
            file_digest(wheel)
            if wheel
            else content_digest(ext.sources_root or ext.root, ROOT_IGNORED if ext.sources_root else IGNORED, ext.tests)
        ),
        "recipe": build.extension.recipe,
        "target": build.target.hex if build.target else None,
        "torch": torch_version,
        "python": build.python,
        "compiler": None if wheel else compiler,
    }
    if ext.published is not None:  # its site/ holds the derived suite's manifest: made by this format of it
        material["derived_suite"] = DERIVED_SUITE_FORMAT
        if not ext.published.build_torch_known:  # its manifest holds no reference: not the cached one that does
            material["no_reference"] = True
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
