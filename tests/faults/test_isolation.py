"""Cells cannot damage what others use, and nothing a cell starts outlives it (venv backend).

The hostile suite tries, from inside its cell, every write the catalogue found possible before:
into its torch env (E7, E8), into uv's cache that env files are hardlinks of, into another
build's unpacked wheel, into the harness's probe plugin, and over another cell's result. Each
test passes only if its write is refused; a bystander extension's cell must pass in the same run
and the next, and the env must still match RECORD file by file.
"""

import json
import os
import signal
import time

import pytest
from kit import observed, processes_left

from torch_abi_harness.provision import integrity

HOSTILE = """
import errno
import glob
import json
import os
import pathlib

import harness_cellprobe
import pytest
import torch

TARGETS = json.loads(pathlib.Path(__file__).with_name("targets.json").read_text())
SITE = pathlib.Path(torch.__file__).parents[1]


def refused(path, create=False):
    # Opening path for writing must fail (read-only, not the cell's, or not even visible to it). Nothing is
    # ever written: if the sandbox failed, an existing file (the harness's own probe plugin, say) is opened
    # for append and closed untouched.
    flags = os.O_WRONLY | (os.O_CREAT | os.O_EXCL if create else os.O_APPEND)
    with pytest.raises(OSError) as info:
        os.close(os.open(path, flags))
    assert info.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT), info.value


def test_E7_rewrite_torch_init():
    refused(SITE / "torch" / "__init__.py")


def test_E8_drop_a_pth_into_site_packages():
    refused(SITE / "zz_hostile.pth", create=True)


def test_write_into_uvs_cache():
    refused(pathlib.Path(TARGETS["uv_cache"]) / "hostile.txt", create=True)


def test_write_into_another_builds_site():
    for other in glob.glob(TARGETS["other_site"]) or [TARGETS["other_site"].replace("*", "x")]:
        refused(other)  # where the cell sees it at all


def test_write_into_the_probe_plugin():
    refused(harness_cellprobe.__file__)


def test_forge_another_cells_result():
    pattern = os.path.join(os.getcwd(), "..", "bystander@*", "result.json")
    for other in glob.glob(pattern) or [pattern.replace("*", "x")]:
        refused(other)  # where the cell sees it at all
"""
SLEEPS = """
import time

def test_sleeps():
    time.sleep(300)
"""


@pytest.mark.usefixtures("hardlinked_env")  # its files are the shared env's: each write into one must be refused
def test_a_hostile_suite_changes_nothing_another_cell_uses(workspace, private_uv_cache, catalogue) -> None:
    private_uv_cache.mkdir()  # there to be written (not missing): the write is refused, not unseen
    workspace.add_extension("bystander")
    hostile = workspace.add_extension("hostile", HOSTILE)
    (hostile / "tests" / "targets.json").write_text(
        json.dumps(
            {
                "uv_cache": str(private_uv_cache),
                "other_site": f"{workspace.cache}/builds/bystander*/site/bystander/*.py",
            }
        )
    )
    builds = "".join(f"  - extension: {n}\n    torch: 2.13.0\n    target: '2.10'\n" for n in ("bystander", "hostile"))
    workspace.write_matrix(builds)
    first = workspace.run("-j", "1")  # cells forked by the forkserver (the default)
    cells = workspace.cells()
    second = workspace.run("-j", "1", "--executor", "fresh")  # the same suite in fresh interpreters
    again = workspace.cells()
    site = next((workspace.cache / "envs").glob("torch-2.13.0-*/lib/python*/site-packages"))
    damage = integrity.take(site)[0]
    hostile_cell = cells["hostile@b2.13.0-t2.10~r2.13.0-cpu"]
    catalogue(
        "E7/E8",
        "a test suite writes into its torch env (torch/__init__.py, a .pth), uv's cache, another build, the probe "
        "plugin and another cell's result",
        "every write refused (the hostile cell passes only then); the bystander passes in this run and the next; "
        "the env matches RECORD",
        f"{observed(first)}; hostile: {hostile_cell['status']} ({hostile_cell['reason']}); bystander: "
        f"{cells['bystander@b2.13.0-t2.10~r2.13.0-cpu']['status']}, next run "
        f"{again['bystander@b2.13.0-t2.10~r2.13.0-cpu']['status']}; env damage: {len(damage)}",
    )
    assert first.returncode == 0, first.stdout
    assert {c["status"] for c in cells.values()} == {"PASS"}, cells
    assert hostile_cell["tests"]["passed"] == 6
    assert second.returncode == 0 and {c["status"] for c in again.values()} == {"PASS"}, second.stdout
    assert again["hostile@b2.13.0-t2.10~r2.13.0-cpu"]["tests"]["passed"] == 6  # refused in fresh cells too
    assert {c["executor"] for c in cells.values()} == {"forkserver"}
    assert {c["executor"] for c in again.values()} == {"fresh"}
    assert damage == []
    assert "is damaged" not in second.stdout


