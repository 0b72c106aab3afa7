"""Which stable-surface declarations a build at target T sees, as the compiler's preprocessor says.

No guard text is interpreted: one translation unit that includes every public
stable-ABI header of a release is run through ``c++ -E`` at each target from the
oldest supported level to the release's own, without and with ``USE_CUDA``; the
``aoti_torch_*`` / ``torch_*`` declarations that survive are visible at that
target, and the preprocessor's line markers (``# N "file" flags``: 1 entering an
include, 2 returning) give the header chain that brought each one in.

``python tools/gen_visibility.py`` writes ``torch_abi_harness/data/stable_visibility.json``
(``nox -s manifest`` runs it); only ``audit-guards`` loads it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import Version

from torch_abi_harness.core.errors import BadInputError, InfrastructureError
from torch_abi_harness.core.versions import ApiLevel, release_of
from torch_abi_harness.static.wheelfile import open_wheel

log = logging.getLogger(__name__)

VISIBILITY_SCHEMA_VERSION = 1
OLDEST_TARGET = ApiLevel(2, 9)
# Public stable-ABI headers, relative to torch/include. mps/xpu shims are left out: no Linux wheel
# exports them, so there is nothing to compare their visibility with.
PUBLIC_HEADERS = re.compile(
    r"^torch/(?:csrc/stable/[^/]+\.h|csrc/stable/c/[^/]+\.h|headeronly/.+\.h"
    r"|csrc/inductor/aoti_torch/c/shim\.h|csrc/inductor/aoti_torch/generated/c_shim_(?:aten|cpu|cuda)\.h)$"
)
CUDA_ONLY_HEADERS = re.compile(r"^torch/(?:headeronly/cuda/|csrc/inductor/aoti_torch/generated/c_shim_cuda\.h)")
# Windows-only, and the per-architecture vector headers (vec256/missing_vld1_neon.h: ARM NEON types) that
# vec headers include for their own architecture only.
NEVER_ON_LINUX = re.compile(r"win32-headers\.h$|^torch/headeronly/cpu/vec/[^/]+/")
LINE_MARKER = re.compile(r'^# (\d+) "((?:\\.|[^"\\])*)"((?: \d+)*)\s*$')
TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[{};]|\b(?P<name>(?:aoti_torch|torch)_\w+)(?=\s*\()')
SCOPE_OPENER = re.compile(r'^(?:extern\s*"C(?:\+\+)?"|(?:inline\s+)?namespace\b[^=]*)$', re.S)
NOT_A_DECLARATION = re.compile(r"^\s*(?:using|typedef|static_assert|return|template)\b|&\s*$")
PREPROCESS_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Pass:
    """One preprocessor run: a target and whether USE_CUDA was defined."""

    target: ApiLevel
    cuda: bool


def public_headers(include: Path, *, cuda: bool, cuda_runtime: bool = True) -> list[str]:
    """The public stable-ABI headers under include (torch/include), as an extension names them."""
    found = []
    for path in sorted(include.glob("torch/**/*.h")):
        relative = path.relative_to(include).as_posix()
        if not PUBLIC_HEADERS.match(relative) or NEVER_ON_LINUX.search(relative):
            continue
        if CUDA_ONLY_HEADERS.match(relative) and not cuda:
            continue
        if relative.startswith("torch/headeronly/cuda/") and not cuda_runtime:
            continue  # they include cuda.h
        found.append(relative)
    found.sort(key=include_order)
    if not found:
        raise BadInputError(f"{include}: no stable-ABI header under it; pass a torch/include directory")
    return found


def include_order(header: str) -> tuple[int, str]:
    """What a stable extension includes comes first, so the chains show how it reaches the C shims."""
    for rank, prefix in enumerate(("torch/csrc/stable/c/", "torch/csrc/stable/", "torch/headeronly/")):
        if header.startswith(prefix):
            return (1 if rank == 0 else 0 if rank == 1 else 2, header)
    return (3, header)


def translation_unit(headers: Sequence[str]) -> str:
    return "".join(f"#include <{h}>\n" for h in headers)


def preprocess(
    include: Path, headers: Sequence[str], run: Pass, workdir: Path, cuda_include: Path | None = None
) -> str:
    """The preprocessed text of one translation unit including headers, at run's target."""
    source = workdir / f"visibility-{run.target}{'-cuda' if run.cuda else ''}.cpp"
    source.write_text(translation_unit(headers))
    argv = ["c++", "-E", "-std=c++17", f"-DTORCH_TARGET_VERSION={run.target.hex}ULL", f"-I{include}"]
    if run.cuda:
        argv.append("-DUSE_CUDA")
        if cuda_include is not None:
            argv.append(f"-I{cuda_include}")
    argv.append(str(source))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise InfrastructureError("no C++ compiler: `c++` is not on PATH (install g++)") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise InfrastructureError(
            f"preprocessing the stable headers of {include} at target {run.target}"
            f"{' with USE_CUDA' if run.cuda else ''} failed:\n  $ {' '.join(argv)}\n{tail}"
        )
    return proc.stdout


