"""The release gate for real: a released version (2.15.0) plays the candidate against a matrix of older releases.

GO: abi-diff 2.14.1 -> 2.15.0 is clean, the older builds pass on the candidate, the candidate's builds at
older targets pass on the older releases (and fail to load where the target is newer than the runtime,
as promised), and nothing is new against the previous release's run. NO-GO: an extension whose suite
fails on the candidate (a planted break); then the same break acknowledged (GO, listed apart), and expired
(NO-GO, by name), with a fixed and an unmatched entry reported.
"""

import json
from pathlib import Path
from typing import Any

from kit import cells_by_id, harness, harness_at_once, latest_results, make_extension

REPO = Path(__file__).resolve().parents[2]
PLANTED = """
import torch
from @NS@ import ops

def test_answer_on_this_release():
    # planted: on the candidate (2.15) the suite expects another answer, as if a behaviour changed there
    assert ops.answer() == (42 if torch.__version__.startswith("2.15.") else 41)
"""


def gate(work: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    (decided,) = gates([work], *args)
    return decided


def gates(works: list[Path], *args: str) -> list[tuple[int, dict[str, Any], str]]:
    """The gate on each work directory's matrix.yaml (its report in work/reports), the gates run at once."""
    common = ("--candidate", "2.15.0", "--previous", "2.14.1", *args)
    runs = [("gate", "--matrix", work / "matrix.yaml", "--reports-dir", work / "reports", *common) for work in works]
    decided = []
    for work, done in zip(works, harness_at_once(*runs, cwd=works[0]), strict=True):
        run_dir = (work / "reports" / "latest").resolve()
        assert (run_dir / "gate.md").is_file(), done.stdout
        decided.append((done.returncode, json.loads((run_dir / "gate.json").read_text()), done.stdout))
    return decided


def test_a_released_version_as_the_candidate_is_go_with_the_evidence(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        f"schema_version: 1\nextensions:\n  - path: {REPO / 'extensions' / 'stable_basic'}\n"
        "runtimes:\n  - torch: [2.13.0, 2.14.1]\n"
        'builds:\n  - {extension: stable_basic, torch: 2.13.0, target: "2.10"}\n'
    )
    baseline = harness("run", "--matrix", tmp_path / "matrix.yaml", "--reports-dir", tmp_path / "base", cwd=tmp_path)
    assert baseline.returncode == 0, baseline.stdout
    # The candidate's builds at three rungs (every rung from 2.9 is what an unselected gate builds).
    rungs = ["-k", "b2.13.0-t2.10", "-k", "b2.15.0-t2.13~", "-k", "b2.15.0-t2.15~"]
    code, decision, out = gate(tmp_path, *rungs, "--baseline", str(tmp_path / "base" / "latest"))
    assert code == 0, out
    assert decision["decision"] == "GO" and decision["reasons"] == []
    evidence = "\n".join(decision["evidence"])
    assert "abi-diff 2.14.1 -> 2.15.0: 0 removed export(s), 0 changed signature(s)" in evidence
    # the selectors take the header probe's cells at those rungs too: the candidate's headers, from 2.13 (the
    # oldest release this matrix runs), show nothing its releases do not export
    assert "built on the candidate (forward): 10 cells, 8 kept, 0 broken, 2 expected failure" in evidence
    assert "header audit: 0 finding(s)" in evidence and "header probe: 4 cell(s), 0 failing to load" in evidence
    assert "run on the candidate (backward): 5 cells, 5 kept, 0 broken" in evidence
    assert "against baseline" in evidence and "0 new break(s)" in evidence
    cells = cells_by_id(latest_results(tmp_path / "reports"))
    assert latest_results(tmp_path / "reports")["candidate"] == "2.15.0"
    newer = cells["stable_basic@b2.15.0-t2.15~r2.14.1-cpu"]  # a target newer than the runtime: promised to fail
    assert (newer["status"], newer["verdict"], newer["expected_why"]) == (
        "LOAD_FAILED",
        "expected_failure",
        "target 2.15 is newer than the runtime torch 2.14",
    )
    assert cells["stable_basic@b2.15.0-t2.13~r2.13.0-cpu"]["verdict"] == "kept"  # forward: the candidate's headers
    page = (tmp_path / "reports" / "latest" / "report.html").read_text()
    assert 'class="decision GO">GO<' in page and "Against baseline" in page
    assert "**GO**" in (tmp_path / "reports" / "latest" / "gate.md").read_text()


def test_a_planted_break_is_no_go_until_acknowledged_and_again_when_that_expires(tmp_path: Path) -> None:
    extension = make_extension(tmp_path / "extensions", "planted", PLANTED)
    matrix = (
        f"schema_version: 1\nextensions:\n  - path: {extension}\nruntimes:\n  - torch: [2.13.0, 2.14.1]\n"
        'builds:\n  - {extension: planted, torch: 2.13.0, target: "2.10"}\n'
    )

    def acknowledged(expires: str) -> str:
        return matrix + (
            "known_breaks:\n"
            f"  - {{name: planted-2.15, cells: '~r2.15.0', reason: accepted for now, link: 'https://example.org/1', "
            f"expires: {expires}}}\n"
            "  - {name: was-broken, cells: 'planted@b2.13.0-t2.10~r2.14.1', reason: r, link: l, expires: 2099-01-01}\n"
            "  - {name: typo, cells: 'r9.9.9', reason: r, link: l, expires: 2099-01-01}\n"
        )

    # The same matrix three ways (no entry, the entry, the entry expired): three gates at once, each in its own
    # directory, on the one build they share.
    works = {"plain": matrix, "accepted": acknowledged("2099-12-31"), "expired": acknowledged("2000-01-01")}
    for name, text in works.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "matrix.yaml").write_text(text)
    only = ["-k", "planted@b2.13.0"]  # the old build; the candidate's own builds of it are the other test's subject
    plain, accepted, expired = gates([tmp_path / name for name in works], *only)

    code, decision, out = plain
    assert code == 1, out
    assert decision["decision"] == "NO-GO"
    (reason,) = decision["reasons"]
    assert reason["title"] == "1 broken promise(s) in the matrix with the candidate on both axes"
    (line,) = reason["evidence"]
    assert line.startswith("planted@b2.13.0-t2.10~r2.15.0-cpu: TEST_FAILED")
    assert "backward: built on 2.13.0, run on the candidate" in line
    assert "failing tests test_planted::test_answer_on_this_release" in line
    assert "NO-GO" in out and "exit 1" in out

    code, decision, out = accepted
    assert code == 0, out
    assert decision["decision"] == "GO" and decision["reasons"] == []
    (known,) = decision["known_breaks"]
    assert known.startswith("planted-2.15 (accepted, expires 2099-12-31)")
    assert [w.split(" ")[:2] for w in decision["warnings"]] == [["was-broken", "(fixed,"], ["typo", "(unmatched,"]]
    results = latest_results(tmp_path / "accepted" / "reports")
    cell = cells_by_id(results)["planted@b2.13.0-t2.10~r2.15.0-cpu"]
    assert (cell["verdict"], cell["known_break"]) == ("known_break", "planted-2.15")
    own = json.loads((tmp_path / "accepted" / "reports" / "latest" / "cells" / cell["id"] / "result.json").read_text())
    assert (own["verdict"], own["known_break"]) == ("known_break", "planted-2.15")  # the cell's file agrees
    assert {k["name"]: k["state"] for k in results["known_breaks"]} == {
        "planted-2.15": "accepted",
        "was-broken": "fixed",
        "typo": "unmatched",
    }
    summary = (tmp_path / "accepted" / "reports" / "latest" / "summary.md").read_text()
    assert "## Known breaks" in summary and "remove the entry" in summary

    code, decision, out = expired
    assert code == 1, out
    (reason,) = decision["reasons"]
    assert reason["title"].startswith("known break planted-2.15 expired on 2000-01-01: 1 cell(s) broken again")
