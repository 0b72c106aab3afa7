"""argparse types: a bad value is a usage error (exit 2) that names the value, before any work starts."""

from __future__ import annotations

import argparse
import enum
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from torch_abi_harness.cli.console import notes
from torch_abi_harness.config import DEFAULT_MATRIX
from torch_abi_harness.config.defaults import default_matrix
from torch_abi_harness.core.versions import ApiLevel


class Command(Protocol):
    """Makes a command's parser (the top parser hands it to each family): with the global options after the
    command, its help as the description too, and the exit codes as the epilog."""

    def __call__(self, name: str, help: str) -> argparse.ArgumentParser: ...


K = TypeVar("K", bound=enum.StrEnum)


def one_of(kind: type[K], allowed: Sequence[K]) -> Callable[[str], K]:
    """argparse type: a member of a closed set by its value, with argparse's own words for a wrong one (an enum's
    ValueError would read "invalid Backend value")."""

    def parse(text: str) -> K:
        try:
            member = kind(text)
        except ValueError:
            member = None
        if member is None or member not in allowed:
            shown = ", ".join(repr(str(k)) for k in allowed)
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {shown})")
        return member

    return parse


def add_matrix_option(p: argparse.ArgumentParser) -> None:
    """--matrix of every command that reads one; left out, matrix_of picks the default."""
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help=f"the matrix file (default: ./{DEFAULT_MATRIX}, else the packaged default matrix and its samples)",
    )


def matrix_of(given: Path | None) -> Path:
    """--matrix as given, else the default matrix (config.defaults); the packaged one is said on stderr: no file
    of the working directory chose it."""
    if given is not None:
        return given
    path = default_matrix(Path())
    say_packaged(path)
    return path


def say_packaged(path: Path) -> None:
    """One line on stderr when the default matrix is the packaged one: no file of the working directory chose it."""
    if path != DEFAULT_MATRIX:
        notes.print(f"no {DEFAULT_MATRIX} here: running the packaged default matrix {path} and its sample extensions")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a bad value is a usage error, exit 2, before any work)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


MAX_SECONDS = 7 * 24 * 3600  # a week: more than any cell or build needs; 1e308 overflowed every deadline


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0 (0 or less would kill every cell at once), at most a week."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds greater than 0, at most {MAX_SECONDS}")
    return value


def api_level(text: str) -> ApiLevel:
    """argparse type: a target such as 2.10."""
    try:
        return ApiLevel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def existing_file(text: str) -> Path:
    """argparse type: a file that exists (a directory or a typo is a usage error, not exit 3)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text}: {'is a directory' if path.is_dir() else 'no such file'}; pass a file"
        )
    return path


def existing_dir(text: str) -> Path:
    """argparse type: a directory that exists (a typo is a usage error, not exit 3)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: {'is a file' if path.exists() else 'no such directory'}; pass a directory"
        )
    return path


def wheel_directory(text: str) -> str:
    """argparse type: a directory of wheels (--find-links)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory; pass a directory of wheels")
    return text


def torch_include(text: str) -> Path:
    """argparse type: a release's torch/include. A wrong path would make every compile probe fail,
    which reads as 'not visible when compiled' for every declaration: a false all-clear."""
    path = Path(text)
    if not (path / "torch").is_dir():
        raise argparse.ArgumentTypeError(
            f"{text}: no torch/ directory in it; pass a release's torch/include "
            "(site-packages/torch/include of an env holding that release)"
        )
    return path


def release_specifier(text: str) -> SpecifierSet:
    """--releases: a PEP 440 specifier of torch releases."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a PEP 440 version specifier such as '>=2.11,<2.16' "
            "(one release: '==2.13.0'; a series: '==2.13.*')"
        ) from None


def python_specifier(text: str) -> SpecifierSet:
    """--python: a PEP 440 specifier of CPython versions."""
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a PEP 440 version specifier such as '>=3.10' (one version: '==3.12')"
        ) from None


def wheel_variant(text: str) -> str:
    """--variant: a torch wheel's local label (cpu, cu130, rocm6.4, xpu), or auto (no label)."""
    if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9]+)*", text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch variant such as cpu, cu130 or auto")
    return text.lower()


def torch_variant(text: str) -> str:
    """--variant: a torch wheel variant as the matrix writes it (cpu, cuXYZ, rocmX.Y)."""
    if not re.fullmatch(r"cpu|cu[0-9]{2,3}|rocm[0-9.]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch variant such as cpu, cu128 or cu130")
    return text


def cpython_version(text: str) -> str:
    """--python: a CPython version X.Y, with a t when free-threaded."""
    if not re.fullmatch(r"3\.[0-9]+t?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython version such as 3.12 or 3.13t")
    return text


def listing_sources(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """--extra-index-url and --find-links of the commands that read listings themselves (`runtimes`, `check
    REQUIREMENT`): an index, a directory of wheels or a page of links, each repeatable."""
    p.add_argument("--extra-index-url", action="append", default=[], metavar="URL", help=f"another index {what}")
    p.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR|URL",
        help=f"a directory of wheels or a page of links {what}",
    )
