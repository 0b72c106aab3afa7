"""A release candidate on both axes of the matrix (`run --candidate VERSION`).

As a runtime it answers the backward question: do the builds made on older releases still load
and pass on the candidate? As a build torch it answers the forward one, where a release itself can
break the promise: every stable extension of the matrix is built with the candidate's headers at
every target from the extension's min_target to the candidate's own level, and each such build runs
on every runtime. A header whose version guard does not hold (a declaration visible at a target
whose release does not export it) ships in the candidate and breaks every extension built on it for
an older target: only a build on the candidate run on the older release shows it.

So the candidate also brings the header probe (torch_abi_harness.gate.probe_extension): an extension generated from
its own headers that references every declaration they make visible at each target, built on the
candidate at each target and run on that target's release and later ones. Its headers come from the
packaged visibility data for a release the harness has preprocessed, else from the candidate's env.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torch_abi_harness.config import HEADER_PROBE, BuildSpec, Matrix, Recipe, RuntimeSpec
from torch_abi_harness.config.extension import load_extension
from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.core.versions import ApiLevel, parse_release
from torch_abi_harness.gate.probe_extension import probe_targets, with_header_probe, write_probe
from torch_abi_harness.provision.envs import Env, EnvManager, EnvSpec
from torch_abi_harness.provision.sources import resolve_sources
from torch_abi_harness.static.artifact import wheel_tags
from torch_abi_harness.static.audit import DEVICES_WITHOUT_EXPORTS
from torch_abi_harness.static.manifest import open_torch_wheel, packaged_manifest
from torch_abi_harness.static.visibility import (
    OLDEST_TARGET,
    Visibility,
    find_cuda_include,
    include_order,
    packaged_visibility,
    public_headers,
    scan_include,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A torch release candidate: its version (a release X.Y.Z, pre-release tags allowed), and where its ABI is
    read from: its wheel (given, or found in a --find-links directory), else the manifest's release (wheel None)."""

    version: Version
    wheel: Path | None = None

    @classmethod
    def parse(cls, text: str) -> Candidate:
        """--candidate RELEASE; not a release written X.Y.Z: a configuration error naming the option."""
        try:
            return cls(parse_release(text))
        except ValueError as exc:
            raise ConfigError("command line", [f"--candidate {text!r}: {exc}"]) from exc

    def __str__(self) -> str:
        return str(self.version)

    @property
    def level(self) -> ApiLevel:
        return ApiLevel.of(self.version)

    @property
    def ref(self) -> str:
        """What abi-diff compares the previous release with: the wheel's path, else the release."""
        return str(self.wheel) if self.wheel is not None else str(self.version)

    def located(
        self, wheel: Path | None, find_links: Sequence[str], releases: Sequence[str], variants: Sequence[str] = ()
    ) -> Candidate:
        """The candidate with where abi-diff reads it: the given wheel, else its wheel in a --find-links directory,
        else the manifest's release of that version. A given wheel is checked here, before any work
        (check_candidate_wheel; variants: those of the matrix's runtimes)."""
        if wheel is not None:
            check_candidate_wheel(wheel, variants)
            return dataclasses.replace(self, wheel=wheel)
        for folder in find_links:
            found = sorted(Path(folder).glob(f"torch-{self}-*.whl")) + sorted(Path(folder).glob(f"torch-{self}+*.whl"))
            if found:
                return dataclasses.replace(self, wheel=found[0])
        if str(self) in releases:
            return dataclasses.replace(self, wheel=None)
        raise BadInputError(
            f"no wheel of torch {self} to compare with abi-diff: pass --candidate-wheel, or a --find-links "
            f"directory holding it (the manifest knows {', '.join(releases)})"
        )


_LINUX_X86_64 = re.compile(r"(?:many)?linux(?:1|2010|2014|_\d+_\d+)?_x86_64")
_EXPECTED = "a Linux x86_64 wheel of torch (manylinux_*_x86_64), as the matrix's runtimes install"


