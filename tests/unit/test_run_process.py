"""The process runner on real processes (plain Python, no torch): timeouts leave nothing running."""

import os
import sys
import time
from pathlib import Path

from harness.run import run_process


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_hanging_cell_and_its_children_are_killed(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(child_pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    execution = run_process([sys.executable, "-c", script], dict(os.environ), tmp_path, timeout=2)
    assert execution.timed_out and execution.returncode is None
    assert time.monotonic() - started < 30
    child = int(child_pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        time.sleep(0.1)
    assert not alive(child), "the cell's child process outlived the timeout"


def test_a_signal_death_is_a_negative_returncode(tmp_path: Path) -> None:
    execution = run_process(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
        dict(os.environ),
        tmp_path,
        timeout=30,
    )
    assert execution.returncode == -11 and not execution.timed_out


def test_output_is_kept(tmp_path: Path) -> None:
    execution = run_process(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        dict(os.environ),
        tmp_path,
        timeout=30,
    )
    assert execution.returncode == 0
    assert execution.stdout.read_text() == "out\n" and execution.stderr.read_text() == "err\n"
