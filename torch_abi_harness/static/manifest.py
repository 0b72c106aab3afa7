"""The stable surface per torch release, read from the wheels: generated, never edited by hand.

For every C shim (``aoti_torch_*`` / ``torch_*``) declared in a release's stable C
headers or exported by its libraries, the manifest keeps where it is declared
(header, version guard, device, signature without parameter names) and which
releases export it. ``nox -s manifest`` regenerates ``torch_abi_harness/data/stable_manifest.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.errors import BadInputError, InfrastructureError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.symbols import STABLE_C_NAME, read_shared_object
from torch_abi_harness.static.wheelfile import Wheel, open_wheel

log = logging.getLogger(__name__)

MANIFEST_SCHEMA_VERSION = 1
HEADER_PATTERN = re.compile(
    r"torch/include/(torch/csrc/(?:inductor/aoti_torch/(?:c|generated)/[^/]+\.h|stable/c/[^/]+\.h))$"
)
LIBRARY_PATTERN = re.compile(r"torch/lib/(lib(?:torch|c10)[^/]*\.so)$")
VERSION_GUARD = re.compile(r"TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+")
DEVICE_GUARD = re.compile(r"^#\s*(?:ifdef|if\s+defined)\s*\(?\s*USE_(CUDA|MPS|XPU|ROCM)\b")
DECLARATION = re.compile(
    r"AOTI_TORCH_EXPORT\s+(?P<ret>.*?)\b(?P<name>(?:aoti_torch|torch)_\w+)\s*\((?P<params>.*)\)\s*;", re.S
)


@dataclasses.dataclass(frozen=True)
class Declaration:
    name: str
    header: str
    guard: str | None  # "2.12": visible when TORCH_FEATURE_VERSION >= 2.12; "<2.10": only below it
    device: str | None  # "cuda", "mps", "xpu" for device-only declarations
    signature: str


@dataclasses.dataclass(frozen=True)
class ReleaseScan:
    release: str
    declarations: dict[str, Declaration]
    exports: frozenset[str]


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def normalize_signature(ret: str, params: str) -> str:
    """'AOTITorchError (AtenTensorHandle, int64_t*)': types only, whitespace folded."""
    ret = " ".join(ret.replace("[[", " [[").split())
    ret = re.sub(r"\[\[.*?\]\]\s*", "", ret).strip()
    parts = []
    for param in _split_params(params):
        param = " ".join(param.split())
        param = re.sub(r"\(\s*\*\s*\w+\s*\)", "(*)", param)  # function pointer name
        param = re.sub(r"\s*=\s*[^,]+$", "", param)  # default values
        if "(" not in param:
            param = re.sub(r"\s*([*&]+)\s*", r"\1 ", param).strip()  # 'int64_t *ret' -> 'int64_t* ret'
        tokens = re.match(r"^(.*?[\w\*&\]\)>])\s+(\w+)$", param)
        if tokens and tokens[2] not in {
            "const",
            "int",
            "char",
            "long",
            "short",
            "unsigned",
            "signed",
            "double",
            "float",
            "bool",
            "void",
        }:
            param = tokens[1]
        parts.append(param.replace(" *", "*").replace(" &", "&"))
    return f"{ret} ({', '.join(p for p in parts if p)})"


def _split_params(params: str) -> Iterator[str]:
    depth, current = 0, ""
    for char in params:
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        if char == "," and depth == 0:
            yield current
            current = ""
        else:
            current += char
    if current.strip() and current.strip() != "void":
        yield current


def parse_header(path: str, text: str) -> Iterator[Declaration]:
    """Declarations with the version guard and device condition in force where each stands."""
    stack: list[tuple[str, str | None]] = []  # (kind, value): ("version", "2.12"), ("device", "cuda"), ("other", None)
    pending: list[str] = []
    for line in strip_comments(text).splitlines():
        directive = line.strip()
        if directive.startswith("#"):
            word = directive[1:].strip().split(" ", 1)[0].split("(", 1)[0]
            if word in ("if", "ifdef", "ifndef"):
                version_guard = VERSION_GUARD.search(directive)
                device_guard = DEVICE_GUARD.match(directive)
                if version_guard and word == "if":
                    stack.append(("version", f"{int(version_guard[1])}.{int(version_guard[2])}"))
                elif device_guard:
                    stack.append(("device", device_guard[1].lower()))
                else:
                    stack.append(("other", None))
            elif word == "else" and stack:
                kind, value = stack[-1]
                stack[-1] = (
                    ("version", f"<{value}") if kind == "version" else (kind, None if kind == "device" else value)
                )
            elif word == "elif" and stack:
                stack[-1] = ("other", None)
            elif word == "endif" and stack:
                stack.pop()
            continue
        if pending or "AOTI_TORCH_EXPORT" in line:
            pending.append(line)
            joined = "\n".join(pending)
            if ";" in joined or "{" in joined:
                pending = []
                match = DECLARATION.search(joined)
                if match:
                    versions = [v for k, v in stack if k == "version" and v]
                    devices = [v for k, v in stack if k == "device" and v]
                    guard = max(versions, key=_guard_key) if versions else None
                    device = devices[-1] if devices else _device_of(path)
                    yield Declaration(
                        match["name"], path, guard, device, normalize_signature(match["ret"], match["params"])
                    )


def _guard_key(guard: str) -> tuple[int, ApiLevel]:
    return (0 if guard.startswith("<") else 1, ApiLevel.parse(guard.lstrip("<")))


def _device_of(header: str) -> str | None:
    match = re.search(r"(?:c_shim|shim)_(cuda|mps|xpu|mkldnn)\.h$", header)
    return match[1] if match and match[1] != "mkldnn" else None


def open_torch_wheel(path: Path) -> Wheel:
    """The zip of a torch wheel; a file that is not a zip, or a wheel without torch/version.py, is the user's
    bad input (BadInputError) naming the file and what it is not. `gate` checks its --candidate-wheel so,
    before any work."""
    try:
        wheel = open_wheel(path)
    except BadInputError as exc:
        raise BadInputError(f"{exc}; pass a torch wheel (torch-X.Y.Z-...whl)") from exc
    if "torch/version.py" not in wheel.namelist():
        wheel.close()
        raise BadInputError(f"{path}: not a torch wheel (it has no torch/version.py); pass a torch wheel")
    return wheel


def scan_wheel(path: Path) -> ReleaseScan:
    """Headers and library exports of one torch wheel, read from the zip (nothing is installed). A file that is
    not a zip, or a wheel of another project, is the user's bad input (BadInputError), named as such."""
    with open_torch_wheel(path) as wheel:
        names = wheel.namelist()
        raw = re.search(r"__version__\s*=\s*['\"]([^'\"+]+)", wheel.read("torch/version.py").decode())
        release = raw[1] if raw else path.name.split("-")[1]
        declarations: dict[str, Declaration] = {}
        for member in sorted(names):
            header = HEADER_PATTERN.search(member)
            if header:
                for decl in parse_header(header[1], wheel.read(member).decode(errors="replace")):
                    declarations.setdefault(decl.name, decl)
        exports: set[str] = set()
        for member in names:
            if LIBRARY_PATTERN.search(member) and "python" not in member:
                shared = read_shared_object(io.BytesIO(wheel.read(member)), member)
                exports |= {s for s in shared.exports if STABLE_C_NAME.match(s)}
    log.info("%s: %d declarations, %d stable exports", release, len(declarations), len(exports))
    return ReleaseScan(release, declarations, frozenset(exports))


