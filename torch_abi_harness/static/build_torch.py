"""The torch a published wheel was built with (its build torch B), as the wheel itself says it: read, never guessed.

In this order, the first that names a torch wins:

1. pinned: its metadata's `Requires-Dist: torch==X.Y.Z` (no extra);
2. a build record in JSON that the build leaves in the package: `{"version": {"torch": "2.10.0+cu128"}}`
   (xformers' cpp_lib.json) or a top-level `"torch_version"`;
3. a version or build-info file (`version.py`, `_version.py`, `__version__.py`, `build_info.py`,
   `_build_info.py`, `__about__.py`) that assigns the torch version (`torch_version = "2.14.1"`,
   `TORCH_VERSION`, `__torch_version__`, `built_with_torch`...) as a string;
4. the wheel's own version's local label naming torch: `0.9.3+torch2.14.1.cpu`, `+pt25cu124`,
   `+cu124torch2.5` (its METADATA Version, else a version file's `__version__`);
5. a torch compatibility table in a top-level package's `__init__.py`, keyed by the wheel's own major.minor:
   fbgemm_gpu's `_fbgemm_torch_compat_table = {"1.9": "2.14", ...}`. It names a release series only.

Else B is unknown. Not read, on purpose: the strings of its shared objects (no wheel seen carries its torch
version there, and a bare "2.14.1" in .rodata says nothing of what it is), `git_version` (the project's own
commit, not torch's), a minimum such as `min_torch_version` (a floor, not the build) and a Requires-Dist range.

Also here: where a wheel's declared torch range claims releases its binary cannot load on (`declared_beyond`).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import zipfile
from collections.abc import Sequence
from email.parser import Parser
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.predict import Prediction
from torch_abi_harness.static.wheelfile import Wheel, open_wheel

PINNED, UNKNOWN = "pinned", "unknown"
_READ_AT_MOST = 256 * 1024  # a version file, a build record or an __init__.py larger than this is not one to read
_VERSION_FILES = re.compile(r"(_{0,2}version_{0,2}|_?build_info|__about__)\.py")
# What a build names its torch version as (lowercase, underscores dropped); a floor such as min_torch is not one.
_TORCH_NAMES = frozenset(
    {"torchversion", "pytorchversion", "builttorch", "buildtorch", "builtwithtorch", "torchbuildversion"}
)
_LABEL_EXACT = re.compile(r"(?:^|[^a-z])(?:py)?torch(\d+)\.(\d+)(?:\.(\d+))?")  # torch2.14.1, cu124torch2.5
_LABEL_PT = re.compile(r"(?:^|[^a-z])pt(\d)\.?(\d{1,2})(?!\d)")  # pt25, pt210, pt2.14: a release series


@dataclasses.dataclass(frozen=True)
class BuildTorch:
    """B as the wheel says it, and how it was learnt: "pinned", "read from <file>" or "unknown"."""

    release: Version | None  # None: unknown; X.Y.0 where only the series was named (exact False)
    how: str
    said: str = ""  # what was read, as written: "__version__ = '0.9.3+torch2.14.1.cpu'"
    exact: bool = True

    @property
    def known(self) -> bool:
        return self.release is not None

    @property
    def level(self) -> ApiLevel | None:
        return ApiLevel.of(self.release) if self.release is not None else None

    def describe(self) -> str:
        """One line: 'torch 2.14.1, read from torch_harmonics/_version.py (__version__ = ...)'."""
        if self.release is None:
            return "unknown: neither its metadata nor its files name the torch it was built with"
        shown = str(self.release) if self.exact else f"{self.release.major}.{self.release.minor} (the series)"
        return f"torch {shown}, {self.how}" + (f" ({self.said})" if self.said else "")


def metadata_text(wheel: Wheel) -> str:
    name = next((n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")), None)
    return wheel.read(name).decode(errors="replace") if name else ""


def torch_requirement(path: Path) -> tuple[str | None, Version | None]:
    """The wheel's Requires-Dist on torch (with no extra), and the release it pins exactly, if it does."""
    with open_wheel(path) as wheel:
        text = metadata_text(wheel)
    for line in Parser().parsestr(text).get_all("Requires-Dist") or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "torch" or (requirement.marker and "extra" in str(requirement.marker)):
            continue
        exact = [s.version for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
        return str(requirement), Version(exact[0]) if exact else None
    return None, None


def read_build_torch(path: Path) -> BuildTorch:
    """B as the wheel at path says it (the readers of this module's docstring, in their order), else unknown."""
    pin, pinned = torch_requirement(path)
    if pinned is not None:
        return BuildTorch(Version(pinned.base_version), PINNED, pin or "")
    with open_wheel(path) as wheel:
        members = [
            m
            for m in wheel.infolist()
            if not m.is_dir() and ".dist-info/" not in m.filename and m.file_size <= _READ_AT_MOST
        ]
        version = Parser().parsestr(metadata_text(wheel)).get("Version") or ""
        for reader in (_from_build_records, _from_version_files, _from_own_version, _from_compat_table):
            found = reader(wheel, members, version)
            if found is not None:
                return found
    return BuildTorch(None, UNKNOWN)


def _version_or_none(text: str) -> Version | None:
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def _torch_version(text: object) -> Version | None:
    """A torch version as a build records it ('2.10.0+cu128'), as its release; None for anything else."""
    found = _version_or_none(text) if isinstance(text, str) else None
    return Version(found.base_version) if found is not None and len(found.release) >= 2 else None


# Each reader: the wheel, its members that may be read, its own version as its METADATA gives it.
def _from_build_records(wheel: Wheel, members: list[zipfile.ZipInfo], _version: str) -> BuildTorch | None:
    for member in (m for m in members if m.filename.endswith(".json")):
        try:
            data = json.loads(wheel.read(member))
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        nested = data.get("version")
        candidates = [("version.torch", nested.get("torch"))] if isinstance(nested, dict) else []
        candidates.append(("torch_version", data.get("torch_version")))
        for key, value in candidates:
            release = _torch_version(value)
            if release is not None:
                return BuildTorch(release, f"read from {member.filename}", f'"{key}": "{value}"')
    return None


def _assignments(wheel: Wheel, member: zipfile.ZipInfo) -> list[tuple[str, object]]:
    """A Python file's module-level assignments of constants and dicts: (name, value), in order."""
    try:
        tree = ast.parse(wheel.read(member).decode(errors="replace"))
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[str, object]] = []
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        try:
            literal = ast.literal_eval(value) if value is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        found += [(t.id, literal) for t in targets if isinstance(t, ast.Name)]
    return found


