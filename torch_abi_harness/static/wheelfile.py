"""A wheel (a zip) opened as hostile input: every member named inside the archive, every read bounded.

A wheel comes from a user, an index or a cache another process wrote, so nothing its directory says is trusted:

- a member whose name leaves the archive (absolute, ``..``, a drive letter, a backslash) is refused when the
  wheel is opened, before any member is read or extracted: a reader would otherwise judge a file of the host;
- a member is read only when its uncompressed size (from the zip's directory) is within a bound and its
  compression ratio is one real files have (a zip bomb of 2.6 MB that inflates to gigabytes is refused before
  a byte is inflated), and the read itself stops at that bound, in chunks, in case the directory lies.

Every place the harness opens a wheel goes through `open_wheel`; each refusal is bad input (exit 2) naming the
wheel, the member and the bound it broke.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from torch_abi_harness.core.errors import BadInputError

# The largest member read: libtorch_cuda.so of a CUDA wheel is ~1.5 GB uncompressed; nothing real comes near 4 GiB.
MAX_MEMBER_BYTES = 4 * 2**30
# Deflate inflates real files 2-10 times (shared objects ~3, headers ~5, sources ~10); a zip bomb ~1000 times.
MAX_RATIO = 100
# Below this size a member's ratio is not judged: a small file of repeated text can compress 200:1 harmlessly.
RATIO_FROM_BYTES = 2**20
CHUNK_BYTES = 2**20

_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_name(name: str) -> str | None:
    """Why a member's name points outside the archive (None when it stays inside)."""
    if "\\" in name:
        return "has a backslash (a Windows path)"
    if name.startswith("/"):
        return "is absolute"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    if ".." in name.split("/"):
        return "climbs out with '..'"
    if "\0" in name:
        return "holds a NUL byte"
    return None


class Wheel:
    """An open wheel whose member names were all checked; reads bounded (module docstring)."""

    def __init__(self, path: Path, archive: zipfile.ZipFile) -> None:
        self.path = path
        self.archive = archive

    def namelist(self) -> list[str]:
        return self.archive.namelist()

    def infolist(self) -> list[zipfile.ZipInfo]:
        return self.archive.infolist()

    def _checked(self, member: str | zipfile.ZipInfo, limit: int) -> zipfile.ZipInfo:
        info = member if isinstance(member, zipfile.ZipInfo) else self.archive.getinfo(member)
        if info.file_size > limit:
            raise self._refused(info, f"{info.file_size} bytes uncompressed, over the bound of {limit} bytes")
        if info.file_size > RATIO_FROM_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            ratio = info.file_size // max(info.compress_size, 1)
            raise self._refused(
                info,
                f"inflates {ratio} times ({info.compress_size} bytes to {info.file_size}), over the bound of "
                f"{MAX_RATIO} times (a zip bomb?)",
            )
        return info

    def _refused(self, info: zipfile.ZipInfo, why: str) -> BadInputError:
        return BadInputError(f"{self.path}: member {info.filename!r} {why}: refused; pass a wheel a build tool made")

    def _chunks(self, member: str | zipfile.ZipInfo, limit: int) -> Iterator[bytes]:
        info = self._checked(member, limit)
        seen = 0
        try:
            with self.archive.open(info) as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    seen += len(chunk)
                    if seen > min(limit, info.file_size):
                        raise self._refused(info, f"inflates past the {info.file_size} bytes its header states")
                    yield chunk
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:  # a damaged member, or its CRC is wrong
            raise BadInputError(f"{self.path}: member {info.filename!r} cannot be read: {exc}") from exc

    def read(self, member: str | zipfile.ZipInfo, limit: int = MAX_MEMBER_BYTES) -> bytes:
        """The member's bytes, bounded (BadInputError naming the member and the bound otherwise)."""
        buffer = io.BytesIO()  # its getvalue() hands over the buffer: one copy of the member in memory, not two
        for chunk in self._chunks(member, limit):
            buffer.write(chunk)
        return buffer.getvalue()

    def extract(self, member: str | zipfile.ZipInfo, target: Path) -> Path:
        """The member written under target at its own (checked) name; its directories made."""
        name = member.filename if isinstance(member, zipfile.ZipInfo) else member
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            self._copy(member, out)
        return path

    def _copy(self, member: str | zipfile.ZipInfo, out: IO[bytes]) -> None:
        for chunk in self._chunks(member, MAX_MEMBER_BYTES):
            out.write(chunk)

    def close(self) -> None:
        self.archive.close()

    def __enter__(self) -> Wheel:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def open_wheel(path: Path) -> Wheel:
    """The wheel at path, its members' names and sizes checked (use it in a `with`); BadInputError naming the file
    when it is no zip, or naming the member whose path leaves the archive or whose size breaks a bound."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadInputError(f"{path}: not a wheel (not a zip archive: {exc})") from exc
    wheel = Wheel(path, archive)
    try:
        for info in archive.infolist():  # all of it judged at once, before any member is read or extracted
            why = unsafe_name(info.filename)
            if why is not None:
                raise BadInputError(f"{path}: member {info.filename!r} {why}: a path outside the wheel; refused")
            wheel._checked(info, MAX_MEMBER_BYTES)
    except BadInputError:
        archive.close()
        raise
    return wheel


def is_zip(path: Path) -> bool:
    return zipfile.is_zipfile(path)
