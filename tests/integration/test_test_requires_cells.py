"""test_requires for real: a suite written as PyTorch's extension tutorials write theirs (common_utils' TestCase,
opcheck, device-type tests, hypothesis) runs unchanged across releases with its dependencies in an overlay,
never in the shared envs; without them it is an ERROR that names the module and the fix."""

import shutil
import subprocess
from pathlib import Path

import pytest
from kit import EXAMPLES, cells_by_id, harness, latest_results
from packaging.version import Version

from torch_abi_harness.builds import IGNORED
from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.text import md_text
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources

RUNTIMES = ("2.10.0", "2.13.0", "2.15.0")
TESTS = {"passed": 9, "failed": 0, "skipped": 0, "errors": 0}  # 4 + 2 + 2 device-type + 1 hypothesis
# Planted beside the example's suite: where the overlay sits on the cell's path, and that the cell cannot change it.
OVERLAY_CHECKS = """
import os, pathlib, sys
import expecttest, torch

OVERLAY = str(pathlib.Path(expecttest.__file__).parent.parent)
ENV = str(pathlib.Path(torch.__file__).parent.parent)

def test_the_overlay_comes_after_the_envs_own_site_packages():
    assert OVERLAY != ENV and sys.path.index(OVERLAY) > sys.path.index(ENV)

def test_the_overlay_is_read_only():
    assert not os.access(OVERLAY, os.W_OK)
"""


@pytest.fixture
def tutorial(tmp_path: Path) -> Path:
    """examples/ as a user has it: muladd_ops and the matrix that runs it."""
    shutil.copytree(EXAMPLES / "muladd_ops", tmp_path / "muladd_ops", ignore=shutil.ignore_patterns(*IGNORED))
    shutil.copy(EXAMPLES / "tutorial-matrix.yaml", tmp_path / "matrix.yaml")
    return tmp_path


def declare(workspace: Path, *requirements: str) -> None:
    """Replace the example's test_requires."""
    path = workspace / "muladd_ops" / "extension.yaml"
    kept = path.read_text().split("test_requires:")[0]
    path.write_text(kept + "test_requires:\n" + "".join(f"  - {r!r}\n" for r in requirements))


def env_python(torch: str) -> Path:
    manager = EnvManager(default_cache_dir(), resolve_sources(Sources()))
    env = manager.cached(EnvSpec(Version(torch), "auto", DEFAULT_PYTHON))
    assert env is not None, f"the run made the env of torch {torch} and it is intact"
    return env.python


def test_a_tutorial_style_suite_runs_unchanged_on_every_runtime_with_its_test_requires(tutorial: Path) -> None:
    (tutorial / "muladd_ops" / "test" / "test_overlay.py").write_text(OVERLAY_CHECKS)
    proc = harness("run", "--matrix", tutorial / "matrix.yaml", "--reports-dir", "reports", cwd=tutorial)
    assert proc.returncode == 0, proc.stdout
    assert "== test deps: test_requires resolved against 3 runtime env(s)" in proc.stdout
    cells = cells_by_id(latest_results(tutorial / "reports"))
    assert set(cells) == {f"muladd_ops@b2.13.0-t2.10~r{r}-cpu" for r in RUNTIMES}
    for cell in cells.values():
        assert (cell["status"], cell["verdict"], cell["tests"]) == ("PASS", "kept", {**TESTS, "passed": 11}), cell
        junit = (tutorial / "reports" / "latest" / cell["logs"]["junit"]).read_text()
        for name in ("TestMulAddDevicesCPU", "test_matches_reference_cpu", "TestMulAddProperties", "test_opcheck"):
            assert name in junit, (name, cell["id"])
    for torch in RUNTIMES:  # the shared envs did not change: the overlay sits beside them
        python = env_python(torch)
        alone = subprocess.run([python, "-c", "import expecttest"], capture_output=True, text=True)
        assert "No module named 'expecttest'" in alone.stderr, (torch, alone.stderr)


def test_a_missing_test_dependency_is_an_error_naming_the_module_where_and_the_fix(tutorial: Path) -> None:
    declare(tutorial, "hypothesis")  # expecttest, which common_utils imports, is left out
    proc = harness("run", "--matrix", tutorial / "matrix.yaml", "-k", "r2.13.0", "--reports-dir", "r", cwd=tutorial)
    assert proc.returncode == 3, proc.stdout  # infrastructure, never a broken promise
    (cell,) = cells_by_id(latest_results(tutorial / "r")).values()
    assert (cell["status"], cell["verdict"]) == ("ERROR", "error")
    assert cell["reason"].startswith(
        "collection failed: ModuleNotFoundError: No module named 'expecttest' "
        "(torch/testing/_internal/common_utils.py, line "
    ), cell["reason"]
    assert ", imported from test/test_muladd.py, line " in cell["reason"]
    assert cell["reason"].endswith(
        "the runtime has no 'expecttest': declare what the suite needs in extension.yaml (test_requires: [expecttest])"
    )
    summary = (tutorial / "r" / "latest" / "summary.md").read_text()
    assert "No module named 'expecttest'" in summary and md_text("test_requires: [expecttest]") in summary
    assert "No module named 'expecttest'" in " ".join(proc.stdout.split())  # the terminal, however it wraps


def test_a_requirement_that_would_replace_torch_is_refused_before_any_work(tutorial: Path) -> None:
    declare(tutorial, "expecttest", "torch>=2.14")
    proc = harness("run", "--matrix", tutorial / "matrix.yaml", "-k", "r2.13.0", "--reports-dir", "r", cwd=tutorial)
    assert proc.returncode == 2, proc.stdout
    text = " ".join(proc.stdout.split())
    assert "test_requires of muladd_ops (expecttest, torch>=2.14) cannot be installed beside torch 2.13.0+cpu" in text
    assert "Because you require torch>=2.14 and torch==2.13.0+cpu" in text
    assert "== build" not in proc.stdout and not (tutorial / "r").exists()


@pytest.mark.docker
def test_the_overlay_is_mounted_read_only_in_containers(tutorial: Path, docker_host: str) -> None:
    (tutorial / "muladd_ops" / "test" / "test_overlay.py").write_text(OVERLAY_CHECKS)
    proc = harness(
        "run",
        "--backend",
        "docker",
        "--matrix",
        tutorial / "matrix.yaml",
        "-k",
        "r2.13.0",
        "--reports-dir",
        "d",
        cwd=tutorial,
    )
    assert proc.returncode == 0, proc.stdout
    (cell,) = cells_by_id(latest_results(tutorial / "d")).values()
    assert (cell["status"], cell["tests"]["passed"]) == ("PASS", TESTS["passed"] + 2), cell
    command = (tutorial / "d" / "latest" / "cells" / cell["id"] / "command.txt").read_text()
    assert "target=/opt/harness/testdeps/0,readonly" in command
    assert "HARNESS_SITE_DIRS=/opt/harness/testdeps/0" in command
