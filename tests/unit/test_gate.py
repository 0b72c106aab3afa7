"""The gate's decision from its three sources, without running anything (test_gate_decisions.py runs it)."""

import dataclasses
import json
from pathlib import Path

import pytest
from test_report import BROKEN, ERROR, KEPT, run_of

from harness.cli import main
from harness.core.errors import ExitCode
from harness.results.diff import compare
from harness.results.gate import Decision, decide, previous_release
from harness.static.abi_diff import AbiDiff, SignatureChange
from harness.verdict import Verdict

CLEAN = AbiDiff("2.14.1", "2.15.0", (), ("torch_new",), (), ("torch_new",), (), ())


def test_go_lists_its_evidence_and_no_reason() -> None:
    gate = decide("2.13.0", "2.10.0", CLEAN, run_of(KEPT), None)
    assert (gate.decision, gate.exit_code, gate.reasons) == (Decision.GO, ExitCode.OK, ())
    assert gate.evidence[0] == (
        "abi-diff 2.14.1 -> 2.15.0: 0 removed export(s), 0 changed signature(s), 1 added export(s), "
        "1 added declaration(s), 0 changed version guard(s)"
    )
    assert "run on the candidate (backward): 1 cells, 1 kept, 0 broken" in "\n".join(gate.evidence)
    assert "**GO**" in gate.markdown() and json.loads(json.dumps(gate.to_json()))["decision"] == "GO"


def test_removed_exports_changed_signatures_and_broken_cells_are_each_a_reason() -> None:
    abi = dataclasses.replace(
        CLEAN,
        removed_exports=("aoti_torch_gone",),
        changed_signatures=(SignatureChange("torch_f", "int(int)", "int(long)"),),
    )
    baseline = run_of(dataclasses.replace(BROKEN, verdict=Verdict.KEPT))
    current = run_of(BROKEN)
    gate = decide("2.13.0", "2.10.0", abi, current, compare(baseline, current))
    assert gate.decision is Decision.NO_GO and gate.exit_code is ExitCode.BROKEN
    titles = [r.title for r in gate.reasons]
    assert titles[0].startswith("the candidate removes 1 stable export(s) of 2.14.1")
    assert titles[1] == "1 stable shim signature(s) changed since 2.14.1"
    assert gate.reasons[1].evidence == ("torch_f: int(int) -> int(long)",)
    (line,) = gate.reasons[2].evidence
    assert line.startswith(f"{BROKEN.id}: TEST_FAILED") and line.endswith("new since the baseline")
    assert "backward: built on 2.10.0, run on the candidate" in line


def test_an_incomplete_run_without_a_reason_is_undecided() -> None:
    gate = decide("2.13.0", "2.10.0", CLEAN, run_of(KEPT, ERROR), None)
    assert (gate.decision, gate.exit_code) == (Decision.UNDECIDED, ExitCode.INFRASTRUCTURE)
    assert decide("2.13.0", "2.10.0", CLEAN, run_of(KEPT, ERROR, BROKEN), None).decision is Decision.NO_GO


def test_an_interrupted_run_is_undecided_even_when_every_cell_it_ran_kept_its_promise() -> None:
    whole = run_of(KEPT)
    interrupted = dataclasses.replace(whole, interrupted=True)
    assert decide("2.13.0", "2.10.0", CLEAN, whole, None).decision is Decision.GO
    gate = decide("2.13.0", "2.10.0", CLEAN, interrupted, None)
    assert (gate.decision, gate.exit_code, gate.reasons) == (Decision.UNDECIDED, ExitCode.INFRASTRUCTURE, ())
    assert gate.evidence[-1].startswith("incomplete: 0 cell(s) ended in a harness error and the run was interrupted")
    assert "UNDECIDED (exit 3)" in gate.summary and json.loads(json.dumps(gate.to_json()))["exit_code"] == 3
    # A reason outweighs the gap: what was seen is already enough to say no.
    broken = dataclasses.replace(run_of(KEPT, BROKEN), interrupted=True)
    assert decide("2.13.0", "2.10.0", CLEAN, broken, None).decision is Decision.NO_GO


def test_the_previous_release_is_the_newest_runtime_below_the_candidate() -> None:
    assert previous_release("2.15.0", ["2.9.1", "2.14.1", "2.10.0", "2.16.0"]) == "2.14.1"


def test_bad_input_is_refused_before_any_work(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = str(repo / "matrix.yaml")
    reports = ["--reports-dir", str(tmp_path / "reports")]
    assert main(["gate", "--matrix", matrix, *reports]) == 2
    assert "--candidate RELEASE is required" in capsys.readouterr().err
    assert main(["gate", "--matrix", matrix, "--candidate", "2.99.0", *reports]) == 2
    assert "no wheel of torch 2.99.0 to compare with abi-diff: pass --candidate-wheel" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()
