"""`compat`: per build, the runtimes it is proven on (promises kept, nothing else), as a table and a line that
spans no release, Python or variant the run did not prove; a hole in the range fails; a docs page keeps the
table between markers (`--update`, `--check`)."""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from synthetic import synthetic_run

from torch_abi_harness.cli import main
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.status import Status
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.compat import MARK_BEGIN, MARK_END, Claim, claims, document, markdown, splice
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.verdict import Verdict

BUILD = "ext1@b2.14.1-t2.10"  # target 2.10: passes from 2.10 on, fails to load on 2.9 as promised


def only(run: RunResult, keep: Callable[[CellResult], bool]) -> RunResult:
    return dataclasses.replace(run, cells=tuple(c for c in run.cells if keep(c)))


def changed(run: RunResult, where: Callable[[CellResult], bool], **fields: object) -> RunResult:
    return dataclasses.replace(
        run,
        cells=tuple(dataclasses.replace(c, **fields) if where(c) else c for c in run.cells),  # type: ignore[arg-type]
    )


def claim_of(run: RunResult, build: str = BUILD) -> Claim:
    (claim,) = claims(run, [build])[:1]
    assert claim.build == build
    return claim


def test_a_build_proven_from_its_target_on_is_one_range_without_holes() -> None:
    claim = claim_of(synthetic_run(2000))
    assert claim.line() == "torch 2.10–2.15 (CPython 3.10–3.12, cu130)"
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
    broken = changed(
        run, lambda c: c is hole, status=Status.TEST_FAILED, verdict=Verdict.BROKEN, reason="1 test failed"
    )
    claim = claim_of(broken, clean.build)
    assert claim.line() == clean.line()  # another runtime of 2.12 on CPython 3.11 passed: the line alone hides it
    assert [c.id for c in claim.holes] == [hole.id]
    assert claim.by_release()["2.12"] == "⚠️ 5/6"
    write_report(broken, tmp_path / "after")
    assert main(["compat", str(tmp_path / "after" / "results.json"), "-k", clean.build]) == 1


@pytest.mark.parametrize("verdict", [Verdict.UNEXPECTED_PASS, Verdict.FLAKY, Verdict.KNOWN_BREAK])
def test_only_a_kept_promise_proves_a_pass(verdict: Verdict) -> None:
    """An unexpected pass (nothing was promised: an unstable extension that happened to load), a flaky pass or a
    known break passed, yet proves nothing: the release drops out of the line and the table marks it unproven."""
    run = changed(
        synthetic_run(2000), lambda c: c.build_id == BUILD and c.runtime_torch.startswith("2.15"), verdict=verdict
    )
    assert all(c.status is Status.PASS for c in run.cells if c.build_id == BUILD and c.runtime_torch.startswith("2.15"))
    claim = claim_of(run)
    assert claim.line() == "torch 2.10–2.14 (CPython 3.10–3.12, cu130)"
    assert claim.by_release()["2.15"] == "❌"


def test_an_unexpected_pass_outside_every_promise_claims_nothing() -> None:
    """A build whose every pass is unexpected (no promise anywhere) is proven on no runtime."""
    run = changed(
        synthetic_run(2000), lambda c: c.build_id == BUILD and c.status is Status.PASS, verdict=Verdict.UNEXPECTED_PASS
    )
    claim = claim_of(run)
    assert claim.line() == "proven on no runtime of this run" and claim.holes == []


def test_a_release_the_run_left_out_is_not_tested_never_spanned() -> None:
    run = only(synthetic_run(2000), lambda c: not (c.build_id == BUILD and c.runtime_torch.startswith("2.12")))
    claim = claim_of(run)
    assert (
        claim.line()
        == "torch 2.10–2.11 (CPython 3.10–3.12, cu130), 2.13–2.15 (CPython 3.10–3.12, cu130); torch 2.12 not tested"
    )
    assert "2.12" not in claim.by_release()
    table = markdown(claims(run, ["ext1@", "ext2@"]))  # ext2 ran on 2.12, ext1 did not: its column says so
    assert table[0].split(" | ")[4] == "torch 2.12"
    assert table[2].split(" | ")[4] == "not tested"


