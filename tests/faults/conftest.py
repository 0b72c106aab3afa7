"""Fault tier: every probe of the fault catalogue injected for real (docs/reference/faults.md).

Each probe records a row of the catalogue with the `catalogue` fixture: its id, the fault, what
is expected and what the run showed. With HARNESS_FAULT_TABLE set, rows go to that file (JSON
lines); `nox -s faults` renders them as the fault table (tests/faults/table.py, docs/results/fault-table.md).

Each probe runs the harness as a user does, on a one-cell matrix (a small real stable-ABI
extension built on torch 2.13.0 for target 2.10, run on 2.13.0) with its own cache and reports
directories, breaks one thing the way a user, a crash or an adversary would, and asserts how
the run classifies it and that nothing finished is lost. A fault that must not damage what
other tests use (uv's cache, shared envs) is injected into a private copy only.

A probe whose subject is not the cache works in the shared cache (`shared_cache`), as the
integration tier does: its env and builds are made once and reused by every later probe and run.
A probe of the build cache whose subject is not its env uses `linked_env`: the shared torch 2.13.0
env linked into its private cache. Either saves making an env (30 to 60 s of uv and bytecode
compiling per probe) and deleting it after (as long again on a busy disk). A probe that changes
its env uses `hardlinked_env`: a `cp -al` copy of that env (its own directories, the shared files;
a file it damages in place it first gives an inode of its own). A probe
with a private cache whose first run only has to pass before it breaks something else (the env, the
cached build in place) uses `cached_build`: a copy of the shared cache's build of probe_ext, which
that run finds cached instead of compiling (10 to 20 s of c++ per probe).
"""

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from kit import Workspace, harness
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.locks import locked
from torch_abi_harness.provision.sources import resolve_sources

HERE = Path(__file__).parent
PROBE_BUILD = "  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n"  # the workspace's one build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def catalogue(request: pytest.FixtureRequest) -> Callable[..., None]:
    """record(probe, fault, expected, observed): one row of the fault table, as this test saw it."""

    def record(probe: str, fault: str, expected: str, observed: str) -> None:
        target = os.environ.get("HARNESS_FAULT_TABLE")
        if not target:
            return
        row = {"probe": probe, "fault": fault, "expected": expected, "observed": observed, "test": request.node.nodeid}
        with open(target, "a") as handle:  # one short line per write: appends from xdist workers do not interleave
            handle.write(json.dumps(row) + "\n")

    return record


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """One extension ('probe_ext', two passing tests), one build (2.13.0, target 2.10), one runtime (2.13.0)."""
    ws = Workspace(tmp_path, tmp_path / "cache", tmp_path / "reports", dict(os.environ))
    ws.add_extension("probe_ext")
    ws.write_matrix(PROBE_BUILD)
    return ws


@pytest.fixture
def private_uv_cache(workspace: Workspace, tmp_path: Path) -> Path:
    """uv's cache for this workspace alone: env files are hardlinks into uv's cache, so a probe that
    writes into an env in place must not reach the cache every other test and user shares."""
    path = tmp_path / "uv-cache"
    workspace.env["UV_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def shared_env() -> Path:
    """The shared cache's torch 2.13.0 env, the one the workspace's matrix asks for: made there once if
    missing (every xdist worker waits on its lock and then reuses it), checked against its fingerprint."""
    spec = EnvSpec(Version("2.13.0"), "auto", DEFAULT_PYTHON)
    return EnvManager(default_cache_dir(), resolve_sources(Sources())).ensure(spec).path


@pytest.fixture
def linked_env(workspace: Workspace, shared_env: Path) -> Path:
    """workspace's private cache with the shared torch 2.13.0 env linked in (a symlink), for a probe that
    never writes into its env: its runs reuse that env as every integration test does, and its
    teardown removes a link instead of 1 GB of files. Probes that damage or delete env files make
    their own env (or copy one): never this one."""
    link = workspace.cache / "envs" / shared_env.name
    link.parent.mkdir(parents=True)
    link.symlink_to(shared_env, target_is_directory=True)
    return link


@pytest.fixture
def shared_cache(workspace: Workspace) -> Path:
    """workspace's runs use the shared cache (envs and builds, content-addressed and locked) instead of a
    private one: for a probe of a cell, a run or its reports, never of the cache itself."""
    workspace.cache = default_cache_dir()
    return workspace.cache


@pytest.fixture
def hardlinked_env(workspace: Workspace, shared_env: Path) -> Path:
    """workspace's private cache holding a hardlinked copy (`cp -al`: seconds, where a copy of 1 GB took a minute on
    a busy disk) of the shared torch 2.13.0 env: directories of its own, so a file created, deleted or renamed
    there (a rebuild removes them all) changes the copy alone; files that are the shared env's inodes, so a probe
    that writes into one in place first gives it an inode of its own (`own_inode`). Its first run hashes its
    files once (the links moved their ctime)."""
    target = workspace.cache / "envs" / shared_env.name
    target.parent.mkdir(parents=True)
    # Its use lock held shared, as a run using the env holds it: no run repairs the env while it is linked (a
    # repair takes that lock exclusively), and the runs of other tests that use it go on.
    with open(shared_env.with_name(f"{shared_env.name}.use"), "a+") as use:
        fcntl.flock(use, fcntl.LOCK_SH)
        subprocess.run(["cp", "-al", shared_env, target], check=True)
    return target


@pytest.fixture(scope="session")
def shared_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared cache's build of the workspace's probe_ext (torch 2.13.0, target 2.10): made there once if
    missing by `build` (a CI graph's build job, cached and locked as a run's build is), its folder named by the
    key that build handed on (a key of the extension's content: the workspace's probe_ext has the same)."""
    root = tmp_path_factory.mktemp("shared-build")
    ws = Workspace(root, default_cache_dir(), root / "reports", dict(os.environ))
    ws.add_extension("probe_ext")
    ws.write_matrix(PROBE_BUILD)
    out = root / "out"
    made = harness("build", "--matrix", ws.matrix, "--torch", "2.13.0", "--out", out, "--cache-dir", ws.cache, cwd=root)
    assert made.returncode == 0, made.stdout
    (handoff,) = out.glob("probe_ext@*/handoff.json")
    key = json.loads(handoff.read_text())["key"]
    return ws.cache / "builds" / f"{handoff.parent.name}-{key[:16]}"


@pytest.fixture
def cached_build(workspace: Workspace, shared_build: Path) -> Path:
    """workspace's private cache holding a copy of the shared build of probe_ext (new inodes, 300 kB: a probe
    that damages it in place reaches nothing shared), for a probe whose subject is not that first build: its
    first run finds it cached (verified against its digests, as any cached build) instead of compiling it."""
    target = workspace.cache / "builds" / shared_build.name
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(shared_build.with_name(f"{shared_build.name}.lock")):  # as a run holds it while it builds
        shutil.copytree(shared_build, target, symlinks=True)
    return target
