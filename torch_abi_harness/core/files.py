"""Files the harness writes: whole or not at all.

A result is written to a temporary file beside its target, flushed to disk and renamed over
it, so a crash, a full disk or an interrupt leaves the previous file or none, never a
truncated one; the rename also replaces a symlink a cell may have planted instead of
following it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch_abi_harness.core.errors import BadInputError


def _umask() -> int:
    """The process's umask (read once, at import: os.umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file: a cell (another uid) reads what the harness wrote


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write data to path atomically (temp file, fsync, rename); the parent directory must exist. The file gets
    the mode open() would give it, not mkstemp's 0600: a cell runs as another uid and reads some of them (a
    derived suite's manifest in a build's site)."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, data: Any) -> None:
    """JSON as the harness writes it everywhere: indented, a final newline, atomically."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def writable_dir(path: Path, what: str) -> None:
    """Make sure path is a directory this process can write, or can be made in one, before any work
    starts; BadInputError naming the path, the problem and the fix otherwise. Nothing is created:
    a run refused later for another reason leaves no trace. Writing is tried for real (mode bits do
    not stop root; a read-only mount or an immutable directory does)."""
    if path.exists() and not path.is_dir():
        raise BadInputError(f"{what} {path}: exists and is not a directory; name a directory (it is made if missing)")
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise BadInputError(f"{what} {path}: {existing} is not a directory, so it cannot be made; name another")
    try:
        fd, probe = tempfile.mkstemp(prefix=".harness-write-check-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = "" if existing == path.absolute() else f" (it would be made in {existing})"
        raise BadInputError(
            f"{what} {path}: cannot be written{where}: {exc.strerror or exc}; name a directory you can write"
        ) from exc


_PLAIN_NAME = re.compile(r"[\w.@+~=,-]+")


def run_relative(text: str) -> bool:
    """Whether a path read from a results.json names a file inside its run directory: relative, plain names
    only, no '..' (a results.json from a shard, an artifact or an older run is treated as hostile)."""
    parts = text.split("/")
    return bool(text) and all(_PLAIN_NAME.fullmatch(p) and p not in (".", "..") for p in parts)


def open_inside(root: Path, relative: str) -> int:
    """A file descriptor for root/relative opened for reading without following a link on the way (each
    directory opened O_NOFOLLOW from the one before); OSError if a part is a link, missing, or not plain."""
    if not run_relative(relative):
        raise OSError(f"{relative!r}: not a path inside {root}")
    *folders, name = relative.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in folders:
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def content_digest(root: Path, ignore: Sequence[str] = (), exclude: Path | None = None) -> str:
    """sha256 over a directory's relative paths and file contents, names matching ignore (glob patterns) and
    the subtree exclude left out; links are hashed by their target, never followed."""
    digest = hashlib.sha256()
    skip = shutil.ignore_patterns(*ignore)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        ignored = skip(dirpath, dirnames + filenames)
        dirnames[:] = sorted(d for d in dirnames if d not in ignored and here / d != exclude)
        for name in sorted(f for f in filenames if f not in ignored):
            path = here / name
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(os.readlink(path).encode() if path.is_symlink() else file_digest(path).encode())
            digest.update(b"\0")
    return digest.hexdigest()
