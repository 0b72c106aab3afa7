"""Test dependencies (`test_requires:`): what a suite needs beyond torch, pytest and numpy, as an overlay.

An overlay is a directory of distributions in the harness cache, installed once per content (the
pins it holds, the Python and the platform) and never into a torch env, which every cell of that
release shares. A cell puts it on sys.path *after* the env's own site-packages (the cell probe reads
HARNESS_SITE_DIRS), so nothing the env holds can be shadowed.

The requirements are resolved against the env: every distribution the env holds is a constraint
at its installed version, so a requirement that would change torch (or numpy, or pytest) is refused
with uv's own account of the conflict, and only what the env lacks goes into the overlay. The
resolution is cached per (requirements, env content, sources); the overlay is copied, not
hardlinked, out of uv's cache (a test writing into it cannot damage uv's cache), fingerprinted
against RECORD, locked while made and verified on reuse, like the envs.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torch_abi_harness.core import commands
from torch_abi_harness.core.errors import CommandError, InfrastructureError
from torch_abi_harness.core.files import write_atomic
from torch_abi_harness.provision import integrity
from torch_abi_harness.provision.envs import Env
from torch_abi_harness.provision.locks import locked
from torch_abi_harness.provision.sources import ResolvedSources, uv_binary

log = logging.getLogger(__name__)

FORMAT = 1
MARKER = "harness-testdeps.json"
UNSATISFIABLE = "No solution found when resolving dependencies"


@dataclasses.dataclass(frozen=True)
class Overlay:
    """The test dependencies of one suite on one runtime env: what was asked, what the env lacked and holds now."""

    requirements: tuple[str, ...]  # as the extension declares them
    pins: tuple[str, ...]  # name==version of what the env lacked: the overlay's content
    site: Path | None  # the directory that goes on the cell's path; None when the env already satisfies everything
    seconds: float  # to resolve and (when made) install
    reused: bool

    def describe(self) -> str:
        return ", ".join(self.pins) if self.pins else "nothing (the env has it all)"


class Conflict(Exception):
    """The requirements cannot be installed beside what the env holds; the message is uv's explanation."""


