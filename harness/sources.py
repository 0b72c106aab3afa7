"""Where packages come from: the matrix's sources, pip's configuration and uv's variables, merged."""

from __future__ import annotations

import configparser
import dataclasses
import os
import shutil
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.config import Sources
from harness.errors import InfrastructureError


@dataclasses.dataclass(frozen=True)
class ResolvedSources:
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    index_strategy: str

    def uv_args(self) -> list[str]:
        args = self.pip_args()
        if self.extra_index_urls or self.find_links:
            args += ["--index-strategy", self.index_strategy]
        return args

    def pip_args(self) -> list[str]:
        """The same sources for `pip download` (pip always takes the best match across indexes)."""
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args

    def describe(self) -> str:
        parts = [f"index {self.index_url or 'default (PyPI)'}"]
        parts += [f"extra index {u}" for u in self.extra_index_urls]
        parts += [f"find-links {f}" for f in self.find_links]
        return ", ".join(parts)


def pip_config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (as `pip config debug` lists them)."""
    home = Path(environ.get("HOME", "~")).expanduser()
    xdg_dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if "PIP_CONFIG_FILE" in environ:
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def read_pip_config(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """index-url, extra-index-url and find-links from pip's files and PIP_* variables."""
    wanted = ("index-url", "extra-index-url", "find-links")
    found: dict[str, list[str]] = {}
    for path in pip_config_files(environ):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            for key in wanted:
                if parser.has_option(section, key):
                    found[key] = parser.get(section, key).split()
    for key in wanted:
        env_key = "PIP_" + key.upper().replace("-", "_")
        if environ.get(env_key):
            found[key] = environ[env_key].split()
    return found


def resolve_sources(sources: Sources, environ: Mapping[str, str] | None = None) -> ResolvedSources:
    environ = os.environ if environ is None else environ
    index_url = sources.index_url or environ.get("UV_INDEX_URL") or environ.get("UV_DEFAULT_INDEX")
    extra = list(sources.extra_index_urls) + environ.get("UV_EXTRA_INDEX_URL", "").split()
    links = list(sources.find_links) + environ.get("UV_FIND_LINKS", "").replace(",", " ").split()
    if sources.inherit_pip_config:
        pip = read_pip_config(environ)
        index_url = index_url or next(iter(pip.get("index-url", [])), None)
        extra += pip.get("extra-index-url", [])
        links += pip.get("find-links", [])
    strategy = environ.get("UV_INDEX_STRATEGY") or sources.index_strategy
    return ResolvedSources(index_url, _unique(extra), _unique(links), strategy)


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


_uv_lock = threading.Lock()
_uv_path: list[str] = []


def uv_binary() -> str:
    """The uv that ships with the `uv` package, else the one on PATH; looked up once per process.

    The lock matters: uv's find_uv_bin reads sysconfig, whose lazy initialisation is not
    thread-safe on Python 3.11 (two threads asking at once can get None for EXE).
    """
    with _uv_lock:
        if not _uv_path:
            _uv_path.append(_find_uv())
        return _uv_path[0]


def _find_uv() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise InfrastructureError("uv is not installed: `pip install uv` (the harness creates its environments with it)")
