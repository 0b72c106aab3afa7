"""Existing environments ("bring your own runtime"): an interpreter whose torch serves the envs it matches.

A conda env, a source build of torch or a machine image's Python can stand in for the env the harness
would make for a torch release (`--use-env PYTHON`). It is asked once what it holds (its CPython X.Y,
`torch.__version__` and CUDA, the runner requirements) and then serves every EnvSpec it matches, for
builds and runtimes alike: the release of its torch, the variant (`auto` or its own local label) and
the Python. It is used as it is and never written to: builds, test dependencies and the harness's own
files (the exported-symbol cache) go to the harness cache, as they do for the envs the harness makes.
Nothing about it is verified against RECORD (the harness did not make it); cells see it read-only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.versions import release_of
from torch_abi_harness.static.manifest import Manifest, packaged_manifest
from torch_abi_harness.static.symbols import library_exports, read_shared_object

log = logging.getLogger(__name__)

SOURCE = "--use-env"  # where existing environments are named, for ConfigError
# What the harness asks an interpreter; json and importlib only, so it runs wherever torch does.
INSPECT = r"""
import importlib.metadata as md, json, os, sys, sysconfig
facts = {
    "python": "%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""),
    "version": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "prefix": sys.prefix,
    "sites": [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)],
    "dists": {},
}
for name in NAMES:
    try:
        facts["dists"][name] = md.version(name)
    except md.PackageNotFoundError:
        facts["dists"][name] = None