def test_a_release_tested_and_never_proven_between_two_proven_ones_is_named() -> None:
    run = changed(
        synthetic_run(2000),
        lambda c: c.build_id == BUILD and c.runtime_torch.startswith(("2.12", "2.13")),
        status=Status.TEST_FAILED,
        verdict=Verdict.BROKEN,
    )
    claim = claim_of(run)
    assert claim.line().endswith("; torch 2.12, 2.13 not proven")
    assert {c.runtime_torch.split("+")[0] for c in claim.holes} == {"2.12.1", "2.13.0"}


def test_a_python_the_run_did_not_use_is_never_inside_a_span() -> None:
    run = only(synthetic_run(2000), lambda c: not (c.build_id == BUILD and c.runtime_python == "3.11"))
    assert claim_of(run).line() == "torch 2.10–2.15 (CPython 3.10 and 3.12, cu130); CPython 3.11 not tested"
    broken = changed(
        synthetic_run(2000),
        lambda c: c.build_id == BUILD and c.runtime_python == "3.11",
        status=Status.TEST_FAILED,
        verdict=Verdict.BROKEN,
    )
    claim = claim_of(broken)
    assert claim.line() == "torch 2.10–2.15 (CPython 3.10 and 3.12, cu130); CPython 3.11 not proven"
    assert {c.runtime_python for c in claim.holes} == {"3.11"}


def test_each_release_names_the_variants_it_ran_as_resolved() -> None:
    """A variant is named as the run resolved it (cu130, cpu), never widened ('CUDA 13' would claim cu126 too);
    releases with other variants are their own spans; a release whose Pythons and variants are not every
    combination lists its pairs."""
    run = changed(synthetic_run(2000), lambda c: c.runtime_torch.startswith("2.13"), runtime_variant="cpu")
    run = changed(
        run, lambda c: c.runtime_torch.startswith("2.15") and c.runtime_python == "3.10", runtime_variant="cu132"
    )
    run = only(run, lambda c: not (c.runtime_torch.startswith("2.15") and c.runtime_python == "3.12"))
    assert claim_of(run).line() == (
        "torch 2.10–2.12 (CPython 3.10–3.12, cu130), 2.13 (CPython 3.10–3.12, cpu), "
        "2.14 (CPython 3.10–3.12, cu130), 2.15 (CPython 3.10 cu132, 3.11 cu130)"
    )


PAGE = f"# Compatibility\n\nBefore.\n\n{MARK_BEGIN}\nold table\n{MARK_END}\n\nAfter.\n"


def test_splice_rewrites_only_between_the_markers_and_is_stable() -> None:
    once = splice(PAGE, ["| a |", "| b |"], "page.md")
    assert once == f"# Compatibility\n\nBefore.\n\n{MARK_BEGIN}\n| a |\n| b |\n{MARK_END}\n\nAfter.\n"
    assert splice(once, ["| a |", "| b |"], "page.md") == once


@pytest.mark.parametrize(
    "text",
    [
        "# no markers\n",
        f"{MARK_BEGIN}\nonly the start\n",
        f"{MARK_END}\nend first\n{MARK_BEGIN}\n",
        f"{MARK_BEGIN}\n{MARK_END}\n{MARK_BEGIN}\n{MARK_END}\n",
    ],
)
def test_splice_refuses_a_page_without_exactly_one_pair_of_markers(text: str) -> None:
    with pytest.raises(BadInputError, match=r"page\.md: needs exactly one <!-- compat:begin --> line followed"):
        splice(text, ["x"], "page.md")


