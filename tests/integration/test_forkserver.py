"""The forkserver executor against fresh processes, on real cells of every outcome: the same statuses
and test counts, cells that see the environment a fresh process gets, and no server left behind."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kit import (
    cells_by_id,
    forkservers,
    harness,
    harness_at_once,
    latest_results,
    make_extension,
    processes_mentioning,
    start_harness,
)

# Asserted inside the cell, in both executors: what a fresh `python -m pytest` would see.
SEES_ITS_CELL = """
import os
import sys
import tempfile
from pathlib import Path

import torch
from @NS@ import ops


def test_answer_is_41():
    assert ops.answer() == 41


def test_the_extension_comes_from_the_builds_site_dir():
    import @NS@

    site = Path(sys.path[1])
    assert Path(@NS@.__file__).is_relative_to(site), (@NS@.__file__, sys.path[:3])
    assert sys.path[0] == os.getcwd()


def test_the_cell_environment_and_its_own_directory():
    cell = os.environ["HARNESS_CELL_ID"]
    assert cell.startswith("@NS@@b2.13.0"), cell
    assert Path(os.getcwd()).name == cell
    assert tempfile.gettempdir() == os.environ["TMPDIR"] == str(Path(os.getcwd()) / "tmp")
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])


def test_a_forked_cell_runs_the_rewrite_its_server_made_of_this_module():
    server = sys.modules.get("harness_forkserver")  # only a forked cell has one
    if server is not None:
        assert str(Path(__file__)) in server.REWRITES.table
        assert server.REWRITES.table[str(Path(__file__))][1].co_filename == __file__


def test_pid_1_of_its_own_namespace_leads_its_group():
    assert os.getpgrp() != os.getpid()  # pytest is the init's child, in the group the init leads


def test_signals_as_python_starts_them():
    import signal

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
"""

EXTENSIONS = {
    "crashes": "from @NS@ import ops\n\ndef test_before():\n    assert ops.answer() == 41\n\n"
    "def test_segfault():\n    ops.crash()\n",
    "hangs": "from @NS@ import ops\n\ndef test_spins_forever():\n    ops.spin()\n",
    "fails": "from @NS@ import ops\n\ndef test_passes():\n    assert ops.answer() == 41\n\n"
    "def test_answer_is_42():\n    assert ops.answer() == 42\n",
    "sees": SEES_ITS_CELL,
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("forkserver")
    for name, tests in EXTENSIONS.items():
        make_extension(root / "extensions", name, tests)
    builds = "".join(f"  - extension: {name}\n    torch: 2.13.0\n" for name in EXTENSIONS)
    (root / "matrix.yaml").write_text(f"schema_version: 1\nruntimes:\n  - torch: 2.13.0\nbuilds:\n{builds}")
    return root


def test_forked_cells_end_as_fresh_ones_do(workspace: Path) -> None:
    fresh, forked = harness_at_once(  # at once: each has a cell that hangs to its 20 s timeout
        ("run", "--executor", "fresh", "--timeout", "20", "--reports-dir", "fresh"),
        ("run", "--timeout", "20", "--reports-dir", "forked"),
        cwd=workspace,
    )
    assert fresh.returncode == forked.returncode == 1, forked.stdout  # crashes/hangs/fails break promises
    assert "forkserver processes" in forked.stdout and "fresh processes" in fresh.stdout
    same = harness("diff", "fresh/latest", "forked/latest", "--fail-on-change", cwd=workspace)
    assert same.returncode == 0, same.stdout
    assert "0 changed" in same.stdout
    cells = cells_by_id(latest_results(workspace / "forked"))
    fresh_cells = cells_by_id(latest_results(workspace / "fresh"))
    sees = cells["sees@b2.13.0~r2.13.0-cpu"]
    assert (sees["status"], sees["tests"]["passed"]) == ("PASS", 6), sees["reason"]
    assert cells["crashes@b2.13.0~r2.13.0-cpu"]["reason"] == "killed by SIGSEGV in test test_crashes.py::test_segfault"
    for report in (workspace / "forked" / "latest", workspace / "fresh" / "latest"):  # asserts rewritten in both
        failed = (report / "cells" / "fails@b2.13.0~r2.13.0-cpu" / "stdout.log").read_text()
        assert "assert 41 == 42" in failed and "where 41 = " in failed, failed
    run_dir = workspace / "forked" / "latest"
    for cell_id, cell in cells.items():
        command = (run_dir / "cells" / cell_id / "command.txt").read_text()
        assert "forked by the forkserver of torch 2.13.0" in command
        assert (cell["executor"], fresh_cells[cell_id]["executor"]) == ("forkserver", "fresh")
        assert cell["durations"]["import_torch"] < 0.05, cell  # imported once, by the server
        assert fresh_cells[cell_id]["durations"]["import_torch"] > 0.2, fresh_cells[cell_id]
    assert not processes_mentioning(str(workspace)), "a forkserver or a cell outlived its run"


def test_a_server_that_dies_under_a_cell_makes_it_error(workspace: Path) -> None:
    proc = start_harness("run", "-k", "hangs", "--reports-dir", "server_dies", cwd=workspace)
    deadline = time.monotonic() + 600
    servers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None and not servers:
        probes = list((workspace / "server_dies").glob("*/cells/*/probe.json"))
        if probes and '"phase": "tests"' in probes[0].read_text():
            servers = forkservers(str(workspace / "server_dies"))
        time.sleep(0.2)
    if not servers:
        proc.kill()
        raise AssertionError(f"the hanging cell never started under a forkserver:\n{proc.communicate()[0]}")
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    (cell,) = latest_results(workspace / "server_dies")["cells"]
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error"), cell
    assert cell["reason"].startswith("the forkserver of torch 2.13.0+cpu ended while this cell ran"), cell
    assert not processes_mentioning(str(workspace / "server_dies")), "the cell outlived its server"


# The first runtime's cell holds its worker long enough for the next runtime's server to be ready before that
# runtime's cell starts; both assert that the server's heap reached them frozen (what pytest's collections skip).
AHEAD = """
import gc
import os
import time