def check_candidate_wheel(wheel: Path, variants: Sequence[str]) -> None:
    """--candidate-wheel judged before any work, since abi-diff compares its exports with the previous release's: a
    wheel for another platform (macOS: no ELF library at all) or of a variant other than the one it is named or the
    matrix's runtimes use would read as 'removes every stable export', a false NO-GO. Each is bad input (exit 2)
    naming what the wheel is and what was expected: a text file or a zip that is no torch wheel too."""
    with open_torch_wheel(wheel) as archive:
        version_py = archive.read("torch/version.py", 2**20).decode(errors="replace")
        libraries = [n for n in archive.namelist() if re.fullmatch(r"torch/lib/libtorch\w*\.so", n)]
    foreign = sorted(p for p in {t.platform for t in wheel_tags(wheel)} if not _LINUX_X86_64.fullmatch(p))
    if foreign or not libraries:
        what = f"tagged for {', '.join(foreign)}" if foreign else "without torch/lib/libtorch*.so"
        raise BadInputError(f"{wheel}: a torch wheel {what}; the gate reads {_EXPECTED}")
    inside = _variant_inside(version_py)
    try:
        named = parse_wheel_filename(wheel.name)[1].local
    except InvalidWheelFilename:
        named = None
    if named is not None and named != inside:
        raise BadInputError(
            f"{wheel}: named a +{named} wheel, but its torch/version.py says the {inside} variant (a renamed file); "
            f"pass the {named} wheel itself, {_EXPECTED}"
        )
    wanted = sorted({v for v in variants if v != "auto"})
    if wanted and inside not in wanted:
        raise BadInputError(
            f"{wheel}: a wheel of the {inside} variant; the matrix's runtimes use {', '.join(wanted)}: pass "
            f"{_EXPECTED} of that variant"
        )


def _variant_inside(version_py: str) -> str:
    """The variant a torch wheel's torch/version.py states: its version's local label (2.13.0+cpu: cpu), else its
    CUDA (cuda = '12.8': cu128), else cpu."""
    local = re.search(r"__version__\s*=\s*['\"][^'\"+]+\+([\w.]+)['\"]", version_py)
    if local:
        return local[1]
    cuda = re.search(r"^cuda\b[^=]*=\s*['\"](\d+)\.(\d+)['\"]", version_py, re.MULTILINE)
    return f"cu{cuda[1]}{cuda[2]}" if cuda else "cpu"


def candidate_extensions(matrix: Matrix) -> list[str]:
    """The stable extensions the matrix builds from source, in the matrix's order: negative controls
    (`expect:`) fail by design and a prebuilt wheel (`recipe: wheel`) cannot be built again. A published wheel
    (`wheel: <requirement>`) is no source extension (its name is no key of the matrix's extensions when the
    release has a file per CPython): the gate compares it on both releases (torch_abi_harness.gate.ecosystem)."""
    names = dict.fromkeys(b.extension.name for b in matrix.builds if b.extension.published is None)
    buildable = (ext for ext in (matrix.extensions[n] for n in names) if ext.recipe is not Recipe.WHEEL)
    return [ext.name for ext in buildable if ext.stable and ext.expect is None and ext.wheel is None]


def with_candidate(matrix: Matrix, candidate: Candidate, probes: Path | None = None, env: Env | None = None) -> Matrix:
    """The matrix plus the candidate as a runtime and as the build torch of every stable extension at every
    target from its min_target to the candidate's level (builds the matrix already has are not repeated);
    with probes (a directory for generated extensions), the candidate's header probe too, its headers read from
    env when the packaged data does not hold them."""
    release, level = candidate.version, candidate.level
    runtimes = list(matrix.runtimes)
    runtime = RuntimeSpec(release)
    if all(r.key != runtime.key for r in runtimes):
        runtimes.append(runtime)
    builds = list(matrix.builds)
    seen = {_key(b) for b in builds}
    problems: list[str] = []
    for name in candidate_extensions(matrix):
        extension = matrix.extensions[name]
        if extension.min_target > level:
            problems.append(
                f"--candidate {candidate}: extension {name!r} needs at least level {extension.min_target} "
                f"(its min_target); the candidate is {level}"
            )
            continue
        for minor in range(extension.min_target.minor, level.minor + 1):
            target = ApiLevel(level.major, minor)
            build = BuildSpec(extension, release, target=target)
            if _key(build) not in seen:
                seen.add(_key(build))
                builds.append(build)
    if problems:
        raise ConfigError("command line", problems)
    matrix = dataclasses.replace(matrix, runtimes=tuple(runtimes), builds=tuple(builds), candidate=str(release))
    return matrix if probes is None else add_header_probe(matrix, release, probes, env)