def surviving_declarations(text: str, include: Path | str) -> dict[str, tuple[str, ...]]:
    """Each aoti_torch_* / torch_* function declared at namespace scope, with its header chain.

    The chain runs from the header the translation unit includes to the one that declares it
    (paths relative to include). Calls inside inline bodies and definitions are not declarations.
    """
    root = str(include).rstrip("/") + "/"
    stack: list[str] = []
    scopes: list[bool] = []  # per open brace: True for extern "C" / namespace, False for any body
    statement: list[str] = []
    candidate: tuple[str, tuple[str, ...]] | None = None
    found: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            marker = LINE_MARKER.match(line)
            if marker:
                _follow(stack, marker[2], marker[3].split())
                continue
        position = 0
        for token in TOKEN.finditer(line):
            value = token.group()
            if token["name"]:
                if candidate is None and all(scopes):
                    before = "".join(statement) + line[position : token.start()]
                    if not NOT_A_DECLARATION.search(before):
                        candidate = (token["name"], _chain(stack, root))
                continue
            if value in "{};":
                statement.append(line[position : token.start()])
                text_before = "".join(statement).strip()
                if value == "{":
                    scopes.append(bool(SCOPE_OPENER.match(text_before)))
                    candidate = None
                elif value == "}":
                    if scopes:
                        scopes.pop()
                    candidate = None
                elif candidate is not None and all(scopes):
                    found.setdefault(*candidate)
                    candidate = None
                statement = []
                position = token.end()
        statement.append(line[position:] + "\n")
    return found


def _follow(stack: list[str], path: str, flags: list[str]) -> None:
    if "1" in flags:
        stack.append(path)
    elif "2" in flags:
        if stack:
            stack.pop()
        if stack:
            stack[-1] = path
        else:
            stack.append(path)
    elif stack:
        stack[-1] = path
    else:
        stack.append(path)


def _chain(stack: list[str], root: str) -> tuple[str, ...]:
    return tuple(p[len(root) :] if p.startswith(root) else p for p in stack[1:])


@dataclasses.dataclass(frozen=True)
class Visibility:
    """Per symbol, the targets of one release's headers at which it is visible, and how."""

    release: str
    targets: tuple[ApiLevel, ...]
    cpu: dict[str, frozenset[ApiLevel]]  # without USE_CUDA
    cuda: dict[str, frozenset[ApiLevel]]  # with USE_CUDA (and the CUDA headers)
    chains: dict[str, tuple[str, ...]]  # at the lowest target that sees it, without USE_CUDA if it can

    def names(self) -> list[str]:
        return sorted(set(self.cpu) | set(self.cuda))

    def visible_at(self, name: str, target: ApiLevel) -> bool:
        return target in self.cpu.get(name, frozenset()) or target in self.cuda.get(name, frozenset())

    def needs_cuda(self, name: str, target: ApiLevel) -> bool:
        return target not in self.cpu.get(name, frozenset()) and target in self.cuda.get(name, frozenset())

    def to_json(self) -> dict[str, Any]:
        chains: list[list[str]] = []
        index: dict[tuple[str, ...], int] = {}
        symbols: dict[str, list[int]] = {}
        for name in self.names():
            chain = self.chains[name]
            if chain not in index:
                index[chain] = len(chains)
                chains.append(list(chain))
            symbols[name] = [
                _mask(self.cpu.get(name, frozenset()), self.targets),
                _mask(self.cuda.get(name, frozenset()), self.targets),
                index[chain],
            ]
        return {"targets": [str(t) for t in self.targets], "chains": chains, "symbols": symbols}

    @classmethod
    def from_json(cls, release: str, data: dict[str, Any]) -> Visibility:
        targets = tuple(ApiLevel.parse(t) for t in data["targets"])
        chains = [tuple(c) for c in data["chains"]]
        cpu: dict[str, frozenset[ApiLevel]] = {}
        cuda: dict[str, frozenset[ApiLevel]] = {}
        chain_of: dict[str, tuple[str, ...]] = {}
        for name, (cpu_mask, cuda_mask, chain) in data["symbols"].items():
            if cpu_mask:
                cpu[name] = _unmask(cpu_mask, targets)
            if cuda_mask:
                cuda[name] = _unmask(cuda_mask, targets)
            chain_of[name] = chains[chain]
        return cls(release, targets, cpu, cuda, chain_of)


def _mask(levels: frozenset[ApiLevel], targets: tuple[ApiLevel, ...]) -> int:
    return sum(1 << i for i, t in enumerate(targets) if t in levels)


