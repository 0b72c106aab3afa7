"""The configuration model: matrix.yaml and extension.yaml as frozen dataclasses (read by config.matrix and
config.extension; an author's [tool.torch-abi-harness] table by config.author), validated against the package's
schemas."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
from pathlib import Path
from typing import Any, Literal

from packaging.version import Version

from torch_abi_harness.core.kinds import Device as Device  # re-exported: a config holds it
from torch_abi_harness.core.kinds import Recipe as Recipe
from torch_abi_harness.core.versions import ApiLevel

Generated = Literal["header_probe"]  # what the harness generated an extension as (not one of the matrix's own)
DEFAULT_MATRIX = Path("matrix.yaml")
DEFAULT_PYTHON = "3.11"


class CudaPolicy(enum.StrEnum):
    """A build's `cuda:`: on which CUDA runtimes a build that needs CUDA libraries is promised."""

    SAME_MAJOR = "same-major"  # only where the runtime's torch ships the CUDA major its libraries name
    ANY = "any"  # on every CUDA build of torch, whatever its major (it must work across majors)


@dataclasses.dataclass(frozen=True)
class Settings:
    cell_timeout: float = 300.0
    build_timeout: float = 900.0
    # Modules each forkserver imports once after torch and pytest, so that no forked cell pays for them:
    # torch.library.opcheck's machinery is ~1,200 modules and 2.4 s per cell.
    preload: tuple[str, ...] = ("torch.testing._internal.optests",)


@dataclasses.dataclass(frozen=True)
class Sources:
    """Package sources for uv. uv's own UV_* variables still apply on top of these."""

    inherit_pip_config: bool = True
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    index_strategy: str = "unsafe-best-match"
    # Existing environments (`--use-env`): interpreters whose torch serves the envs they match, used as they are
    environments: tuple[str, ...] = ()


SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"^([1-9][0-9]*)([KMGT]?)(?:i?B)?$", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """Bytes from "512M", "6G", "8GiB" or a plain count of bytes; None where text is not a size."""
    match = SIZE.match(text.strip())
    return int(match.group(1)) * SIZE_UNITS[match.group(2).upper()] if match else None


def size_words(size: int) -> str:
    """A size as a person reads it: whole GiB or MiB where it is one, else bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one venv cell may use (its cgroup's bounds): bytes of memory, swap included, and processes (threads
    count, as the kernel counts them). The defaults hold every cell of the default matrix with room to spare (a
    stable_basic cell measured 466 MiB and 3 tasks at its peak on torch 2.15.0)."""

    memory: int = 8 * 2**30
    pids: int = 1024


@dataclasses.dataclass(frozen=True)
class DockerSettings:
    """The docker backend: how runtime images are made and what each cell container may use."""

    route: Literal["mounted", "baked"] = "mounted"
    base_image: str | None = None
    debian_mirror: str = "http://deb.debian.org/debian"
    memory: str = "8g"
    pids: int = 4096
    tmpfs: str = "2g"


HEADER_PROBE: Generated = "header_probe"  # the gate's generated probe: its marker, and the name it is built under


@dataclasses.dataclass(frozen=True)
class Extension:
    """An extension under test: its sources, recipe and conformance suite."""

    name: str
    module: str
    min_target: ApiLevel
    stable: bool
    recipe: Recipe
    root: Path
    tests: Path
    expect: str | None = None  # a negative control's status where it loads: TEST_FAILED, CRASHED or TIMEOUT
    timeout: float | None = None
    wheel: Path | None = None  # recipe 'wheel': the user's prebuilt wheel, unpacked instead of built
    # What the suite needs beyond torch, pytest and numpy (requirement strings, `-r` files read): an overlay per runtime
    test_requires: tuple[str, ...] = ()
    published: PublishedFacts | None = None  # a published wheel (`wheel: <requirement>` build): the derived suite runs
    requires: frozenset[str] = frozenset()  # what the recipe always needs of the machine: 'nvcc'
    sources_root: Path | None = None  # a folder above root that the recipe reads from: copied for the build instead
    generated: Generated | None = None  # made by the harness (the gate's header probe), not read from the matrix


