"""What a cell's directory keeps once the cell has run: plain files of bounded size, and nothing else.

A cell's directory is part of the run's report (`reports/<run>/cells/<id>/`), and the report is copied,
archived and uploaded by tools that follow links or read whatever a name holds: the nightly's `cp`, `tar`,
`zip`, actions/upload-artifact, a person's archiver running with more rights than the cell had. A cell may
leave anything there: a link to `/` or `/proc/self/environ` (the archiver packs the root-only file or its
own environment), a FIFO (the copy blocks), a 264 MB core dump, a 300 MB temp file. So once a cell has
ended, and after its outcome was read (the disk rule measures free space before this frees any), its
directory is swept: links, FIFOs, sockets and devices removed, core dumps removed, files over the caps
removed, names upload-artifact refuses removed, and each named with why in `left-out.txt`, which the cell's
result names among its logs. The walk opens every directory without following a link and never reads a
file other than a regular one.

What it does not do: it does not judge (what was left out never changes a verdict), and it does not stop a
process the cell left running from writing afterwards (the sandbox ends the whole cell first).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import stat
from pathlib import Path

from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.execute.api import LOG_LIMIT

log = logging.getLogger(__name__)

# Per file: more than any junit XML, probe record or preload trace a real suite writes (a junit report of
# 10,000 tests is about 2 MB), less than a core dump of a process that loaded torch (200 MB and more) or a
# 300 MB temp file; the GPU device check leaves out a run archive of 16 MB or more for the same reason.
FILE_CAP = 16 * 2**20
# Per cell, its logs aside (they are capped as they are written, LOG_LIMIT each): four files at the cap.
# A nightly of 100 cells then keeps under 7 GB beside its logs on a hosted runner's 14 GB disk, and an
# artifact stays a size GitHub's storage takes.
CELL_CAP = 64 * 2**20
# The harness's own logs of the cell: capped where written, with a line saying what was dropped.
LOGS = {"stdout.log": LOG_LIMIT + 4096, "stderr.log": LOG_LIMIT + 4096}
# Below cells/<id>/: tmp/.cache/torch_extensions/... is 4 deep; a deeper tree is a cell's game.
DEPTH_LIMIT = 16
LEFT_OUT_FILE = "left-out.txt"
# Characters actions/upload-artifact refuses in a path (it fails the whole upload on one of them).
UNUPLOADABLE = re.compile(r'[":<>|*?\r\n\\]')
CORE_NAME = re.compile(r"core(\.\d+)?")
ELF_CORE = b"\x7fELF"  # and e_type 4 (ET_CORE) at byte 16, in either byte order


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """One thing a cell left that its report does not keep: where it was (relative to the cell's directory)
    and why, as `left-out.txt` and the run's log show it."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path} ({self.why})"


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n} bytes"


def _shown(relative: str) -> str:
    """A name as left-out.txt can show it on one line: as it is when printable, else Python's ascii()."""
    return relative if relative.isprintable() else ascii(relative)


def _not_plain(info: os.stat_result) -> str | None:
    """Why a thing that is neither a directory nor a regular file is left out; None for those two."""
    mode = info.st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _made_readable(fd: int, name: str, info: os.stat_result) -> str | None:
    """Give its owner read access (and a directory's, entry) where a cell took it away, so a copy by the run's
    user does not stop at it; why it is left out when that cannot be done. (Known a directory or a regular file:
    chmod follows no link here.)"""
    wanted = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
    if info.st_mode & wanted == wanted:
        return None
    try:
        os.chmod(name, stat.S_IMODE(info.st_mode) | wanted, dir_fd=fd)
    except OSError as exc:
        return f"not readable by the run's user: {exc.strerror or exc}"
    return None


def _is_core(name: str, dir_fd: int) -> bool:
    """A core dump: named as the kernel names one (core, core.<pid>), or an ELF file of type ET_CORE."""
    if CORE_NAME.fullmatch(name):
        return True
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        head = os.read(fd, 18)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head[:4] == ELF_CORE and head[16:18] in (b"\x04\x00", b"\x00\x04")


