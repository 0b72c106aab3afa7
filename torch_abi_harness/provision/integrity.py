"""What an environment holds: fingerprinted when it is made, checked on every use.

A cell's test suite runs with the env's site-packages on its path and can write there. Env
files are hardlinks into uv's cache, so a file written in place is damaged in uv's cache and in
every env of that release at once. Each installed distribution's RECORD says what its files
must be (size and sha256); the fingerprint adds a stamp per file (mtime, inode, ctime) so that
a check costs one stat per file and hashes only the files whose stamp moved. A rewrite that
keeps size and mtime still moves ctime; ctime also moves for harmless reasons (another env
hardlinking the same inode), which is why a moved stamp leads to a hash, never to a verdict.
"""

from __future__ import annotations

import base64
import concurrent.futures
import csv
import dataclasses
import functools
import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_abi_harness.core.errors import InfrastructureError

FINGERPRINT = "harness-fingerprint.json"
FORMAT = 1
# Top-level entries of site-packages that no RECORD lists: the bytecode of top-level modules
# (--compile-bytecode) and the seed some uv versions write into every venv.
UNRECORDED = frozenset({"__pycache__", "_virtualenv.pth", "_virtualenv.py"})
HASH_THREADS = 4
SHOWN = 3  # damaged files named in one line; the rest are counted

Stamp = tuple[int, int, int]  # (st_mtime_ns, st_ino, st_ctime_ns)


@dataclasses.dataclass(frozen=True)
class FileRecord:
    distribution: str
    size: int
    sha256: str  # urlsafe base64 without padding, as RECORD writes it
    stamp: Stamp  # when last seen intact