import torch
from @NS@ import ops


def test_the_servers_heap_is_frozen():
    assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()


def test_the_first_runtime_takes_its_time():
    if torch.__version__.startswith("2.12."):  # held until the test outside sees the next server ready
        deadline = time.monotonic() + 300
        while not os.path.exists("go") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists("go")
    assert ops.answer() == 41
"""


def _executable(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""


def _serving(pid: int) -> bool:
    """The server has imported everything and waits for a cell: its only thread is blocked in epoll_wait."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text() == "do_epoll_wait"
    except OSError:
        return False


def _hold_until_the_next_server_serves(proc: subprocess.Popen[str], reports: Path) -> None:
    """Let the first cell (2.12.1) end only once the 2.13.0 server, started ahead while it runs, is ready: on a
    machine loaded enough, its `import torch` outlasts any fixed hold, and the test would race it."""
    deadline = time.monotonic() + 600
    go = None
    while time.monotonic() < deadline and proc.poll() is None:
        holding = list(reports.glob("*/cells/ahead@b2.13.0-t2.10~r2.12.1-cpu/probe.json"))
        if holding and '"phase": "tests"' in holding[0].read_text():
            go = holding[0].with_name("go")
            servers = forkservers(str(reports))
            ready = [pid for pid in servers if b"/torch-2.13.0-" in _executable(pid) and _serving(pid)]
            if ready:
                go.write_text("")
                return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the next server never served while the first cell held ({go}):\n{proc.communicate()[0]}")


def test_the_next_runtimes_server_starts_while_this_ones_cells_run(tmp_path: Path) -> None:
    make_extension(tmp_path / "extensions", "ahead", AHEAD)
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.12.1\n  - torch: 2.13.0\n"
        "builds:\n  - extension: ahead\n    torch: 2.13.0\n    target: '2.10'\n"
    )
    proc = start_harness("run", "-j", "1", "--reports-dir", "reports", cwd=tmp_path)
    _hold_until_the_next_server_serves(proc, tmp_path / "reports")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    first, second = cells["ahead@b2.13.0-t2.10~r2.12.1-cpu"], cells["ahead@b2.13.0-t2.10~r2.13.0-cpu"]
    assert (first["tests"]["passed"], second["tests"]["passed"]) == (2, 2), (first["reason"], second["reason"])
    assert first["executor"] == second["executor"] == "forkserver", out  # a server outlived its starter
    # The first cell waited for its server's `import torch`; the second found its server ready, started ahead.
    assert first["durations"]["startup"] > 1.0, first["durations"]
    assert second["durations"]["startup"] < first["durations"]["startup"] / 2, (first["durations"], second["durations"])
    # -j 1 is one cell's process at a time, though its recording overlaps the next cell (CellRunner.slots).
    cells_dir = tmp_path / "reports" / "latest" / "cells"
    first_ended = json.loads((cells_dir / first["id"] / "probe.json").read_text())["finished_at"]
    assert (cells_dir / second["id"] / "command.txt").stat().st_mtime > first_ended
    assert not processes_mentioning(str(tmp_path)), "a server started ahead outlived its run"
