"""Bad input in an author's own project (`[tool.torch-abi-harness]`, `run --wheel`): refused with exit 2 naming the
key or the option and what to write, before any work (no env made, nothing built: the cache stays empty)."""

import subprocess
from pathlib import Path

from kit import Workspace, harness, observed

SETUP = 'flags = ["-DTORCH_TARGET_VERSION=0x020a000000000000"]\n'


def author_project(workspace: Workspace, table: str, setup: str = SETUP) -> Path:
    """A source tree with a pyproject.toml holding the table, next to the workspace's matrix.yaml (which it beats)."""
    root = workspace.root
    (root / "pyproject.toml").write_text(f'[project]\nname = "probe-ext"\n\n[tool.torch-abi-harness]\n{table}')
    (root / "setup.py").write_text(setup)
    (root / "probe_ext").mkdir(exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    return root


def run_here(workspace: Workspace, *more: str | Path) -> subprocess.CompletedProcess[str]:
    args = ("run", "--cache-dir", workspace.cache, "--reports-dir", workspace.reports, *more)
    return harness(*args, cwd=workspace.root, timeout=300, env=workspace.env)


def refused(workspace: Workspace, catalogue, probe: str, fault: str, *named: str, more: tuple[str, ...] = ()) -> None:
    result = run_here(workspace, *more)
    no_work = not (workspace.cache / "envs").exists() and not (workspace.cache / "builds").exists()
    catalogue(probe, fault, "exit 2 naming the key and what to write, before any work", f"{observed(result)}; "
              f"no work: {no_work}")  # fmt: skip
    assert result.returncode == 2, result.stdout
    for text in named:
        assert text in result.stdout, result.stdout
    assert "internal error" not in result.stdout
    assert no_work


def test_A40_an_author_table_with_a_misspelt_key_is_refused_naming_it(workspace, catalogue) -> None:
    author_project(workspace, 'releses = ["2.13.0"]\n')
    refused(
        workspace, catalogue, "A40", "[tool.torch-abi-harness] beside matrix.yaml, a key misspelt (`releses`)",
        "tool.torch-abi-harness.releses: unknown key 'releses'", "did you mean 'releases'?",
    )  # fmt: skip


def test_A41_two_targets_in_the_sources_are_refused_naming_both_places(workspace, catalogue) -> None:
    project = author_project(workspace, "")
    (project / "probe_ext" / "ops.h").write_text("#define TORCH_TARGET_VERSION 0x020d000000000000\n")
    refused(
        workspace, catalogue, "A41", "setup.py targets 2.10, a header 2.13: no `target` in the table",
        "tool.torch-abi-harness.target: the sources give more than one TORCH_TARGET_VERSION",
        "at setup.py:1", "at probe_ext/ops.h:1",
    )  # fmt: skip


def test_A42_a_wheel_that_is_no_zip_is_refused_naming_the_option(workspace, catalogue) -> None:
    author_project(workspace, 'releases = ["2.13.0"]\n')
    wheel = workspace.root / "dist" / "probe_ext-1.0-cp39-abi3-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")  # a pointer file, not the wheel
    refused(
        workspace, catalogue, "A42", "run --wheel given a pointer file named like a wheel",
        "--wheel: ", "is not a wheel: not a zip archive", more=("--wheel", "dist/*.whl"),
    )  # fmt: skip
