"""An author's own source tree, end to end: `torch-abi-harness run` where its pyproject.toml holds a
[tool.torch-abi-harness] table builds it with its own backend at the target its setup.py gives the compiler and
runs its own tests on each release the table lists; `run --wheel` does the same for a wheel built outside."""

import shutil
from pathlib import Path

from conftest import build_wheel
from kit import cells_by_id, harness, latest_results

STABLE_BASIC = Path(__file__).parents[2] / "extensions" / "stable_basic"
LEVEL_2_14 = "0x020e000000000000"
SETUP = f"""\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[
        CppExtension(
            "stable_basic._C",
            ["csrc/stable_basic.cpp"],
            extra_compile_args=["-O2", "-std=c++17", "-fvisibility=hidden", "-DTORCH_TARGET_VERSION={LEVEL_2_14}"],
            py_limited_api=True,
        )
    ],
    cmdclass={{"build_ext": BuildExtension.with_options(use_ninja=False)}},
    options={{"bdist_wheel": {{"py_limited_api": "cp39"}}}},
)
"""
TABLE = '\n[tool.torch-abi-harness]\nreleases = ["2.14.1", "2.15.0"]\n'
CELLS = ("stable_basic@b2.15.0-t2.14~r2.14.1-cpu", "stable_basic@b2.15.0-t2.14~r2.15.0-cpu")


def author_project(root: Path) -> Path:
    """stable_basic's sources, suite and package as an author keeps them: no extension.yaml, no matrix; setup.py
    states the target (2.14) itself, and its pyproject.toml holds the table."""
    for part in ("csrc", "stable_basic", "tests"):
        shutil.copytree(STABLE_BASIC / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "setup.py").write_text(SETUP)
    (root / "pyproject.toml").write_text((STABLE_BASIC / "pyproject.toml").read_text() + TABLE)
    return root


def assert_both_runtimes_pass(proc_stdout: str, reports: Path) -> dict[str, dict[str, object]]:
    cells = cells_by_id(latest_results(reports))
    assert sorted(cells) == list(CELLS), proc_stdout
    for cell_id in CELLS:
        assert (cells[cell_id]["status"], cells[cell_id]["verdict"]) == ("PASS", "kept"), proc_stdout
    assert "compatibility matrix" in proc_stdout
    assert "stable_basic@b2.15.0-t2.14 │ ✅ pass │ ✅ pass" in proc_stdout
    return cells


def test_run_in_a_source_tree_builds_it_at_its_declared_target_and_runs_its_tests(tmp_path: Path) -> None:
    project = author_project(tmp_path / "stable-basic")
    proc = harness("run", "-j", "2", cwd=project)
    assert proc.returncode == 0, proc.stdout
    assert "pyproject.toml: 1 build(s) x 2 runtime(s) -> 2 cells selected" in proc.stdout
    assert f"target 2.14: TORCH_TARGET_VERSION={LEVEL_2_14} at setup.py:" in proc.stdout
    assert "module stable_basic: [project].name 'stable-basic'" in proc.stdout
    cells = assert_both_runtimes_pass(proc.stdout, project / "reports")
    log = project / "reports" / "latest" / str(cells[CELLS[0]]["logs"]["build"])  # type: ignore[index]
    assert f"-DTORCH_TARGET_VERSION={LEVEL_2_14}" in log.read_text()  # built by its own setup.py


def test_run_wheel_tests_a_built_wheel_with_the_projects_suite(tmp_path: Path) -> None:
    project = author_project(tmp_path / "stable-basic")
    wheel = build_wheel(project, "2.15.0", "2.14", tmp_path / "dist")
    proc = harness(
        "run", "-j", "2", "--wheel", tmp_path / "dist" / "*.whl", "--reports-dir", tmp_path / "r", cwd=project
    )
    assert proc.returncode == 0, proc.stdout
    cells = assert_both_runtimes_pass(proc.stdout, tmp_path / "r")
    log = tmp_path / "r" / "latest" / str(cells[CELLS[0]]["logs"]["build"])  # type: ignore[index]
    assert log.read_text().startswith(f"prebuilt wheel {wheel} (sha256 ")
