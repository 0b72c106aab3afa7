"""What the package sources serve for torch: release x Python x variant, read from their listings.

`python -m torch_abi_harness runtimes` answers "which runtimes could the matrix name?" without downloading a
wheel. An index's simple API (PEP 691 JSON, else PEP 503 HTML; a file:// index's
``torch/index.html``) or a find-links directory or page gives the wheel file names, and packaging
parses them: the public version is the release, the local label (``+cpu``, ``+cu128``) the variant
(none: ``auto``, the index's default build), the ``cpXY`` tag the Python (``cp313t``: free-threaded).

A default torch wheel on PyPI has no label yet is a CUDA build (2.9.1 and 2.10.0: CUDA 12.8; 2.11
on: CUDA 13). Its CUDA major is read from its core metadata where the index serves it (PEP 658/714:
a few kB per entry shown, never the wheel), else it is ``unknown``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import http.client
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from email.parser import BytesHeaderParser
from typing import NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.errors import BadInputError, InfrastructureError
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.provision.index import PROJECT, Listed, Source, fetch, list_source, local_path, reason_of
from torch_abi_harness.static.artifact import cuda_major
from torch_abi_harness.static.wheelfile import open_wheel

log = logging.getLogger(__name__)

MAX_METADATA_BYTES = 4 * 1024 * 1024  # torch's METADATA is ~30 kB
METADATA_WORKERS = 16

AUTO = "auto"  # no local label: whatever the source's default build is
UNKNOWN = "unknown"  # a default build whose core metadata is not served (or not read)
NO_CUDA = "none"

# Requires-Dist names that carry the CUDA major: CUDA 12's wheels end in -cu12; CUDA 13's
# packages (torch 2.11 on: cuda-toolkit[...]==13.0.2) carry it in their version instead.
CUDA_SUFFIXED = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)$")
CUDA_VERSIONED = frozenset({"cuda-toolkit", "nvidia-cuda-runtime"})
EXTRA_MARKER = re.compile(r"\bextra\s*==")  # an optional dependency: not part of what installs


@dataclasses.dataclass(frozen=True)
class TorchWheel:
    """One torch wheel file for one Python, as its name describes it."""

    release: Version  # the public version: 2.13.0
    variant: str  # the local label (cpu, cu128), or AUTO
    python: str  # 3.13
    free_threaded: bool  # a cp313t wheel
    platforms: frozenset[str]
    source: Source
    listed: Listed

    @property
    def python_label(self) -> str:
        """3.13t for a free-threaded CPython, as the harness writes it elsewhere (check --python)."""
        return self.python + ("t" if self.free_threaded else "")


def wheels_of(listed: Listed, source: Source) -> list[TorchWheel]:
    """The torch wheels one listed file is (one per CPython its tags name); none for anything else."""
    if not listed.filename.endswith(".whl"):
        return []
    try:
        name, version, _, tags = parse_wheel_filename(listed.filename)
    except (InvalidWheelFilename, InvalidVersion):
        log.debug("%s: %s is not a valid wheel file name; ignored", source, listed.filename)
        return []
    if name != PROJECT:
        return []
    pythons: dict[tuple[str, bool], set[str]] = {}
    for tag in tags:
        match = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
        if not match:
            log.debug("%s: %s is not for CPython (%s); ignored", source, listed.filename, tag)
            continue
        threaded = tag.abi == f"{tag.interpreter}t"
        pythons.setdefault((f"{match[1]}.{match[2]}", threaded), set()).add(tag.platform)
    release = Version(release_of(str(version)))
    variant = version.local or AUTO
    return [
        TorchWheel(release, variant, python, threaded, frozenset(platforms), source, listed)
        for (python, threaded), platforms in pythons.items()
    ]


class Hidden(enum.StrEnum):
    """Why a torch wheel file is not shown."""

    YANKED = "yanked"
    PLATFORM = "platform"
    PRE_RELEASE = "pre-release"
    RELEASE = "release"
    PYTHON = "python"
    VARIANT = "variant"

    @property
    def words(self) -> str:
        """What the count of such files reads as, and the option that shows them (or that hid them)."""
        return {
            Hidden.YANKED: "yanked",
            Hidden.PLATFORM: "for other platforms (--all-platforms)",
            Hidden.PRE_RELEASE: "pre-releases (--pre)",
            Hidden.RELEASE: "outside --releases",
            Hidden.PYTHON: "outside --python",
            Hidden.VARIANT: "of other variants (--variant)",
        }[self]


def host_platforms() -> frozenset[str]:
    """The platform tags this host installs (any Python): manylinux_2_28_x86_64, linux_x86_64, any..."""
    return frozenset(tag.platform for tag in sys_tags())


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which wheels are shown. platforms None: every platform."""

    releases: SpecifierSet = dataclasses.field(default_factory=SpecifierSet)
    pythons: SpecifierSet = dataclasses.field(default_factory=SpecifierSet)
    variants: frozenset[str] = frozenset()  # empty: every variant
    pre: bool = False
    platforms: frozenset[str] | None = None

    def hides(self, wheel: TorchWheel) -> Hidden | None:
        """Why the wheel is not shown (the first reason), or None when it is."""
        if self.platforms is not None and not wheel.platforms & self.platforms:
            return Hidden.PLATFORM
        # A specifier that names a pre-release admits them, as in pip. Explicit either way: whether
        # contains() admits a pre-release by default differs between packaging releases.
        pre = self.pre or bool(self.releases.prereleases)
        if wheel.release.is_prerelease and not pre:
            return Hidden.PRE_RELEASE
        if not self.releases.contains(wheel.release, prereleases=pre):
            return Hidden.RELEASE
        if not self.pythons.contains(Version(wheel.python), prereleases=True):
            return Hidden.PYTHON
        if self.variants and wheel.variant not in self.variants:
            return Hidden.VARIANT
        return None


