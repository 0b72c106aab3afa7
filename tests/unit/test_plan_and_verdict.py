from pathlib import Path

import pytest

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import SelectionError
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import make_plan
from torch_abi_harness.run.judge import judge
from torch_abi_harness.verdict import Expected, Verdict, promise


@pytest.fixture
def plan(repo: Path):
    return make_plan(load_matrix(repo / "matrix.yaml"))


def test_every_build_meets_every_runtime_unless_limited(plan) -> None:
    limited = {b.id: b for b in plan.builds if b.only_on}
    assert list(limited) == ["hang_control@b2.13.0-t2.9"]
    # `runtimes: ["2.15.0"]` names a release: both of its runtimes (Python 3.11 and 3.13).
    assert len(plan.cells) == (len(plan.builds) - 1) * len(plan.runtimes) + 2 == 145
    assert len({c.id for c in plan.cells}) == 145
    assert [c.runtime.id for c in plan.cells if c.build is limited["hang_control@b2.13.0-t2.9"]] == [
        "r2.15.0-cpu",
        "r2.15.0-cpu-py3.13",
    ]
    # cuda_ops runs everywhere: where a runtime lacks its CUDA major is decided from the built wheel.
    cuda = [c.runtime.id for c in plan.cells if c.build.id == "cuda_ops@b2.14.1-t2.10"]
    assert cuda == [r.id for r in plan.runtimes]


def test_cell_ids_are_canonical(plan) -> None:
    ids = {c.id for c in plan.cells}
    assert "stable_basic@b2.13.0-t2.10~r2.11.0-cpu" in ids
    assert "stable_basic@b2.15.0~r2.9.1-cpu" in ids


def test_selectors_match_parts_of_ids_with_globs(repo: Path) -> None:
    matrix = load_matrix(repo / "matrix.yaml")
    picked = make_plan(matrix, ["t2.10~r2.1[01]", "@b2.9.1~r2.15.0"])
    assert [c.id for c in picked.cells] == [
        "stable_basic@b2.9.1~r2.15.0-cpu",
        "stable_basic@b2.9.1~r2.15.0-cpu-py3.13",  # a selector matches any part of an id
        "stable_basic@b2.13.0-t2.10~r2.10.0-cpu",
        "stable_basic@b2.13.0-t2.10~r2.11.0-cpu",
        "cuda_ops@b2.14.1-t2.10~r2.10.0-cpu",  # a selector matches any extension's ids
        "cuda_ops@b2.14.1-t2.10~r2.11.0-cpu",
    ]
    assert [r.id for r in picked.needed_runtimes] == ["r2.10.0-cpu", "r2.11.0-cpu", "r2.15.0-cpu", "r2.15.0-cpu-py3.13"]


def test_a_selector_that_matches_nothing_says_why(repo: Path) -> None:
    with pytest.raises(SelectionError, match=r"'r2\.8' matches nothing") as info:
        make_plan(load_matrix(repo / "matrix.yaml"), ["r2.10", "r2.8"])
    assert "python -m torch_abi_harness plan" in str(info.value)


@pytest.mark.parametrize(
    ("cell_id", "expected"),
    [
        ("stable_basic@b2.9.1~r2.15.0-cpu", Expected.PASS),
        ("stable_basic@b2.15.0-t2.9~r2.9.1-cpu", Expected.PASS),
        ("stable_basic@b2.13.0-t2.10~r2.9.1-cpu", Expected.LOAD_FAILED),
        ("stable_basic@b2.13.0-t2.10~r2.10.0-cpu", Expected.PASS),
        ("stable_basic@b2.15.0~r2.14.1-cpu", Expected.LOAD_FAILED),
        ("stable_basic@b2.15.0~r2.15.0-cpu", Expected.PASS),
    ],
)
def test_the_promise_is_t_le_min_b_r(plan, cell_id: str, expected: Expected) -> None:
    cell = next(c for c in plan.cells if c.id == cell_id)
    assert promise(cell).expected is expected


