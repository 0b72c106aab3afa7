"""What the integration and fault tiers share: running the harness as a user does, reading its
results, and small real stable-ABI extensions made on the fly."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).parents[1] / "examples"


def harness(
    *args: str | Path, cwd: Path, timeout: float = 3000, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", *map(str, args)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
    )


def start_harness(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, session: bool = False
) -> subprocess.Popen[str]:
    """The harness in the background, with SIGINT at its default even when this test run ignores it
    (a shell's background job does): Python then turns it into KeyboardInterrupt, as for a user.
    session=True makes it the leader of its own process group, as a terminal's job is, so a test
    can send a signal to the whole group the way Ctrl-C does."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch_abi_harness", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=session,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def harness_at_once(
    *runs: tuple[str | Path, ...], cwd: Path, timeout: float = 3000
) -> list[subprocess.CompletedProcess[str]]:
    """Several harness runs started together and waited for, in order: what `harness` gives for each, in the wall
    time of the slowest. For independent runs a test compares (two backends, two executors): their builds are
    content-addressed and locked in the shared cache, so one makes a build while the other waits for it."""
    procs = [
        ([sys.executable, "-m", "torch_abi_harness", *map(str, args)], start_harness(*args, cwd=cwd)) for args in runs
    ]
    done = []
    try:
        for argv, proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(argv, proc.returncode, out))
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return done


