"""A real matrix run whole and as 3 shards: merged, the shards are the whole run, cell by cell.
And --rerun-failed / --rerun-broken on real cells (one of them fails only the first time it runs)."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from kit import cells_by_id, harness, latest_results, make_extension

FAILS = """
from @NS@ import ops

def test_passes():
    assert ops.answer() == 41

def test_answer_is_42():
    assert ops.answer() == 42
"""
PASSES = """
from @NS@ import ops

def test_answer():
    assert ops.answer() == 41
"""
# Fails the first time it runs: a cell may write only its own directory, new per attempt, so the test
# tells its attempt from where it runs (the first in cells/<id>/, a rerun in attempt-K/<id>/).
FLAKY = """
from pathlib import Path

from @NS@ import ops

def test_fails_the_first_time():
    first = Path.cwd().parent.name == "cells"
    assert not first, "the first attempt fails on purpose"
    assert ops.answer() == 41
"""


def outcome(cell: dict[str, Any]) -> tuple[str, str, dict[str, int]]:
    return cell["status"], cell["verdict"], cell["tests"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    make_extension(root / "extensions", "sharded", PASSES)
    make_extension(root / "extensions", "sharded_fails", FAILS)
    (root / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.13.0\n  - torch: 2.15.0\nbuilds:\n"
        "  - {extension: sharded, torch: 2.13.0}\n"
        "  - {extension: sharded, torch: 2.15.0, target: '2.10'}\n"
        "  - {extension: sharded_fails, torch: 2.13.0}\n"
    )
    return root


def test_three_shards_merged_are_the_whole_run(workspace: Path) -> None:
    reports = workspace / "reports"
    whole = harness("run", "--reports-dir", reports / "whole", cwd=workspace)
    assert whole.returncode == 1, whole.stdout  # sharded_fails breaks its promise on both runtimes
    expected = latest_results(reports / "whole")
    assert len(expected["cells"]) == 6 and expected["plan"]["shard"] is None

    for k in (1, 2, 3):
        proc = harness("run", "--shard", f"{k}/3", "--reports-dir", reports / f"shard-{k}", cwd=workspace)
        assert proc.returncode in (0, 1), proc.stdout
        shard = latest_results(reports / f"shard-{k}")
        assert shard["plan"]["shard"] == {"index": k, "count": 3}
        assert shard["plan"]["digest"] == expected["plan"]["digest"]
        assert shard["cells"], f"shard {k}/3 of 6 cells got none"

    merge = harness(
        "merge",
        *(reports / f"shard-{k}" / "latest" for k in (1, 2, 3)),
        "--reports-dir",
        reports / "merged",
        cwd=workspace,
    )
    assert merge.returncode == whole.returncode, merge.stdout
    assert "compatibility matrix" in merge.stdout
    merged = latest_results(reports / "merged")
    assert merged["plan"]["digest"] == expected["plan"]["digest"] and merged["plan"]["shard"] is None
    assert merged["exit_code"] == expected["exit_code"] and merged["summary"] == expected["summary"]
    want, got = cells_by_id(expected), cells_by_id(merged)
    assert got.keys() == want.keys()
    for cell_id, cell in want.items():
        assert outcome(got[cell_id]) == outcome(cell), cell_id
        for log in got[cell_id]["logs"].values():  # the merged report stands on its own: every log is there
            assert (reports / "merged" / "latest" / log).is_file(), (cell_id, log)
        assert (reports / "merged" / "latest" / "cells" / cell_id / "result.json").is_file()

    # The same shard twice, or a shard short: refused, nothing merged.
    twice = harness("merge", reports / "shard-1" / "latest", reports / "shard-1" / "latest", cwd=workspace)
    assert twice.returncode == 2 and "in more than one report" in twice.stdout, twice.stdout
    short = harness("merge", reports / "shard-1" / "latest", reports / "shard-2" / "latest", cwd=workspace)
    assert short.returncode == 2 and "missing shard(s): 3/3" in short.stdout, short.stdout


def test_rerun_failed_runs_exactly_the_broken_cells(workspace: Path) -> None:
    reports = workspace / "reports"
    if not (reports / "whole" / "latest").exists():
        assert harness("run", "--reports-dir", reports / "whole", cwd=workspace).returncode == 1
    failed = {c["id"] for c in latest_results(reports / "whole")["cells"] if c["verdict"] in ("broken", "error")}
    assert failed and all(i.startswith("sharded_fails@") for i in failed)
    proc = harness(
        "run", "--rerun-failed", reports / "whole" / "latest", "--reports-dir", reports / "rerun", cwd=workspace
    )
    assert proc.returncode == 1, proc.stdout
    assert set(cells_by_id(latest_results(reports / "rerun"))) == failed


def test_a_cell_that_fails_only_once_is_flaky_with_both_attempts(tmp_path: Path) -> None:
    make_extension(tmp_path / "extensions", "flaky_once", FLAKY)
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nruntimes:\n  - torch: 2.13.0\nbuilds:\n  - {extension: flaky_once, torch: 2.13.0}\n"
    )
    proc = harness("run", "--rerun-broken", "2", "--reports-dir", "reports", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout  # flaky does not fail the run...
    assert "1 flaky cell(s)" in proc.stdout  # ...but says so
    (cell,) = latest_results(tmp_path / "reports")["cells"]
    assert (cell["status"], cell["verdict"]) == ("PASS", "flaky")
    assert [(a["status"], a["verdict"]) for a in cell["attempts"]] == [("TEST_FAILED", "broken"), ("PASS", "kept")]
    assert "test_fails_the_first_time" in cell["attempts"][0]["reason"]
    run_dir = tmp_path / "reports" / "latest"
    assert json.loads((run_dir / "cells" / cell["id"] / "result.json").read_text())["verdict"] == "flaky"
    assert cell["attempts"][1]["logs"]["stdout"] == f"attempt-2/{cell['id']}/stdout.log"
    assert (run_dir / "attempt-2" / cell["id"] / "stdout.log").is_file()
    case = ET.parse(run_dir / "junit.xml").getroot().find("testcase")
    assert case is not None and case.find("failure") is None and case.find("flakyFailure") is not None
    assert "🔁" in (run_dir / "summary.md").read_text()
