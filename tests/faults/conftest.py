"""Fault tier: every probe of the fault catalogue injected for real (README, "Faults").

Each probe records a row of the catalogue with the `catalogue` fixture: its id, the fault, what
is expected and what the run showed. With HARNESS_FAULT_TABLE set, rows go to that file (JSON
lines); `nox -s faults` renders them as the README's table (tests/faults/table.py).

Each probe runs the harness as a user does, on a one-cell matrix (a small real stable-ABI
extension built on torch 2.13.0 for target 2.10, run on 2.13.0) with its own cache and reports
directories, breaks one thing the way a user, a crash or an adversary would, and asserts how
the run classifies it and that nothing finished is lost. A fault that must not damage what
other tests use (uv's cache, shared envs) is injected into a private copy only.
"""

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kit import harness, make_extension, start_harness

HERE = Path(__file__).parent
PASSING = """
from @NS@ import ops

def test_answer():
    assert ops.answer() == 41

def test_answer_again():
    assert ops.answer() + 1 == 42
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.faults)


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
        """`python -m harness run` on this workspace, to completion."""
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