def build_manifest(scans: Iterable[ReleaseScan]) -> dict[str, Any]:
    ordered = sorted(scans, key=lambda s: Version(s.release))
    releases = [s.release for s in ordered]
    names = sorted({n for s in ordered for n in (*s.declarations, *s.exports)})
    symbols: dict[str, Any] = {}
    for name in names:
        spans: list[dict[str, Any]] = []
        for scan in ordered:
            decl = scan.declarations.get(name)
            if decl is None:
                continue
            facts = {"header": decl.header, "guard": decl.guard, "device": decl.device, "signature": decl.signature}
            if (
                spans
                and all(spans[-1][k] == v for k, v in facts.items())
                and spans[-1]["releases"][-1] == _previous(releases, scan.release)
            ):
                spans[-1]["releases"].append(scan.release)
            else:
                spans.append({"releases": [scan.release], **facts})
        symbols[name] = {"declared": spans, "exported": [s.release for s in ordered if name in s.exports]}
    return {"schema_version": MANIFEST_SCHEMA_VERSION, "releases": releases, "symbols": symbols}


def _previous(releases: list[str], release: str) -> str | None:
    index = releases.index(release)
    return releases[index - 1] if index else None


@dataclasses.dataclass(frozen=True)
class SymbolFacts:
    name: str
    exported: tuple[str, ...]
    declared: tuple[dict[str, Any], ...]

    @property
    def first_exported(self) -> str | None:
        return self.exported[0] if self.exported else None

    def declaration_in(self, release: str) -> dict[str, Any] | None:
        return next((d for d in self.declared if release in d["releases"]), None)


