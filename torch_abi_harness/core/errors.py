"""One error hierarchy; the CLI turns each category into one exit code."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path

from torch_abi_harness.core.text import redact


class ExitCode(enum.IntEnum):
    OK = 0  # every promise kept
    BROKEN = 1  # a promise was broken: an extension is incompatible
    BAD_INPUT = 2  # the matrix, a selector or a requested version is wrong
    INFRASTRUCTURE = 3  # the harness or what it runs on failed
    NOTHING_PROVEN = 4  # every cell was skipped or not run: no promise was tested either way


class HarnessError(Exception):
    """Base class: a message a person can act on, and the exit code it maps to."""

    exit_code = ExitCode.INFRASTRUCTURE


class BadInputError(HarnessError):
    exit_code = ExitCode.BAD_INPUT


class ConfigError(BadInputError):
    """A matrix or extension file is invalid; carries every problem found, not only the first."""

    def __init__(self, source: Path | str, problems: Sequence[str]) -> None:
        self.source = str(source)
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"{self.source}: {len(self.problems)} {noun}:\n{lines}")


class SelectionError(BadInputError):
    """A selector matched no cell."""


class ResolutionError(BadInputError):
    """A requested torch release cannot be found in the configured package sources."""


class InfrastructureError(HarnessError):
    """Something the harness depends on failed (uv, the compiler driver, the disk...)."""


class CommandError(InfrastructureError):
    """An external command failed; says what ran, where, how it ended and what it printed."""

    def __init__(self, argv: Sequence[str], returncode: int, cwd: Path | None, output: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.cwd = cwd
        self.output = output
        tail = "\n".join(output.rstrip().splitlines()[-25:])
        line = redact(" ".join(self.argv))  # an index URL's token never reaches a message or a log
        super().__init__(f"command failed with exit code {returncode} (cwd: {cwd or '.'}):\n  $ {line}\n{redact(tail)}")