def test_a_target_newer_than_the_build_torch_is_expected_not_to_build(tmp_path: Path, repo: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nextensions:\n  - path: " + str(repo / "extensions" / "stable_basic") + "\n"
        "runtimes:\n  - torch: 2.13.0\nbuilds:\n  - extension: stable_basic\n    torch: 2.10.0\n    target: '2.13'\n"
    )
    cell = make_plan(load_matrix(tmp_path / "matrix.yaml")).cells[0]
    assert promise(cell).expected is Expected.BUILD_FAILED


@pytest.mark.parametrize(
    ("expected", "status", "verdict"),
    [
        (Expected.PASS, Status.PASS, Verdict.KEPT),
        (Expected.PASS, Status.LOAD_FAILED, Verdict.BROKEN),
        (Expected.PASS, Status.TEST_FAILED, Verdict.BROKEN),
        (Expected.PASS, Status.CRASHED, Verdict.BROKEN),
        (Expected.PASS, Status.TIMEOUT, Verdict.BROKEN),
        (Expected.PASS, Status.BUILD_FAILED, Verdict.BROKEN),
        (Expected.PASS, Status.ERROR, Verdict.ERROR),
        (Expected.PASS, Status.SKIPPED, Verdict.SKIPPED),
        (Expected.LOAD_FAILED, Status.LOAD_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.LOAD_FAILED, Status.PASS, Verdict.UNEXPECTED_PASS),
        (Expected.LOAD_FAILED, Status.ERROR, Verdict.ERROR),
        (Expected.BUILD_FAILED, Status.BUILD_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.NONE, Status.PASS, Verdict.UNEXPECTED_PASS),
        (Expected.NONE, Status.LOAD_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.CRASHED, Status.CRASHED, Verdict.EXPECTED_FAILURE),
        (Expected.CRASHED, Status.PASS, Verdict.BROKEN),  # a control that does not crash proves nothing
        (Expected.CRASHED, Status.TIMEOUT, Verdict.BROKEN),
        (Expected.TIMEOUT, Status.TIMEOUT, Verdict.EXPECTED_FAILURE),
        (Expected.TEST_FAILED, Status.TEST_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.TIMEOUT, Status.ERROR, Verdict.ERROR),
        (Expected.TIMEOUT, Status.PASS, Verdict.BROKEN),  # each control proves only the failure it was built for
        (Expected.TEST_FAILED, Status.PASS, Verdict.BROKEN),
        (Expected.TEST_FAILED, Status.CRASHED, Verdict.BROKEN),
        # Where the matrix promises nothing, every way of failing is as good as expected.
        (Expected.NONE, Status.TEST_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.NONE, Status.BUILD_FAILED, Verdict.EXPECTED_FAILURE),
        (Expected.NONE, Status.CRASHED, Verdict.EXPECTED_FAILURE),
        (Expected.NONE, Status.TIMEOUT, Verdict.EXPECTED_FAILURE),
    ],
)
def test_verdicts(expected: Expected, status: Status, verdict: Verdict) -> None:
    assert judge(expected, status) is verdict


def test_an_unexpected_failure_exits_3_not_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness bug must never exit 1, which means "a promise was broken"."""
    from torch_abi_harness.cli import main

    def boom(args: object) -> int:
        raise OSError("disk on fire")

    monkeypatch.setattr("torch_abi_harness.cli.run.cmd_plan", boom)
    assert main(["plan"]) == 3


def test_a_negative_control_is_expected_to_fail_its_way_where_it_loads(plan) -> None:
    by_id = {c.id: c for c in plan.cells}
    assert promise(by_id["crash_control@b2.13.0-t2.9~r2.9.1-cpu"]).expected is Expected.CRASHED
    assert promise(by_id["hang_control@b2.13.0-t2.9~r2.15.0-cpu"]).expected is Expected.TIMEOUT