def add_header_probe(matrix: Matrix, release: Version, probes: Path, env: Env | None) -> Matrix:
    """The matrix plus the candidate's header probe, one build per target of its headers (none, with a warning,
    when its headers cannot be read: a release the harness never preprocessed, without its env)."""
    found = candidate_headers(release, env)
    if found is None:
        log.warning(
            "torch %s: no header probe in this run: its headers were never preprocessed by this harness and its "
            "env is not made yet (`gate`, `build` and `run` make it; `plan` finds one made earlier)",
            release,
        )
        return matrix
    headers, visibility = found
    targets = probe_targets(visibility, oldest_served(matrix), other_platforms(str(release), visibility.names()))
    loaded = load_extension(write_probe(probes, str(release), headers, targets))
    extension = dataclasses.replace(loaded, generated=HEADER_PROBE)  # marked: the report classes its cells by it
    return with_header_probe(matrix, release, extension, [t.target for t in targets])


def other_platforms(release: str, names: list[str]) -> frozenset[str]:
    """The declarations the manifest records for a device no Linux wheel exports (mps, xpu) in that release."""
    manifest = packaged_manifest()
    found = set()
    for name in names:
        declaration = manifest[name].declaration_in(release) if name in manifest else None
        if declaration is not None and declaration["device"] in DEVICES_WITHOUT_EXPORTS:
            found.add(name)
    return frozenset(found)


def oldest_served(matrix: Matrix) -> ApiLevel:
    """The oldest target a candidate is asked to serve: the oldest release the matrix runs (never below the
    oldest target a build can ask for)."""
    return max(OLDEST_TARGET, min(ApiLevel.of(r.torch) for r in matrix.runtimes))


def candidate_headers(release: Version, env: Env | None) -> tuple[list[str], Visibility] | None:
    """The headers the probe includes (in the order an extension reaches the C shims) and what they declare at
    each target: the packaged data for a release it holds, else the candidate's env scanned, if given."""
    packaged = packaged_visibility().get(str(release))
    if packaged is not None:
        entries = {chain[0] for name, chain in packaged.chains.items() if chain and name in packaged.cpu}
        return sorted(entries, key=include_order), packaged
    if env is None:
        return None
    include = env.torch_lib.parent / "include"
    visibility = scan_include(include, str(release), cuda_include=find_cuda_include())
    return public_headers(include, cuda=False), visibility


def _envs(matrix: Matrix, cache_dir: Path) -> EnvManager:
    return EnvManager(cache_dir, resolve_sources(matrix.sources))


def ensure_candidate_env(matrix: Matrix, candidate: Candidate, cache_dir: Path) -> Env:
    """The candidate's env, made when missing (a release the sources do not serve: exit 2): its headers for the
    audit and the probe, its torch for the op schemas when the data file does not record them."""
    envs = _envs(matrix, cache_dir)
    try:
        return envs.ensure(EnvSpec(candidate.version, "auto", matrix.python))
    finally:
        envs.release()


def cached_candidate_env(matrix: Matrix, candidate: Candidate, cache_dir: Path, *, make: bool = False) -> Env | None:
    """`plan`, `build` and `run` with --candidate: the candidate's env where the probe needs it (a release whose
    headers the packaged data lacks), when an earlier `gate` made it, or made now (make: `build` and `run`, so that
    each job of the gate's graph plans with the probe the decide job's `gate` adds); else None."""
    if str(candidate) in packaged_visibility():
        return None
    if make:
        return ensure_candidate_env(matrix, candidate, cache_dir)
    return _envs(matrix, cache_dir).cached(EnvSpec(candidate.version, "auto", matrix.python))


def _key(build: BuildSpec) -> tuple[str, str, str, str, str | None]:
    return (build.extension.name, str(build.torch), build.variant, str(build.target or ""), build.python)
