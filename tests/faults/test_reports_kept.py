"""What a cell leaves in its report, and a disk a neighbour filled (issue 32). A cell's directory is part of the
run's report, copied with `cp -r`, archived with `tar` and uploaded: once the cell ends it keeps regular files
within the caps only (run/kept.py), each thing left out named in its left-out.txt. A cell that failed because
its disk was full, even one a neighbour freed again before the cell ended, is ERROR naming the disk, never
broken (run/collect.py: disk_full).

The cells are real: a small stable-ABI extension built on 2.13.0 for target 2.10, run on 2.13.0 in the shared
cache, whose test leaves the files (or fills the disk) itself."""

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from kit import Workspace, harness_in_mount_namespace, observed

from torch_abi_harness.provision.envs import default_cache_dir
from torch_abi_harness.run.kept import FILE_CAP, LEFT_OUT_FILE

CELL = "hostile_files@b2.13.0-t2.10~r2.13.0-cpu"
# The 300 MB temp file is sparse: the cap is on apparent size (st_size), which tar and zip copy whole.
LEAVES_HOSTILE_FILES = """
import os

from @NS@ import ops

ELF_CORE = b"\\x7fELF\\x02\\x01\\x01" + b"\\0" * 9 + b"\\x04\\x00" + b"\\0" * 46

def test_leaves_links_a_fifo_a_big_temp_file_and_core_dumps():
    assert ops.answer() == 41
    os.symlink("/", "root")
    os.symlink("/proc/self/environ", "environ")
    os.mkfifo("pipe")
    with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as big:
        big.truncate(300 * 2**20)
    for name in ("core", "core.4242"):
        with open(name, "wb") as core:
            core.write(ELF_CORE)
"""
EXPECTED_LEFT_OUT = {
    "root -> / (a symbolic link)",
    "environ -> /proc/self/environ (a symbolic link)",
    "pipe (a FIFO)",
    "tmp/big (300 MB over the 16 MB per-file cap)",
}
EXPECTED_CORES = {"core (64 bytes, a core dump)", "core.4242 (64 bytes, a core dump)"}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, subprocess.CompletedProcess[str]]:
    """One run of the cell that leaves all of it: R1 and R2 read the same report."""
    root = tmp_path_factory.mktemp("hostile-files")
    workspace = Workspace(root / "checkout", default_cache_dir(), root / "reports", dict(os.environ))
    workspace.root.mkdir()
    workspace.add_extension("hostile_files", LEAVES_HOSTILE_FILES)
    workspace.write_matrix("  - extension: hostile_files\n    torch: 2.13.0\n    target: '2.10'\n")
    return workspace, workspace.run()


def _left_out(workspace: Workspace) -> set[str]:
    cell_dir = (workspace.reports / "latest").resolve() / "cells" / CELL
    return {line.removeprefix("left out: ") for line in (cell_dir / LEFT_OUT_FILE).read_text().splitlines()}


def test_R1_links_a_fifo_and_a_big_file_leave_the_report_and_it_copies_and_archives(
    hostile_run: tuple[Workspace, subprocess.CompletedProcess[str]], tmp_path: Path, catalogue
) -> None:
    """R1: before, the links stayed in the report and the nightly's `cp -r` and an archiver followed them
    (a root-only file, the archiver's environment), and a 300 MB temp file stayed. Now none stays, each is
    named, and `cp -r` and `tar czf` of the reports directory follow nothing."""
    workspace, result = hostile_run
    cell = workspace.cells()[CELL]
    run_dir = (workspace.reports / "latest").resolve()
    left_out = _left_out(workspace)
    copied = subprocess.run(["cp", "-r", workspace.reports, tmp_path / "copy"], capture_output=True, timeout=120)
    archive = tmp_path / "reports.tgz"
    tar_argv = ["tar", "czf", archive, "-C", workspace.reports.parent, workspace.reports.name]
    packed = subprocess.run(tar_argv, capture_output=True, timeout=120)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    links = [f"{m.name} -> {m.linkname}" for m in members if m.issym() or m.islnk()]
    odd = [m.name for m in members if not (m.isfile() or m.isdir() or m.issym() or m.islnk())]
    biggest = max(m.size for m in members if m.isfile())
    catalogue(
        "R1",
        "a cell leaves links to / and /proc/self/environ, a FIFO and a 300 MB (sparse) temp file",
        "none kept in the report, each named in left-out.txt; cp -r and tar czf of the reports follow nothing",
        f"{observed(result, cell)}; left out: {sorted(left_out & EXPECTED_LEFT_OUT)}; cp -r exit {copied.returncode}, "
        f"tar exit {packed.returncode}; links in the archive: {links}; largest file {biggest} bytes",
    )
    assert result.returncode == 0, result.stdout
    assert cell["status"] == "PASS", cell
    assert EXPECTED_LEFT_OUT <= left_out, left_out
    assert cell["logs"]["left_out"] == f"cells/{CELL}/{LEFT_OUT_FILE}"
    cell_dir = run_dir / "cells" / CELL
    for name in ("root", "environ", "pipe", "tmp/big"):
        assert not os.path.lexists(cell_dir / name), name
    assert copied.returncode == 0, copied.stderr
    assert packed.returncode == 0, packed.stderr
    assert links == [f"{workspace.reports.name}/latest -> {run_dir.name}"]  # the harness's own pointer only
    assert not odd
    assert biggest <= FILE_CAP


