"""The promise (what a cell should do) and the verdicts a cell or build can have. Whether it kept the promise is
decided in torch_abi_harness/run/judge.py, and nowhere else."""

from __future__ import annotations

import dataclasses
import enum

from torch_abi_harness.config import CudaPolicy
from torch_abi_harness.core.status import Condition
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import Build, Cell
from torch_abi_harness.static.artifact import ArtifactFacts, RuntimeFacts, unmet


class Expected(enum.StrEnum):
    PASS = "pass"
    LOAD_FAILED = "load_failed"
    BUILD_FAILED = "build_failed"
    NONE = "none"  # no promise either way
    # Negative controls (extension.yaml `expect:`): built to fail this way wherever they load.
    TEST_FAILED = "test_failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"


class Verdict(enum.StrEnum):
    KEPT = "kept"
    BROKEN = "broken"
    EXPECTED_FAILURE = "expected_failure"
    UNEXPECTED_PASS = "unexpected_pass"
    SKIPPED = "skipped"
    ERROR = "error"
    FLAKY = "flaky"  # broken, then kept the promise on a retry (`run --rerun-broken N`): never reads as kept
    KNOWN_BREAK = "known_break"  # broken, and acknowledged by a known_breaks entry that has not expired
    NOT_RUN = "not_run"  # its build failed where promised to build: the build broke the promise, once, not the cell


@dataclasses.dataclass(frozen=True)
class Promise:
    expected: Expected
    why: str
    condition: Condition  # which condition decided it: the class an expected failure is grouped by


def promise(
    cell: Cell,
    artifact: ArtifactFacts | None = None,
    runtime: RuntimeFacts | None = None,
    built_for: ApiLevel | None = None,
) -> Promise:
    """What the cell should do. From the matrix alone (the plan, before anything is built): T <= min(B, R)
    passes, T > B fails to build, T > R fails to load. With the built artifact and the runtime as
    prepared, first what the artifact needs besides torch's symbols: the wheel's Python ABI, the host libraries
    this machine lacks, the CUDA major its libraries name, the NVIDIA driver; a load failure is expected where the
    runtime lacks one, of the class of the first (artifact.unmet's order), for a reason naming all of them. `built_for`:
    the level the build was really compiled for (its compiler's -DTORCH_TARGET_VERSION, its imports),
    where that differs from the matrix's target: the binary is promised what it is, not what was asked.
    A published wheel whose build torch is unknown (its metadata and files name none) is promised by T alone
    when stable, and nothing (class unknown-build) when not: B is never guessed."""
    build, run = cell.build, cell.runtime
    if artifact is not None and runtime is not None:
        problems = unmet(artifact, runtime, any_cuda_major=build.cuda is CudaPolicy.ANY)
        if problems:  # the first decides the class; the reason names every cause
            why = "; and ".join(problem.why for problem in problems)
            return Promise(Expected.LOAD_FAILED, why, problems[0].condition)
    target = built_for or build.effective_target
    b_level, r_level = ApiLevel.of(build.torch), ApiLevel.of(run.torch)
    published = build.extension.published
    if published is not None and not published.build_torch_known:
        return _unknown_build(target, r_level, stable=build.extension.stable)
    if not build.extension.stable:
        if build.torch == run.torch:
            return Promise(Expected.PASS, "unstable C++ API, run on the torch it was built with", Condition.UNSTABLE)
        return Promise(Expected.NONE, "unstable C++ API: nothing is promised across releases", Condition.UNSTABLE)
    if target > b_level:
        return Promise(
            Expected.BUILD_FAILED, f"target {target} is newer than the build torch {b_level}", Condition.BUILD
        )
    if target > r_level:
        return Promise(
            Expected.LOAD_FAILED, f"target {target} is newer than the runtime torch {r_level}", Condition.TORCH_ABI
        )
    if build.extension.expect:
        return Promise(
            Expected(build.extension.expect.lower()),
            f"negative control: built to end {build.extension.expect} wherever it loads",
            Condition.CONTROL,
        )
    return Promise(Expected.PASS, f"target {target} <= min(build {b_level}, runtime {r_level})", Condition.TORCH_ABI)


def _unknown_build(target: ApiLevel, r_level: ApiLevel, *, stable: bool) -> Promise:
    """A published wheel whose build torch B is unknown: off the stable ABI, nothing is promised (no release is
    known to be its own); on it, T alone decides: T <= R passes, T > R fails to load."""
    if not stable:
        return Promise(
            Expected.NONE,
            "unstable C++ API and no build torch named by its metadata or files: nothing is promised",
            Condition.UNKNOWN_BUILD,
        )
    if target > r_level:
        return Promise(
            Expected.LOAD_FAILED, f"target {target} is newer than the runtime torch {r_level}", Condition.TORCH_ABI
        )
    return Promise(
        Expected.PASS,
        f"target {target} <= runtime {r_level} (its build torch is unknown: T alone)",
        Condition.TORCH_ABI,
    )


def build_promise(build: Build, built_for: ApiLevel | None = None) -> Promise:
    """What a build should do: compile where its target is not newer than its build torch's level. (The
    cells of a build that failed where it was promised to build are NOT_RUN: the failure is the build's.)"""
    target, b_level = built_for or build.effective_target, ApiLevel.of(build.torch)
    if target > b_level:
        return Promise(
            Expected.BUILD_FAILED, f"target {target} is newer than the build torch {b_level}", Condition.BUILD
        )
    return Promise(Expected.PASS, f"target {target} <= build torch {b_level}", Condition.BUILD)
