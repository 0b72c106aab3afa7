"""CPython interpreters for the environments: found the way uv finds them, plus pyenv's, or given as a path.

A matrix names a Python as a version (``"3.10"``, ``"3.13t"`` for free-threaded) or as the path of
an interpreter. A version is looked up among the interpreters uv knows without downloading any
(its managed installations and those on PATH, in uv's order of preference), then among pyenv's
versions (``$PYENV_ROOT/versions/*``: pyenv's shims do not answer for a version that is not
selected, so uv cannot use them), then downloaded by ``uv python install`` unless uv's setting forbids
downloads. A path is asked what it is. Nothing is looked up until an
environment is made, so planning a matrix needs no interpreter; a missing one is a BadInputError
that lists every interpreter found.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from torch_abi_harness.config import is_path
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.provision.sources import uv_binary

log = logging.getLogger(__name__)

VERSION = re.compile(r"^3\.(\d+)(t?)$")  # what a matrix may name: 3.10, 3.13t
PYENV_VERSION_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)(t?)$")  # pyenv's CPython directories: 3.10.13, 3.13.0t
INSPECT = (
    "import json, sys, sysconfig; print(json.dumps({'implementation': sys.implementation.name, "
    "'version': '%d.%d.%d' % sys.version_info[:3], "
    "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), 'prefix': sys.base_prefix}))"
)


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """A CPython found on this machine: where it is and what it runs."""

    path: Path
    version: str  # 3.10.13
    free_threaded: bool = False
    origin: str = "uv"  # how it was found: uv (managed or on PATH), pyenv, path (given in the matrix)
    prefix: Path | None = None  # sys.base_prefix, when it was asked

    @property
    def minor(self) -> str:
        """What a matrix calls it: 3.10, or 3.13t when free-threaded."""
        major, minor, _ = self.version.split(".", 2)
        return f"{major}.{minor}{'t' if self.free_threaded else ''}"

    def describe(self) -> str:
        return f"{self.minor} ({self.version}, {self.origin}: {self.path})"


def inspect(path: Path | str, origin: str = "path") -> Interpreter:
    """Ask an interpreter what it is; BadInputError when it does not run or is not CPython."""
    file = Path(path).expanduser()
    try:
        proc = subprocess.run([str(file), "-c", INSPECT], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInputError(f"python {str(path)!r}: cannot run it ({exc})") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BadInputError(f"python {str(path)!r}: exit {proc.returncode} when asked its version: {tail[0]}")
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BadInputError(f"python {str(path)!r}: did not say what it is ({proc.stdout[:200]!r})") from exc
    if facts["implementation"] != "cpython":
        raise BadInputError(
            f"python {str(path)!r} is {facts['implementation']}, not CPython (torch ships CPython wheels)"
        )
    return Interpreter(file.absolute(), facts["version"], facts["free_threaded"], origin, Path(facts["prefix"]))


def candidates(environ: Mapping[str, str] | None = None) -> tuple[Interpreter, ...]:
    """Every CPython found, in order of preference: uv's (managed, then PATH), then pyenv's, newest first."""
    environ = os.environ if environ is None else environ
    found = [*_from_uv(environ), *_from_pyenv(environ)]
    unique: dict[Path, Interpreter] = {}
    for interpreter in found:
        key = interpreter.path.resolve()
        unique.setdefault(key, interpreter)
    return tuple(unique.values())


@functools.cache
def _discovered() -> tuple[Interpreter, ...]:
    return candidates()


def find(request: str, environ: Mapping[str, str] | None = None) -> Interpreter:
    """The interpreter for a matrix's python (a version or a path): an installed one (uv's listing: managed and on
    PATH; then pyenv's), else one uv downloads (`uv python install`) unless uv's setting forbids downloads
    (UV_PYTHON_DOWNLOADS=never, which `run --no-python-downloads` sets, or `python-downloads` in uv.toml);
    BadInputError naming those found and how to get the one asked for otherwise."""
    if is_path(request):
        return _inspected(request)
    match = VERSION.match(request)
    if not match:
        raise BadInputError(f"python {request!r}: not a CPython version such as '3.11' or '3.13t', nor a path")
    found = candidates(environ) if environ is not None else _discovered()
    for interpreter in found:
        if interpreter.minor == request:
            return _confirmed(interpreter)
    download = _download(request, os.environ if environ is None else environ)
    if download.ok:
        _discovered.cache_clear()
        for interpreter in candidates(environ):
            if interpreter.minor == request:
                return _confirmed(interpreter)
    first = {(i.minor, i.version): i for i in reversed(found)}  # one line per version: its preferred path
    listed = "\n".join(f"    {i.describe()}" for i in found if first[(i.minor, i.version)] is i) or "    (none)"
    raise BadInputError(
        f"no CPython {request} interpreter found; found:\n{listed}\n  {download.why}\n"
        f"  install it (e.g. `uv python install {request}`, `pyenv install {request}` or your system's package), "
        "or give its path as the python of the runtime or build in the matrix"
    )


@dataclasses.dataclass(frozen=True)
class Download:
    ok: bool
    why: str  # what was tried and how it ended, for the error when none is found


def downloads_forbidden(environ: Mapping[str, str]) -> bool:
    """uv's own switch, read where uv reads it first (a uv.toml `python-downloads` is uv's to apply)."""
    return environ.get("UV_PYTHON_DOWNLOADS", "").strip().lower() in ("never", "manual", "0", "false")


def _download(request: str, environ: Mapping[str, str]) -> Download:
    """`uv python install <request>`, logged as the line to run by hand; how it ended, never an exception."""
    if downloads_forbidden(environ):
        return Download(
            ok=False, why=f"downloads are off (UV_PYTHON_DOWNLOADS={environ['UV_PYTHON_DOWNLOADS']}): not fetched"
        )
    argv = [uv_binary(), "python", "install", request]
    log.info("no CPython %s installed: %s", request, " ".join(argv))
    env = {**environ, "UV_PYTHON_DOWNLOADS": "manual"}  # an explicit install: allowed unless uv.toml says never
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Download(ok=False, why=f"`uv python install {request}` did not run: {exc}")
    if proc.returncode == 0:
        return Download(ok=True, why=f"`uv python install {request}` installed it")
    said = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
    return Download(
        ok=False, why=f"`uv python install {request}` failed (exit {proc.returncode}): " + " / ".join(said[-3:])
    )


@functools.cache
def _inspected(request: str) -> Interpreter:
    return inspect(request)


@functools.cache
def _confirmed(interpreter: Interpreter) -> Interpreter:
    """A discovered interpreter, asked once whether it runs and is what its listing said."""
    asked = inspect(interpreter.path, interpreter.origin)
    if asked.minor != interpreter.minor:
        raise BadInputError(f"{interpreter.path}: listed as CPython {interpreter.minor}, but it runs {asked.version}")
    return asked


def find_all(requests: Iterable[str]) -> dict[str, Interpreter]:
    """Every request's interpreter, or one BadInputError naming every request that has none."""
    found: dict[str, Interpreter] = {}
    problems: list[str] = []
    for request in dict.fromkeys(requests):
        try:
            found[request] = find(request)
        except BadInputError as exc:
            problems.append(str(exc))
    if problems:
        raise BadInputError("\n".join(problems))
    return found


