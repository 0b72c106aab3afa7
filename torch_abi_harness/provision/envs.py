"""uv virtualenvs, one per (torch release, variant, python): made once, verified on reuse, locked while made.

Verified means every installed file is still what its distribution's RECORD says
(torch_abi_harness.provision.integrity):
a damaged env is named and rebuilt, never handed to a cell whose failure it would then explain.

Envs are shared between runs, so a run that uses one holds it: a shared lock (`flock LOCK_SH` on
`<key>.use`) from `ensure` until `release`. Removing an env (to repair it, or to replace a stale one)
takes that lock exclusively, waiting at most `USE_WAIT_SECONDS` for the runs using it to end: an env
is never rebuilt under a live cell.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

import platformdirs
from packaging.version import Version

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import CommandError, ConfigError, InfrastructureError, ResolutionError
from torch_abi_harness.provision import integrity, interpreters
from torch_abi_harness.provision.existing import SOURCE as EXISTING_SOURCE
from torch_abi_harness.provision.existing import Existing, inspect_all, unserving
from torch_abi_harness.provision.locks import close_all, locked
from torch_abi_harness.provision.sources import ResolvedSources, uv_binary

log = logging.getLogger(__name__)

ENV_FORMAT = 1
MARKER = "harness-env.json"
USE_WAIT_SECONDS = 1800.0  # how long a repair waits for the runs using an env to end


def default_cache_dir() -> Path:
    """Where environments and builds are cached: $HARNESS_CACHE_DIR, else the user cache directory."""
    return Path(os.environ.get("HARNESS_CACHE_DIR") or platformdirs.user_cache_dir("torch-abi-harness"))


def cache_dir_of(given: Path | None) -> Path:
    """--cache-dir, else the default cache directory; absolute (cells run in their own directory)."""
    return (given or default_cache_dir()).absolute()


# What every environment holds besides torch: the build backend for recipes and the test runner.
RUNNER_REQUIREMENTS = ("numpy", "setuptools>=64", "wheel", "pytest>=8")


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    torch: Version
    variant: str
    python: str  # X.Y (X.Yt: free-threaded)
    interpreter: str | None = None  # the interpreter's path when the matrix gave one; else found by version

    @property
    def key(self) -> str:
        own = f"-{hashlib.sha256(self.interpreter.encode()).hexdigest()[:8]}" if self.interpreter else ""
        return f"torch-{self.torch}-{self.variant}-py{self.python}{own}"

    @property
    def requirement(self) -> str:
        local = "" if self.variant == "auto" else f"+{self.variant}"
        return f"torch=={self.torch}{local}"


@dataclasses.dataclass(frozen=True)
class Env:
    spec: EnvSpec
    path: Path
    torch_version: str  # torch.__version__, e.g. '2.10.0+cu128'
    variant: str  # detected from the installed wheel: 'cpu', 'cu128', ...
    created_seconds: float
    reused: bool
    repaired: str | None = None  # the damage this env was rebuilt for, one line; None when it was intact
    # An existing environment (`--use-env`) serving spec: used as it is, never written to; None for the envs made here
    existing: Existing | None = None
    state: Path | None = None  # where the harness keeps its own files about an existing env (in its cache)

    @property
    def python(self) -> Path:
        return self.existing.python if self.existing else self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        """The site directory that holds torch."""
        return self.existing.torch_dir.parent if self.existing else site_packages(self.path)

    @property
    def site_dirs(self) -> tuple[Path, ...]:
        """Every site directory of the env (an existing one may have several: a system Python's, a user's)."""
        if self.existing is not None and self.existing.sites:
            return self.existing.sites
        return (self.site_packages,)

    @property
    def exports_cache(self) -> Path:
        """Where the symbols torch's libraries export are cached: in the env when the harness made it, else in the
        harness cache (an existing env is never written to)."""
        return (self.state or self.path) / "harness-exports.json"

    @property
    def torch_lib(self) -> Path:
        lib = self.site_packages / "torch" / "lib"
        if not lib.is_dir():
            raise InfrastructureError(f"{self.path}: torch/lib not found")
        return lib


def site_packages(env_path: Path) -> Path:
    found = sorted(env_path.glob("lib/python*/site-packages"))
    if not found:
        raise InfrastructureError(f"{env_path}: no lib/python*/site-packages")
    return found[0]


def detect_variant(torch_version: str, cuda: str | None) -> str:
    local = torch_version.partition("+")[2]
    if local:
        return local
    return f"cu{cuda.replace('.', '')}" if cuda else "cpu"


def _read_torch_version_file(env_path: Path) -> tuple[str, str | None]:
    """torch/version.py of an env, read as text: no import, milliseconds."""
    candidates = list(env_path.glob("lib/python*/site-packages/torch/version.py"))
    if not candidates:
        raise InfrastructureError(f"{env_path}: torch is not installed in this environment")
    text = candidates[0].read_text()
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", text, re.M)
    if not version:
        raise InfrastructureError(f"{candidates[0]}: no __version__")
    return version[1], cuda[1] if cuda else None


class EnvManager:
    def __init__(self, root: Path, sources: ResolvedSources, use_wait: float = USE_WAIT_SECONDS) -> None:
        self.root = root / "envs"
        self.sources = sources
        self.use_wait = use_wait
        self._existing: list[Existing] | None = None  # asked once, on first use
        self._asking = threading.Lock()
        self._held: dict[Path, IO[str]] = {}  # env path -> its use lock, held shared until release()
        self._holding = threading.Lock()
        weakref.finalize(self, close_all, self._held)  # a manager dropped without release() lets go as well

    @property
    def uv(self) -> str:
        """uv, looked up when first needed: envs served by existing environments need none."""
        return uv_binary()

    def path(self, spec: EnvSpec) -> Path:
        return self.root / spec.key

    def existing_envs(self) -> list[Existing]:
        """The existing environments the sources name, each asked once what it holds (ConfigError if one cannot
        serve: it does not run, has no torch, or lacks a runner requirement)."""
        with self._asking:
            if self._existing is None:
                self._existing = inspect_all(self.sources.environments, RUNNER_REQUIREMENTS)
            return self._existing

    def served(self, spec: EnvSpec) -> Env | None:
        """The env spec is served by an existing environment (the first that matches), or None."""
        for found in self.existing_envs():
            if found.mismatch(spec.torch, spec.variant, spec.python, spec.interpreter) is None:
                state = self.root / found.key
                return Env(
                    spec,
                    found.prefix,
                    found.torch_version,
                    found.variant,
                    0.0,
                    reused=True,
                    existing=found,
                    state=state,
                )
        return None

    def check_existing(self, specs: Sequence[EnvSpec]) -> None:
        """ConfigError when an existing environment serves none of specs: a mismatch (its torch, variant or python
        differs from what the plan asks) is named, not provisioned around."""
        problems = unserving(self.existing_envs(), ((s.torch, s.variant, s.python, s.interpreter) for s in specs))
        if problems:
            raise ConfigError(EXISTING_SOURCE, problems)

    def cached(self, spec: EnvSpec) -> Env | None:
        """The env if it exists, its marker matches what is installed and no file is damaged; None otherwise."""
        served = self.served(spec)
        if served is not None:
            return served
        env = self._marked(spec)
        return env if env is not None and not self._damage(env) else None

    def verify(self, env: Env) -> str | None:
        """None if env's files are what RECORD says and site-packages holds nothing else; else the damage in one line.

        Cheap enough to ask after every cell that errs: one stat per file (0.1 s for 20,000
        files), a hash only of files whose stamp moved. ensure() rebuilds a damaged env. An existing environment
        is not checked: the harness did not make it, and cells see it read-only.
        """
        if env.existing is not None:
            return None
        damage = self._damage(env)
        return integrity.describe(damage) if damage else None

    def _damage(self, env: Env) -> list[integrity.Damage]:
        saved = env.path / integrity.FINGERPRINT
        fingerprint = integrity.load(saved)
        if fingerprint is None:
            # An env made before fingerprints: proven against RECORD once rather than rebuilt.
            log.info("%s has no fingerprint yet: hashing its files against RECORD once", env.path.name)
            damage, refreshed = integrity.take(env.site_packages)
        else:
            damage, refreshed = integrity.check(env.site_packages, fingerprint)
        if not damage and refreshed != fingerprint:
            try:  # best effort: an unsaved fingerprint costs hashes next time, nothing else
                integrity.save(saved, refreshed)
            except OSError as exc:
                log.debug("could not save %s: %s", saved, exc)
        return damage

    def _marked(self, spec: EnvSpec) -> Env | None:
        """The env if it exists and its marker matches the torch it holds (a few reads, no hashing)."""
        path = self.path(spec)
        marker = path / MARKER
        try:
            meta = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        if meta.get("format") != ENV_FORMAT or meta.get("requirements") != self._requirements(spec):
            return None
        if not (path / "bin" / "python").exists():
            return None
        try:
            torch_version, _ = _read_torch_version_file(path)
        except InfrastructureError:
            return None
        if torch_version != meta.get("torch_version"):
            return None
        return Env(spec, path, torch_version, meta["variant"], meta["seconds"], reused=True)

    def resolve(self, specs: Sequence[EnvSpec], jobs: int = 4) -> None:
        """Check that every requested torch exists in the sources before any work starts."""
        todo = [s for s in dict.fromkeys(specs) if self.cached(s) is None]
        if not todo:
            return
        log.info("resolving %d torch release(s) against %s", len(todo), self.sources.describe())
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            failures = [f for f in pool.map(self._resolve_one, todo) if f]
        if failures:
            raise ResolutionError(
                "torch release(s) not available from the configured sources "
                f"({self.sources.describe()}):\n"
                + "\n".join(failures)
                + "\n  fix the version in the matrix, or add the index or find-links that serves it "
                "(matrix `sources:`, pip's configuration or UV_* variables)" + self._strategy_hint(failures)
            )

    def _strategy_hint(self, failures: list[str]) -> str:
        """uv's first-index found the project on one source without the release, and no strategy was asked for:
        say how to ask (the harness never chooses one)."""
        if self.sources.index_strategy or not any("--index-strategy" in f for f in failures):
            return ""
        return (
            "\n  uv took torch from the first source that lists it (its default, first-index): if every source is "
            "trusted, ask for `index_strategy: unsafe-best-match` in the matrix's `sources:` (or UV_INDEX_STRATEGY)"
        )

    def _resolve_one(self, spec: EnvSpec) -> str | None:
        argv = [
            self.uv,
            "pip",
            "compile",
            "-",
            "--no-deps",
            "--no-header",
            "--quiet",
            "--python-version",
            spec.python,
            *self.sources.uv_args(),
        ]
        proc = commands.run(argv, input=spec.requirement + "\n", check=False, timeout=300)
        if proc.returncode == 0:
            return None
        reason = " ".join(line.strip() for line in proc.stdout.strip().splitlines()[-4:])
        return f"  - {spec.requirement} (python {spec.python}): {reason}"

    def ensure(self, spec: EnvSpec) -> Env:
        """The env for spec, made if missing or broken, and held (shared) until release(). Safe when several
        runs ask at once; a repair waits for the runs using the env to end. An env an existing environment serves
        is that environment, as it is."""
        self.root.mkdir(parents=True, exist_ok=True)
        served = self.served(spec)
        if served is not None:
            assert served.state is not None
            served.state.mkdir(exist_ok=True)
            log.info("torch %s (python %s) is the existing env %s", spec.requirement, spec.python, served.python)
            return served
        with locked(self.root / f"{spec.key}.lock"):
            env = self._make(spec)
            self._hold(spec)  # at once: only a maker, under the lock held here, takes it exclusively
            return env

    def release(self) -> None:
        """This manager's runs no longer use their envs: others may repair them."""
        with self._holding:
            close_all(self._held)

    def _make(self, spec: EnvSpec) -> Env:
        env = self._marked(spec)
        if env is None:
            if not self.path(spec).exists():
                return self._create(spec)
            with self._sole_use(spec, "it is incomplete or stale"):
                return self._create(spec)
        damage = self._damage(env)
        if not damage:
            log.debug("reusing %s", env.path)
            return env
        what = integrity.describe(damage)
        with self._sole_use(spec, f"it is damaged: {what}"):
            log.warning("%s is damaged: %s; rebuilding it", env.path, what)
            shutil.rmtree(env.path)
            # Written in place, the file is damaged wherever it is hardlinked, uv's cache included:
            # a rebuild from that cache would link the same damage again.
            self._forget(d.distribution for d in damage if d.shared and d.distribution)
            return dataclasses.replace(self._create(spec), repaired=what)

    def _use_lock(self, spec: EnvSpec) -> Path:
        return self.root / f"{spec.key}.use"

    def _hold(self, spec: EnvSpec) -> None:
        import fcntl  # POSIX only, as in locked()

        with self._holding:
            if self.path(spec) in self._held:
                return
            handle = open(self._use_lock(spec), "a+")  # closed by release()
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # a maker holds it, which it may only do under the make lock we hold
                handle.close()
                raise InfrastructureError(
                    f"{self._use_lock(spec)} is held exclusively by a process outside the harness's make lock; "
                    "nothing should take it: stop that process and run again"
                ) from None
            self._held[self.path(spec)] = handle

    @contextlib.contextmanager
    def _sole_use(self, spec: EnvSpec, why: str) -> Iterator[None]:
        """The env's use lock, exclusively: no run uses the env while the block removes or rebuilds it."""
        path = self._use_lock(spec)
        if self.path(spec) in self._held:
            raise InfrastructureError(
                f"{self.path(spec)} must be rebuilt ({why}) but this run already uses it: run again to rebuild it"
            )
        with locked(path, self.use_wait, f"{self.path(spec).name} must be rebuilt ({why}); another run uses it"):
            yield

    def _forget(self, distributions: Iterable[str]) -> None:
        """Remove distributions from uv's cache (waits for other uv processes using it)."""
        names = sorted(set(distributions))
        if names:
            log.warning(
                "removing %s from uv's cache: its files there are hardlinks of the damaged ones", " ".join(names)
            )
            commands.run([self.uv, "cache", "clean", *names], timeout=600)

    def _requirements(self, spec: EnvSpec) -> list[str]:
        return [spec.requirement, *RUNNER_REQUIREMENTS]

    def _create(self, spec: EnvSpec) -> Env:
        path = self.path(spec)
        if path.exists():
            log.warning("%s is incomplete or stale; recreating it", path)
            shutil.rmtree(path)
        started = time.monotonic()
        log.info("creating %s (%s)", path, spec.requirement)
        fingerprint = self._install(spec, path)
        try:
            # One real import proves the wheel set is complete (a CUDA wheel without its
            # nvidia-* dependencies installs fine and fails here).
            commands.run([path / "bin" / "python", "-c", "import torch"], timeout=300)
        except CommandError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        torch_version, cuda = _read_torch_version_file(path)
        variant = detect_variant(torch_version, cuda)
        if spec.variant != "auto" and variant != spec.variant:
            shutil.rmtree(path, ignore_errors=True)
            raise ResolutionError(
                f"{spec.requirement}: the sources served torch {torch_version} (variant {variant}), "
                f"not variant {spec.variant}; add the index that serves it"
            )
        seconds = time.monotonic() - started
        meta = {
            "format": ENV_FORMAT,
            "requirements": self._requirements(spec),
            "torch_version": torch_version,
            "variant": variant,
            "cuda": cuda,
            "seconds": round(seconds, 2),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        integrity.save(path / integrity.FINGERPRINT, fingerprint)
        (path / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
        log.info("created %s in %.1f s (torch %s)", path.name, seconds, torch_version)
        return Env(spec, path, torch_version, variant, seconds, reused=False)

    def _install(self, spec: EnvSpec, path: Path) -> integrity.Fingerprint:
        """A venv with spec's requirements, every file hashed against RECORD: its fingerprint.

        Installed files are hardlinks of uv's cache, so a file written in place in any env of
        this release arrives damaged: such distributions are removed from uv's cache and
        installed again, once; damage that survives that is an error naming the file.
        """
        damage, fingerprint = self._install_once(spec, path)
        distributions = {d.distribution for d in damage if d.distribution}
        if distributions:
            log.warning("%s: installed damaged from uv's cache: %s", path.name, integrity.describe(damage))
            self._forget(distributions)
            damage, fingerprint = self._install_once(spec, path)
        if damage:
            raise InfrastructureError(
                f"{path.name}: damaged as installed: {integrity.describe(damage)}\n"
                "  uv's cache may hold damaged files: run `uv cache clean` "
                "(or point UV_CACHE_DIR at a fresh directory) and run again"
            )
        return fingerprint

    def _install_once(self, spec: EnvSpec, path: Path) -> tuple[list[integrity.Damage], integrity.Fingerprint]:
        """venv and install, then the full hash; a damaged result is removed."""
        try:
            base = interpreters.find(spec.interpreter or spec.python)
            commands.run([self.uv, "venv", "--quiet", "--python", base.path, path], timeout=300)
            commands.run(
                [
                    self.uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--compile-bytecode",
                    "--python",
                    path / "bin" / "python",
                    *self.sources.uv_args(),
                    *self._requirements(spec),
                ],
                timeout=3600,
            )
        except CommandError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        damage, fingerprint = integrity.take(site_packages(path))
        if damage:
            shutil.rmtree(path, ignore_errors=True)
        return damage, fingerprint
