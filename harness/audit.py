"""Latent forward-compatibility breaks in a release's headers.

A declaration an extension can see at target T but that release T does not
export compiles fine, then fails to load on T. For each declaration of a release
we compare the lowest target that sees it (its version guard) with the first
release that exports it, and confirm each claim by compiling a probe against the
release's own headers: does the symbol really resolve at that target?
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from packaging.version import Version

from harness.manifest import Manifest
from harness.versions import ApiLevel

DEVICES_WITHOUT_EXPORTS = ("mps", "xpu")  # Linux CUDA wheels never export these: nothing to compare


@dataclasses.dataclass(frozen=True)
class LatentBreak:
    name: str
    header: str
    guard: str | None
    visible_from: ApiLevel
    first_exported: str | None
    device: str | None = None  # 'cuda': declared under USE_CUDA
    confirmed: bool | None = None  # True: a probe compiled at visible_from; None: not probed

    def describe(self) -> str:
        exported = f"first exported in {self.first_exported}" if self.first_exported else "exported by no release"
        guard = f"guard {self.guard}" if self.guard else "no version guard"
        return f"{self.name}: visible at target {self.visible_from} ({guard}, {self.header}) but {exported}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "header": self.header,
            "guard": self.guard,
            "visible_from": str(self.visible_from),
            "first_exported": self.first_exported,
            "device": self.device,
            "confirmed": self.confirmed,
        }


def find_latent_breaks(manifest: Manifest, release: str, min_target: ApiLevel) -> list[LatentBreak]:
    found: list[LatentBreak] = []
    for name in manifest.names():
        facts = manifest[name]
        decl = facts.declaration_in(release)
        if decl is None or decl["device"] in DEVICES_WITHOUT_EXPORTS:
            continue
        guard = decl["guard"]
        visible = ApiLevel.parse(guard) if guard and not guard.startswith("<") else min_target
        visible = max(visible, min_target)
        first = facts.first_exported
        if first is None or ApiLevel.of(Version(first)) > visible:
            found.append(LatentBreak(name, decl["header"], guard, visible, first, decl["device"]))
    return sorted(found, key=lambda b: (b.header, b.name))


def probe_source(header: str, names: list[str]) -> str:
    uses = "\n".join(f"  (void)&{name};" for name in names)
    return f"#include <{header}>\n\nvoid harness_probe() {{\n{uses}\n}}\n"


def cuda_include() -> Path | None:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    return home / "include" if (home / "include" / "cuda_runtime_api.h").is_file() else None


def compiles(include: Path, header: str, names: list[str], target: ApiLevel, workdir: Path, cuda: Path | None) -> bool:
    source = workdir / "probe.cpp"
    source.write_text(probe_source(header, names))
    argv = ["c++", "-fsyntax-only", "-std=c++17", f"-DTORCH_TARGET_VERSION={target.hex}ULL", f"-I{include}"]
    if cuda is not None:
        argv += ["-DUSE_CUDA", f"-I{cuda}"]
    return subprocess.run([*argv, str(source)], capture_output=True, timeout=120).returncode == 0


def confirm(breaks: list[LatentBreak], include: Path) -> list[LatentBreak]:
    """Compile one probe per (header, target); split it per symbol only where the batch fails."""
    groups: dict[tuple[str, ApiLevel, bool], list[LatentBreak]] = defaultdict(list)
    for item in breaks:
        groups[(item.header, item.visible_from, item.device == "cuda")].append(item)
    confirmed: list[LatentBreak] = []
    cuda_headers = cuda_include()
    with tempfile.TemporaryDirectory(prefix="audit-guards-") as tmp:
        for (header, target, needs_cuda), items in groups.items():
            if needs_cuda and cuda_headers is None:
                confirmed += items  # unprobed: no CUDA headers on this machine
                continue
            cuda = cuda_headers if needs_cuda else None
            if compiles(include, header, [i.name for i in items], target, Path(tmp), cuda):
                confirmed += [dataclasses.replace(i, confirmed=True) for i in items]
            else:
                confirmed += [
                    dataclasses.replace(i, confirmed=compiles(include, header, [i.name], target, Path(tmp), cuda))
                    for i in items
                ]
    return sorted(confirmed, key=lambda b: (b.header, b.name))