def _from_uv(environ: Mapping[str, str]) -> Iterator[Interpreter]:
    argv = [uv_binary(), "python", "list", "--only-installed", "--output-format", "json"]
    env = {**environ, "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)  # an active venv is not an interpreter to base environments on
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
        listed = json.loads(proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        log.warning("`uv python list` failed (%s); looking for interpreters under pyenv only", exc)
        return
    for item in listed:
        if item.get("implementation") != "cpython" or not item.get("path"):
            continue
        yield Interpreter(Path(item["path"]), item["version"], item.get("variant") == "freethreaded", "uv")


def _from_pyenv(environ: Mapping[str, str]) -> Iterator[Interpreter]:
    root = Path(environ.get("PYENV_ROOT") or Path(environ.get("HOME", "~")).expanduser() / ".pyenv")
    versions = root / "versions"
    if not versions.is_dir():
        return
    entries = []
    for entry in versions.iterdir():
        match = PYENV_VERSION_DIR.match(entry.name)
        if match:
            entries.append((tuple(int(part) for part in match.groups()[:3]), match[4], entry))
    for numbers, threaded, entry in sorted(entries, reverse=True):
        major, minor, _ = numbers
        binary = entry / "bin" / f"python{major}.{minor}{threaded}"
        if binary.is_file() and os.access(binary, os.X_OK):
            yield Interpreter(binary, ".".join(map(str, numbers)), bool(threaded), "pyenv")
