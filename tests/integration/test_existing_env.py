"""`run --use-env`: an environment made by hand (not by the harness) builds and runs the cells of its torch with
uv offline (nothing fetched), and is not written to; one that serves nothing of the plan is exit 2."""

import os
import subprocess
from pathlib import Path

import pytest
from kit import cells_by_id, harness, latest_results

from torch_abi_harness.config import Sources
from torch_abi_harness.provision.sources import resolve_sources, uv_binary

REPO = Path(__file__).resolve().parents[2]


def matrix(root: Path, python: str) -> Path:
    path = root / "matrix.yaml"
    path.write_text(
        f'schema_version: 1\npython: "{python}"\n'
        f"extensions:\n  - path: {REPO / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - {torch: 2.13.0, variant: cpu}\n"
        'builds:\n  - {extension: stable_basic, torch: 2.13.0, target: "2.10"}\n'
    )
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory of root: (size, mtime_ns)."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in [root, *root.rglob("*")]}


@pytest.fixture(scope="module")
def byo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch 2.13.0+cpu with the runner requirements, in a venv uv made outside the harness (its cache warm: ~5 s)."""
    env = tmp_path_factory.mktemp("byo") / "env"
    subprocess.run([uv_binary(), "venv", "--quiet", "--python", "3.11", env], check=True)
    sources = resolve_sources(Sources()).uv_args()
    install = [uv_binary(), "pip", "install", "--quiet", "--python", env / "bin" / "python", *sources]
    subprocess.run([*install, "torch==2.13.0+cpu", "numpy", "pytest", "setuptools", "wheel"], check=True)
    return env


def test_an_existing_env_builds_and_runs_offline_and_stays_as_it_was(byo: Path, tmp_path: Path) -> None:
    before = snapshot(byo)
    offline = {**os.environ, "UV_OFFLINE": "1", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    args = ("--matrix", matrix(tmp_path, "3.11"), "--use-env", byo / "bin" / "python", "--reports-dir", tmp_path / "r")
    proc = harness("run", *args, "-j", "1", cwd=tmp_path, env=offline)
    assert proc.returncode == 0, proc.stdout
    assert f"the existing env {byo / 'bin' / 'python'}" in proc.stdout
    cell = cells_by_id(latest_results(tmp_path / "r"))["stable_basic@b2.13.0-t2.10~r2.13.0+cpu-cpu"]
    assert (cell["status"], cell["verdict"]) == ("PASS", "kept"), cell
    assert snapshot(byo) == before
    assert not list((tmp_path / "cache" / "envs").glob("torch-*"))  # no env was made


def test_an_existing_env_that_serves_nothing_is_exit_2(byo: Path, tmp_path: Path) -> None:
    python = byo / "bin" / "python"
    proc = harness("plan", "--matrix", matrix(tmp_path, "3.12"), "--use-env", python, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert f"{python} (torch 2.13.0+cpu, python 3.11" in proc.stdout
    assert "serves no build or runtime of the plan" in proc.stdout
    assert "torch 2.13.0 variant cpu python 3.12: python 3.11, not 3.12" in proc.stdout