@pytest.mark.usefixtures("shared_cache")
def test_B8_cells_die_with_a_killed_harness(workspace, catalogue) -> None:
    """B8: after SIGKILL of the harness its cells ran on with no timeout. Now they die with it."""
    workspace.add_extension("sleeper", SLEEPS)
    workspace.write_matrix("  - extension: sleeper\n    torch: 2.13.0\n    target: '2.10'\n")
    proc = workspace.start()
    deadline = time.monotonic() + 300
    while (
        not list(workspace.reports.glob("*/cells/*/probe.json"))
        or '"tests"' not in next(workspace.reports.glob("*/cells/*/probe.json")).read_text()
    ):
        assert time.monotonic() < deadline and proc.poll() is None, "the cell never started"
        time.sleep(0.2)
    cell_pid = json.loads(next(workspace.reports.glob("*/cells/*/probe.json")).read_text())["pid"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    started = time.monotonic()
    left = processes_left(str(workspace.root), grace=10)
    catalogue(
        "B8",
        "SIGKILL of the harness while a cell runs",
        "the cell and everything it started die with the harness",
        f"{len(left)} process(es) left after {time.monotonic() - started:.1f} s",
    )
    assert left == [], f"the cell (its pytest was pid {cell_pid}) outlived the harness: {left}"


DETACHES_AND_FLOODS = """
import atexit
import os
import subprocess
import sys


def flood():  # after pytest has given fd 1 back: straight into the cell's stdout
    chunk = "x" * (1 << 20)
    for _ in range(100):
        sys.stdout.write(chunk)
    sys.stdout.flush()


def test_detaches_a_child_and_floods_stdout_at_exit():
    subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(600)", os.environ["MARKER"]])
    atexit.register(flood)
"""


@pytest.mark.usefixtures("shared_cache")
def test_E1_E3_a_detached_child_dies_with_its_cell_and_a_flood_of_output_is_capped(workspace, catalogue) -> None:
    """E1: a test's `setsid` child survived the run. E3: 500 MB of stdout made a 524 MB stdout.log."""
    marker = f"harness-fault-e1-{os.getpid()}"
    workspace.env["MARKER"] = marker
    workspace.add_extension("noisy", DETACHES_AND_FLOODS.replace('os.environ["MARKER"]', repr(marker)))
    workspace.write_matrix("  - extension: noisy\n    torch: 2.13.0\n    target: '2.10'\n")
    result = workspace.run()
    left = processes_left(marker)
    cell = workspace.only_cell()
    log = (workspace.reports / "latest" / cell["logs"]["stdout"]).read_bytes()
    catalogue(
        "E1",
        "a test starts a `setsid` child that sleeps 600 s",
        "the child dies with its cell",
        f"{observed(result, cell)}; {len(left)} detached process(es) left",
    )
    catalogue(
        "E3",
        "a test registers an at-exit handler that writes 100 MB to stdout",
        "stdout.log keeps 64 MB and says what it dropped; the cell is unaffected",
        f"{observed(result, cell)}; stdout.log {len(log) / 2**20:.1f} MB, ends {log[-60:].decode().strip()!r}",
    )
    assert left == []
    assert result.returncode == 0 and cell["status"] == "PASS", result.stdout
    assert len(log) < 64 * 2**20 + 200
    assert b"more bytes dropped]" in log[-200:]
