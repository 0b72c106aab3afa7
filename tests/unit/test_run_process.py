"""The process runner on real processes (plain Python, no torch): timeouts leave nothing running."""

import os
import sys
import time
from pathlib import Path

import pytest
from kit import processes_mentioning

from harness.execute import sandbox
from harness.execute.venv import run_process


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


BOX = sandbox.detect()


def test_this_host_runs_cells_in_the_sandbox() -> None:
    """Where the harness is developed and tested (Linux, util-linux, root or user namespaces) cells are
    isolated; a host that refuses namespaces runs them unisolated, and this test says why."""
    assert BOX.isolated, f"cells would run without the sandbox here: {BOX.reason}"


def test_in_the_sandbox_a_signal_death_is_still_a_negative_returncode(tmp_path: Path) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"
    execution = run_process([sys.executable, "-c", code], dict(os.environ), tmp_path, 30, BOX)
    assert (execution.returncode, execution.timed_out) == (-6, False)
    assert (
        run_process([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), tmp_path, 30, BOX).returncode == 3
    )


def test_E1_a_detached_child_does_not_outlive_its_cell(tmp_path: Path) -> None:
    """E1: a test's `setsid` child survived the run; in the sandbox's PID namespace it dies with the cell."""
    marker = f"harness-e1-{os.getpid()}"
    script = (
        "import subprocess, sys\n"
        f"subprocess.Popen(['setsid', sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "import time; time.sleep(0.5)\n"
    )
    execution = run_process([sys.executable, "-c", script], dict(os.environ), tmp_path, 30, BOX)
    assert execution.returncode == 0
    time.sleep(0.3)
    assert processes_mentioning(marker) == []


def test_in_the_sandbox_only_the_cells_own_directory_is_writable(tmp_path: Path) -> None:
    shared, out = tmp_path / "shared", tmp_path / "shared" / "reports" / "cell"
    out.mkdir(parents=True)
    (shared / "env.py").write_text("pristine\n")
    script = (
        "import pathlib, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        pathlib.Path(path).write_text('changed')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('REFUSED', path, exc.errno)\n"
    )
    argv = [sys.executable, "-c", script, str(shared / "env.py"), str(shared / "new.pth"), str(out / "mine.txt")]
    execution = run_process(argv, dict(os.environ), out, 30, BOX, [shared])
    lines = execution.stdout.read_text().splitlines()
    assert lines == [f"REFUSED {shared / 'env.py'} 30", f"REFUSED {shared / 'new.pth'} 30", f"WROTE {out / 'mine.txt'}"]
    assert (shared / "env.py").read_text() == "pristine\n"


def test_E3_a_cells_output_is_capped_and_it_still_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """E3: 500 MB of stdout made a 524 MB stdout.log; now the log keeps the cap and says what it dropped."""
    monkeypatch.setattr("harness.execute.api.LOG_LIMIT", 1 << 20)
    script = "import sys\nfor _ in range(8):\n    sys.stdout.write('x' * (1 << 20))\nprint('done', file=sys.stderr)"
    execution = run_process([sys.executable, "-c", script], dict(os.environ), tmp_path, 60, BOX)
    assert execution.returncode == 0
    text = execution.stdout.read_text()
    assert len(text) < (1 << 20) + 200
    assert text.endswith(f"[harness: log cut at {1 << 20} bytes; {7 << 20} more bytes dropped]\n")
    assert execution.stderr.read_text() == "done\n"
