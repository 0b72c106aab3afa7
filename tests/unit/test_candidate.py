"""`--candidate`: the release as a runtime and as the build torch of every stable extension at every target."""

import dataclasses
from pathlib import Path

import pytest

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.gate.candidate import Candidate, candidate_extensions, with_candidate
from torch_abi_harness.plan import make_plan
from torch_abi_harness.verdict import Expected, promise


def test_a_released_version_as_the_candidate_of_a_matrix_of_older_releases(repo: Path) -> None:
    matrix = load_matrix(repo / "matrix.yaml")
    older = dataclasses.replace(matrix, runtimes=tuple(r for r in matrix.runtimes if r.torch.minor < 15))
    assert candidate_extensions(older) == ["stable_basic", "cp_specific", "cuda_ops"]  # no controls, no classic
    plan = make_plan(with_candidate(older, Candidate.parse("2.15.0")))
    assert "r2.15.0-cpu" in {r.id for r in plan.runtimes}
    on_candidate = {b.id for b in plan.builds if str(b.torch) == "2.15.0"}
    for extension, lowest in (("stable_basic", 9), ("cp_specific", 9), ("cuda_ops", 10)):
        assert {f"{extension}@b2.15.0-t2.{minor}" for minor in range(lowest, 16)} <= on_candidate
    ids = [b.id for b in plan.builds]
    assert len(ids) == len(set(ids))  # the matrix's own 2.15 builds are not repeated
    cells = {c.id: c for c in plan.cells}
    forward = promise(cells["stable_basic@b2.15.0-t2.9~r2.9.1-cpu"])  # the candidate's headers, the oldest runtime
    newer = promise(cells["stable_basic@b2.15.0-t2.15~r2.14.1-cpu"])  # a target newer than the runtime
    assert (forward.expected, newer.expected) == (Expected.PASS, Expected.LOAD_FAILED)
    assert newer.why == "target 2.15 is newer than the runtime torch 2.14"


def test_a_candidate_that_is_no_release_is_refused(repo: Path) -> None:
    with pytest.raises(ConfigError, match=r"--candidate '2.16': '2.16' is not a release written as X.Y.Z"):
        with_candidate(load_matrix(repo / "matrix.yaml"), Candidate.parse("2.16"))
