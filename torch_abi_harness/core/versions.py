"""Torch releases and stable-ABI levels (TORCH_TARGET_VERSION)."""

from __future__ import annotations

import dataclasses
import re

from packaging.version import InvalidVersion, Version

_LEVEL = re.compile(r"^(\d+)\.(\d+)$")


@dataclasses.dataclass(frozen=True, order=True)
class ApiLevel:
    """A stable-ABI level: the major.minor of the release whose API a build may use."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> ApiLevel:
        match = _LEVEL.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not a major.minor level such as '2.10'")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def of(cls, release: Version) -> ApiLevel:
        return cls(release.major, release.minor)

    @classmethod
    def from_hex(cls, text: str) -> ApiLevel:
        """A TORCH_TARGET_VERSION value as the compiler was given it (0x020a000000000000) as a level."""
        value = int(text, 16)
        return cls((value >> 56) & 0xFF, (value >> 48) & 0xFF)

    @property
    def hex(self) -> str:
        """The value of TORCH_TARGET_VERSION for this level, e.g. 0x020a000000000000."""
        return f"0x{(self.major << 56) | (self.minor << 48):016x}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_release(text: str) -> Version:
    """A torch release as written in matrix.yaml: X.Y.Z, no local label or pre-release tag."""
    try:
        version = Version(text)
    except InvalidVersion as exc:
        raise ValueError(f"{text!r} is not a version") from exc
    if version.local or len(version.release) != 3:
        raise ValueError(f"{text!r} is not a release written as X.Y.Z (e.g. '2.10.0')")
    return version


def release_of(torch_version: str) -> str:
    """The release a torch version is a build of: its wheel variant (the local label) dropped.

    '2.13.0+cpu' -> '2.13.0', '2.10.0+cu128' -> '2.10.0'. Only the label goes (packaging's `public`
    version), never a pre-release, dev or post tag: a release candidate or a nightly is not the release
    it precedes (its ABI and op schemas may still change), so '2.13.0rc1+cpu' -> '2.13.0rc1', and what
    is recorded per release (op schemas, grid columns, compat ranges) does not claim it. Raises
    ValueError (packaging's InvalidVersion) for text that is not a version.
    """
    return Version(torch_version).public
