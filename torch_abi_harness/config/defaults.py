"""Which configuration a command runs when it is not told: the one home of that decision.

`--matrix FILE` names a matrix; `--project DIR` or `--wheel` an author's project. Without them, an author's table
in the current directory (pyproject.toml's [tool.torch-abi-harness], or torch-abi.toml) wins over ./matrix.yaml,
so that `torch-abi-harness run` in an extension's source tree runs that extension.
Without any of them, ./matrix.yaml; and where there is none, the default matrix and the sample extensions an
installed wheel carries as package data (`torch_abi_harness/samples/`, put there by setup.py from the repository's
matrix.yaml and extensions/), so `torch-abi-harness run` works from any directory.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from torch_abi_harness.config import DEFAULT_MATRIX
from torch_abi_harness.config.author import find_author_file
from torch_abi_harness.core.errors import BadInputError

PACKAGE = Path(__file__).resolve().parents[1]  # torch_abi_harness/, wherever it is installed


class ConfigKind(enum.StrEnum):
    MATRIX = "matrix"  # a matrix file (matrix.yaml's format)
    AUTHOR = "author"  # an extension's own project: its [tool.torch-abi-harness] table or torch-abi.toml


@dataclasses.dataclass(frozen=True)
class ConfigSource:
    """What a command reads: a matrix file, or an author's project directory."""

    kind: ConfigKind
    path: Path


def default_matrix_source(
    cwd: Path, matrix: Path | None = None, project: Path | None = None, wheel: Path | None = None
) -> ConfigSource:
    """--matrix, else --project (or --wheel: the project is cwd), else an author's table in cwd, else
    ./matrix.yaml, else the packaged default (default_matrix). A matrix with a project or a wheel is a
    contradiction, refused."""
    if matrix is not None:
        if project is not None or wheel is not None:
            given = "--project" if project is not None else "--wheel"
            raise BadInputError(
                f"--matrix names a matrix file and {given} an extension's own project: give one of them "
                "(a prebuilt wheel in a matrix is an extension with `recipe: wheel`)"
            )
        return ConfigSource(ConfigKind.MATRIX, matrix)
    if project is not None or wheel is not None:
        return ConfigSource(ConfigKind.AUTHOR, project or cwd)
    if find_author_file(cwd) is not None:
        return ConfigSource(ConfigKind.AUTHOR, cwd)
    return ConfigSource(ConfigKind.MATRIX, default_matrix(cwd))


def packaged_samples() -> Path | None:
    """The folder holding the packaged default matrix beside its extensions/: `samples/` inside an installed wheel;
    in an editable install the checkout's root, whose files the wheel packages (None when neither is there)."""
    for folder in (PACKAGE / "samples", PACKAGE.parent):
        if (folder / DEFAULT_MATRIX).is_file() and (folder / "extensions").is_dir():
            return folder
    return None


def default_matrix(cwd: Path) -> Path:
    """The matrix a command runs without --matrix: cwd's matrix.yaml when there is one, else the packaged default.
    Neither there: cwd's matrix.yaml still, so that reading it says the file is missing and where."""
    here = cwd / DEFAULT_MATRIX
    samples = None if here.is_file() else packaged_samples()
    return here if samples is None else samples / DEFAULT_MATRIX