def test_update_then_check_is_current_and_a_changed_run_makes_it_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = only(synthetic_run(2000), lambda c: c.build_id == BUILD)  # -k BUILD would match ext1@...-n31 too
    write_report(run, tmp_path / "run")
    page = tmp_path / "compat.md"
    page.write_text(PAGE)
    assert main(["compat", str(tmp_path / "run"), "-k", BUILD, "--check", str(page)]) == 1
    assert f"{page}: the compatibility table is stale" in capsys.readouterr().out
    assert main(["compat", str(tmp_path / "run"), "-k", BUILD, "--update", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Compatibility\n\nBefore.\n\n") and text.endswith(f"{MARK_END}\n\nAfter.\n")
    assert "\n".join(markdown(claims(run, [BUILD]))) in text
    assert f"| `{BUILD}` | ❌ | ✅ | ✅ | ✅ | ✅ | ✅ | ✅ | torch 2.10–2.15 (CPython 3.10–3.12, cu130) |\n" in text
    assert main(["compat", str(tmp_path / "run"), "-k", BUILD, "--check", str(page)]) == 0
    assert "the compatibility table is current" in capsys.readouterr().out
    later = changed(
        run, lambda c: c.build_id == BUILD and c.runtime_torch.startswith("2.15"), verdict=Verdict.UNEXPECTED_PASS
    )
    write_report(dataclasses.replace(later, run_id=run.run_id), tmp_path / "later")
    assert main(["compat", str(tmp_path / "later"), "-k", BUILD, "--check", str(page)]) == 1
    out = capsys.readouterr().out
    assert f"{page}: the compatibility table is stale" in out
    assert "+| `ext1@b2.14.1-t2.10` | ❌ | ✅ | ✅ | ✅ | ✅ | ✅ | ❌ | torch 2.10–2.14 " in out
    assert page.read_text() == text  # --check writes nothing


def test_update_keeps_the_pages_mode_and_a_link_to_it(tmp_path: Path) -> None:
    """A README is rewritten where it lies, readable as before (the atomic write's temporary file is 0600)."""
    run = only(synthetic_run(2000), lambda c: c.build_id == BUILD)
    write_report(run, tmp_path / "run")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "compat.md"
    page.write_text(PAGE)
    page.chmod(0o644)
    link = tmp_path / "README.md"
    link.symlink_to(page)
    assert main(["compat", str(tmp_path / "run"), "--update", str(link)]) == 0
    assert link.is_symlink() and MARK_BEGIN + "\nGenerated by" in page.read_text()
    assert page.stat().st_mode & 0o777 == 0o644


def test_update_writes_no_claim_with_holes(tmp_path: Path) -> None:
    run = synthetic_run(2000)
    holed = next(c.build for c in claims(run) if c.holes)
    write_report(run, tmp_path / "run")
    page = tmp_path / "compat.md"
    page.write_text(PAGE)
    assert main(["compat", str(tmp_path / "run"), "-k", holed, "--update", str(page)]) == 1
    assert page.read_text() == PAGE


def test_a_page_without_markers_is_bad_input_before_the_run_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "README.md"
    page.write_text("# My extension\n")
    for option in ("--update", "--check"):
        assert main(["compat", str(tmp_path / "no-such-run"), option, str(page)]) == 2
        err = capsys.readouterr().err
        assert f"{page}: needs exactly one {MARK_BEGIN} line followed by one {MARK_END} line" in err
        assert "add the two lines" in err
    assert page.read_text() == "# My extension\n"
    assert main(["compat", str(tmp_path / "no-such-run"), "--check", str(tmp_path / "missing.md")]) == 2
    assert "missing.md: cannot read it" in capsys.readouterr().err


def test_update_and_check_together_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compat", str(tmp_path), "--update", "a.md", "--check", "b.md"])
    assert exit_.value.code == 2


def test_no_build_matching_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(synthetic_run(2000).to_json()))
    assert main(["compat", str(tmp_path), "-k", "no-such-build"]) == 2
    assert "no build matches" in capsys.readouterr().err


def test_the_document_is_a_legend_line_and_the_table() -> None:
    run = synthetic_run(2000)
    found = claims(run, [BUILD])
    assert len(found) == 2  # ext1@b2.14.1-t2.10 and ext1@b2.14.1-t2.10-n31: a row each, in the run's order
    block = document(run, found)
    assert block[1:] == ["", *markdown(found)]
    assert f"from run `{run.run_id}`" in block[0] and "an unexpected pass proves nothing" in block[0]
