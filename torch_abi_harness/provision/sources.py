"""Where packages come from: the matrix's sources, pip's configuration and uv's variables, merged."""

from __future__ import annotations

import ast
import dataclasses
import functools
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping

from torch_abi_harness.config import Sources
from torch_abi_harness.core.errors import InfrastructureError
from torch_abi_harness.core.text import redact

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CaBundle:
    """The CA certificates the harness's own HTTPS requests trust (a PEM file, or a directory of them), and who
    named them: an error about the file names where to fix it."""

    path: str
    origin: str  # "$PIP_CERT", "pip's configuration (`cert`)", "$REQUESTS_CA_BUNDLE", "$SSL_CERT_FILE"


CERT_VARIABLES = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")  # after pip's own `cert`, in the order requests reads them


@dataclasses.dataclass(frozen=True)
class ResolvedSources:
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    index_strategy: str | None  # None: uv's own default (first-index); a strategy only where one was asked for
    environments: tuple[str, ...] = ()  # existing environments' interpreters (`--use-env`), served before any index
    strategy_from: str = ""  # who asked for index_strategy: UV_INDEX_STRATEGY or the matrix's sources
    cert: CaBundle | None = None  # None: the system's store (truststore's, where it is installed)

    def uv_args(self) -> list[str]:
        args = self.pip_args()
        if self.index_strategy:
            args += ["--index-strategy", self.index_strategy]
        return args

    def strategy_note(self) -> str | None:
        """What a run says when uv is told an index strategy (so a resolution across sources is never silent)."""
        if not self.index_strategy:
            return None
        said = f"uv's --index-strategy {self.index_strategy}, asked for by {self.strategy_from or 'the caller'}"
        if self.index_strategy == "unsafe-best-match":
            said += ": each package from whichever source has its best version, not from the first source that has it"
        return said

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
        """For messages and logs: every URL's secret replaced by ****."""
        parts = [f"index {self.index_url or 'default (PyPI)'}"]
        parts += [f"extra index {u}" for u in self.extra_index_urls]
        parts += [f"find-links {f}" for f in self.find_links]
        return redact(", ".join(parts))


PIP_KEYS = ("index-url", "extra-index-url", "find-links", "cert")
PIP_PRIORITY = (":env:", "install", "global")  # a PIP_* variable, then pip install's section, then [global]


def read_pip_config(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """index-url, extra-index-url, find-links and cert as pip itself reads them (`pip config list` under environ):
    its files in its order, PIP_CONFIG_FILE (os.devnull: no file at all) and the PIP_* variables."""
    return {key: list(values) for key, values in _pip_config(tuple(sorted(environ.items()))).items()}


@functools.lru_cache(maxsize=8)
def _pip_config(environ: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, ...]]:
    argv = [sys.executable, "-m", "pip", "config", "list"]
    log.debug("pip's configuration: %s", " ".join(argv))
    try:
        proc = subprocess.run(argv, env=dict(environ), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("pip's configuration not read (%s): its indexes and find-links are not used", exc)
        return {}
    if proc.returncode != 0:
        log.warning(
            "pip's configuration not read (`%s` exited %d: %s): its indexes and find-links are not used",
            " ".join(argv),
            proc.returncode,
            proc.stderr.strip()[-300:],
        )
        return {}
    by_key: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():  # section.key='value', one a line
        name, sep, written = line.partition("=")
        section, _, key = name.strip().rpartition(".")
        if not sep or key not in PIP_KEYS:
            continue
        try:
            value = ast.literal_eval(written.strip())
        except (ValueError, SyntaxError):
            value = written.strip()
        by_key.setdefault(key, {})[section] = str(value)
    found: dict[str, tuple[str, ...]] = {}
    for key, sections in by_key.items():
        for section in PIP_PRIORITY:
            if section in sections:
                found[key] = tuple(sections[section].split())
                break
    return found


def resolve_sources(sources: Sources, environ: Mapping[str, str] | None = None) -> ResolvedSources:
    environ = os.environ if environ is None else environ
    index_url = sources.index_url or environ.get("UV_INDEX_URL") or environ.get("UV_DEFAULT_INDEX")
    extra = list(sources.extra_index_urls) + environ.get("UV_EXTRA_INDEX_URL", "").split()
    links = list(sources.find_links) + environ.get("UV_FIND_LINKS", "").replace(",", " ").split()
    pip = read_pip_config(environ) if sources.inherit_pip_config else {}
    index_url = index_url or next(iter(pip.get("index-url", [])), None)
    extra += pip.get("extra-index-url", [])
    links += pip.get("find-links", [])
    strategy, asked_by = index_strategy(sources, environ)
    return ResolvedSources(
        index_url,
        _unique(extra),
        _unique(links),
        strategy,
        _unique(sources.environments),
        asked_by,
        ca_bundle(environ, pip),
    )


def index_strategy(sources: Sources, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """uv's index strategy and who asked for it: UV_INDEX_STRATEGY, else the matrix's `sources: index_strategy`,
    else none (uv's first-index). Never chosen here: which source may serve a package is the user's call."""
    if environ.get("UV_INDEX_STRATEGY"):
        return environ["UV_INDEX_STRATEGY"], "UV_INDEX_STRATEGY"
    if sources.index_strategy:
        return sources.index_strategy, "the matrix's sources.index_strategy"
    return None, ""


def ca_bundle(environ: Mapping[str, str], pip: Mapping[str, list[str]]) -> CaBundle | None:
    """The CA bundle the harness's HTTPS requests trust, as pip finds one: its `cert` (PIP_CERT, else its
    configuration files), else REQUESTS_CA_BUNDLE, else SSL_CERT_FILE; None: the system's store."""
    if environ.get("PIP_CERT"):
        return CaBundle(environ["PIP_CERT"], "$PIP_CERT")
    if pip.get("cert"):
        return CaBundle(" ".join(pip["cert"]), "pip's configuration (`cert` in `pip config list`)")
    for name in CERT_VARIABLES:
        if environ.get(name):
            return CaBundle(environ[name], f"${name}")
    return None


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
    raise InfrastructureError(
        "uv is not installed, and none is on PATH: the harness makes its environments and builds with it; "
        "pip install 'torch-abi-harness[run]' (the uv package), or install uv (https://docs.astral.sh/uv/)"
    )
