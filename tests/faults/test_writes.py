"""Writes that fail: a cell that removes its own directory, a disk that fills up. Nothing finished is
lost, no file is left half-written, and the run reports what it could not write."""

import json
import shutil
import subprocess
import sys

import pytest
from kit import harness_in_mount_namespace, observed

REMOVES_ITS_DIR = """
import os
import shutil

from @NS@ import ops

def test_removes_its_own_cell_directory():
    assert ops.answer() == 41
    here = os.getcwd()
    for name in os.listdir(here):
        path = os.path.join(here, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    shutil.rmtree(here, ignore_errors=True)
"""


@pytest.mark.usefixtures("shared_cache")
def test_E12_a_cell_that_deletes_its_own_directory_loses_nothing_else(workspace, catalogue) -> None:
    """E12: before, `internal error: FileNotFoundError`, no report, 2 finished cells lost, 3 never run."""
    workspace.add_extension("vandal", REMOVES_ITS_DIR)
    workspace.add_extension("bystander")
    workspace.write_matrix(
        "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("vandal", "bystander"))
        + "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n",
    )
    result = workspace.run("-j", "1")
    cells = workspace.cells()
    vandal = cells["vandal@b2.13.0-t2.10~r2.13.0-cpu"]
    catalogue(
        "E12",
        "a test deletes its own cell directory (2 other cells in the run)",
        "the run goes on: every cell reported, the others pass, the report whole; never broken",
        f"{observed(result)}; {len(cells)} cells reported; vandal: {vandal['status']} ({vandal['verdict']}); "
        f"others: {sorted(c['status'] for i, c in cells.items() if c is not vandal)}",
    )
    assert "internal error" not in result.stdout
    assert len(cells) == 3
    assert cells["bystander@b2.13.0-t2.10~r2.13.0-cpu"]["status"] == "PASS"
    assert cells["probe_ext@b2.13.0-t2.10~r2.13.0-cpu"]["status"] == "PASS"
    assert cells["vandal@b2.13.0-t2.10~r2.13.0-cpu"]["verdict"] != "broken"
    run_dir = (workspace.reports / "latest").resolve()
    for name in ("results.json", "summary.md", "junit.xml"):
        assert (run_dir / name).stat().st_size > 0
    for cell_id in cells:
        assert json.loads((run_dir / "cells" / cell_id / "result.json").read_text())["id"] == cell_id


# Run inside the namespace after the harness, while the small filesystem still exists: every file the
# run left must be whole (no empty file, every JSON file parses).
CHECK = """
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*")):
    if path.is_file() and not path.is_symlink() and path.name != "stdout.log" and path.name != "stderr.log":
        if path.stat().st_size == 0:
            print("HALF-WRITTEN (empty):", path)
        elif path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except ValueError:
                print("HALF-WRITTEN (bad JSON):", path)
"""


def _in_a_small_filesystem(workspace, size: str) -> subprocess.CompletedProcess[str]:
    """A really full disk: the reports directory is a tmpfs of `size` for this run alone; then CHECK
    (in the same namespace, while the files still exist) over what the run left."""
    workspace.reports.mkdir()
    return harness_in_mount_namespace(
        f"mount -t tmpfs -o size={size} harness-full {workspace.reports}",
        *workspace.args(),
        cwd=workspace.root,
        env={**workspace.env, "CHECK": CHECK},
        after=f'{sys.executable} -c "$CHECK" {workspace.reports}',
    )


@pytest.mark.usefixtures("shared_cache")
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare to make a small filesystem")
@pytest.mark.parametrize("size", ["8k", "24k", "48k"], ids=["G1-full", "G2-nearly-full", "G3-almost-enough"])
def test_a_full_disk_leaves_no_half_written_file_and_names_what_it_could_not_write(
    workspace, catalogue, request, size: str
) -> None:
    """G1-G3: before, `No space left on device` naming no path, no report, and 0-byte result.json,
    results.json or junit.xml. Now: exit 3 (or 0 when everything fit), every file whole or absent, the
    failing path named, never an internal error, never a false broken."""
    result = _in_a_small_filesystem(workspace, size)
    out = result.stdout
    probe = request.node.callspec.id.split("-")[0]
    statuses = [line.split()[1] for line in out.splitlines() if line.strip().startswith("[1/1]")]
    catalogue(
        probe,
        f"the reports directory on a {size} filesystem (No space left on device)",
        "no half-written file; the cell ERROR naming the full disk, the unwritable paths named; exit 3",
        f"{observed(result)}; cell {statuses[0] if statuses else 'not run'}; "
        f"{out.count('HALF-WRITTEN')} half-written file(s); paths named: {str(workspace.reports) in out}",
    )
    assert "HALF-WRITTEN" not in out, out
    assert "internal error" not in out, out
    assert result.returncode in (0, 3), out
    if result.returncode == 3:
        assert "No space left on device" in out, out
        assert str(workspace.reports) in out, out
    assert "a promise was broken" not in out, out
