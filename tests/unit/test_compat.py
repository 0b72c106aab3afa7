"""`compat`: per build, the runtimes it is proven on, as a table and a one-line range; a hole in the range fails."""

import dataclasses
import json
from pathlib import Path

import pytest
from synthetic import synthetic_run

from harness.cli import main
from harness.core.status import Status
from harness.render.report import write_report
from harness.results.compat import claims, markdown
from harness.verdict import Verdict

BUILD = "ext1@b2.14.1-t2.10"  # target 2.10: passes from 2.10 on, fails to load on 2.9 as promised


def test_a_build_proven_from_its_target_on_is_one_range_without_holes() -> None:
    (claim,) = claims(synthetic_run(2000), [BUILD])[:1]
    assert claim.build == BUILD
    assert claim.line() == "torch 2.10–2.15, CPython 3.10–3.12, CUDA 13"
    assert claim.holes == []
    marks = claim.by_release()
    assert marks["2.9"] == "❌" and all(marks[r] == "✅" for r in ("2.10", "2.11", "2.12", "2.13", "2.14", "2.15"))
    table = markdown([claim])
    assert table[0].startswith("| build | torch 2.9 | torch 2.10 |") and table[2].startswith(f"| `{BUILD}` | ❌ | ✅ |")


def test_a_cell_inside_the_range_that_did_not_pass_is_a_hole(tmp_path: Path) -> None:
    run = synthetic_run(2000)
    write_report(run, tmp_path / "before")
    clean = next(c for c in claims(run) if not c.holes and len(claims(run, [c.build])) == 1 and "t2.10" in c.build)
    assert main(["compat", str(tmp_path / "before"), "-k", clean.build]) == 0
    hole = next(c for c in clean.cells if c.runtime_id == "r2.12.1-cpu")
    cells = tuple(
        dataclasses.replace(c, status=Status.TEST_FAILED, verdict=Verdict.BROKEN, reason="1 test failed")
        if c is hole
        else c
        for c in run.cells
    )
    broken = dataclasses.replace(run, cells=cells)
    (claim,) = claims(broken, [clean.build])
    assert claim.line() == clean.line()  # the line alone would hide it
    assert [c.id for c in claim.holes] == [hole.id]
    assert claim.by_release()["2.12"] == "⚠️ 5/6"
    write_report(broken, tmp_path / "after")
    assert main(["compat", str(tmp_path / "after" / "results.json"), "-k", clean.build]) == 1


def test_a_flaky_pass_or_a_known_break_proves_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = synthetic_run(2000)
    flaky = tuple(
        dataclasses.replace(c, verdict=Verdict.FLAKY)
        if c.build_id == BUILD and c.runtime_torch.startswith("2.15")
        else c
        for c in run.cells
    )
    (claim,) = claims(dataclasses.replace(run, cells=flaky), [BUILD])[:1]
    assert claim.line() == "torch 2.10–2.14, CPython 3.10–3.12, CUDA 13"
    (tmp_path / "results.json").write_text(json.dumps(run.to_json()))
    assert main(["compat", str(tmp_path), "-k", "no-such-build"]) == 2
    assert "no build matches" in capsys.readouterr().err
