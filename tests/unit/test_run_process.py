"""The process runner on real processes (plain Python, no torch): timeouts leave nothing running."""

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit import processes_mentioning

import torch_abi_harness
from torch_abi_harness.execute import sandbox
from torch_abi_harness.execute.venv import run_process


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


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can be refused namespaces on demand (CAP_SYS_ADMIN dropped)")
def test_where_the_kernel_refuses_the_namespaces_cells_run_unisolated_and_the_run_says_why(tmp_path: Path) -> None:
    """A real refusal: the harness as root without CAP_SYS_ADMIN (`unshare --mount` gets EPERM). The sandbox is
    'none' with the kernel's reason, and a cell still runs (writing where it could not in the sandbox)."""
    code = (
        "import logging, pathlib, sys\n"
        "from torch_abi_harness.execute import sandbox, venv\n"
        "logging.basicConfig(stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "venv.VenvBackend()\n"
        "box = sandbox.detect()\n"
        "print(box.kind)\n"
        "cell = [sys.executable, '-c', 'import sys; open(sys.argv[1], \"w\")', sys.argv[1]]\n"
        "print(venv.run_process(cell, {}, pathlib.Path(sys.argv[2]), 30, box).returncode)\n"
    )
    argv = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--", sys.executable, "-c", code]
    argv += [str(tmp_path / "outside"), str(tmp_path / "cell")]
    (tmp_path / "cell").mkdir()
    lines = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("WARNING cells run without the sandbox (the kernel refused the namespaces ("), lines
    assert lines[1:] == ["none", "0"]
    assert (tmp_path / "outside").exists()


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


# Opens each path for writing (creating only what is missing) and writes nothing: if the sandbox failed,
# an existing file (the harness's own package, say) is opened for append and closed untouched.
TRY_WRITES = """
import os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | (0 if os.path.exists(path) else os.O_CREAT)))
        print("WROTE", path)
    except OSError as exc:
        print("REFUSED", path, exc.errno)
"""


def test_in_the_sandbox_only_the_cells_own_directory_and_its_own_dev_shm_are_writable(tmp_path: Path) -> None:
    """V3: a passing test wrote into the installed harness package and $HOME. Now every mount is read-only
    but the cell's directory (and a /dev/shm of its own, empty and gone with the cell)."""
    shared, out = tmp_path / "shared", tmp_path / "shared" / "reports" / "cell"
    out.mkdir(parents=True)
    (shared / "env.py").write_text("pristine\n")
    name = f"harness-sandbox-test-{os.getpid()}"
    elsewhere = [
        shared / "env.py",
        shared / "new.pth",
        Path(torch_abi_harness.__file__),
        Path.home() / name,
        Path("/tmp") / name,
        Path("/var/tmp") / name,
    ]
    mine = [out / "mine.txt", Path("/dev/shm") / name]
    open_to_all = (Path("/tmp"), Path("/var/tmp"))
    execution = run_process(
        [sys.executable, "-c", TRY_WRITES, *map(str, elsewhere + mine)], dict(os.environ), out, 30, BOX
    )
    lines = execution.stdout.read_text().splitlines()
    try:
        # as nobody (the harness is root) a path under a directory it cannot traverse is not even there (ENOENT), a
        # file it does not own refuses it (EACCES); where anyone may write (/tmp, /var/tmp), the mount refuses
        anyway = {errno.EROFS, errno.EACCES, errno.ENOENT}
        refused = {p: {errno.EROFS} if p.parent in open_to_all else anyway for p in elsewhere}
        said = dict(line.rsplit(" ", 1) for line in lines[: len(elsewhere)])
        assert [line.split(" ", 1)[0] for line in lines] == ["REFUSED"] * len(elsewhere) + ["WROTE"] * len(mine)
        assert all(int(said[f"REFUSED {p}"]) in refused[p] for p in elsewhere), lines
        assert lines[len(elsewhere) :] == [f"WROTE {p}" for p in mine]
        assert (shared / "env.py").read_text() == "pristine\n"
        assert not (Path("/dev/shm") / name).exists(), "the cell's /dev/shm was the host's"
    finally:
        for path in (Path.home() / name, Path("/tmp") / name, Path("/var/tmp") / name, Path("/dev/shm") / name):
            path.unlink(missing_ok=True)


@pytest.mark.parametrize("remount_all", ["util-linux", "a no-op"])
def test_in_the_sandbox_a_submount_is_read_only_too(tmp_path: Path, remount_all: str) -> None:
    """Not only `/`: a mount below it (here a fresh writable tmpfs, made in a mount namespace of this test's
    own with a space in its path, as /proc/self/mountinfo escapes it) refuses the cell's writes as well;
    also where `mount --all -o remount` remounts nothing (a mount(8) in front of util-linux's that ignores
    `--all`): the init's line-by-line pass over mountinfo alone makes every mount read-only."""
    submount, out = tmp_path / "a mount", tmp_path / "cell"
    submount.mkdir()
    out.mkdir()
    environ = dict(os.environ)
    if remount_all == "a no-op":
        fake = tmp_path / "bin" / "mount"
        fake.parent.mkdir()
        fake.write_text(f'#!/bin/sh\n[ "$1" = --all ] && exit 0\nexec {shutil.which("mount")} "$@"\n')
        fake.chmod(0o755)
        environ["PATH"] = f"{fake.parent}{os.pathsep}{environ['PATH']}"
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
    cell = (
        "import os, subprocess, sys\n"
        "from pathlib import Path\n"
        "from torch_abi_harness.execute import sandbox\n"
        "argv = [sys.executable, '-c', sys.argv[1], sys.argv[2], sys.argv[3]]\n"
        "cell = Path(sys.argv[3]).parent\n"
        "world = sandbox.World((cell,), uid=None)  # the mounts alone: no uid of its own to refuse the write\n"
        "wrapped = sandbox.Sandbox('namespaces').wrap(argv, [cell], world=world)\n"
        "raise SystemExit(subprocess.run(wrapped).returncode)\n"
    )
    script = 'mount -t tmpfs harness-test "$1" && touch "$1/host-writes" && shift && exec "$@"'
    argv = [*unshare, "sh", "-c", script, "sh", str(submount), sys.executable, "-c", cell, TRY_WRITES]
    proc = subprocess.run(
        [*argv, str(submount / "x"), str(out / "mine.txt")], capture_output=True, text=True, timeout=60, env=environ
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"REFUSED {submount / 'x'} {errno.EROFS}", f"WROTE {out / 'mine.txt'}"]


def test_E3_a_cells_output_is_capped_and_it_still_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """E3: 500 MB of stdout made a 524 MB stdout.log; now the log keeps the cap and says what it dropped."""
    monkeypatch.setattr("torch_abi_harness.execute.api.LOG_LIMIT", 1 << 20)
    script = "import sys\nfor _ in range(8):\n    sys.stdout.write('x' * (1 << 20))\nprint('done', file=sys.stderr)"
    execution = run_process([sys.executable, "-c", script], dict(os.environ), tmp_path, 60, BOX)
    assert execution.returncode == 0
    text = execution.stdout.read_text()
    assert len(text) < (1 << 20) + 200
    assert text.endswith(f"[harness: log cut at {1 << 20} bytes; {7 << 20} more bytes dropped]\n")
    assert execution.stderr.read_text() == "done\n"
