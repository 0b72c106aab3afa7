import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import PlanIdentity, make_plan
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.cases import CaseCounts
from torch_abi_harness.results.model import CellLogs, CellResult, Durations, RunResult, load_results
from torch_abi_harness.run.judge import Observed, judge_cell
from torch_abi_harness.verdict import Expected, Verdict


def result(
    build: str, runtime: str, status: Status, verdict: Verdict, expected: Expected = Expected.PASS
) -> CellResult:
    return CellResult(
        id=f"demo@{build}~{runtime}",
        build_id=f"demo@{build}",
        runtime_id=runtime,
        extension="demo",
        build_torch=build[1:].split("-")[0],
        build_variant="auto",
        target=None,
        runtime_torch=runtime[1:-4],
        runtime_variant="cpu",
        backend="venv",
        device="cpu",
        status=status,
        reason=f"{status.value} because",
        expected=expected,
        expected_why="policy",
        verdict=verdict,
        tests=CaseCounts(passed=3),
        durations=Durations.from_json({"total": 1.5, "import_torch": None}),
        logs=CellLogs(stdout="cells/x/stdout.log"),
    )


def run_of(*cells: CellResult) -> RunResult:
    return RunResult(
        run_id="20261121-000000",
        started="s",
        finished="f",
        harness_version="0.1.0",
        matrix="matrix.yaml",
        backend="venv",
        selectors=(),
        cells=cells,
        build_order=("demo@b2.13.0", "demo@b2.10.0"),
        runtime_order=("r2.10.0-cpu", "r2.13.0-cpu"),
        plan=PlanIdentity("matrix.yaml", tuple(sorted(c.id for c in cells))),
    )


KEPT = result("b2.13.0", "r2.13.0-cpu", Status.PASS, Verdict.KEPT)
EXPECTED_FAIL = result("b2.13.0", "r2.10.0-cpu", Status.LOAD_FAILED, Verdict.EXPECTED_FAILURE, Expected.LOAD_FAILED)
BROKEN = result("b2.10.0", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN)
ERROR = result("b2.10.0", "r2.10.0-cpu", Status.ERROR, Verdict.ERROR)


@pytest.mark.parametrize(
    ("cells", "code"),
    [
        ((KEPT, EXPECTED_FAIL), ExitCode.OK),
        ((KEPT, BROKEN, ERROR), ExitCode.BROKEN),
        ((KEPT, ERROR), ExitCode.INFRASTRUCTURE),
    ],
)
def test_exit_code_is_the_worst_verdict(cells: tuple[CellResult, ...], code: ExitCode) -> None:
    assert run_of(*cells).exit_code is code