def _version_files(members: list[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    return [m for m in members if _VERSION_FILES.fullmatch(PurePosixPath(m.filename).name)]


def _from_version_files(wheel: Wheel, members: list[zipfile.ZipInfo], _version: str) -> BuildTorch | None:
    for member in _version_files(members):
        for name, value in _assignments(wheel, member):
            release = _torch_version(value) if name.lower().replace("_", "") in _TORCH_NAMES else None
            if release is not None:
                return BuildTorch(release, f"read from {member.filename}", f"{name} = {value!r}")
    return None


def from_local_label(version: str) -> tuple[Version, bool] | None:
    """The torch a version's local label names ('0.9.3+torch2.14.1.cpu' -> 2.14.1, exact; '+pt25cu124' -> 2.5,
    the series only), or None."""
    parsed = _version_or_none(version)
    label = parsed.local if parsed is not None else None
    if not label:
        return None
    exact = _LABEL_EXACT.search(label)
    if exact:
        return Version(f"{exact[1]}.{exact[2]}.{exact[3] or 0}"), exact[3] is not None
    series = _LABEL_PT.search(label)
    return (Version(f"{series[1]}.{series[2]}.0"), False) if series else None


def _from_own_version(wheel: Wheel, members: list[zipfile.ZipInfo], version: str) -> BuildTorch | None:
    found = from_local_label(version)
    if found is not None:
        return BuildTorch(found[0], "read from its METADATA", f"Version: {version}", exact=found[1])
    for member in _version_files(members):
        for name, value in _assignments(wheel, member):
            found = from_local_label(value) if name in ("__version__", "version") and isinstance(value, str) else None
            if found is not None:
                return BuildTorch(found[0], f"read from {member.filename}", f"{name} = {value!r}", exact=found[1])
    return None


def _from_compat_table(wheel: Wheel, members: list[zipfile.ZipInfo], version: str) -> BuildTorch | None:
    """A top-level package's table of its own major.minor to the torch series it is built for (fbgemm_gpu's)."""
    own = _version_or_none(version)
    if own is None:
        return None
    key = f"{own.major}.{own.minor}"
    for member in (m for m in members if re.fullmatch(r"[^/]+/__init__\.py", m.filename)):
        for name, value in _assignments(wheel, member):
            lowered = name.lower()
            if "torch" in lowered and "compat" in lowered and isinstance(value, dict):
                series = value.get(key)
                level = _torch_version(series)
                if level is not None:
                    said = f"{name}[{key!r}] = {series!r}"
                    return BuildTorch(
                        Version(f"{level.major}.{level.minor}.0"), f"read from {member.filename}", said, exact=False
                    )
    return None


def declared_beyond(pin: str | None, predictions: Sequence[Prediction]) -> str | None:
    """Where the declared torch requirement admits releases the binary cannot load on (a torch symbol it imports
    is missing there, per the static prediction): 'declares torch>=2.9, loads from 2.13.0'; None where it does not."""
    if not pin:
        return None
    try:
        specifier = Requirement(pin).specifier
    except InvalidRequirement:
        return None
    claimed = [p for p in predictions if specifier.contains(Version(p.runtime), prereleases=True)]
    if not any(p.missing for p in claimed):
        return None
    loads = [p.runtime for i, p in enumerate(predictions) if not any(q.missing for q in predictions[i:])]
    where = f"loads from {loads[0]}" if loads else "loads on none of the releases checked"
    return f"declares {pin}, {where}"