@dataclasses.dataclass(frozen=True)
class RuntimeSpec:
    torch: Version
    variant: str = "auto"
    device: Device = Device.CPU
    image: str | None = None  # docker backend: an image that already holds this release
    python: str | None = None  # a version (3.10) or an interpreter's path; None: the matrix's python

    @property
    def key(self) -> tuple[Version, str, Device, str | None]:
        """What makes two runtime entries the same runtime."""
        return (self.torch, self.variant, self.device, self.python)


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    extension: Extension
    torch: Version
    variant: str = "auto"
    target: ApiLevel | None = None
    runtimes: tuple[Version, ...] = ()  # empty: every runtime of the matrix
    cuda: CudaPolicy = CudaPolicy.SAME_MAJOR
    python: str | None = None  # a version (3.10) or an interpreter's path; None: the matrix's python
    own_python_only: bool = False  # run only on runtimes of its own Python (a published wheel made per CPython)


def selector_pattern(selector: str) -> str:
    """A selector matches any part of a cell id; * ? [...] are glob wildcards within it."""
    return f"*{selector}*"


@dataclasses.dataclass(frozen=True)
class KnownBreak:
    """A broken cell acknowledged until a date (matrix.yaml `known_breaks:`): while it holds, a broken cell its
    selectors match is a known_break and does not fail the run; after `expires` it fails again, named."""

    name: str
    cells: tuple[str, ...]  # selectors, as -k takes them
    reason: str
    link: str
    expires: datetime.date  # the last day it holds
    # symbol patterns: a broken cell missing only these, and the gate's header findings of them, are acknowledged
    symbols: tuple[str, ...] = ()
    # a selector or symbol pattern of it matches everything, and the matrix says so on purpose (`acknowledge_all:
    # true`): without it such an entry is refused, and with it every report names it
    acknowledge_all: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cells": list(self.cells),
            "reason": self.reason,
            "link": self.link,
            "expires": self.expires.isoformat(),
            **({"symbols": list(self.symbols)} if self.symbols else {}),
            **({"acknowledge_all": True} if self.acknowledge_all else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KnownBreak:
        expires = datetime.date.fromisoformat(data["expires"])
        symbols = tuple(data.get("symbols", ()))
        return cls(
            data["name"], tuple(data["cells"]), data["reason"], data["link"], expires, symbols,
            acknowledge_all=bool(data.get("acknowledge_all", False)),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class PublishedRequest:
    """A build entry naming a published wheel by requirement (`wheel: "torchao==0.18.0"`): resolved, downloaded
    and read (its build torch and target come from the wheel) by
    torch_abi_harness.builds.published before a plan is made."""

    requirement: str
    where: str  # the entry in its matrix file, for messages: "census.yaml: builds[0]"
    runtimes: tuple[Version, ...] = ()  # empty: every runtime of the matrix
    cuda: CudaPolicy = CudaPolicy.SAME_MAJOR


@dataclasses.dataclass(frozen=True)
class PublishedFacts:
    """What a published wheel build is, as read from the registry and the artifact (shown beside its verdicts)."""

    requirement: str
    filename: str
    url: str  # redacted
    sha256: str
    torch_pin: str | None  # the wheel's Requires-Dist on torch, as written; reported, never obeyed
    build_torch_from: str  # where B came from, in words
    target_from: str  # where T came from, in words
    unserved: tuple[str, ...] = ()  # the runtimes' CPythons for which the sources serve no file of this release
    build_torch: str | None = None  # B as the wheel says it; None: unknown (promised by T alone, no reference)
    build_torch_how: str = "unknown"  # "pinned", "read from <file>" or "unknown"
    declared_beyond: str | None = None  # its torch requirement admits releases it cannot load on: in words

    @property
    def build_torch_known(self) -> bool:
        return self.build_torch is not None


@dataclasses.dataclass(frozen=True)
class Matrix:
    path: Path
    python: str
    settings: Settings
    sources: Sources
    extensions: dict[str, Extension]
    runtimes: tuple[RuntimeSpec, ...]
    builds: tuple[BuildSpec, ...]
    docker: DockerSettings = DockerSettings()
    known_breaks: tuple[KnownBreak, ...] = ()
    limits: Limits = Limits()
    candidate: str | None = None  # `run --candidate`: a release added as a runtime and as a build torch
    published: tuple[PublishedRequest, ...] = ()  # builds naming published wheels, not yet resolved
    notes: tuple[str, ...] = ()  # an author's table: each default and where it was read from, shown before a run


def is_path(request: str) -> bool:
    """A matrix's python names an interpreter's file when it holds a slash or starts with ~."""
    return "/" in request or request.startswith("~")
