"""A cell's directory swept to plain files within the caps (run/kept.py), on real files in tmp_path."""

import os
import socket
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from torch_abi_harness.run.kept import CELL_CAP, FILE_CAP, LEFT_OUT_FILE, keep_plain_files


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def _everything(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _left_out(cell: Path) -> list[str]:
    return (cell / LEFT_OUT_FILE).read_text().splitlines()


def test_links_fifos_and_sockets_are_removed_and_named(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    (cell / "tmp").mkdir(parents=True)
    (cell / "stdout.log").write_text("ok\n")
    (cell / "root").symlink_to("/")
    (cell / "tmp" / "environ").symlink_to("/proc/self/environ")
    (cell / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(cell / "pipe")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(cell / "sock"))
    found = keep_plain_files(cell)
    assert {str(f) for f in found} == {
        "root -> / (a symbolic link)",
        "tmp/environ -> /proc/self/environ (a symbolic link)",
        f"dangling -> {tmp_path / 'nowhere'} (a symbolic link)",
        "pipe (a FIFO)",
        "sock (a socket)",
    }
    assert _everything(cell) == {"stdout.log", "tmp", LEFT_OUT_FILE}
    assert sorted(_left_out(cell)) == sorted(f"left out: {f}" for f in found)


def test_a_file_over_the_per_file_cap_is_left_out_by_its_apparent_size(tmp_path: Path) -> None:
    """The cap is on st_size: a sparse 300 MB file counts as 300 MB (tar and zip copy it whole)."""
    cell = tmp_path / "cell"
    _sparse(cell / "tmp" / "big", 300 * 2**20)
    _sparse(cell / "tmp" / "at-the-cap", FILE_CAP)
    found = keep_plain_files(cell)
    assert [str(f) for f in found] == ["tmp/big (300 MB over the 16 MB per-file cap)"]
    assert (cell / "tmp" / "at-the-cap").stat().st_size == FILE_CAP


def test_the_cells_own_files_stop_at_the_per_cell_total_but_its_logs_never_count(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    _sparse(cell / "stderr.log", 60 * 2**20)  # a log capped where written: not the cell's own files
    for n in range(5):
        _sparse(cell / "cache" / f"kernel-{n}", FILE_CAP)
    found = keep_plain_files(cell)
    assert [str(f) for f in found] == ["cache/kernel-4 (16 MB, over the 64 MB a cell keeps beside its logs)"]
    kept = sum(p.stat().st_size for p in (cell / "cache").iterdir())
    assert kept == CELL_CAP
    assert (cell / "stderr.log").exists()


ELF_CORE = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + b"\x04\x00" + b"\0" * 46


@pytest.mark.parametrize(
    ("name", "content"), [("core", b"whatever"), ("core.4242", b"whatever"), ("dump.bin", ELF_CORE)]
)
def test_core_dumps_are_always_left_out(tmp_path: Path, name: str, content: bytes) -> None:
    """By the kernel's names for one, or by an ELF header of type ET_CORE whatever the name; small or not."""
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / name).write_bytes(content)
    (cell / "not-a-core").write_bytes(ELF_CORE[:16] + b"\x03\x00")  # ET_DYN: a shared library
    (cell / "core-notes.txt").write_text("a name like a core's is not one")
    found = keep_plain_files(cell)
    assert [str(f) for f in found] == [f"{name} ({len(content)} bytes, a core dump)"]
    assert _everything(cell) == {"not-a-core", "core-notes.txt", LEFT_OUT_FILE}


def test_names_upload_artifact_refuses_and_folders_too_deep(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    (cell / "a:b").mkdir(parents=True)
    (cell / "a:b" / "inside").write_text("x")
    (cell / "new\nline").write_text("x")
    deep = cell.joinpath(*["d"] * 17)
    deep.mkdir(parents=True)
    found = {str(f) for f in keep_plain_files(cell)}
    assert found == {
        "a:b (a name upload-artifact refuses)",
        "'new\\nline' (a name upload-artifact refuses)",
        "/".join(["d"] * 16) + " (a folder more than 16 deep)",
    }
    assert not (cell / "a:b").exists()
    assert cell.joinpath(*["d"] * 15).is_dir()


def test_nothing_left_out_writes_no_list_and_removes_a_planted_one(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "junit.xml").write_text("<testsuites/>")
    (cell / LEFT_OUT_FILE).write_text("left out: nothing, trust me\n")
    assert [str(f) for f in keep_plain_files(cell)] == [f"{LEFT_OUT_FILE} (the harness's name for this list)"]
    assert (cell / LEFT_OUT_FILE).read_text() == f"left out: {LEFT_OUT_FILE} (the harness's name for this list)\n"
    assert keep_plain_files(tmp_path / "gone") == ()
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "junit.xml").write_text("<testsuites/>")
    assert keep_plain_files(clean) == ()
    assert _everything(clean) == {"junit.xml"}


def test_what_a_cell_made_unreadable_is_given_back_to_its_owner(tmp_path: Path) -> None:
    """A folder or a file of mode 000 stops `cp -r` by the run's user: the sweep restores the owner's access."""
    cell = tmp_path / "cell"
    (cell / "locked").mkdir(parents=True)
    (cell / "locked" / "inside").write_text("x")
    (cell / "secret").write_text("y")
    (cell / "secret").chmod(0)
    (cell / "locked").chmod(0)
    assert keep_plain_files(cell) == ()
    assert stat.S_IMODE((cell / "locked").stat().st_mode) == 0o700
    assert stat.S_IMODE((cell / "secret").stat().st_mode) == 0o600
    assert (cell / "locked" / "inside").read_text() == "x"


def test_a_cell_directory_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "link").symlink_to("/")
    (tmp_path / "cell").symlink_to(target)
    found = keep_plain_files(tmp_path / "cell")
    assert [f.path for f in found] == ["."]
    assert (target / "link").is_symlink()  # nothing outside the cell's directory was touched


def test_what_is_kept_archives_without_a_link_or_a_file_over_the_cap(tmp_path: Path) -> None:
    cell = tmp_path / "reports" / "cells" / "c"
    (cell / "tmp").mkdir(parents=True)
    (cell / "junit.xml").write_text("<testsuites/>")
    (cell / "tmp" / "etc").symlink_to("/etc")
    os.mkfifo(cell / "tmp" / "pipe")
    _sparse(cell / "tmp" / "big", 300 * 2**20)
    keep_plain_files(cell)
    subprocess.run(["cp", "-r", tmp_path / "reports", tmp_path / "copy"], check=True, timeout=60)
    subprocess.run(["tar", "czf", tmp_path / "r.tgz", "-C", tmp_path, "reports"], check=True, timeout=60)
    with tarfile.open(tmp_path / "r.tgz") as archive:
        members = archive.getmembers()
    assert not [m.name for m in members if m.issym() or m.islnk() or not (m.isfile() or m.isdir())]
    assert max(m.size for m in members) <= FILE_CAP
    assert {m.name for m in members if m.isfile()} == {"reports/cells/c/junit.xml", f"reports/cells/c/{LEFT_OUT_FILE}"}
