"""Shards: a deterministic, disjoint, covering, balanced partition; K/N typed by argparse; the CI job matrix."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from torch_abi_harness.cli import main, parser
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.plan import Build, Cell, Plan, PlanIdentity, Shard, make_plan
from torch_abi_harness.run.shard import (
    CELL_SECONDS,
    build_jobs,
    build_seconds,
    fan_out,
    needed_pythons,
    partition,
    shard_plan,
    split,
)


def validate_job_matrix(data: dict[str, Any]) -> None:
    """A job matrix of `plan --json` against the plan schema's own definition of one."""
    schema = load_schema("plan")
    jsonschema.validate(data, {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/job_matrix"})


@pytest.fixture
def plan(repo: Path) -> Plan:
    return make_plan(load_matrix(repo / "matrix.yaml"))


@pytest.mark.parametrize("count", [1, 2, 3, 7, 76, 77, 100])
def test_shards_are_disjoint_cover_every_cell_and_keep_plan_order(plan: Plan, count: int) -> None:
    parts = partition(plan.cells, count)
    assert [str(p.shard) for p in parts] == [f"{k}/{count}" for k in range(1, count + 1)]
    ids = [c.id for p in parts for c in p.cells]
    assert sorted(ids) == sorted(c.id for c in plan.cells)  # each cell in exactly one shard
    order = [c.id for c in plan.cells]
    for part in parts:
        assert [c.id for c in part.cells] == [i for i in order if i in {c.id for c in part.cells}]
    if count <= len(plan.cells):
        assert all(p.cells for p in parts), "a shard was left empty while there were cells enough"


def test_the_partition_is_the_same_on_every_machine(plan: Plan) -> None:
    """Same cells in another order, a new process: the same shards (nothing from hash order or the clock)."""
    shuffled = tuple(reversed(plan.cells))
    first = [sorted(c.id for c in p.cells) for p in partition(plan.cells, 4)]
    again = [sorted(c.id for c in p.cells) for p in partition(shuffled, 4)]
    assert first == again


def test_a_build_stays_in_one_shard_when_that_costs_nothing(plan: Plan) -> None:
    """The default matrix: 14 builds, 3 shards. Cells spread one by one would build nearly every build in
    every shard; kept together, each build is built once in all but where cutting one between two shards
    brings them within 5% of an even share (whole builds alone leave one shard 11% over here)."""
    parts = partition(plan.cells, 3)
    assert len(plan.needed_builds) <= sum(p.builds for p in parts) <= len(plan.needed_builds) + 2
    estimate = len(plan.cells) * CELL_SECONDS + sum(map(build_seconds, plan.needed_builds))
    assert max(p.seconds for p in parts) < estimate / 3 * 1.1
    assert sum(p.seconds for p in parts) == pytest.approx(
        estimate
        + sum(build_seconds(b) for p in parts for b in {c.build for c in p.cells})
        - sum(map(build_seconds, plan.needed_builds)),
        abs=0.5,
    )


def test_measured_durations_balance_the_shards(plan: Plan) -> None:
    """One build's cells are slow (as a previous run's durations say): balanced by those, no shard is more
    than 10% over an even share; balanced by the cost model alone, the real times are far apart."""
    slow = {c.id: 60.0 for c in plan.cells if c.build.id == "stable_basic@b2.15.0-t2.9"}

    def real_seconds(cells: tuple[Cell, ...]) -> float:
        builds = {c.build for c in cells}
        return sum(slow.get(c.id, CELL_SECONDS) for c in cells) + sum(map(build_seconds, builds))

    total = real_seconds(plan.cells)
    measured = partition(plan.cells, 3, slow)
    assert max(real_seconds(p.cells) for p in measured) <= total / 3 * 1.1
    assert [p.seconds for p in measured] == [round(real_seconds(p.cells), 1) for p in measured]
    blind = partition(plan.cells, 3)
    assert max(real_seconds(p.cells) for p in blind) > total / 3 * 1.5


def test_a_sharded_plan_knows_the_whole_plan(plan: Plan) -> None:
    part = shard_plan(plan, Shard(2, 3))
    assert part.cells and set(part.cells) < set(plan.cells)
    assert part.identity.cells == plan.identity.cells and part.identity.digest == plan.identity.digest
    assert part.identity.shard == Shard(2, 3) and plan.identity.shard is None
    other = make_plan(plan.matrix, ["r2.13"])
    assert other.identity.digest != plan.identity.digest


def test_the_digest_is_checked_when_read() -> None:
    identity = PlanIdentity("matrix.yaml", ("a@b1~r1-cpu",), Shard(1, 2))
    assert PlanIdentity.from_json(identity.to_json()) == identity
    forged = {**identity.to_json(), "cells": ["a@b1~r1-cpu", "b@b1~r1-cpu"]}
    with pytest.raises(ValueError, match="does not match"):
        PlanIdentity.from_json(forged)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0/3", "'0/3': K must be from 1 to N"),
        ("4/3", "'4/3': K must be from 1 to N"),
        ("1/0", "'1/0': K must be from 1 to N"),
        ("a/b", "'a/b' is not K/N"),
        ("3", "'3' is not K/N"),
        ("-1/3", "'-1/3' is not K/N"),
    ],
)
def test_a_bad_shard_is_a_usage_error(text: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(["run", f"--shard={text}"])
    assert info.value.code == 2
    assert f"argument --shard: {message}" in capsys.readouterr().err


def test_shard_and_rerun_broken_are_typed() -> None:
    args = parser().parse_args(["run", "--shard", "2/3", "--rerun-broken", "2"])
    assert (args.shard, args.rerun_broken) == (Shard(2, 3), 2)
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--rerun-broken", "0"])


def test_plan_shards_json_is_a_github_actions_job_matrix(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(repo / "matrix.yaml"), "--shards", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["include"]  # any other top-level key would be read as one more matrix axis
    assert [job["shard"] for job in data["include"]] == ["1/3", "2/3", "3/3"]
    assert sum(job["cells"] for job in data["include"]) == len(make_plan(load_matrix(repo / "matrix.yaml")).cells)
    assert all(set(job) == {"shard", "cells", "estimated_seconds", "pythons"} for job in data["include"])
    validate_job_matrix(data)
    # by cells, a job builds and runs its cells: its CPythons are its builds' and its runtimes'
    shards = split(make_plan(load_matrix(repo / "matrix.yaml")), 3, "cells")
    for job, part in zip(data["include"], shards, strict=True):
        wanted = {c.runtime.python for c in part.cells} | {c.build.python for c in part.cells}
        assert job["pythons"] == sorted(wanted, key=lambda v: int(v.split(".")[1]))
    # Each job's --shard is accepted by `run` as it is.
    assert [parser().parse_args(["run", "--shard", j["shard"]]).shard.index for j in data["include"]] == [1, 2, 3]


def test_a_fan_out_with_more_shards_than_cells_is_bad_input(plan: Plan) -> None:
    few = make_plan(plan.matrix, ["stable_basic@b2.9.1~r2.1[01]"])
    assert [j["cells"] for j in fan_out(few, 2)["include"]] == [1, 1]
    with pytest.raises(BadInputError, match=r"--shards 3 for 2 selected cell\(s\): .* ask for at most 2"):
        fan_out(few, 3)


@pytest.mark.parametrize("argv", [["run", "--shard", "1/99999999999"], ["plan", "--shards", "3000000"]])
def test_a_fan_out_larger_than_a_ci_job_matrix_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2 and "at most 256 shards" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["1e308", "inf", "604801"])
def test_a_timeout_beyond_a_week_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(["run", "--timeout", value])
    assert info.value.code == 2 and "at most 604800" in capsys.readouterr().err


def test_plan_json_lists_the_cells_and_their_promise(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--matrix", str(repo / "matrix.yaml"), "-k", "stable_basic@b2.13.0-t2.10", "--json"]
    assert main([*argv, "--shard", "1/2"]) == 0
    shard = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    for data in (shard, whole):
        jsonschema.validate(data, load_schema("plan"))
    assert whole["shard"] is None and shard["shard"] == {"index": 1, "count": 2}
    assert whole["digest"] == shard["digest"]
    assert whole["pythons"] == ["3.10", "3.11", "3.13"]  # sorted by version: 3.10 before 3.11, as in any job
    assert set(shard["pythons"]) == {
        c["runtime"].rpartition("-py")[2] if "-py" in c["runtime"] else "3.11" for c in shard["cells"]
    } | {"3.11"}  # the builds are made on 3.11
    assert len(whole["cells"]) == 11 and 0 < len(shard["cells"]) < 11  # 7 releases on 3.11, 4 on 3.10 and 3.13
    first = whole["cells"][0]
    assert first == {
        "id": "stable_basic@b2.13.0-t2.10~r2.9.1-cpu",
        "build": "stable_basic@b2.13.0-t2.10",
        "runtime": "r2.9.1-cpu",
        "expected": "load_failed",
        "why": "target 2.10 is newer than the runtime torch 2.9",
    }


def test_an_empty_shard_runs_nothing_and_reports_0_cells(repo: Path, tmp_path: Path) -> None:
    """More shards than cells: the extra shard builds and runs nothing (this tier would fail if it tried),
    writes a report of 0 cells that still names the whole plan, and exits 0."""
    argv = ["run", "--matrix", str(repo / "matrix.yaml"), "-k", "stable_basic@b2.9.1~r2.1[01]", "--shard", "3/3"]
    assert main([*argv, "--reports-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "cache")]) == 0
    data = json.loads((tmp_path / "r" / "latest" / "results.json").read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["cells"] == [] and data["exit_code"] == 0
    assert data["plan"]["shard"] == {"index": 3, "count": 3} and len(data["plan"]["cells"]) == 2
    assert "shard 3/3 of a plan of 2 cells" in (tmp_path / "r" / "latest" / "summary.md").read_text()


def test_a_split_by_runtime_keeps_each_runtime_in_one_shard_and_covers_every_cell(plan: Plan) -> None:
    parts = split(plan, 3, "runtime")
    runtimes = [{c.runtime.id for c in part.cells} for part in parts]
    assert all(runtimes) and sum(len(r) for r in runtimes) == len({c.runtime.id for c in plan.cells})
    assert sorted(c.id for part in parts for c in part.cells) == sorted(c.id for c in plan.cells)
    assert len(split(plan, None, "runtime")) == len({c.runtime.id for c in plan.cells})  # one per runtime
    shard = shard_plan(plan, Shard(2, 3, "runtime"))
    assert shard.cells == parts[1].cells and shard.identity.shard == Shard(2, 3, "runtime")
    assert PlanIdentity.from_json(shard.identity.to_json()).shard == Shard(2, 3, "runtime")


def test_plan_by_runtime_json_names_each_jobs_runtimes_and_build_jobs_each_build_torch(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--matrix", str(repo / "matrix.yaml"), "--by", "runtime", "--shards", "2", "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)
    assert [j["shard"] for j in jobs["include"]] == ["1/2", "2/2"]
    named = [r for j in jobs["include"] for r in j["runtimes"].split()]
    for job in jobs["include"]:  # a run job's CPythons are its runtimes' (its builds come made): 3.11 no more
        ids = job["runtimes"].split()
        assert job["pythons"] == sorted({r.rpartition("-py")[2] if "-py" in r else "3.11" for r in ids}), job
    assert len(named) == len(set(named)) == len(load_matrix(repo / "matrix.yaml").runtimes)
    assert main(["plan", "--matrix", str(repo / "matrix.yaml"), "--build-jobs", "--json"]) == 0
    builds = json.loads(capsys.readouterr().out)["include"]
    assert {b["torch"] for b in builds} == {str(b.torch) for b in load_matrix(repo / "matrix.yaml").builds}
    assert all(b["pythons"] == ["3.11"] for b in builds)  # the default matrix builds on 3.11 alone
    validate_job_matrix(jobs)
    validate_job_matrix({"include": builds})
    with pytest.raises(BadInputError, match="at most 11"):
        fan_out(make_plan(load_matrix(repo / "matrix.yaml"), ()), 12, by="runtime")


def test_the_cpythons_a_job_sets_up_are_sorted_by_version_without_the_interpreters_given_by_path(plan: Plan) -> None:
    runtime = plan.cells[0].runtime
    made_on = [dataclasses.replace(runtime, python=v) for v in ("3.13t", "3.9", "3.13", "3.10", "3.9")]
    given = dataclasses.replace(runtime, python="3.12", interpreter="/opt/python3.12/bin/python3.12")
    assert needed_pythons([*made_on, given]) == ["3.9", "3.10", "3.13", "3.13t"]
    assert needed_pythons([]) == []


def test_each_build_job_names_the_cpythons_of_its_own_builds(plan: Plan) -> None:
    first = next(b for b in plan.builds if str(b.torch) == "2.13.0")
    moved = dataclasses.replace(first, python="3.10")

    def on_310(build: Build) -> Build:
        return moved if build == first else build

    changed = dataclasses.replace(
        plan,
        builds=tuple(map(on_310, plan.builds)),
        cells=tuple(dataclasses.replace(c, build=on_310(c.build)) for c in plan.cells),
    )
    jobs = {j["torch"]: j["pythons"] for j in build_jobs(changed)["include"]}
    assert jobs["2.13.0"] == ["3.10", "3.11"] and jobs["2.9.1"] == ["3.11"]
