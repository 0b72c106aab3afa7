"""The build's one hook: the default matrix (matrix.yaml) and the sample extensions it runs (extensions/) ship in the
wheel as package data of `torch_abi_harness.samples`, from where they lie in the repository (the layout is fixed:
tests, CI and the docs name the top-level files). Everything else is in pyproject.toml.

Both the sdist and the wheel take the files from here: setuptools' sdist adds every package-data file that build_py
lists, so the sdist holds matrix.yaml and extensions/ at its root and a wheel built from it finds them there again.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SAMPLES_PACKAGE = "torch_abi_harness.samples"
# What a local build or test run leaves in an extension's folder (plan.BUILD_OUTPUTS, which the build cache's digest
# leaves out too: the packaged samples digest as a clean checkout's do, so their builds are shared).
LEFT_OUT = (
    "__pycache__", "build", "dist", "*.egg-info", "*.so", "*.pyc", ".pytest_cache",
    ".git", ".nox", ".tox", ".venv", ".mypy_cache", ".ruff_cache", "reports",
)  # fmt: skip


def sample_files(root: Path) -> list[str]:
    """matrix.yaml and every file under extensions/ but build outputs, as paths relative to root, sorted."""
    if not (root / "matrix.yaml").is_file():
        raise FileNotFoundError(f"{root / 'matrix.yaml'} is missing: the default matrix must ship with the package")
    found = ["matrix.yaml"]
    for folder, dirs, files in os.walk(root / "extensions"):
        dirs[:] = sorted(d for d in dirs if not _left_out(d))
        found += [os.path.relpath(Path(folder, f), root) for f in sorted(files) if not _left_out(f)]
    return found


def _left_out(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in LEFT_OUT)


class BuildPyWithSamples(build_py):
    """build_py whose package data also lists the samples, copied into torch_abi_harness/samples/."""

    def _samples(self) -> tuple[str, str, str, list[str]]:
        build_dir = os.path.join(self.build_lib, *SAMPLES_PACKAGE.split("."))
        return SAMPLES_PACKAGE, os.curdir, build_dir, sample_files(Path(os.curdir))

    def _get_data_files(self):
        return [*super()._get_data_files(), self._samples()]

    def get_data_files_without_manifest(self):
        return [*super().get_data_files_without_manifest(), self._samples()]


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildPyWithSamples})
