"""Which matrix a command runs when none is named: the one decision, in one place.

A checkout (or a user's own folder) holds a matrix.yaml and it wins; an installed wheel carries the default matrix
and the sample extensions it runs as package data (`torch_abi_harness/samples/`, put there by setup.py from the
repository's matrix.yaml and extensions/), so `torch-abi-harness run` works from any directory.
"""

from __future__ import annotations

from pathlib import Path

from torch_abi_harness.config import DEFAULT_MATRIX

PACKAGE = Path(__file__).resolve().parents[1]  # torch_abi_harness/, wherever it is installed


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
    if here.is_file():
        return here
    samples = packaged_samples()
    if samples is None:
        return here
    return samples / DEFAULT_MATRIX