def test_R2_core_dumps_are_left_out_and_named(
    hostile_run: tuple[Workspace, subprocess.CompletedProcess[str]], catalogue
) -> None:
    """R2: before, a 264 MB core dump stayed in the report. Now a core dump (core, core.<pid>, or an ELF core
    by its header) is always left out, whatever its size, and named."""
    workspace, result = hostile_run
    left_out = _left_out(workspace)
    cell_dir = (workspace.reports / "latest").resolve() / "cells" / CELL
    kept = sorted(p.name for p in cell_dir.iterdir() if p.name.startswith("core"))
    catalogue(
        "R2",
        "a cell leaves core dumps named core and core.4242 (64-byte ELF cores)",
        "left out of the report and named in left-out.txt",
        f"{observed(result)}; named: {sorted(left_out & EXPECTED_CORES)}; still in the report: {kept or 'none'}",
    )
    assert EXPECTED_CORES <= left_out, left_out
    assert not kept


FILLS_THE_DISK = """
import os

from @NS@ import ops

def test_writes_its_data_while_a_neighbour_fills_the_disk():
    assert ops.answer() == 41
    neighbour = os.open("neighbour.fill", os.O_WRONLY | os.O_CREAT)
    try:
        try:
            while True:
                os.write(neighbour, b"\\0" * 2**20)
        except OSError:
            pass  # the disk is full
        with open("data.bin", "wb", buffering=0) as data:
            data.write(b"x" * 2**20)
    finally:
        os.close(neighbour)
        os.unlink("neighbour.fill")  # the neighbour frees the disk before the cell ends
"""


@pytest.mark.usefixtures("shared_cache")
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare to make a small filesystem")
def test_R3_a_neighbour_that_fills_the_disk_and_frees_it_makes_the_cell_error_not_broken(
    workspace: Workspace, catalogue
) -> None:
    """R3: before, TEST_FAILED and broken (the disk had room again when the harness looked). The reports are a
    64 MB tmpfs of this run's own; a neighbour (a file on the same file system, the only one the sandboxed
    cell may write) fills it, the test's write meets ENOSPC, the neighbour frees it. Now ERROR naming the disk."""
    workspace.add_extension("disk_victim", FILLS_THE_DISK)
    workspace.write_matrix("  - extension: disk_victim\n    torch: 2.13.0\n    target: '2.10'\n")
    workspace.reports.mkdir()
    copy = workspace.root / "results-copy.json"
    result = harness_in_mount_namespace(
        f"mount -t tmpfs -o size=64m harness-r3 {workspace.reports}",
        *workspace.args(),
        cwd=workspace.root,
        env=workspace.env,
        after=f"cp {workspace.reports}/latest/results.json {copy}",
    )
    (cell,) = json.loads(copy.read_text())["cells"]
    catalogue(
        "R3",
        "a neighbour fills the 64 MB file system holding the cell's directory, the test's write meets ENOSPC, "
        "the neighbour frees it before the cell ends",
        "ERROR naming the disk (a fault of the machine), never TEST_FAILED/broken",
        observed(result, cell),
    )
    assert cell["status"] == "ERROR", cell
    assert cell["verdict"] == "error", cell
    assert f"the disk holding {workspace.reports}/" in cell["reason"], cell["reason"]
    assert "was full while the cell ran" in cell["reason"] and "No space left on device" in cell["reason"]
    assert "a fault of the machine" in cell["reason"]
