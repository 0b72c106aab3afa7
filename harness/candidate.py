"""A release candidate on both axes of the matrix (`run --candidate VERSION`).

As a runtime it answers the backward question: do the builds made on older releases still load
and pass on the candidate? As a build torch it answers the forward one, where a release itself can
break the promise: every stable extension of the matrix is built with the candidate's headers at
every target from the extension's min_target to the candidate's own level, and each such build runs
on every runtime. A header whose version guard does not hold (a declaration visible at a target
whose release does not export it) ships in the candidate and breaks every extension built on it for
an older target: only a build on the candidate run on the older release shows it.
"""

from __future__ import annotations

import dataclasses

from harness.config import BuildSpec, Matrix, RuntimeSpec
from harness.core.errors import ConfigError
from harness.core.versions import ApiLevel, parse_release


def candidate_extensions(matrix: Matrix) -> list[str]:
    """The stable extensions the matrix builds from source, in the matrix's order: negative controls
    (`expect:`) fail by design and a prebuilt wheel (`recipe: wheel`) cannot be built again."""
    names = dict.fromkeys(b.extension.name for b in matrix.builds)
    return [
        n
        for n in names
        if (ext := matrix.extensions[n]).stable and ext.expect is None and ext.wheel is None and ext.recipe != "wheel"
    ]


def with_candidate(matrix: Matrix, version: str) -> Matrix:
    """The matrix plus the candidate as a runtime and as the build torch of every stable extension at every
    target from its min_target to the candidate's level (builds the matrix already has are not repeated)."""
    try:
        release = parse_release(version)
    except ValueError as exc:
        raise ConfigError("command line", [f"--candidate {version!r}: {exc}"]) from exc
    level = ApiLevel.of(release)
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
                f"--candidate {version}: extension {name!r} needs at least level {extension.min_target} "
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
    return dataclasses.replace(matrix, runtimes=tuple(runtimes), builds=tuple(builds), candidate=str(release))


def _key(build: BuildSpec) -> tuple[str, str, str, str, str | None]:
    return (build.extension.name, str(build.torch), build.variant, str(build.target or ""), build.python)