class _Build(NamedTuple):
    """A release's build as one source serves it: torch builds all of its Pythons against one CUDA."""

    release: Version
    variant: str
    source: Source


class _Key(NamedTuple):
    """A runtime as one source serves it (what a PublishedRuntime is, less its platforms and CUDA)."""

    release: Version
    variant: str
    python: str
    free_threaded: bool
    source: Source

    @property
    def build(self) -> _Build:
        return _Build(self.release, self.variant, self.source)


@dataclasses.dataclass(frozen=True)
class PublishedRuntime:
    """A runtime a matrix could name: a release, a variant and a CPython, as one source serves it.

    cuda: the CUDA major of its torch ("12", "13"), "none" for a build without CUDA, or "unknown"
    (a default build whose core metadata the source does not serve)."""

    release: Version
    variant: str
    python: str
    free_threaded: bool
    platforms: tuple[str, ...]
    source: Source
    cuda: str

    @property
    def python_label(self) -> str:
        return self.python + ("t" if self.free_threaded else "")

    def to_json(self) -> dict[str, object]:
        return {
            "release": str(self.release),
            "variant": self.variant,
            "python": self.python,
            "free_threaded": self.free_threaded,
            "platforms": list(self.platforms),
            "source": self.source.location,
            "cuda": self.cuda,
        }

    def matrix_entry(self) -> str:
        """A line of matrix.yaml's runtimes; Python quoted, or YAML reads 3.10 as 3.1."""
        variant = "" if self.variant == AUTO else f", variant: {self.variant}"
        return f'  - {{torch: {self.release}{variant}, python: "{self.python_label}"}}'


@dataclasses.dataclass(frozen=True)
class Catalog:
    """What the sources serve, after the filters; hidden counts the wheel files each filter left out."""

    sources: tuple[Source, ...]
    runtimes: tuple[PublishedRuntime, ...]
    hidden: tuple[tuple[Hidden, int], ...] = ()
    variants_seen: tuple[str, ...] = ()  # every variant listed, shown or not (to say what --variant could be)

    def to_json(self) -> dict[str, object]:
        return {
            "schema_version": 1,
            "sources": [s.to_json() for s in self.sources],
            "hidden": {why.value: count for why, count in self.hidden},
            "runtimes": [r.to_json() for r in self.runtimes],
        }

    def hidden_text(self) -> str:
        """'1,234 for other platforms (--all-platforms), 3 yanked' (empty: nothing hidden)."""
        return ", ".join(f"{count:,} {why.words}" for why, count in self.hidden)

    def matrix_entries(self) -> list[str]:
        """One line per (release, variant, Python), whichever sources serve it."""
        return list(dict.fromkeys(r.matrix_entry() for r in self.runtimes))


def discover(sources: Sequence[Source], filters: Filters, *, timeout: float = 30.0, metadata: bool = True) -> Catalog:
    """List every source (at once), keep the torch wheels the filters admit, group them into runtimes
    and, when metadata is true, read the CUDA major of the default builds among them."""
    started = time.monotonic()
    listings = _list_all(sources, timeout)
    hidden: Counter[Hidden] = Counter()
    groups: dict[_Key, list[TorchWheel]] = {}
    variants: set[str] = set()
    for source, files in zip(sources, listings, strict=True):
        for listed in files:
            wheels = wheels_of(listed, source)
            if wheels and listed.yanked:
                hidden[Hidden.YANKED] += 1
                continue
            for wheel in wheels:
                variants.add(wheel.variant)
                reason = filters.hides(wheel)
                if reason:
                    hidden[reason] += 1
                    continue
                key = _Key(wheel.release, wheel.variant, wheel.python, wheel.free_threaded, source)
                groups.setdefault(key, []).append(wheel)
    log.info(
        "listed %d source(s) in %.2f s: %d runtime(s) shown", len(sources), time.monotonic() - started, len(groups)
    )
    cudas = _cuda_of_builds(groups, timeout, metadata=metadata)
    order = {source: position for position, source in enumerate(sources)}
    runtimes = [
        PublishedRuntime(
            key.release,
            key.variant,
            key.python,
            key.free_threaded,
            tuple(sorted({p for w in wheels for p in w.platforms})),
            key.source,
            cudas[key.build],
        )
        for key, wheels in groups.items()
    ]
    runtimes.sort(key=lambda r: (r.release, r.variant, order[r.source], Version(r.python), r.free_threaded))
    hidden_order = list(Hidden)
    counts = tuple(sorted(hidden.items(), key=lambda item: hidden_order.index(item[0])))
    return Catalog(tuple(sources), tuple(runtimes), counts, tuple(sorted(variants)))