def test_results_json_matches_its_schema_and_round_trips(tmp_path: Path) -> None:
    run = run_of(KEPT, EXPECTED_FAIL, BROKEN, ERROR)
    files = write_report(run, tmp_path)
    data = json.loads(files["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["schema_version"] == 9 and data["exit_code"] == 1
    assert [c["id"] for c in data["cells"]] == sorted(c["id"] for c in data["cells"])
    assert data["summary"] == {
        "kept": 1,
        "broken": 1,
        "expected_failure": 1,
        "unexpected_pass": 0,
        "skipped": 0,
        "error": 1,
        "flaky": 0,
        "known_break": 0,
        "not_run": 0,
    }
    assert load_results(files["results"]).to_json() == data


def test_the_schema_rejects_a_bad_status(tmp_path: Path) -> None:
    data = run_of(KEPT).to_json()
    data["cells"][0]["status"] = "PASSED"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, load_schema("results"))


def test_summary_has_a_grid_a_legend_and_every_non_pass_explained(tmp_path: Path) -> None:
    text = write_report(run_of(KEPT, EXPECTED_FAIL, BROKEN, ERROR), tmp_path)["summary"].read_text()
    assert "| build \\ runtime | 2.10.0 | 2.13.0 |" in text
    assert "| `demo@b2.13.0` | ➖ load | ✅ pass |" in text
    assert "| `demo@b2.10.0` | ⚠️ error | ❌ test |" in text
    assert "Legend:" in text
    for cell in (EXPECTED_FAIL, BROKEN, ERROR):
        assert f"`{cell.id}`: **{cell.status.value}**" in text
    assert f"`{KEPT.id}`:" not in text


def test_junit_has_one_testcase_per_cell(tmp_path: Path) -> None:
    root = ET.parse(write_report(run_of(KEPT, EXPECTED_FAIL, BROKEN, ERROR), tmp_path)["junit"]).getroot()
    assert root.get("tests") == "4" and root.get("failures") == "1" and root.get("errors") == "1"
    cases = {c.get("classname") + "~" + c.get("name"): c for c in root.iter("testcase")}
    assert cases[BROKEN.id.replace("demo@", "demo@", 1)].find("failure") is not None
    assert cases[EXPECTED_FAIL.id].find("skipped").get("message").startswith("expected failure: LOAD_FAILED")


def test_junits_root_says_when_where_how_long_and_which_plan(tmp_path: Path) -> None:
    """What dorny/test-reporter and Jenkins read from the root: without `time` they show NaN durations."""
    run = dataclasses.replace(
        run_of(KEPT, BROKEN), started="2026-11-28T02:00:00+00:00", finished="2026-11-28T02:03:30+00:00"
    )
    root = ET.parse(write_report(run, tmp_path)["junit"]).getroot()
    assert root.get("time") == "210.000"
    assert root.get("timestamp") == "2026-11-28T02:00:00"
    assert root.get("hostname")
    properties = {p.get("name"): p.get("value") for p in root.find("properties").iter("property")}
    assert properties == {
        "run_id": "20261121-000000",
        "harness_version": "0.1.0",
        "matrix": "matrix.yaml",
        "plan_digest": run.plan.digest,
    }
    unparsable = ET.parse(write_report(run_of(KEPT), tmp_path / "other")["junit"]).getroot()
    assert unparsable.get("time") == "0.000" and unparsable.get("timestamp") == "s"


def test_report_files_honour_the_umask(tmp_path: Path) -> None:
    """Every report file is as readable as the umask makes a new file (0644 under 022), not mkstemp's 0600; a
    rewrite keeps the mode the file has."""
    import os
    import stat

    previous = os.umask(0o022)
    try:
        files = write_report(run_of(KEPT, BROKEN), tmp_path)
        modes = {name: stat.S_IMODE(path.stat().st_mode) for name, path in files.items() if path.is_file()}
        assert modes and set(modes.values()) == {0o644}, modes
        os.umask(0o027)
        files["summary"].chmod(0o600)
        again = write_report(run_of(KEPT, BROKEN), tmp_path)
        assert stat.S_IMODE(again["summary"].stat().st_mode) == 0o600  # kept
        assert stat.S_IMODE(again["junit"].stat().st_mode) == 0o644  # kept, though the umask is 027 now
        fresh = write_report(run_of(KEPT), tmp_path / "fresh")
        assert stat.S_IMODE(fresh["junit"].stat().st_mode) == 0o640  # a new file: 0666 & ~027
    finally:
        os.umask(previous)


def test_from_version_4_the_schema_requires_the_plan() -> None:
    data = run_of(KEPT).to_json()
    jsonschema.validate(data, load_schema("results"))
    del data["plan"]
    with pytest.raises(jsonschema.ValidationError, match="'plan' is a required property"):
        jsonschema.validate(data, load_schema("results"))
    data["schema_version"] = 3
    jsonschema.validate(data, load_schema("results"))


def test_from_version_5_a_cell_names_the_python_of_its_build_and_runtime(repo: Path, tmp_path: Path) -> None:
    cell = make_plan(load_matrix(repo / "matrix.yaml"), ["stable_basic@b2.9.1~r2.10.0"]).cells[0]
    other = dataclasses.replace(cell, runtime=dataclasses.replace(cell.runtime, python="3.10"))
    observed = Observed(
        status=Status.PASS, reason="3 passed", backend="venv", runtime_torch="2.10.0+cpu", runtime_variant="cpu"
    )
    judged = [judge_cell(c, observed) for c in (cell, other)]
    assert [(c.build_python, c.runtime_python) for c in judged] == [("3.11", "3.11"), ("3.11", "3.10")]
    data = json.loads(write_report(run_of(*judged), tmp_path)["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert {(c["build"]["python"], c["runtime"]["python"]) for c in data["cells"]} == {
        ("3.11", "3.11"),
        ("3.11", "3.10"),
    }
    assert load_results(tmp_path / "results.json").to_json() == data
    del data["cells"][0]["runtime"]["python"]
    with pytest.raises(jsonschema.ValidationError, match="'python' is a required property"):
        jsonschema.validate(data, load_schema("results"))


def test_version_4_results_without_pythons_still_load_and_validate(tmp_path: Path) -> None:
    data = run_of(KEPT, BROKEN).to_json()
    data["schema_version"] = 4
    for cell in data["cells"]:
        del cell["build"]["python"], cell["runtime"]["python"]
    jsonschema.validate(data, load_schema("results"))
    (tmp_path / "v4.json").write_text(json.dumps(data))
    loaded = load_results(tmp_path / "v4.json")
    assert {(c.build_python, c.runtime_python) for c in loaded.cells} == {(None, None)}
    jsonschema.validate(loaded.to_json(), load_schema("results"))  # written again as version 5: null, not absent
