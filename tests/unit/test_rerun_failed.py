"""--rerun-failed REPORT: exactly the cells broken or errored there, within -k; nothing to rerun is exit 0."""

import dataclasses
import json
from pathlib import Path

import pytest
from test_merge import write_run

from torch_abi_harness.cli import main
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import make_plan
from torch_abi_harness.verdict import Verdict

BROKEN_ID = "stable_basic@b2.13.0-t2.10~r2.11.0-cpu"
ERROR_ID = "classic_ops@b2.13.0~r2.13.0-cpu"
GONE_ID = "stable_basic@b2.8.0~r2.11.0-cpu"  # a cell of an older matrix


@pytest.fixture
def report(repo: Path, tmp_path: Path) -> Path:
    """A previous run of two builds: one cell broken, one errored, one gone from the matrix since."""
    plan = make_plan(load_matrix(repo / "matrix.yaml"), ["stable_basic@b2.13.0-t2.10", "classic_ops"])
    out = write_run(plan, tmp_path / "previous")
    data = json.loads((out / "results.json").read_text())
    gone = dict(data["cells"][0], id=GONE_ID)
    for cell in [*data["cells"], gone]:
        if cell["id"] in (BROKEN_ID, GONE_ID):
            cell |= {"status": Status.TEST_FAILED.value, "verdict": Verdict.BROKEN.value}
        if cell["id"] == ERROR_ID:
            cell |= {"status": Status.ERROR.value, "verdict": Verdict.ERROR.value}
    data["cells"].append(gone)
    (out / "results.json").write_text(json.dumps(data))
    return out


def planned(repo: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """`plan --json`'s cell ids (stdout holds the JSON alone) and what it said (on stderr)."""
    code = main(["plan", "--matrix", str(repo / "matrix.yaml"), "--json", *argv])
    out, err = capsys.readouterr()
    return code, [c["id"] for c in json.loads(out)["cells"]] if code == 0 else [], err


def test_exactly_the_broken_and_errored_cells(repo: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, ids, said = planned(repo, capsys, "--rerun-failed", str(report))
    assert code == 0 and sorted(ids) == sorted([BROKEN_ID, ERROR_ID])
    assert f"1 failed cell(s) of {report} are not in matrix.yaml: {GONE_ID}" in said


def test_with_selectors_it_is_the_intersection(repo: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, ids, _ = planned(repo, capsys, "--rerun-failed", str(report), "-k", "classic_ops")
    assert (code, ids) == (0, [ERROR_ID])


def test_a_report_without_failures_reruns_nothing(repo: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((report / "results.json").read_text())
    data["cells"] = [c for c in data["cells"] if c["verdict"] not in ("broken", "error")]
    (report / "results.json").write_text(json.dumps(data))
    code, ids, said = planned(repo, capsys, "--rerun-failed", str(report))
    assert (code, ids) == (0, [])
    assert "was broken or errored: nothing to rerun (exit 0)" in said
    # `run` stops there too, before any work (this unit tier would fail on any env or build).
    assert main(["run", "--matrix", str(repo / "matrix.yaml"), "--rerun-failed", str(report)]) == 0


def test_a_bad_report_is_bad_input(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--matrix", str(repo / "matrix.yaml"), "--rerun-failed", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and "no such results file" in err and not out  # errors on stderr, never on stdout


def test_failed_ids_are_broken_and_error_only() -> None:
    from test_report import BROKEN, ERROR, EXPECTED_FAIL, KEPT, run_of

    flaky = dataclasses.replace(KEPT, id="f", verdict=Verdict.FLAKY)
    assert run_of(KEPT, EXPECTED_FAIL, BROKEN, ERROR, flaky).failed_ids == {BROKEN.id, ERROR.id}
