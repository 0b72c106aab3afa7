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
its env without damaging it uses `copied_env`: a copy of that env with files of its own.
"""

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from kit import Workspace
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources

HERE = Path(__file__).parent


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
    ws.write_matrix("  - extension: probe_ext\n    torch: 2.13.0\n    target: '2.10'\n")
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
def copied_env(workspace: Workspace, shared_env: Path) -> Path:
    """workspace's private cache holding a copy of the shared torch 2.13.0 env (new inodes: nothing done to
    it reaches the shared env or uv's cache). Its first run hashes its files once (their stamps moved)."""
    target = workspace.cache / "envs" / shared_env.name
    target.parent.mkdir(parents=True)
    # Its use lock held shared, as a run using the env holds it: no run repairs the env while it is copied (a
    # repair takes that lock exclusively), and the runs of other tests that use it go on (its make lock, held
    # for the copy's minute on a busy disk, stopped every run needing torch 2.13.0).
    with open(shared_env.with_name(f"{shared_env.name}.use"), "a+") as use:
        fcntl.flock(use, fcntl.LOCK_SH)
        shutil.copytree(shared_env, target, symlinks=True)
    return target
