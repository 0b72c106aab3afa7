"""`gate --from-run`: the decide job of the gate's CI graph decides from the merged run, running no cell, as the gate
that ran the same plan decided; a run of another plan, or a request without the build jobs' hand-offs, is refused
before any work. (tests/graph/test_gate_graph.py holds the whole graph to a one-machine gate.)"""

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from test_gate_orchestrate import Recorder, counts, small_matrix

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.decide import Decision
from torch_abi_harness.gate.orchestrate import GateRequest, run_gate
from torch_abi_harness.gate.replay import ROW_FILE, decide_from_run, replay_jobs, run_replay
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.run.launch import ExecuteOptions, MatrixRequest
from torch_abi_harness.run.pipeline import Pipeline

__all__ = ["counts"]  # the orchestration test's fixture: no env, no compiler, every cell passed without running


def request(tmp_path: Path, matrix: Path, **given: Any) -> GateRequest:
    prebuilt = tmp_path / "built"
    prebuilt.mkdir(exist_ok=True)
    execute = ExecuteOptions(reports_dir=tmp_path / "decided", cache_dir=tmp_path / "cache", jobs=1, prebuilt=prebuilt)
    return GateRequest(matrix=MatrixRequest(path=matrix), execute=execute, candidate=Candidate.parse("2.15.0"), **given)


def decided(data: dict[str, Any]) -> dict[str, Any]:
    """gate.json but for what two runs of one plan never share: the run's id and the timings."""
    evidence = [line.replace(data["run_id"], "RUN") for line in data["evidence"] if not line.startswith("gate timings")]
    return {k: v for k, v in data.items() if k not in {"run_id", "timings"}} | {"evidence": evidence}


def test_the_decide_job_decides_from_the_merged_run_as_the_gate_that_ran_it(
    tmp_path: Path, counts: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1")
    here = run_gate(request(tmp_path, matrix, from_run=None), Recorder())

    def no_cell(self: Pipeline) -> tuple[RunResult, Path]:
        raise AssertionError("the decide job ran the matrix")

    monkeypatch.setattr(Pipeline, "execute", no_cell)
    hooks = Recorder()
    graph = run_gate(request(tmp_path, matrix, from_run=here.run_dir / "results.json"), hooks)
    assert graph.run_dir == here.run_dir.resolve() and graph.gate.decision == here.gate.decision
    assert decided(graph.gate.to_json()) == decided(here.gate.to_json())
    assert any(line.startswith("matrix: the graph's merged run") for line in hooks.shown), hooks.shown
    assert {p.name for p in graph.written} == {"gate.md", "gate.json", "report.html"}


def test_a_run_of_another_plan_is_refused_before_any_work(tmp_path: Path, counts: dict[str, list[str]]) -> None:
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1")
    here = run_gate(request(tmp_path, matrix), Recorder())
    hooks = Recorder()
    with pytest.raises(BadInputError, match=r"the run of another plan than this gate's .* cell\(s\) only in the"):
        run_gate(request(tmp_path, matrix, from_run=here.run_dir, select=("r2.13.0",)), hooks)
    assert not any(line.startswith("abi-diff") for line in hooks.shown), "refused before abi-diff and the audit"


def test_from_run_needs_the_build_jobs_hand_offs_and_decides_one_candidate(tmp_path: Path) -> None:
    execute = ExecuteOptions(reports_dir=tmp_path, jobs=1)
    with pytest.raises(BadInputError, match="needs --prebuilt BUILT"):
        GateRequest(
            matrix=MatrixRequest(path=tmp_path / "m.yaml"),
            execute=execute,
            candidate=Candidate.parse("2.15.0"),
            from_run=tmp_path,
        )


def test_the_replays_table_from_its_graphs_rows_is_the_table_of_a_replay_here(
    tmp_path: Path, counts: dict[str, list[str]]
) -> None:
    """Each decide job leaves its replay-row.json; the table job tabulates them (`gate --replay --replay-rows`) as
    `gate --replay` does when it gates each release itself; a pair whose graph left no row is UNDECIDED."""
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1", "2.15.0")
    replay = GateRequest(
        matrix=MatrixRequest(path=matrix),
        execute=ExecuteOptions(reports_dir=tmp_path / "here", cache_dir=tmp_path / "cache", jobs=1),
        replay_from=Version("2.14.1"),
    )
    here = run_replay(replay, Recorder())
    rows = tmp_path / "decisions"
    for row in here.rows:  # as each candidate's decide job would: `gate --from-run`, its row beside gate.json
        assert row.run_dir is not None
        prebuilt = tmp_path / "built"
        prebuilt.mkdir(exist_ok=True)
        execute = ExecuteOptions(reports_dir=tmp_path / "x", cache_dir=tmp_path / "cache", jobs=1, prebuilt=prebuilt)
        one = GateRequest(
            matrix=MatrixRequest(path=matrix),
            execute=execute,
            candidate=Candidate.parse(str(row.candidate)),
            previous=row.previous,
            from_run=row.run_dir,
        )
        outcome = decide_from_run(one, Recorder())
        assert outcome.run_dir / ROW_FILE in outcome.written
        (rows / f"stable-abi-gate-{row.candidate}-report").mkdir(parents=True)
        (outcome.run_dir / ROW_FILE).rename(rows / f"stable-abi-gate-{row.candidate}-report" / ROW_FILE)
    tabulate = dataclasses.replace(replay, execute=dataclasses.replace(replay.execute, reports_dir=tmp_path / "t"))
    table = run_replay(dataclasses.replace(tabulate, replay_rows=rows), Recorder())
    assert [r.line for r in table.rows] == [r.line for r in here.rows]
    assert table.markdown.splitlines()[2:] == here.markdown.splitlines()[2:]  # but the title's minutes
    assert [r.decision for r in table.rows] == [Decision.GO, Decision.GO] and table.exit_code == 0
    (rows / "stable-abi-gate-2.15.0-report" / ROW_FILE).unlink()
    lost = run_replay(dataclasses.replace(tabulate, replay_rows=rows), Recorder())
    assert lost.rows[1].decision is Decision.UNDECIDED and "left no decision" in lost.rows[1].line
    assert lost.exit_code == 3
    with pytest.raises(BadInputError, match="--replay-rows tabulates a replay's graphs: add --replay"):
        dataclasses.replace(tabulate, replay_from=None, replay_rows=rows, candidate=Candidate.parse("2.15.0"))


def test_the_replays_job_matrix_is_one_gate_graph_per_pair(tmp_path: Path) -> None:
    matrix = small_matrix(tmp_path, "2.13.0", "2.14.1", "2.15.0")
    execute = ExecuteOptions(reports_dir=tmp_path / "r", cache_dir=tmp_path / "cache", jobs=1)
    replay = GateRequest(matrix=MatrixRequest(path=matrix), execute=execute, replay_from=Version("2.14.1"))
    assert replay_jobs(replay) == {
        "include": [{"candidate": "2.14.1", "previous": "2.13.0"}, {"candidate": "2.15.0", "previous": "2.14.1"}]
    }