class Manifest:
    def __init__(self, data: dict[str, Any]) -> None:
        problems = check_manifest(data)
        if problems:
            raise InfrastructureError(
                "the stable-ABI manifest is inconsistent (regenerate it with `nox -s manifest`):\n  "
                + "\n  ".join(problems[:10])
            )
        self.releases: list[str] = data["releases"]
        self._symbols: dict[str, dict[str, Any]] = data["symbols"]

    def __contains__(self, name: str) -> bool:
        return name in self._symbols

    def __getitem__(self, name: str) -> SymbolFacts:
        raw = self._symbols[name]
        return SymbolFacts(name, tuple(raw["exported"]), tuple(raw["declared"]))

    def names(self) -> list[str]:
        return list(self._symbols)

    def exported_by(self, release: str) -> frozenset[str]:
        return frozenset(n for n, s in self._symbols.items() if release in s["exported"])

    def release_for(self, version: Version) -> str | None:
        """The manifest release with the same major.minor as version (patch releases share an ABI level)."""
        level = ApiLevel.of(version)
        matches = [r for r in self.releases if ApiLevel.of(Version(r)) == level]
        return matches[-1] if matches else None

    def release(self, text: str) -> str:
        """The manifest release a person means by '2.12' or '2.12.1'; a clear error otherwise."""
        try:
            version = Version(text if text.count(".") >= 2 else f"{text}.0")
        except InvalidVersion as exc:
            raise BadInputError(f"{text!r} is not a release such as '2.10' or '2.10.0'") from exc
        release = self.release_for(version)
        if release is None:
            raise BadInputError(
                f"{text!r} is not in the manifest (releases: {', '.join(self.releases)}); "
                "regenerate it with `nox -s manifest -- RELEASE` to add a release"
            )
        return release


def check_manifest(data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if data.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        return [f"schema_version {data.get('schema_version')!r} is not {MANIFEST_SCHEMA_VERSION}"]
    releases = data.get("releases", [])
    if releases != sorted(releases, key=Version):
        problems.append("releases are not in version order")
    known = set(releases)
    for name, facts in data.get("symbols", {}).items():
        if not STABLE_C_NAME.match(name):
            problems.append(f"{name}: not a stable C shim name")
        for release in facts["exported"]:
            if release not in known:
                problems.append(f"{name}: exported by unknown release {release}")
        for span in facts["declared"]:
            if not set(span["releases"]) <= known:
                problems.append(f"{name}: declared in unknown releases {span['releases']}")
    return problems


@functools.cache
def packaged_manifest() -> Manifest:
    text = resources.files("torch_abi_harness.data").joinpath("stable_manifest.json").read_text()
    return Manifest(json.loads(text))