@dataclasses.dataclass
class _Sweep:
    """One walk of a cell's directory: what it kept so far (bytes, logs aside) and what it left out."""

    kept: int = 0
    left_out: list[LeftOut] = dataclasses.field(default_factory=list)

    def directory(self, fd: int, prefix: str, depth: int) -> None:
        """Every entry of the open directory fd, the harness's logs first (so the caps never cost them)."""
        names = sorted(os.listdir(fd), key=lambda n: (n not in LOGS or depth > 0, n))
        for name in names:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:  # gone since it was listed
                continue
            relative = prefix + name
            why = self.refusal(fd, name, relative, info, depth)
            if why is not None:
                self.remove(fd, name, info, LeftOut(_shown(relative), why))

    def refusal(self, fd: int, name: str, relative: str, info: os.stat_result, depth: int) -> str | None:
        """Why an entry is left out, or None when it is kept (a directory: once its own entries are swept)."""
        if UNUPLOADABLE.search(name):
            return "a name upload-artifact refuses"
        if depth == 0 and name == LEFT_OUT_FILE:
            return "the harness's name for this list"
        why = _not_plain(info) or _made_readable(fd, name, info)
        if why is not None:
            return why
        if stat.S_ISDIR(info.st_mode):
            return self.subdirectory(fd, name, relative, depth)
        return self.regular(fd, name, info.st_size, depth)

    def subdirectory(self, fd: int, name: str, relative: str, depth: int) -> str | None:
        if depth + 1 >= DEPTH_LIMIT:
            return f"a folder more than {DEPTH_LIMIT} deep"
        try:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            return f"a folder that cannot be opened: {exc.strerror or exc}"
        try:
            self.directory(inner, relative + "/", depth + 1)
        finally:
            os.close(inner)
        return None

    def regular(self, fd: int, name: str, size: int, depth: int) -> str | None:
        cap = LOGS.get(name, FILE_CAP) if depth == 0 else FILE_CAP
        if _is_core(name, fd):
            return f"{_size(size)}, a core dump"
        if size > cap:
            return f"{_size(size)} over the {_size(cap)} per-file cap"
        if depth == 0 and name in LOGS:
            return None  # capped where written: never counted against the cell's own files
        if self.kept + size > CELL_CAP:
            return f"{_size(size)}, over the {_size(CELL_CAP)} a cell keeps beside its logs"
        self.kept += size
        return None

    def remove(self, fd: int, name: str, info: os.stat_result, what: LeftOut) -> None:
        """Remove an entry (a directory with all it holds); one that cannot be is named as such."""
        if stat.S_ISLNK(info.st_mode):
            try:
                what = dataclasses.replace(what, path=f"{what.path} -> {_shown(os.readlink(name, dir_fd=fd))}")
            except OSError:
                pass
        try:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
        except OSError as exc:
            what = dataclasses.replace(what, why=f"{what.why}; NOT removed: {exc.strerror or exc}")
            log.warning("%s: could not be removed from the report: %s", name, exc)
        self.left_out.append(what)


def keep_plain_files(cell_dir: Path) -> tuple[LeftOut, ...]:
    """Sweep a cell's directory to regular files within the caps (see the module's docstring); what was left
    out, in walk order, also written to its left-out.txt (removed when nothing was: a cell may plant one)."""
    try:
        fd = os.open(cell_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return ()  # the cell removed its own directory: nothing of it to keep
    except OSError as exc:
        log.warning("%s: the cell's directory cannot be swept: %s", cell_dir, exc)
        return (LeftOut(".", f"the cell's directory cannot be opened as one: {exc.strerror or exc}"),)
    sweep = _Sweep()
    try:
        sweep.directory(fd, "", 0)
    finally:
        os.close(fd)
    left_out = tuple(sweep.left_out)
    _record(cell_dir / LEFT_OUT_FILE, left_out)
    return left_out


def _record(path: Path, left_out: tuple[LeftOut, ...]) -> None:
    try:
        if left_out:
            write_atomic(path, "".join(f"left out: {entry}\n" for entry in left_out))
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:  # a full disk: the run's log still names them
        log.warning("%s: not written: %s", path, exc)