def latest_results(reports: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((reports / "latest" / "results.json").read_text())
    return data


def cells_by_id(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in results["cells"]}


CPP = """\
#include <torch/csrc/stable/library.h>
#include <cstdint>

void boxed_crash(StableIValue*, uint64_t, uint64_t) {
  volatile int* nowhere = nullptr;
  *nowhere = 42;  // a real segmentation fault inside the extension
}

void boxed_spin(StableIValue*, uint64_t, uint64_t) {
  volatile uint64_t n = 0;
  while (true) { n = n + 1; }  // never returns
}

void boxed_answer(StableIValue* stack, uint64_t, uint64_t) {
  int64_t answer = 41;  // the tests expect 42: a real, failing assertion
  std::memcpy(&stack[0], &answer, sizeof(answer));
}

STABLE_TORCH_LIBRARY(@NS@, m) {
  m.def("crash() -> ()");
  m.def("spin() -> ()");
  m.def("answer() -> int");
}

STABLE_TORCH_LIBRARY_IMPL(@NS@, CompositeExplicitAutograd, m) {
  m.impl("crash", &boxed_crash);
  m.impl("spin", &boxed_spin);
  m.impl("answer", &boxed_answer);
}
"""

SETUP = """\
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

EXTRA = ["-std=c++17", "-include", "cstring"]
if os.environ.get("TORCH_TARGET_VERSION"):
    EXTRA.append("-DTORCH_TARGET_VERSION=" + os.environ["TORCH_TARGET_VERSION"])

setup(
    name="@NS@",
    version="0.0.1",
    packages=["@NS@"],
    ext_modules=[CppExtension("@NS@._C", ["csrc/ops.cpp"], extra_compile_args=EXTRA, py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
"""

INIT = """\
from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).parent.glob("_C*.so"))))
ops = torch.ops.@NS@
"""


def make_extension(root: Path, name: str, test_source: str | None, cpp: str = CPP, min_target: str = "2.10") -> Path:
    """A small real stable-ABI extension (by default with ops that crash, hang or answer wrongly)."""
    ext = root / name
    (ext / "csrc").mkdir(parents=True)
    (ext / name).mkdir()
    (ext / "tests").mkdir()
    (ext / "csrc" / "ops.cpp").write_text(cpp.replace("@NS@", name))
    (ext / "setup.py").write_text(SETUP.replace("@NS@", name))
    (ext / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "torch"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (ext / name / "__init__.py").write_text(INIT.replace("@NS@", name))
    (ext / "extension.yaml").write_text(
        f"name: {name}\nmodule: {name}\nmin_target: '{min_target}'\nrecipe: pep517\ntests: tests\n"
    )
    if test_source is not None:
        (ext / "tests" / f"test_{name}.py").write_text(textwrap.dedent(test_source).replace("@NS@", name))
    return ext


def own_inode(path: Path) -> None:
    """path (a file of a `cp -al` copy of an env) made a file of its own, same bytes and mtime: what is then
    written into it in place reaches neither the shared env nor uv's cache."""
    data, before = path.read_bytes(), path.stat()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def wait_for(predicate: Any, what: str, timeout: float = 300) -> None:
    """Poll predicate() every 50 ms until it is true; AssertionError naming what never happened after timeout s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def processes_mentioning(marker: str) -> list[str]:
    """Live processes (other than this one) whose command line or environment mentions marker: what a
    run left behind. Zombies are dead and ignored."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline or marker in environ:
            found.append(f"{entry.name}: {cmdline.strip()[:200]}")
    return found


def processes_left(*markers: str, grace: float = 5.0) -> list[str]:
    """What processes_mentioning() finds for any of markers once a run has ended: polled until none is left, at
    most grace seconds. A process the run killed can take a moment to go (its exit, its parent reaping it) on a
    busy machine; one left behind is there still after the grace (a fixed sleep raced the first and hid nothing)."""
    deadline = time.monotonic() + grace
    while True:
        left = [p for marker in markers for p in processes_mentioning(marker)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _argv(pid: int | str) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def forkservers(marker: str) -> list[int]:
    """The forkservers of a run: python processes running the server whose parent is not one (a forked
    cell has the same command line as its server, the run dir in it)."""
    found = []
    for line in processes_mentioning(marker):
        pid = int(line.split(":")[0])
        if any(b"harness_forkserver.main()" in arg for arg in _argv(pid)[1:3]):
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            if not any(b"harness_forkserver.main()" in arg for arg in _argv(parent)[1:3]):
                found.append(pid)
    return found


def observed(result: subprocess.CompletedProcess[str], cell: dict[str, Any] | None = None) -> str:
    """What a run showed, for the table: its exit code and the cell's status, verdict and reason."""
    text = f"exit {result.returncode}"
    if cell is not None:
        text += f"; {cell['status']} ({cell['verdict']}): {cell['reason']}"
    return text


def harness_in_mount_namespace(
    setup: str, *args: str | Path, cwd: Path, env: dict[str, str], after: str = ""
) -> subprocess.CompletedProcess[str]:
    """The harness in a private mount namespace whose mounts `setup` (shell) changes first: a full or
    read-only filesystem for this run alone, gone with it. `after` runs in the namespace once the
    harness exits ($rc holds its exit code; the script exits with it)."""
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
    script = f'{setup} || exit 99; "$@"; rc=$?; echo "harness exit $rc"; {after or ":"}; exit $rc'
    return subprocess.run(
        [*unshare, "sh", "-c", script, "sh", sys.executable, "-m", "torch_abi_harness", *map(str, args)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=1200,
    )


def harness_containers(host: str) -> list[str]:
    """Every container the harness made that still exists (running or not)."""
    import docker

    client = docker.DockerClient(base_url=host, timeout=30)
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": "torch-abi-harness.pid"})]
    finally:
        client.close()


PASSING = """
from @NS@ import ops

def test_answer():
    assert ops.answer() == 41

def test_answer_again():
    assert ops.answer() + 1 == 42
"""


@dataclasses.dataclass
class Workspace:
    """A matrix, its extensions, and private cache and reports directories."""

    root: Path
    cache: Path
    reports: Path
    env: dict[str, str]

    @property
    def matrix(self) -> Path:
        return self.root / "matrix.yaml"

    def add_extension(self, name: str, tests: str | None = PASSING, **kwargs: Any) -> Path:
        return make_extension(self.root / "extensions", name, tests, **kwargs)

    def write_matrix(self, builds: str, runtimes: str = "  - torch: 2.13.0\n", extra: str = "") -> None:
        self.matrix.write_text(f"schema_version: 1\n{extra}runtimes:\n{runtimes}builds:\n{builds}")

    def args(self, *more: str | Path) -> list[str | Path]:
        return ["run", "--matrix", self.matrix, "--cache-dir", self.cache, "--reports-dir", self.reports, *more]

    def run(self, *more: str | Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        """`python -m torch_abi_harness run` on this workspace, to completion."""
        return harness(*self.args(*more), cwd=self.root, timeout=timeout, env=self.env)

    def start(self, *more: str | Path, session: bool = True) -> subprocess.Popen[str]:
        """The same in the background, leading its own process group (as a terminal's job does),
        e.g. to interrupt it."""
        return start_harness(*self.args(*more), cwd=self.root, env=self.env, session=session)

    def results(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.reports / "latest" / "results.json").read_text())
        return data

    def cells(self) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in self.results()["cells"]}

    def only_cell(self) -> dict[str, Any]:
        (cell,) = self.results()["cells"]
        return dict(cell)

    def builds(self) -> list[Path]:
        """The build directories in this workspace's cache (one per build, keyed by content)."""
        return sorted(p for p in (self.cache / "builds").iterdir() if p.is_dir() and not p.name.startswith("tmp"))

    def env_dir(self, torch: str = "2.13.0") -> Path:
        (found,) = (p for p in (self.cache / "envs").glob(f"torch-{torch}-*") if p.is_dir())
        return found