def _list_all(sources: Sequence[Source], timeout: float) -> list[list[Listed]]:
    """Every source's files; one error naming every source that could not be read."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(sources))) as pool:
        futures = [pool.submit(list_source, source, timeout) for source in sources]
    problems = [str(f.exception()) for f in futures if isinstance(f.exception(), InfrastructureError)]
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise InfrastructureError(
            f"{len(problems)} package source(s) could not be read:\n{lines}\n"
            "Check the address and the network, or remove the source from the matrix's sources, pip's "
            "configuration (`pip config list`) or the UV_* variables (UV_INDEX_URL, UV_EXTRA_INDEX_URL, UV_FIND_LINKS)."
        )
    return [f.result() for f in futures]


def cuda_from_requirements(requirements: Iterable[str]) -> str:
    """The CUDA major a torch's Requires-Dist names ("12", "13"); "none" when it names no CUDA package.

    Platform markers are not evaluated: they say where the CUDA packages install, the names say
    which CUDA the build was made for. (torch before 1.13 bundled CUDA in the wheel: it reads none.)"""
    majors: set[int] = set()
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and EXTRA_MARKER.search(str(requirement.marker)):
            continue
        name = canonicalize_name(requirement.name)
        if match := CUDA_SUFFIXED.match(name):
            majors.add(int(match[1]))
        elif name in CUDA_VERSIONED:
            majors |= {
                Version(s.version.removesuffix(".*")).major for s in requirement.specifier if s.version[:1].isdigit()
            }
    return ",".join(str(m) for m in sorted(majors)) or NO_CUDA


def cuda_of_variant(variant: str) -> str | None:
    """The CUDA a labelled build names (cu128: "12"; cpu, rocm6.4, xpu: "none"); None for AUTO."""
    if variant == AUTO:
        return None
    major = cuda_major(variant)
    return str(major) if major is not None else NO_CUDA


def read_metadata(wheel: TorchWheel, timeout: float) -> list[str] | None:
    """The wheel's Requires-Dist from its PEP 658 core metadata, or from a wheel file on this machine
    (its dist-info/METADATA, read from the zip's directory); None when neither is there."""
    listed = wheel.listed
    if listed.metadata_url:
        body, _, _ = fetch(listed.metadata_url, timeout, "*/*", MAX_METADATA_BYTES, ca=wheel.source.ca)
    else:
        local = local_path(listed.url)
        if local is None or not local.is_file():
            return None
        try:
            with open_wheel(local) as archive:
                member = next((n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
                if member is None:
                    return None
                body = archive.read(member, MAX_METADATA_BYTES)
        except BadInputError as exc:  # one bad file of a listing is passed over, as a page's broken link is
            log.warning("%s", exc)
            return None
    return BytesHeaderParser().parsebytes(body).get_all("Requires-Dist") or []


def _cuda_of_builds(groups: dict[_Key, list[TorchWheel]], timeout: float, *, metadata: bool) -> dict[_Build, str]:
    """The CUDA of each build shown: its label's, else (metadata true) what the core metadata of one
    of its wheels names, read concurrently: a wheel this host installs where there is one, and one
    whose metadata can be read without the wheel (advertised, or a wheel file on this machine)."""
    wheels_of_build: dict[_Build, list[TorchWheel]] = {}
    for key, wheels in groups.items():
        wheels_of_build.setdefault(key.build, []).extend(wheels)
    found = {build: cuda_of_variant(build.variant) or UNKNOWN for build in wheels_of_build}
    if not metadata:
        return found
    host = host_platforms()

    def readable(wheel: TorchWheel) -> bool:
        return bool(wheel.listed.metadata_url or local_path(wheel.listed.url))

    chosen = {
        build: min(wheels, key=lambda w: (not w.platforms & host, not readable(w), w.listed.filename))
        for build, wheels in wheels_of_build.items()
        if build.variant == AUTO
    }
    pending = {build: wheel for build, wheel in chosen.items() if readable(wheel)}
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=METADATA_WORKERS) as pool:
        futures = {build: pool.submit(_cuda_of_wheel, wheel, timeout) for build, wheel in pending.items()}
    found.update((build, future.result()) for build, future in futures.items())
    log.info("core metadata of %d wheel(s) read in %.2f s", len(pending), time.monotonic() - started)
    return found


def _cuda_of_wheel(wheel: TorchWheel, timeout: float) -> str:
    try:
        requirements = read_metadata(wheel, timeout)
    except (
        OSError,
        ValueError,
        http.client.HTTPException,
    ) as exc:  # one metadata file is not worth failing the listing over
        log.warning(
            "%s: core metadata of %s not read (%s): its CUDA is unknown",
            wheel.source,
            wheel.listed.filename,
            reason_of(exc),
        )
        return UNKNOWN
    return UNKNOWN if requirements is None else cuda_from_requirements(requirements)
