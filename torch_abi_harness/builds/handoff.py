"""A CI graph's hand-off: a build job writes each build's result (`export`), its run jobs read it back
(`read_handoff`, then Builder.adopt takes the wheel into their own cache)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from torch_abi_harness.builds.derived import DERIVED_SUITE_MANIFEST
from torch_abi_harness.builds.record import HANDOFF, HANDOFF_FORMAT, RECORD, Handoff, read_record
from torch_abi_harness.builds.result import BuildResult
from torch_abi_harness.core.files import file_digest, write_atomic, write_json
from torch_abi_harness.plan import Build


def export(result: BuildResult, dest: Path) -> Path:
    """A build's result as the build job of a CI graph hands it on: dest/<build id>/ with handoff.json (the
    result, its cache key and what the key was made of), the wheel and the build log. `adopt` takes it in."""
    where = dest / result.build.id
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    meta = read_record(result.log.parent) if (result.log.parent / RECORD).is_file() else {}
    if result.wheel is not None:
        shutil.copyfile(result.wheel, where / result.wheel.name)
    if result.log.is_file():
        shutil.copyfile(result.log, where / "build.log")
    manifest = result.site / DERIVED_SUITE_MANIFEST if result.site is not None else None
    if manifest is not None and manifest.is_file():  # a published wheel: its modules and its reference
        shutil.copyfile(manifest, where / DERIVED_SUITE_MANIFEST)
    handoff = Handoff(
        build=result.build.id,
        key=result.key,
        ok=result.ok,
        reason=result.reason,
        wheel=result.wheel.name if result.wheel else None,
        wheel_sha256=file_digest(result.wheel) if result.wheel else None,
        seconds=round(result.seconds, 2),
        torch=meta.get("torch"),
        compiler=meta.get("compiler"),
        findings=result.findings,
        infrastructure=result.infrastructure,
        toolchain=result.toolchain,
        built_for=str(result.built_for) if result.built_for else None,
    )
    write_json(where / HANDOFF, handoff.to_json())
    return where


def read_handoff(build: Build, where: Path) -> Handoff | str:
    """The hand-off of build in where, or why there is none to take (its job failed or was lost, or it is not one)."""
    try:
        meta = json.loads((where / HANDOFF).read_text())
    except FileNotFoundError:
        return f"no build was handed on for it ({where}/{HANDOFF} is missing: its build job failed or was lost)"
    except (OSError, ValueError) as exc:
        return f"its hand-off {where}/{HANDOFF} is unreadable: {exc}"
    if meta.get("format") != HANDOFF_FORMAT or meta.get("build") != build.id:
        return f"{where}/{HANDOFF} is not a hand-off of {build.id} (format {HANDOFF_FORMAT})"
    try:
        return Handoff.from_json(meta)
    except (ValueError, KeyError, TypeError) as exc:
        return f"its hand-off {where}/{HANDOFF} is unreadable: {exc}"


def handed_trouble(build: Build, handoff: Handoff, where: Path, out: Path) -> BuildResult:
    """The build job's trouble (its infrastructure failed, or it lacked a toolchain), said as it said it: its log
    copied into out."""
    out.mkdir(parents=True, exist_ok=True)
    copied = out / "build.log"
    if (where / "build.log").is_file():
        shutil.copyfile(where / "build.log", copied)
    else:
        write_atomic(copied, f"{handoff.reason}\n")
    return BuildResult.handed_on(build, handoff, copied)
