"""A published wheel named by a requirement (`wheel: "torchao==0.18.0"` in a matrix's builds): the one file
the configured package sources serve for a Python on this platform, downloaded once into the cache and
checked against the digest its source states.

The choice is pip's: the newest version the specifier allows (pre-releases only when the specifier names one,
a yanked file only when pinned with ==), then the most specific tag the interpreter installs (cp311-cp311
before cp310-abi3 before py3-none). Nothing is installed here, and the wheel's own dependencies (torch
among them) are never read as instructions: the runtime's torch is the one under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import Tag, platform_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from torch_abi_harness.core.errors import InfrastructureError, ResolutionError
from torch_abi_harness.core.files import file_digest, write_atomic
from torch_abi_harness.core.text import redact
from torch_abi_harness.provision.index import DOWNLOAD_DEADLINE, Listed, fetch, list_source, local_path, sources_of
from torch_abi_harness.provision.sources import CaBundle, ResolvedSources
from torch_abi_harness.static.prebuilt import ordered_tags

log = logging.getLogger(__name__)

LIST_TIMEOUT = 60.0
DOWNLOAD_TIMEOUT = 600.0
MAX_WHEEL_BYTES = 2 * 2**30  # the largest CUDA extension wheels are ~1 GB


@dataclasses.dataclass(frozen=True)
class PublishedWheel:
    """The file a requirement resolved to for one Python, as downloaded: where from, and its sha256."""

    requirement: str
    project: str  # canonical name: torchao
    version: Version
    path: Path
    url: str  # redacted: no credential is ever written down
    sha256: str

    @property
    def filename(self) -> str:
        return self.path.name


def resolve(requirement: str, python: str, sources: ResolvedSources, cache: Path) -> PublishedWheel:
    """The requirement's wheel for CPython `python` on this platform, downloaded into cache/wheels (once).

    Raises ResolutionError naming what the sources do serve when no file fits, InfrastructureError when a
    source cannot be read or a download is not what the source said it was."""
    wanted = Requirement(requirement)
    project = canonicalize_name(wanted.name)
    listed: list[tuple[Listed, Version, frozenset[Tag]]] = []
    for source in sources_of(sources):
        for item in list_source(source, LIST_TIMEOUT, project):
            try:
                name, version, _, tags = parse_wheel_filename(item.filename)
            except InvalidWheelFilename:
                continue  # an sdist, or another project's file on a find-links page
            if canonicalize_name(name) == project:
                listed.append((item, version, tags))
    if not listed:
        where = ", ".join(str(s) for s in sources_of(sources))
        raise ResolutionError(
            f"{requirement!r}: no configured package source lists a wheel of {project!r} ({where}); "
            "check the name, or add the source that serves it (the matrix's `sources:`; check's --index-url, "
            "--extra-index-url or --find-links)"
        )
    pinned = any(spec.operator in ("==", "===") for spec in wanted.specifier)
    allowed = [
        entry
        for entry in listed
        if wanted.specifier.contains(entry[1], prereleases=bool(wanted.specifier.prereleases) or None)
        and (pinned or not entry[0].yanked)
    ]
    if not allowed:
        versions = sorted({v for _, v, _ in listed})
        shown = ", ".join(map(str, versions[-8:]))
        raise ResolutionError(f"{requirement!r}: no version of {project} fits; the sources serve {shown}")
    rank = {tag: position for position, tag in enumerate(ordered_tags(python))}
    fitting = [
        (item, version, min(rank[t] for t in tags if t in rank))
        for item, version, tags in allowed
        if tags & rank.keys()
    ]
    if not fitting:
        newest = max(v for _, v, _ in allowed)
        files = sorted(item.filename for item, version, _ in allowed if version == newest)
        raise ResolutionError(
            f"{requirement!r}: {project} {newest} has no wheel that CPython {python} installs on this platform "
            f"({next(iter(platform_tags()))}); its wheels: {', '.join(files[:6])}"
        )
    item, version, _ = max(fitting, key=lambda entry: (entry[1], -entry[2]))
    path = _download(item, cache / "wheels" / project, sources.cert)
    log.info("%s -> %s (sha256 %s)", requirement, path.name, file_digest(path)[:12])
    return PublishedWheel(requirement, project, version, path, redact(item.url), file_digest(path))


def marker_holds(requirement: Requirement, python: str) -> bool:
    """Whether the requirement's marker (none: true) holds for CPython `python` (3.12, 3.13t) on this platform,
    the interpreter and platform a wheel is resolved for."""
    if requirement.marker is None:
        return True
    minor = python.rstrip("t")
    environment = {
        "python_version": minor,
        "python_full_version": f"{minor}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    return requirement.marker.evaluate(environment)


def _download(item: Listed, folder: Path, ca: CaBundle | None) -> Path:
    """The listed file in folder, fetched once: a cached copy is reused when it has the digest the source states
    (a local file's own digest; a remote file stated with none is fetched again, never trusted by name)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / item.filename
    local = local_path(item.url)
    try:
        stated = item.sha256 or (file_digest(local) if local is not None else None)
        if path.is_file() and stated is not None and file_digest(path) == stated:
            return path
        if local is not None:
            data = local.read_bytes()
        else:
            log.info("downloading %s", redact(item.url))
            data, _, _ = fetch(item.url, DOWNLOAD_TIMEOUT, "*/*", MAX_WHEEL_BYTES, DOWNLOAD_DEADLINE, ca=ca)
    except (OSError, ValueError) as exc:
        raise InfrastructureError(f"cannot download {redact(item.url)}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if item.sha256 is not None and digest != item.sha256:
        raise InfrastructureError(
            f"{redact(item.url)}: the download's sha256 is {digest}, but its source states {item.sha256}: "
            "a damaged or substituted file; nothing was kept"
        )
    write_atomic(path, data)
    return path