def _unmask(mask: int, targets: tuple[ApiLevel, ...]) -> frozenset[ApiLevel]:
    return frozenset(t for i, t in enumerate(targets) if mask >> i & 1)


def targets_of(release: ApiLevel, oldest: ApiLevel = OLDEST_TARGET) -> tuple[ApiLevel, ...]:
    """Every target from oldest to release's own level (none for a release older than oldest)."""
    if release.major != oldest.major:
        raise BadInputError(f"target levels across major versions ({oldest} to {release}) are not supported")
    return tuple(ApiLevel(release.major, minor) for minor in range(oldest.minor, release.minor + 1))


def scan_include(
    include: Path, release: str, oldest: ApiLevel = OLDEST_TARGET, cuda_include: Path | None = None
) -> Visibility:
    """Run the preprocessor over a release's public stable headers at every target it supports."""
    targets = targets_of(ApiLevel.of(Version(release)), oldest)
    seen: dict[bool, dict[str, set[ApiLevel]]] = {False: {}, True: {}}
    chains: dict[str, tuple[ApiLevel, bool, tuple[str, ...]]] = {}
    with tempfile.TemporaryDirectory(prefix="visibility-") as tmp:
        for cuda in (False, True):
            headers = public_headers(include, cuda=cuda, cuda_runtime=cuda_include is not None)
            for target in targets:
                text = preprocess(include, headers, Pass(target, cuda), Path(tmp), cuda_include)
                for name, chain in surviving_declarations(text, include).items():
                    seen[cuda].setdefault(name, set()).add(target)
                    best = chains.get(name)
                    if best is None or (target, cuda) < best[:2]:
                        chains[name] = (target, cuda, chain)
    log.info("%s: %d declarations visible at some target (%d without USE_CUDA)", release, len(chains), len(seen[False]))
    return Visibility(
        release,
        targets,
        {n: frozenset(s) for n, s in seen[False].items()},
        {n: frozenset(s) for n, s in seen[True].items()},
        {n: c for n, (_, _, c) in chains.items()},
    )


def find_cuda_include() -> Path | None:
    """The CUDA toolkit's include directory ($CUDA_HOME, else /usr/local/cuda), if it holds the runtime API."""
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    return home / "include" if (home / "include" / "cuda_runtime_api.h").is_file() else None


@functools.cache
def packaged_visibility() -> dict[str, Visibility]:
    text = resources.files("torch_abi_harness.data").joinpath("stable_visibility.json").read_text()
    data = json.loads(text)
    if data.get("schema_version") != VISIBILITY_SCHEMA_VERSION:
        raise InfrastructureError(
            f"torch_abi_harness/data/stable_visibility.json: schema_version {data.get('schema_version')!r} is not "
            f"{VISIBILITY_SCHEMA_VERSION} (regenerate it with `nox -s manifest`)"
        )
    return {release: Visibility.from_json(release, facts) for release, facts in data["releases"].items()}


def build_visibility(scans: Sequence[Visibility]) -> dict[str, Any]:
    ordered = sorted(scans, key=lambda v: Version(v.release))
    return {
        "schema_version": VISIBILITY_SCHEMA_VERSION,
        "oldest_target": str(OLDEST_TARGET),
        "releases": {v.release: v.to_json() for v in ordered},
    }


@dataclasses.dataclass(frozen=True)
class HeaderSource:
    """A torch/include tree and the release it belongs to."""

    release: str
    include: Path


def include_of_wheel(wheel: Path, workdir: Path) -> HeaderSource:
    """Extract torch/include from a torch wheel into workdir."""
    with open_wheel(wheel) as archive:
        names = archive.namelist()
        if "torch/version.py" not in names:
            raise BadInputError(f"{wheel}: not a torch wheel (no torch/version.py)")
        raw = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", archive.read("torch/version.py").decode())
        release = release_of(raw[1] if raw else wheel.name.split("-")[1])
        target = workdir / release
        for member in names:
            if member.startswith("torch/include/torch/") and member.endswith(".h"):
                archive.extract(member, target)
    return HeaderSource(release, target / "torch" / "include")


def include_of_dir(path: Path) -> HeaderSource:
    """A torch/include directory (of an installed torch); its release is read from torch/headeronly/version.h."""
    version_h = path / "torch" / "headeronly" / "version.h"
    if not version_h.is_file():
        version_h = path / "torch" / "csrc" / "api" / "include" / "torch" / "version.h"
    text = version_h.read_text() if version_h.is_file() else ""
    parts = [re.search(rf"#define TORCH_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise BadInputError(f"{path}: no torch version header under it; pass a torch/include directory")
    return HeaderSource(".".join(m[1] for m in parts if m), path)


def sources_of(paths: Sequence[Path], workdir: Path) -> Iterator[HeaderSource]:
    for path in paths:
        yield include_of_wheel(path, workdir) if path.suffix == ".whl" else include_of_dir(path)
