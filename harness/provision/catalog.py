"""What the package sources serve for torch: release x Python x variant, read from their listings.

`python -m harness runtimes` answers "which runtimes could the matrix name?" without downloading a
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
import html.parser
import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any, NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness import __version__
from harness.core.errors import InfrastructureError
from harness.core.versions import release_of
from harness.provision.sources import ResolvedSources
from harness.static.artifact import cuda_major

log = logging.getLogger(__name__)

PROJECT = "torch"
DEFAULT_INDEX = "https://pypi.org/simple"  # what pip and uv use when nothing names an index
JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
# PEP 691: JSON preferred; an index that only has PEP 503 pages answers with HTML.
SIMPLE_ACCEPT = f"{JSON_SIMPLE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
MAX_PAGE_BYTES = 64 * 1024 * 1024  # PyPI's torch page is ~0.5 MB; a source is not trusted to end
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


class SourceKind(enum.StrEnum):
    INDEX = "index"
    FIND_LINKS = "find-links"


@dataclasses.dataclass(frozen=True)
class Source:
    """One place wheels are listed: an index (URL) or find-links (a directory, or a page's URL)."""

    kind: SourceKind
    location: str

    def __str__(self) -> str:
        return f"{self.kind} {self.location}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "location": self.location}


def sources_of(resolved: ResolvedSources) -> tuple[Source, ...]:
    """The sources uv would consult, in its order: the index (PyPI when none is named), the extra
    indexes, then find-links."""
    indexes = [resolved.index_url or DEFAULT_INDEX, *resolved.extra_index_urls]
    found = [Source(SourceKind.INDEX, url) for url in indexes]
    found += [Source(SourceKind.FIND_LINKS, link) for link in resolved.find_links]
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class Listed:
    """One file as a source lists it. metadata_url: its PEP 658 core metadata, when advertised."""

    filename: str
    url: str
    metadata_url: str | None = None
    yanked: bool = False


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
    cudas = _cuda_of_builds(groups, timeout, metadata)
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


def list_source(source: Source, timeout: float) -> list[Listed]:
    """The files one source lists for torch. Raises InfrastructureError naming the source."""
    started = time.monotonic()
    try:
        files = (
            _list_index(source.location, timeout)
            if source.kind is SourceKind.INDEX
            else _list_links(source.location, timeout)
        )
    # URLError and HTTPError are OSErrors; a page that is not UTF-8 or not JSON, a ValueError.
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise InfrastructureError(f"{source}: {_reason(exc)}") from exc
    log.info("%s: %d file(s) listed in %.2f s", source, len(files), time.monotonic() - started)
    return files


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"{exc.url} answered HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot be reached: {exc.reason}"
    return str(exc) or type(exc).__name__


def _local_path(location: str) -> Path | None:
    """The directory or file a location names on this machine (a file:// URL or a plain path); None for a URL."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "":
        return Path(location)
    return None


def _list_index(base: str, timeout: float) -> list[Listed]:
    local = _local_path(base)
    if local is not None:
        if not local.is_dir():
            raise ValueError("not a directory (a file:// index is a directory of project pages)")
        project = local / PROJECT
        if (project / "index.html").is_file():
            page = project / "index.html"
            return parse_html_page(page.read_bytes().decode(), project.as_uri() + "/")
        if project.is_dir():
            return _list_directory(project)
        log.info("index %s has no %s/: it serves no torch", base, PROJECT)
        return []
    url = f"{base.rstrip('/')}/{PROJECT}/"
    try:
        body, final_url, content_type = _get(url, timeout, SIMPLE_ACCEPT, MAX_PAGE_BYTES)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            log.info("index %s has no %s page (HTTP 404): it serves no torch", base, PROJECT)
            return []
        raise
    if content_type == JSON_SIMPLE:
        return parse_json_page(json.loads(body), final_url)
    return parse_html_page(body.decode(), final_url)


def _list_links(location: str, timeout: float) -> list[Listed]:
    local = _local_path(location)
    if local is not None:
        if local.is_dir():
            return _list_directory(local)
        if local.is_file():
            return parse_html_page(local.read_bytes().decode(), local.resolve().as_uri())
        raise ValueError("no such directory or file")
    body, final_url, _ = _get(location, timeout, "text/html", MAX_PAGE_BYTES)
    return parse_html_page(body.decode(), final_url)


def _list_directory(directory: Path) -> list[Listed]:
    return [Listed(p.name, p.resolve().as_uri()) for p in sorted(directory.glob("*.whl")) if p.is_file()]


def _get(url: str, timeout: float, accept: str, limit: int) -> tuple[bytes, str, str]:
    """GET url: its body (at most limit bytes), the URL it ended at (after redirects) and its media type."""
    log.debug("GET %s", url)
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": f"torch-abi-harness/{__version__}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read(limit + 1)
        if len(body) > limit:
            raise ValueError(f"{url}: larger than {limit // 2**20} MiB: refused")
        return body, response.geturl(), response.headers.get_content_type()


def parse_json_page(data: Any, page_url: str) -> list[Listed]:
    """A PEP 691 project page: its files, with yanked and PEP 714 core-metadata (or the older
    dist-info-metadata) flags."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError(f"{page_url}: not a PEP 691 project page (no 'files' list)")
    found = []
    for item in data["files"]:
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
            continue
        url = urllib.parse.urljoin(page_url, str(item.get("url", "")))
        served = item.get("core-metadata", item.get("dist-info-metadata", False))
        metadata = url + ".metadata" if served not in (False, None) else None
        found.append(Listed(item["filename"], url, metadata, bool(item.get("yanked", False))))
    return found


class _Anchors(html.parser.HTMLParser):
    """The attributes of each <a> of a page (and its <base href>)."""

    def __init__(self, page_url: str) -> None:
        super().__init__()
        self.base = page_url
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and dict(attrs).get("href"):
            self.base = urllib.parse.urljoin(self.base, dict(attrs)["href"] or "")
        elif tag == "a":
            self.links.append(dict(attrs))


def parse_html_page(text: str, page_url: str) -> list[Listed]:
    """A PEP 503 page or a find-links page: each anchor's file, named by its URL's last part as pip
    names it (PEP 503 asks the text to match; a find-links page's text can be anything)."""
    parser = _Anchors(page_url)
    parser.feed(text)
    parser.close()
    found = []
    for attrs in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        url, _ = urllib.parse.urldefrag(urllib.parse.urljoin(parser.base, href))
        filename = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        served = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata", "false"))
        metadata = url + ".metadata" if served != "false" else None
        found.append(Listed(filename, url, metadata, "data-yanked" in attrs))
    return found


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
        body, _, _ = _get(listed.metadata_url, timeout, "*/*", MAX_METADATA_BYTES)
    else:
        local = _local_path(listed.url)
        if local is None or not local.is_file():
            return None
        try:
            with zipfile.ZipFile(local) as archive:
                member = next((n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
                if member is None:
                    return None
                body = archive.read(member)
        except zipfile.BadZipFile:
            return None
    return BytesHeaderParser().parsebytes(body).get_all("Requires-Dist") or []


def _cuda_of_builds(groups: dict[_Key, list[TorchWheel]], timeout: float, metadata: bool) -> dict[_Build, str]:
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
        return bool(wheel.listed.metadata_url or _local_path(wheel.listed.url))

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
            _reason(exc),
        )
        return UNKNOWN
    return UNKNOWN if requirements is None else cuda_from_requirements(requirements)