def installed(*site_dirs: Path) -> dict[str, str]:
    """Every distribution in the site directories as canonical name -> `name==version` (a read of its metadata,
    no process); the first directory that holds a name wins, as on sys.path."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=[str(d) for d in site_dirs]):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), f"{name}=={dist.version}")
    return found


class OverlayManager:
    def __init__(self, root: Path, sources: ResolvedSources) -> None:
        self.root = root / "testdeps"
        self.sources = sources

    @property
    def uv(self) -> str:
        """uv, looked up when first needed: requirements the env already meets need none."""
        return uv_binary()

    def ensure(self, requirements: Sequence[str], env: Env) -> Overlay:
        """The overlay of requirements for env: resolved (or read from the cache), then made or verified.

        Raises Conflict when the requirements cannot be met without replacing what the env holds.
        """
        started = time.monotonic()
        wanted = tuple(requirements)
        pins, _ = self.resolve(wanted, env)
        if not pins:
            return Overlay(wanted, (), None, time.monotonic() - started, reused=True)
        key = overlay_key(pins, env.spec.python)
        path = self.root / key
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / f"{key}.lock"):
            damage = self._damage(path, pins)
            if damage:
                if path.exists():
                    log.warning("test dependencies %s: %s; installing them again", path.name, damage)
                    shutil.rmtree(path)
                self._create(path, pins, env)
        return Overlay(wanted, pins, path / "site", time.monotonic() - started, damage is None)

    def verify(self, overlay: Overlay) -> str | None:
        """None when the overlay's files are what RECORD says (one stat per file); else the damage in one line."""
        if overlay.site is None:
            return None
        return self._damage(overlay.site.parent, overlay.pins)

    def resolve(self, requirements: tuple[str, ...], env: Env) -> tuple[tuple[str, ...], bool]:
        """The pins the env lacks (name==version, sorted), and whether they came from the cache.

        Requirements the env already meets (each named distribution installed at a version its specifier
        allows) need no resolution: nothing is asked of an index, so a machine without one runs them."""
        have = installed(*env.site_dirs)
        if satisfied(requirements, have):
            return (), True
        fixed = sorted(have.values())
        text = json.dumps([FORMAT, requirements, env.spec.key, fixed, self.sources.describe()])
        cached = self.root / "resolved" / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.json"
        try:
            return tuple(json.loads(cached.read_text())["pins"]), True
        except (OSError, ValueError, KeyError, TypeError):
            pass
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cached.parent, prefix="env-", suffix=".txt") as constraints:
            constraints.write("\n".join(fixed) + "\n")  # what the env holds, at its installed versions
            constraints.flush()
            argv: list[str | Path] = [
                self.uv,
                "pip",
                "compile",
                "-",
                "--constraint",
                constraints.name,
                "--python",
                env.python,
                "--no-header",
                "--no-annotate",
                "--quiet",
                *self.sources.uv_args(),
            ]
            proc = commands.run(argv, input="\n".join(requirements) + "\n", check=False, timeout=600)
        if proc.returncode != 0:
            if UNSATISFIABLE in proc.stdout:
                raise Conflict(commands.uv_explanation(proc.stdout) or proc.stdout.strip().splitlines()[-1])
            raise CommandError([str(a) for a in argv], proc.returncode, None, proc.stdout)
        pins = tuple(sorted(pin for pin in _pins(proc.stdout) if _name(pin) not in have))
        write_atomic(cached, json.dumps({"requirements": list(requirements), "env": env.spec.key, "pins": pins}) + "\n")
        return pins, False

    def _damage(self, path: Path, pins: tuple[str, ...]) -> str | None:
        """Why the overlay at path cannot be used as it is (missing, stale or damaged); None when it is intact."""
        try:
            meta = json.loads((path / MARKER).read_text())
        except (OSError, ValueError):
            return "not made yet"
        if meta.get("format") != FORMAT or tuple(meta.get("pins", ())) != pins:
            return "made by another version of the harness"
        fingerprint = integrity.load(path / integrity.FINGERPRINT)
        if fingerprint is None:
            return "no fingerprint"
        damage, refreshed = integrity.check(path / "site", fingerprint)
        if damage:
            return integrity.describe(damage)
        if refreshed != fingerprint:
            try:  # best effort, as for the envs: an unsaved fingerprint costs hashes next time
                integrity.save(path / integrity.FINGERPRINT, refreshed)
            except OSError as exc:
                log.debug("could not save %s: %s", path / integrity.FINGERPRINT, exc)
        return None

    def _create(self, path: Path, pins: tuple[str, ...], env: Env) -> None:
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{path.name}-"))
        try:
            site = work / "site"
            commands.run(
                [
                    self.uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",  # the resolution above chose every distribution; the env's stay the env's
                    "--compile-bytecode",
                    "--link-mode",
                    "copy",  # never a hardlink of uv's cache: a cell writing here must not damage it
                    "--python",
                    env.python,
                    "--target",
                    site,
                    *self.sources.uv_args(),
                    *pins,
                ],
                timeout=1800,
            )
            (site / ".lock").unlink(missing_ok=True)  # uv's own lock of the target, in no RECORD
            damage, fingerprint = integrity.take(site)
            if damage:
                what = integrity.describe(damage)
                raise InfrastructureError(f"test dependencies {', '.join(pins)}: damaged as installed: {what}")
            integrity.save(work / integrity.FINGERPRINT, fingerprint)
            seconds = time.monotonic() - started
            meta = {
                "format": FORMAT,
                "pins": list(pins),
                "python": env.spec.python,
                "platform": sysconfig.get_platform(),
                "seconds": round(seconds, 2),
                "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
            write_atomic(work / MARKER, json.dumps(meta, indent=2) + "\n")
            os.replace(work, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("made test dependencies %s (%s) in %.1f s", path.name, ", ".join(pins), seconds)


def overlay_key(pins: Sequence[str], python: str) -> str:
    """What an overlay's content depends on: its pins, the Python (X.Y) and the platform they were installed for."""
    text = json.dumps([FORMAT, sorted(pins), python, sysconfig.get_platform()])
    return f"py{python}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def satisfied(requirements: Sequence[str], have: dict[str, str]) -> bool:
    """Whether every requirement is met by the installed distributions (canonical name -> `name==version`).
    A requirement with extras or a marker, or one that does not parse, is never taken as met: uv decides it."""
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return False
        pin = have.get(canonicalize_name(requirement.name))
        if requirement.extras or requirement.marker or requirement.url or pin is None:
            return False
        if not requirement.specifier.contains(pin.split("==", 1)[1], prereleases=True):
            return False
    return True


def _pins(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-"))]


def _name(pin: str) -> str:
    try:
        return canonicalize_name(Requirement(pin).name)
    except InvalidRequirement:
        return canonicalize_name(pin.split("==", 1)[0])