@dataclasses.dataclass(frozen=True)
class Damage:
    path: str  # relative to site-packages; files outside it (bin/) relative to the env
    problem: str
    distribution: str | None = None  # whose RECORD lists the file; None for an entry no RECORD lists
    shared: bool = False  # the file has other hardlinks: uv's cache and other envs hold the same damage

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    files: Mapping[str, FileRecord]  # keyed by the path as RECORD writes it, relative to site-packages
    top_level: frozenset[str]  # what site-packages may hold: RECORD's top-level names and UNRECORDED

    @functools.cached_property
    def by_folder(self) -> dict[str, list[str]]:
        """The recorded files' names by their folder (relative to site-packages; "" for its top)."""
        folders: dict[str, list[str]] = {}
        for path in self.files:
            folder, _, name = path.rpartition("/")
            folders.setdefault(folder, []).append(name)
        return folders

    def to_json(self) -> dict[str, Any]:
        distributions = sorted({r.distribution for r in self.files.values()})
        index = {name: i for i, name in enumerate(distributions)}
        return {
            "format": FORMAT,
            "distributions": distributions,
            "top_level": sorted(self.top_level),
            "files": {
                path: [index[r.distribution], r.size, r.sha256, *r.stamp] for path, r in sorted(self.files.items())
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fingerprint:
        names = data["distributions"]
        files = {
            path: FileRecord(names[d], size, sha, (mtime, ino, ctime))
            for path, (d, size, sha, mtime, ino, ctime) in data["files"].items()
        }
        return cls(files, frozenset(data["top_level"]))


def describe(damage: Sequence[Damage]) -> str:
    """One line: the first few damaged files and how many more."""
    line = "; ".join(map(str, damage[:SHOWN]))
    return line + (f"; and {len(damage) - SHOWN} more" if len(damage) > SHOWN else "")


# Fingerprints read, by path, with the stat of the file they came from: a run checks an env after every cell that
# fails (63 of the default matrix's 145), and reading 20,000 records back costs a third of each check.
_LOADED: dict[Path, tuple[tuple[int, int, int, int], Fingerprint]] = {}
_LOADED_LOCK = threading.Lock()
_LOADED_KEPT = 64


def load(path: Path) -> Fingerprint | None:
    """The fingerprint saved at path; None when there is none (an env older than fingerprints) or it is unreadable.
    Read again only when the file changed (its inode, size, mtime or ctime): `save` replaces it whole."""
    try:
        st = path.stat()
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _LOADED_LOCK:
            seen = _LOADED.get(path)
        if seen is not None and seen[0] == key:
            return seen[1]
        data = json.loads(path.read_text())
        fingerprint = Fingerprint.from_json(data) if data.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    if fingerprint is not None:
        with _LOADED_LOCK:
            if len(_LOADED) >= _LOADED_KEPT:
                _LOADED.clear()
            _LOADED[path] = (key, fingerprint)
    return fingerprint


def save(path: Path, fingerprint: Fingerprint) -> None:
    """Write atomically: a run checking the same env at the same time reads the old or the new file, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(json.dumps(fingerprint.to_json(), separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_records(site: Path) -> dict[str, tuple[str, int | None, str | None]]:
    """Every file that an installed distribution's RECORD lists: path -> (distribution, size, sha256)."""
    listed: dict[str, tuple[str, int | None, str | None]] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        distribution = record.parent.name.partition("-")[0]
        try:
            with open(record, newline="") as handle:
                rows = list(csv.reader(handle))
        except (OSError, csv.Error, UnicodeDecodeError) as exc:
            raise InfrastructureError(f"{record}: unreadable ({exc})") from exc
        for row in rows:
            if not row or not row[0]:
                continue
            path, digest, size = (*row, "", "")[:3]
            algorithm, _, value = digest.partition("=")
            sha = value if algorithm == "sha256" and value else None
            if _is_bytecode(path):  # a .pyc a wheel ships is compiled again by the installer (--compile-bytecode):
                sha, size = None, ""  # its content is then the installer's; fingerprinted as installed, not by RECORD
            listed[os.path.normpath(path)] = (distribution, int(size) if size.isdigit() else None, sha)
    return listed


def _is_bytecode(path: str) -> bool:
    return path.endswith(".pyc") and "/__pycache__/" in f"/{path}"


def take(site: Path) -> tuple[list[Damage], Fingerprint]:
    """Hash every recorded file against RECORD (reads the whole env: seconds) and fingerprint what is there.

    A file RECORD gives no hash for (RECORD itself) is fingerprinted with the hash it has now.
    """
    listed = read_records(site)
    top_level = frozenset(p.split("/", 1)[0] for p in listed if not p.startswith("..")) | UNRECORDED
    stats = {path: _lstat(site, path) for path in listed}
    damage = []
    whole: dict[str, os.stat_result] = {}
    for path, st in stats.items():
        distribution, size, _ = listed[path]
        problem = _stat_problem(st, size)
        if problem:
            damage.append(Damage(_shown(site, path), problem, distribution, _shared(st)))
        elif st is not None:
            whole[path] = st
    files = {}
    for (path, st), digest in zip(whole.items(), _sha256_many(site, whole), strict=True):
        distribution, _, expected = listed[path]
        if digest is None or (expected is not None and digest != expected):
            damage.append(Damage(_shown(site, path), _content_problem(st, digest), distribution, _shared(st)))
        else:
            files[path] = FileRecord(distribution, st.st_size, expected or digest, _stamp(st))
    fingerprint = Fingerprint(files, top_level)
    return damage + _unlisted(site, fingerprint), fingerprint


def check(site: Path, fingerprint: Fingerprint) -> tuple[list[Damage], Fingerprint]:
    """One stat per recorded file; a hash only where a stamp moved. Returns the damage found and the
    fingerprint with the stamps of files proven intact brought up to date (save it to skip those hashes next time).
    """
    damage = []
    moved: dict[str, os.stat_result] = {}
    for path, st in _lstat_all(site, fingerprint.by_folder):
        record = fingerprint.files[path]
        problem = _stat_problem(st, record.size)
        if problem:
            damage.append(Damage(_shown(site, path), problem, record.distribution, _shared(st)))
        elif st is not None and _stamp(st) != record.stamp:
            moved[path] = st
    if not moved:  # the usual case: the same fingerprint, no copy of its records
        return damage + _unlisted(site, fingerprint), fingerprint
    files = dict(fingerprint.files)
    for (path, st), digest in zip(moved.items(), _sha256_many(site, moved), strict=True):
        record = fingerprint.files[path]
        if digest == record.sha256:
            files[path] = dataclasses.replace(record, stamp=_stamp(st))
        else:
            damage.append(Damage(_shown(site, path), _content_problem(st, digest), record.distribution, _shared(st)))
    return damage + _unlisted(site, fingerprint), Fingerprint(files, fingerprint.top_level)


def _lstat_all(site: Path, by_folder: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, os.stat_result | None]]:
    """Each file's lstat (None: missing), folder by folder through one descriptor each: a stat relative to its
    folder skips the walk down a long path (20,000 files: 50 ms, against 80 ms by full paths)."""
    for folder, names in by_folder.items():
        prefix = f"{folder}/" if folder else ""
        try:
            fd = os.open(os.path.join(site, folder), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            for name in names:
                yield prefix + name, None
            continue
        try:
            for name in names:
                try:
                    yield prefix + name, os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    yield prefix + name, None
        finally:
            os.close(fd)


def _lstat(site: Path, path: str) -> os.stat_result | None:
    try:
        return os.lstat(os.path.join(site, path))
    except FileNotFoundError:
        return None


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _shared(st: os.stat_result | None) -> bool:
    return st is not None and st.st_nlink > 1


def _stat_problem(st: os.stat_result | None, size: int | None) -> str | None:
    if st is None:
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return "no longer a regular file"
    if size is not None and st.st_size != size:
        return f"size {st.st_size}, RECORD says {size}"
    return None


def _content_problem(st: os.stat_result, digest: str | None) -> str:
    if digest is None:
        return "unreadable"
    return f"content differs from RECORD (same size, {st.st_size} bytes)"


def _shown(site: Path, path: str) -> str:
    """RECORD names scripts as ../../../bin/x: show them as bin/x, relative to the env."""
    if not path.startswith(".."):
        return path
    return os.path.relpath(os.path.normpath(os.path.join(site, path)), site.parents[2])


def _unlisted(site: Path, fingerprint: Fingerprint) -> list[Damage]:
    """Top-level entries no distribution installed, e.g. a .pth file a test suite dropped in."""
    try:
        names = set(os.listdir(site))
    except OSError as exc:
        return [Damage(str(site), f"unreadable ({exc.strerror})")]
    return [Damage(name, "in no distribution's RECORD") for name in sorted(names - fingerprint.top_level)]


def _sha256_many(site: Path, paths: Mapping[str, object]) -> list[str | None]:
    if not paths:
        return []
    threads = min(HASH_THREADS, os.cpu_count() or 1, len(paths))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda p: _sha256(os.path.join(site, p)), paths))


def _sha256(path: str) -> str | None:
    """As RECORD writes it; None when the file cannot be read (it is then damaged)."""
    try:
        # No following links: a link planted where a file was is damage, not the file it points to.
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").digest()
    except OSError:
        return None
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
