"""Latent forward-compatibility breaks in a release's headers.

A declaration an extension can see at target T but that release T does not
export compiles fine, then fails to load on T. What a build at T sees is what the
compiler's preprocessor leaves of the release's public stable headers at that
target (torch_abi_harness.static.visibility: never the text of a guard), whatever the reason: a
guard that works, one that does not, a declaration reached through another
header. Each claim is confirmed by compiling a probe through the header chain
that made it visible: does the symbol really resolve at that target?

The CUDA side: published Linux wheels are CUDA builds, and their extensions compile with
``USE_CUDA`` and the CUDA headers, which show declarations and macros a CPU build never
sees. Claims visible only there are confirmed, and the wrappers and macros probed, in that
configuration too, with the CUDA headers of the candidate's own wheels where they are complete,
else the toolkit's (CudaHeaders). A host with neither says so (cuda_why_not): the
CUDA side is then not audited, never silently.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.header_compiles import HeaderCompiler
from torch_abi_harness.static.header_probe import HeaderFinding, probe_headers
from torch_abi_harness.static.manifest import Manifest
from torch_abi_harness.static.visibility import (
    OLDEST_TARGET,
    Visibility,
    packaged_visibility,
    scan_include,
)

DEVICES_WITHOUT_EXPORTS = ("mps", "xpu")  # Linux CUDA wheels never export these: nothing to compare
AUDIT_JSON_VERSION = 3  # `audit-guards --json` (2: chain, missing_at, header_findings; 3: cuda_side, side)
# A CUDA include directory g++ can compile the runtime API with: the nvidia-cuda-runtime wheels hold the first
# but not crt/ (that is nvidia-cuda-nvcc's), which cuda_runtime_api.h includes.
CUDA_RUNTIME_FILES = ("cuda_runtime_api.h", "crt/host_defines.h")
TRITON_CUDA = Path("triton/backends/nvidia/include")  # the CUDA headers triton's wheel bundles


@dataclasses.dataclass(frozen=True)
class CudaHeaders:
    """The CUDA headers a CUDA wheel's extensions compile with, or why there are none here."""

    include: Path | None
    why_not: str = ""  # when include is None: where none was found

    @classmethod
    def find(cls, torch_include: Path | None = None) -> CudaHeaders:
        """The candidate's own where torch_include is an installed torch/include: its nvidia wheels' (complete
        only with nvidia-cuda-nvcc's crt/), else those triton bundles (a dependency of Linux CUDA wheels, built
        for the same CUDA major); else the toolkit's ($CUDA_HOME, else /usr/local/cuda). The candidate's first,
        so that what the gate finds does not depend on the host's toolkit."""
        toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
        site = torch_include.parent.parent if torch_include is not None else None
        own = [*sorted((site / "nvidia").glob("*/include")), site / TRITON_CUDA] if site else []
        for place in (*own, toolkit):
            if all((place / name).is_file() for name in CUDA_RUNTIME_FILES):
                return cls(place)
        why = f"no {' and '.join(CUDA_RUNTIME_FILES)} in {toolkit}"
        if site is not None:
            why += f" nor in the candidate's wheels ({site}/nvidia/*/include, {site / TRITON_CUDA})"
        return cls(None, why)

    def note(self) -> str:
        """What the audit says of the CUDA side, for a console or a page."""
        if self.include is None:
            return f"the CUDA side was not audited (no CUDA headers: {self.why_not})"
        return f"the CUDA side audited with USE_CUDA and the CUDA headers of {self.include}"


@dataclasses.dataclass(frozen=True)
class LatentBreak:
    name: str
    header: str  # the header that declares it
    guard: str | None  # what the guard's text says (the manifest's reading), for comparison only
    visible_from: ApiLevel  # the lowest target whose release does not export it, yet sees it
    first_exported: str | None
    device: str | None = None  # 'cuda': visible there only with USE_CUDA
    confirmed: bool | None = None  # True: a probe compiled at visible_from; None: not probed
    chain: tuple[str, ...] = ()  # the headers that made it visible, from the one included to the declaring one
    missing_at: tuple[ApiLevel, ...] = ()  # every target that sees it while its release does not export it

    def describe(self) -> str:
        exported = f"first exported in {self.first_exported}" if self.first_exported else "exported by no release"
        guard = f"guard text says {self.guard}" if self.guard else "no version guard in its text"
        side, cuda = ("CUDA side: ", " with USE_CUDA") if self.device == "cuda" else ("", "")
        targets = ", ".join(str(t) for t in self.missing_at) or str(self.visible_from)
        return (
            f"{side}{self.name}: visible at target {targets}{cuda} through {' > '.join(self.chain) or self.header} "
            f"but {exported} ({guard})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "header": self.header,
            "guard": self.guard,
            "visible_from": str(self.visible_from),
            "first_exported": self.first_exported,
            "device": self.device,
            "confirmed": self.confirmed,
            "chain": list(self.chain),
            "missing_at": [str(t) for t in self.missing_at],
        }


