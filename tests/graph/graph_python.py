"""The CPythons of the graph runner's jobs: actions/setup-python's effect (each CPython asked for on PATH as a
hosted runner's tool cache holds it, the last one `python`, a venv of it) from the CPythons this machine provides
(pyenv's, where this machine keeps those other than its own), and a job's PATH without pyenv's shims."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from graph_errors import ActionFailed, UnsupportedWorkflow

PYENV_VERSION_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)(t?)$")  # pyenv's CPythons: 3.10.13, 3.13.0t


def pyenv_root(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("PYENV_ROOT") or Path(environ.get("HOME") or Path.home()) / ".pyenv")


def without_pyenv(path: str, environ: Mapping[str, str]) -> str:
    """A PATH without pyenv's folders (its shims answer for any version pyenv selects): a hosted runner has none."""
    root = pyenv_root(environ)
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not Path(p).is_relative_to(root))


def provided_python(version: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The CPython `version` (3.10, 3.13t) this machine provides to setup-python: pyenv's newest of that minor,
    else `pythonX.Y` on the machine's PATH outside pyenv; None when it has none."""
    found: list[tuple[int, Path]] = []
    versions = pyenv_root(environ) / "versions"
    for entry in versions.iterdir() if versions.is_dir() else ():
        match = PYENV_VERSION_DIR.match(entry.name)
        binary = entry / "bin" / f"python{version}"
        if match and f"{match[1]}.{match[2]}{match[4]}" == version and binary.is_file():
            found.append((int(match[3]), binary))
    if found:
        return max(found)[1]
    on_path = shutil.which(f"python{version}", path=without_pyenv(environ.get("PATH", ""), environ))
    return Path(on_path) if on_path else None


def setup_python(
    given: Mapping[str, Any], env: dict[str, str], posts: list[Callable[[], None]], store: Path
) -> dict[str, str]:
    """actions/setup-python's effect on the job's env (PATH), as the runner's module docstring says; the post
    step of `cache: pip` queued on posts."""
    versions = [v.strip() for v in str(given.get("python-version") or "").splitlines() if v.strip()]
    if not versions:
        raise ActionFailed("setup-python: no python-version given")
    toolcache = Path(env["RUNNER_TEMP"]).parent / "hostedtoolcache"
    for version in versions:  # each prepended: the last listed is first on PATH
        found = provided_python(version)
        if found is None:
            raise ActionFailed(f"setup-python {version}: this machine provides no CPython {version}")
        folder = toolcache / "Python" / version / "bin"
        if not folder.is_dir():
            folder.mkdir(parents=True)
            for name in dict.fromkeys(("python", "python3", f"python{version}")):
                (folder / name).symlink_to(found)
        env["PATH"] = f"{folder}:{env['PATH']}"
    default = toolcache / f"venv-{versions[-1]}"
    if not default.is_dir():
        subprocess.run([str(found), "-m", "venv", str(default)], check=True)
    env["PATH"] = f"{default / 'bin'}:{env['PATH']}"
    if shutil.which("python", path=env["PATH"]) != str(default / "bin" / "python"):
        raise UnsupportedWorkflow(f"setup-python: `python` on the job's PATH is not {default}/bin/python")
    if given.get("cache") == "pip":
        posts.append(pip_cache(env, store))
    return {"python-version": versions[-1]}


def pip_cache(env: dict[str, str], store: Path) -> Callable[[], None]:
    """setup-python's `cache: pip`: pip's cache restored from the store now; the returned post step saves it."""
    cache = Path(env["HOME"]) / ".cache" / "pip"
    saved = store / "pip"
    if saved.is_dir() and not cache.is_dir():
        shutil.copytree(saved, cache)
    env["PIP_CACHE_DIR"] = str(cache)

    def save() -> None:
        if cache.is_dir():
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(cache, saved)

    return save