try:
    import torch
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    facts["torch_dir"] = os.path.dirname(os.path.abspath(torch.__file__))
except Exception as exc:  # noqa: BLE001 - whatever stops `import torch` is the answer
    facts["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print("HARNESS-ENV " + json.dumps(facts))
"""


@dataclasses.dataclass(frozen=True)
class Existing:
    """An existing environment as it answered: what it runs and where its torch is."""

    python: Path  # the interpreter as given (not resolved: a venv's python is a link to its base's)
    minor: str  # 3.12 (3.13t: free-threaded)
    version: str  # 3.12.3
    prefix: Path  # sys.prefix
    torch_version: str  # torch.__version__, e.g. 2.11.0+cu130
    cuda: str | None  # torch.version.cuda
    torch_dir: Path  # the torch package's directory
    sites: tuple[Path, ...]  # its site directories, in sys.path's order

    @property
    def release(self) -> Version:
        return Version(release_of(self.torch_version))

    @property
    def variant(self) -> str:
        """The local label of its torch (cu130, cpu), else the CUDA it was built with, else cpu."""
        local = self.torch_version.partition("+")[2]
        if local:
            return local
        return f"cu{self.cuda.replace('.', '')}" if self.cuda else "cpu"

    @property
    def key(self) -> str:
        """Its name in the harness cache, where the files the harness keeps about it go."""
        own = hashlib.sha256(bytes(self.python)).hexdigest()[:8]
        return f"existing-{self.release}-{self.variant}-py{self.minor}-{own}"

    def describe(self) -> str:
        return f"{self.python} (torch {self.torch_version}, python {self.version})"

    def mismatch(self, torch: Version, variant: str, python: str, interpreter: str | None) -> str | None:
        """Why it cannot serve an env of (torch, variant, python[, interpreter]); None when it can."""
        if self.release != torch:
            return f"torch {self.release}, not {torch}"
        if variant not in ("auto", self.variant):
            return f"variant {self.variant}, not {variant}"
        if python != self.minor:
            return f"python {self.minor}, not {python}"
        if interpreter is not None and Path(interpreter).expanduser().absolute() != self.python:
            return f"interpreter {self.python}, not {interpreter}"
        return None


def inspect_all(pythons: Iterable[str], requirements: Sequence[str]) -> list[Existing]:
    """Each interpreter asked what it holds; ConfigError listing every one that cannot serve (all at once)."""
    found: list[Existing] = []
    problems: list[str] = []
    for python in dict.fromkeys(pythons):
        try:
            found.append(inspect(Path(python), requirements))
        except _Unfit as exc:
            problems.append(f"{python}: {exc}")
    if problems:
        raise ConfigError(SOURCE, problems)
    for existing in found:
        log.info("existing env %s", existing.describe())
    return found


class _Unfit(Exception):
    """Why an interpreter cannot serve as an env, one line."""


def inspect(python: Path, requirements: Sequence[str]) -> Existing:
    """Ask the interpreter at `python` what it holds (one process, `import torch` included); _Unfit when it
    does not run, is not CPython, has no working torch or lacks a runner requirement."""
    names = [Requirement(r).name for r in requirements]
    script = INSPECT.replace("NAMES", repr(names))
    try:
        proc = subprocess.run(
            [str(python), "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd="/",
            env=environ(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Unfit(f"cannot run it ({exc})") from exc
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("HARNESS-ENV ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise _Unfit(f"exit {proc.returncode} when asked what it holds: {tail[0]}")
    facts = json.loads(line.removeprefix("HARNESS-ENV "))
    if facts["implementation"] != "cpython":
        raise _Unfit(f"it is {facts['implementation']}, not CPython (torch ships CPython wheels)")
    if "torch" not in facts:
        raise _Unfit(f"`import torch` fails in it: {facts['torch_error']}")
    lacking = _lacking(requirements, facts["dists"])
    if lacking:
        raise _Unfit(
            f"torch {facts['torch']} is there, but it lacks what every env holds for builds and cells: "
            f"{'; '.join(lacking)} (install them into it: the harness never writes to an existing env)"
        )
    try:
        Version(facts["torch"])
    except InvalidVersion as exc:
        raise _Unfit(f"torch.__version__ {facts['torch']!r} is not a version") from exc
    existing = Existing(
        python=python.expanduser().absolute(),
        minor=facts["python"],
        version=facts["version"],
        prefix=Path(facts["prefix"]),
        torch_version=facts["torch"],
        cuda=facts["cuda"],
        torch_dir=Path(facts["torch_dir"]),
        sites=tuple(Path(p) for p in facts["sites"]),
    )
    lie = claim_contradicted(existing.torch_version, existing.torch_dir / "lib")
    if lie:
        raise _Unfit(lie)
    return existing


SHOWN_EVIDENCE = 5


def claim_contradicted(torch_version: str, torch_lib: Path, manifest: Manifest | None = None) -> str | None:
    """Why the torch libraries in torch_lib are not those of torch_version, from the stable symbols they export;
    None when they agree (or the manifest does not know the release). `torch/version.py` is a text file: an env
    whose version.py said 2.12.1 over 2.13.0's libraries was accepted, and its cells judged as 2.12.1's (a false
    PASS). Symbols first exported after the claimed release in libtorch_cpu.so show newer libraries; symbols the
    claimed release exports that no torch library does show older ones (CUDA shims left out: a CPU build lacks
    them)."""
    manifest = manifest or packaged_manifest()
    claimed = manifest.release_for(Version(release_of(torch_version)))
    cpu = torch_lib / "libtorch_cpu.so"
    if claimed is None or not cpu.is_file():
        log.info("the stable symbols of torch %s are not checked (%s)", torch_version, claimed or "not in the manifest")
        return None
    with open(cpu, "rb") as handle:
        exports = read_shared_object(handle, cpu.name).exports
    later = manifest.releases[manifest.releases.index(claimed) + 1 :]
    newer = sorted(n for n in exports if n in manifest and manifest[n].first_exported in later)
    if newer:
        firsts = sorted({manifest[n].first_exported or "" for n in newer}, key=Version)
        return (
            f"its torch says {torch_version}, but its libraries are newer: {cpu} exports {len(newer)} stable "
            f"symbol(s) first exported in {', '.join(firsts)} ({_some(newer)}); is torch/version.py edited or "
            "left over from another install? reinstall torch in it"
        )
    missing = sorted(n for n in manifest.exported_by(claimed) - library_exports(torch_lib) if "cuda" not in n)
    if missing:
        return (
            f"its torch says {torch_version}, but its libraries are older: no torch library in {torch_lib} exports "
            f"{len(missing)} stable symbol(s) torch {claimed} exports ({_some(missing)}); is torch/version.py "
            "edited or left over from another install? reinstall torch in it"
        )
    return None


def _some(names: Sequence[str]) -> str:
    return ", ".join(names[:SHOWN_EVIDENCE]) + (
        f" and {len(names) - SHOWN_EVIDENCE} more" if len(names) > SHOWN_EVIDENCE else ""
    )


def environ() -> dict[str, str]:
    """What an existing env's interpreter runs with, outside cells too: no bytecode written into it, and the sites a
    cell sees (no user site, not the harness's own PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}


def _lacking(requirements: Sequence[str], dists: dict[str, str | None]) -> list[str]:
    """The requirements the installed versions (name -> version, None: not installed) do not meet."""
    lacking = []
    for text in requirements:
        requirement = Requirement(text)
        have = dists.get(requirement.name)
        if have is None:
            lacking.append(f"{requirement.name} (not installed)")
        elif not requirement.specifier.contains(have, prereleases=True):
            lacking.append(f"{text} ({have} installed)")
    return lacking


def unserving(existing: Sequence[Existing], asked: Iterable[tuple[Version, str, str, str | None]]) -> list[str]:
    """Problems: an existing env that serves none of the envs asked for (torch, variant, python, interpreter), and
    the closest misses, so a typo in the matrix's python or variant is named rather than provisioned around."""
    wanted = list(dict.fromkeys(asked))
    problems = []
    for env in existing:
        if any(env.mismatch(*spec) is None for spec in wanted):
            continue
        same = [spec for spec in wanted if spec[0] == env.release]
        misses = "; ".join(
            f"torch {t} variant {v} python {p}: {env.mismatch(t, v, p, i)}" for t, v, p, i in (same or wanted)[:4]
        )
        problems.append(
            f"{env.describe()} serves no build or runtime of the plan (variant {env.variant}, python {env.minor}); "
            f"the plan asks for {misses or 'nothing'}"
        )
    return problems