def visible_but_not_exported(
    visibility: Visibility, exports: Mapping[ApiLevel, frozenset[str]], min_target: ApiLevel
) -> list[LatentBreak]:
    """Every declaration visible at a target T >= min_target whose release T does not export it.

    exports maps a target to what its release exports; a target it lacks is not judged.
    """
    found: list[LatentBreak] = []
    for name in visibility.names():
        missing = tuple(
            t
            for t in visibility.targets
            if t >= min_target and t in exports and visibility.visible_at(name, t) and name not in exports[t]
        )
        if not missing:
            continue
        chain = visibility.chains[name]
        device = "cuda" if visibility.needs_cuda(name, missing[0]) else None
        found.append(
            LatentBreak(
                name, chain[-1] if chain else "", None, missing[0], None, device, chain=chain, missing_at=missing
            )
        )
    return sorted(found, key=lambda b: (b.header, b.name))


def exports_by_target(manifest: Manifest, targets: tuple[ApiLevel, ...]) -> dict[ApiLevel, frozenset[str]]:
    """What the manifest's release at each target level exports (a level it has no release for is left out)."""
    found: dict[ApiLevel, frozenset[str]] = {}
    for target in targets:
        release = manifest.release_for(Version(f"{target}.0"))
        if release is not None:
            found[target] = manifest.exported_by(release)
    return found


def find_latent_breaks(
    manifest: Manifest, release: str, min_target: ApiLevel, visibility: Visibility
) -> list[LatentBreak]:
    """visible_but_not_exported against the manifest's exports, with each symbol's first export and guard text."""
    found = []
    for item in visible_but_not_exported(visibility, exports_by_target(manifest, visibility.targets), min_target):
        facts = manifest[item.name] if item.name in manifest else None
        decl = facts.declaration_in(release) if facts else None
        if decl is not None and decl["device"] in DEVICES_WITHOUT_EXPORTS:
            continue
        found.append(
            dataclasses.replace(
                item,
                guard=decl["guard"] if decl else None,
                first_exported=facts.first_exported if facts else None,
            )
        )
    return found


def address_probe_source(header: str, names: list[str]) -> str:
    """A function taking the address of each name, seen through one header: it compiles if each is declared."""
    uses = "\n".join(f"  (void)&{name};" for name in names)
    return f"#include <{header}>\n\nvoid harness_probe() {{\n{uses}\n}}\n"


def compiles(
    include: Path,
    header: str,
    names: list[str],
    target: ApiLevel,
    workdir: Path,
    cuda: Path | None,
    compiler: HeaderCompiler,
) -> bool:
    flags = ["-std=c++17", f"-DTORCH_TARGET_VERSION={target.hex}ULL"]
    includes = [include]
    if cuda is not None:
        flags.append("-DUSE_CUDA")
        includes.append(cuda)
    return compiler.syntax_ok(address_probe_source(header, names), flags, includes, workdir)


def confirm(
    breaks: list[LatentBreak],
    include: Path,
    cuda_headers: Path | None = None,
    compiler: HeaderCompiler | None = None,
) -> list[LatentBreak]:
    """Compile one probe per (header, target); split it per symbol only where the batch fails. A claim visible
    only with USE_CUDA is compiled with cuda_headers; without them it stays unconfirmed."""
    compiler = compiler or HeaderCompiler()
    groups: dict[tuple[str, ApiLevel, bool], list[LatentBreak]] = defaultdict(list)
    for item in breaks:
        entry = item.chain[0] if item.chain else item.header  # the header an extension includes
        groups[(entry, item.visible_from, item.device == "cuda")].append(item)
    confirmed: list[LatentBreak] = []
    with tempfile.TemporaryDirectory(prefix="audit-guards-") as tmp:
        for (header, target, needs_cuda), items in groups.items():
            if needs_cuda and cuda_headers is None:
                confirmed += items  # unprobed: no CUDA headers on this machine
                continue
            cuda = cuda_headers if needs_cuda else None
            if compiles(include, header, [i.name for i in items], target, Path(tmp), cuda, compiler):
                confirmed += [dataclasses.replace(i, confirmed=True) for i in items]
            else:
                confirmed += [
                    dataclasses.replace(
                        i, confirmed=compiles(include, header, [i.name], target, Path(tmp), cuda, compiler)
                    )
                    for i in items
                ]
    return sorted(confirmed, key=lambda b: (b.header, b.name))


