"""What a results.json names that the harness opens again, checked as it is read: a file written elsewhere, or
changed, must not lead a reader outside the run directory or the cache (`../../proc/self/environ`)."""

from __future__ import annotations

from typing import Any

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.files import run_relative
from torch_abi_harness.results.cases import PublishedBuild


def published_builds(entries: Any) -> tuple[PublishedBuild, ...]:
    """The published builds as results.json gives them, refused (bad input, naming the key) unless each filename is
    a plain file name: `census --verify` opens it in the cache, and `../` must not reach a file outside it."""
    found = []
    for index, entry in enumerate(entries):
        published = PublishedBuild.from_json(entry)
        if "/" in published.filename or not run_relative(published.filename):
            raise BadInputError(
                f"published[{index}].filename is {published.filename!r}, not a file name in the cache's wheels/ "
                "(a results.json names only the files it downloaded: this one was changed or written elsewhere)"
            )
        found.append(published)
    return tuple(found)


def own_files(cell: str, logs: Any) -> dict[str, str]:
    """A cell's logs as results.json gives them, refused (bad input, naming the cell and the field) unless each
    is a plain relative path inside the run directory: `../../proc/self/environ` must not reach a report."""
    if not isinstance(logs, dict):
        raise BadInputError(f"cell {cell!r}: logs is {type(logs).__name__}, not a mapping of names to paths")
    for name, path in logs.items():
        if not isinstance(path, str) or not run_relative(path):
            raise BadInputError(
                f"cell {cell!r}: logs.{name} is {path!r}, not a path inside the run directory "
                "(a results.json names only its own files: this one was changed or written elsewhere)"
            )
    return logs
