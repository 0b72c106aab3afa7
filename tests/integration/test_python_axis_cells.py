"""Real cells on other CPythons: the abi3 wheel is promised and passes on 3.10 and 3.13, the cpXY wheel is
refused by the installer there (class python-abi), an interpreter given as a path, a missing interpreter
(exit 2), and the docker backend running another Python through the host's interpreter mounted read-only."""

from pathlib import Path
from typing import Any

import pytest
from kit import cells_by_id, harness, latest_results

from torch_abi_harness.provision import interpreters

REPO = Path(__file__).resolve().parents[2]
BUILDS = """\
  - {extension: stable_basic, torch: 2.15.0, target: "2.9"}
  - {extension: cp_specific, torch: 2.15.0, target: "2.9"}
"""
ABI3, CPXY = "stable_basic@b2.15.0-t2.9", "cp_specific@b2.15.0-t2.9"


def write_matrix(root: Path, runtimes: str, builds: str = BUILDS) -> Path:
    extensions = "".join(f"  - path: {REPO / 'extensions' / name}\n" for name in ("stable_basic", "cp_specific"))
    path = root / "matrix.yaml"
    path.write_text(
        f'schema_version: 1\npython: "3.11"\nextensions:\n{extensions}runtimes:\n{runtimes}builds:\n{builds}'
    )
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch 2.12.1 on 3.11 (the matrix's python), 3.10 (by version) and 3.13 (by its interpreter's path)."""
    root = tmp_path_factory.mktemp("python-axis")
    python313 = interpreters.find("3.13").path
    write_matrix(root, f'  - torch: 2.12.1\n    python: ["3.11", "3.10", {str(python313)!r}]\n')
    return root


def check_the_python_axis(cells: dict[str, dict[str, Any]]) -> None:
    assert set(cells) == {f"{b}~r2.12.1-cpu{p}" for b in (ABI3, CPXY) for p in ("", "-py3.10", "-py3.13")}
    for suffix, python in (("", "3.11"), ("-py3.10", "3.10"), ("-py3.13", "3.13")):
        abi3 = cells[f"{ABI3}~r2.12.1-cpu{suffix}"]
        assert (abi3["status"], abi3["verdict"]) == ("PASS", "kept"), abi3
        assert abi3["runtime"]["python"] == python and abi3["build"]["python"] == "3.11"
        assert abi3["findings"] == []
    assert cells[f"{CPXY}~r2.12.1-cpu"]["verdict"] == "kept"
    for suffix, python in (("-py3.10", "3.10"), ("-py3.13", "3.13")):
        cell = cells[f"{CPXY}~r2.12.1-cpu{suffix}"]
        assert (cell["status"], cell["verdict"], cell["expected_class"]) == (
            "LOAD_FAILED",
            "expected_failure",
            "python-abi",
        ), cell
        assert cell["expected_why"] == f"a cp311-cp311 wheel fits CPython 3.11 only; the runtime runs CPython {python}"
        assert cell["reason"].startswith(f"not installable on CPython {python}: ")
        assert "; uv refuses it (" in cell["reason"] and f"cp{python.replace('.', '')}" in cell["reason"]
        assert cell["prediction"]["outcome"] == "load_failed" and cell["findings"] == []


def test_abi3_passes_and_cpxy_is_refused_on_other_pythons(workspace: Path) -> None:
    result = harness("run", "--reports-dir", "venv", cwd=workspace)
    assert result.returncode == 0, result.stdout
    check_the_python_axis(cells_by_id(latest_results(workspace / "venv")))
    assert "python-abi" in (workspace / "venv" / "latest" / "summary.md").read_text()


def test_a_missing_interpreter_is_bad_input_naming_those_found(tmp_path: Path) -> None:
    write_matrix(tmp_path, '  - torch: 2.12.1\n    python: "3.99"\n')
    result = harness("run", "--reports-dir", "reports", cwd=tmp_path, timeout=600)
    assert result.returncode == 2, result.stdout
    assert "no CPython 3.99 interpreter found; found:" in result.stdout
    assert "3.10 (3.10." in result.stdout and "3.13 (3.13." in result.stdout
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


@pytest.mark.docker
def test_docker_runs_other_pythons_through_the_host_interpreter(workspace: Path, docker_host: str) -> None:
    result = harness("run", "--backend", "docker", "--reports-dir", "docker", cwd=workspace)
    assert result.returncode == 0, result.stdout
    cells = cells_by_id(latest_results(workspace / "docker"))
    check_the_python_axis(cells)
    command = (workspace / "docker" / "latest" / "cells" / f"{ABI3}~r2.12.1-cpu-py3.10" / "command.txt").read_text()
    prefix = interpreters.find("3.10").prefix
    assert f"source={prefix},target=/opt/harness/python,readonly" in command


@pytest.mark.docker
def test_the_baked_route_refuses_another_python_with_the_reason(workspace: Path, docker_host: str) -> None:
    result = harness("run", "--backend", "docker", "--docker-route", "baked", "--reports-dir", "baked", cwd=workspace)
    assert result.returncode == 2, result.stdout
    assert "the baked route makes each env with the image's python" in result.stdout