@dataclasses.dataclass(frozen=True)
class GuardAudit:
    """What `audit-guards` found in one release's headers: latent breaks, and (when probed by compiling)
    header-only wrappers and macros a build at a target cannot use."""

    release: str
    min_target: ApiLevel
    probed: bool  # compiled against the release's torch/include
    breaks: tuple[LatentBreak, ...]
    header_findings: tuple[HeaderFinding, ...]
    cuda: CudaHeaders | None = None  # the CUDA headers it probed with, or why none (None: not probed)

    @property
    def cuda_why_not(self) -> str | None:
        """Why the CUDA side was not audited (no CUDA headers on this host), when it was not."""
        return self.cuda.why_not if self.cuda is not None and self.cuda.include is None else None

    @property
    def broken(self) -> bool:
        """A claim that compiling disproved is no break; an unprobed one still counts."""
        return any(b.confirmed is not False for b in self.breaks) or bool(self.header_findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": AUDIT_JSON_VERSION,
            "release": self.release,
            "min_target": str(self.min_target),
            "probed": self.probed,
            "latent_breaks": [b.to_json() for b in self.breaks],
            "header_findings": [f.to_json() for f in self.header_findings],
            "cuda_side": {
                "audited": self.cuda is not None and self.cuda.include is not None,
                "headers": str(self.cuda.include) if self.cuda and self.cuda.include else None,
                "why_not": self.cuda_why_not,
            },
        }


def auditable_release(manifest: Manifest, text: str) -> str:
    """The manifest release a person names ('2.12' or '2.12.1'), if its headers have a target to audit."""
    release = manifest.release(text)
    if ApiLevel.of(Version(release)) < OLDEST_TARGET:
        raise BadInputError(
            f"{release} is older than the oldest target a build can ask for ({OLDEST_TARGET}): no target of its "
            f"headers to audit; audit {OLDEST_TARGET} or later"
        )
    return release


def audit_guards(
    manifest: Manifest,
    release: str,
    min_target: ApiLevel,
    include: Path | None,
    *,
    probe: bool = True,
    cuda: CudaHeaders | None = None,
    compiler: HeaderCompiler | None = None,
) -> GuardAudit:
    """The release's latent breaks from its preprocessed headers (packaged, else scanned from include); with
    include and probe, each confirmed by compiling, and its header-only wrappers and macros probed too, on the
    CPU side and, with CUDA headers (cuda, else CudaHeaders.find), on the CUDA side. compiler keeps what the
    compiles said (HeaderCompiler with the harness cache: the same audit again reads them back)."""
    cuda = cuda or CudaHeaders.find(include)
    visibility = packaged_visibility().get(release)
    if visibility is None:
        if include is None:
            raise BadInputError(
                f"{release}: its headers were never preprocessed "
                "(not in torch_abi_harness/data/stable_visibility.json) "
                "and there are none here; pass --headers <torch/include> of that release"
            )
        visibility = scan_include(include, release, cuda_include=cuda.include)
    breaks = find_latent_breaks(manifest, release, min_target, visibility)
    if include is None or not probe:
        return GuardAudit(release, min_target, probed=False, breaks=tuple(breaks), header_findings=())
    if breaks:
        breaks = confirm(breaks, include, cuda.include, compiler)
    exports = exports_by_target(manifest, visibility.targets)
    firsts = {name: manifest[name].first_exported for name in manifest.names()}
    targets = [t for t in visibility.targets if t >= min_target and t in exports]
    # One target's probe per core at once (each compile is a process of its own, its files named by its target),
    # the findings in the targets' order: a cold audit of seven targets takes the time of the slowest few.
    with (
        tempfile.TemporaryDirectory(prefix="audit-headers-") as tmp,
        concurrent.futures.ThreadPoolExecutor(max(1, min(len(targets), os.cpu_count() or 1))) as pool,
    ):
        probed = pool.map(
            lambda target: probe_headers(
                include, target, exports[target], Path(tmp), cuda.include, first_exported=firsts, compiler=compiler
            ),
            targets,
        )
        header_findings = [finding for found in probed for finding in found]
    return GuardAudit(
        release,
        min_target,
        probed=True,
        breaks=tuple(breaks),
        header_findings=tuple(header_findings),
        cuda=cuda,
    )
