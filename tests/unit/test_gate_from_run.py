"""`gate --from-run`: the decide job of the gate's CI graph decides from the merged run, running no cell, as the gate
that ran the same plan decided; a run of another plan, or a request without the build jobs' hand-offs, is refused
before any work. (tests/graph/test_gate_graph.py holds the whole graph to a one-machine gate.)"""

from pathlib import Path
from typing import Any

import pytest
from test_gate_orchestrate import Recorder, counts, small_matrix

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.gate.candidate import Candidate
from torch_abi_harness.gate.orchestrate import GateRequest, run_gate
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
