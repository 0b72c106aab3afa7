"""Fault tier: every probe of the fault catalogue injected for real (docs/reference/faults.md).

Each probe records a row of the catalogue with the `catalogue` fixture: its id, the fault, what
is expected and what the run showed. With HARNESS_FAULT_TABLE set, rows go to that file (JSON
lines); `nox -s faults` renders them as the fault table (tests/faults/table.py, docs/results/fault-table.md).

Each probe runs the harness as a user does, on a one-cell matrix (a small real stable-ABI
extension built on torch 2.13.0 for target 2.10, run on 2.13.0) with its own cache and reports
directories, breaks one thing the way a user, a crash or an adversary would, and asserts how
the run classifies it and that nothing finished is lost. A fault that must not damage what
other tests use (uv's cache, shared envs) is injected into a private copy only.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from kit import Workspace

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
