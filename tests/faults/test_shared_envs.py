"""C2: a shared env is never rebuilt under a live cell. A run holds every env it uses (a shared flock on
the env's `.use` file) until its last cell has ended; a run that finds the env damaged takes that lock
exclusively before removing it, so it waits (bounded, logged) for the first run instead of deleting
the files its cell is importing."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kit import latest_results, observed, own_inode

from torch_abi_harness.provision import integrity

HOLDS = """
import pathlib
import time

from @NS@ import ops

GO = pathlib.Path("@GO@")


def test_uses_its_env_while_another_run_repairs_it():
    deadline = time.monotonic() + 300
    while not GO.exists() and time.monotonic() < deadline:  # until the other run is in the middle of its repair
        time.sleep(0.1)
    import torch.utils.show_pickle  # noqa: F401  (read from the env now: no forkserver imported it before)

    assert ops.answer() == 41
"""

DAMAGED = "torch/utils/collect_env.py"  # a file no cell imports: the first run's cell keeps its promise
IMPORTED = "torch/utils/show_pickle.py"  # what the cell imports once told to go


class Output:
    """A running process's output, read line by line in a thread (to act on what it says while it runs)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.stream = proc.stdout
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(self.stream), daemon=True)
        self.thread.start()

    def text(self) -> str:
        """All it said (once it has ended)."""
        self.thread.join(timeout=60)
        self.stream.close()
        return "".join(self.lines)


def _only_cell(reports: Path) -> dict:
    (cell,) = latest_results(reports)["cells"]
    return dict(cell)


def test_C2_a_damaged_env_is_repaired_only_once_the_run_using_it_has_ended(
    workspace, hardlinked_env, catalogue
) -> None:
    # The go signal sits where the cell's uid (nobody) can see it: pytest's tmp_path is under a 0700 directory
    # the cell's world covers.
    signals = Path(tempfile.mkdtemp(prefix="harness-c2-"))
    signals.chmod(0o755)
    go = signals / "go"
    workspace.add_extension("holder", HOLDS.replace("@GO@", str(go)))
    workspace.write_matrix("  - extension: holder\n    torch: 2.13.0\n    target: '2.10'\n")
    first_reports, second_reports = workspace.root / "reports-1", workspace.root / "reports-2"
    site = next(hardlinked_env.glob("lib/python*/site-packages"))
    own_inode(site / DAMAGED)  # damaged in place below: in this copy alone
    first = workspace.start("--reports-dir", first_reports)
    second, said = None, None
    try:
        probe = lambda: next(first_reports.glob("*/cells/*/probe.json"), None)  # noqa: E731
        deadline = time.monotonic() + 600
        while not (probe() is not None and '"phase": "tests"' in probe().read_text()):  # type: ignore[union-attr]
            assert first.poll() is None and time.monotonic() < deadline, first.communicate(timeout=60)[0]
            time.sleep(0.1)
        with open(site / DAMAGED, "a") as handle:
            handle.write("# damaged while run 1's cell uses the env\n")
        second = workspace.start("--reports-dir", second_reports)
        said = Output(second)
        # Go once run 2 waits for the env, or (were it not to wait) once the file the cell imports is gone.
        while not any(".use (at most" in line for line in said.lines) and (site / IMPORTED).exists():
            assert second.poll() is None and time.monotonic() < deadline, said.text()
            time.sleep(0.05)
        go.touch()
        first_out, _ = first.communicate(timeout=600)
        second.wait(timeout=1200)
        second_out = said.text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and every command it started
                proc.wait()
        if said is not None:
            said.text()
        shutil.rmtree(signals, ignore_errors=True)
    first_cell, second_cell = _only_cell(first_reports), _only_cell(second_reports)
    waited = re.search(r"\.use: ours after ([\d.]+) s", second_out)
    catalogue(
        "C2",
        "run 2 finds damage in an env and wants to rebuild it while run 1's cell uses it",
        "run 2 waits (bounded, logged) for run 1 to let go of the env, then rebuilds it; both cells pass",
        f"run 1: {observed(first, first_cell)}; run 2: {observed(second, second_cell)}, "
        + (f"waited {float(waited[1]):.0f} s for the env" if waited else "did NOT wait"),
    )
    assert first.returncode == 0, first_out
    assert (first_cell["status"], first_cell["verdict"]) == ("PASS", "kept"), first_cell
    assert second.returncode == 0, second_out
    assert (second_cell["status"], second_cell["verdict"]) == ("PASS", "kept"), second_cell
    assert f"must be rebuilt (it is damaged: {DAMAGED}: size" in second_out, second_out
    assert waited is not None, second_out
    assert f"is damaged: {DAMAGED}: size" in second_out and "rebuilding it" in second_out, second_out
    assert integrity.take(site)[0] == []  # rebuilt: every file as RECORD says
