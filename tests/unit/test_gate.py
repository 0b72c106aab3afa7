"""The gate's decision from its three sources, without running anything (test_gate_decisions.py runs it)."""

import dataclasses
import datetime
import json
import re
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version
from test_report import BROKEN, ERROR, KEPT, result, run_of

from torch_abi_harness.cli import main
from torch_abi_harness.config import KnownBreak
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.text import md_text
from torch_abi_harness.gate.candidate import Candidate, check_candidate_wheel
from torch_abi_harness.gate.decide import Decision, decide, previous_release
from torch_abi_harness.results.diff import compare
from torch_abi_harness.results.prediction import CellPrediction
from torch_abi_harness.static.abi_diff import AbiDiff, SignatureChange
from torch_abi_harness.verdict import Verdict

CLEAN = AbiDiff("2.14.1", "2.15.0", (), ("torch_new",), (), ("torch_new",), (), ())


def test_go_lists_its_evidence_and_no_reason() -> None:
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(KEPT), None)
    assert (gate.decision, gate.exit_code, gate.reasons) == (Decision.GO, ExitCode.OK, ())
    assert gate.evidence[0] == (
        "abi-diff 2.14.1 -> 2.15.0: 0 removed export(s), 0 changed signature(s), 1 added export(s), "
        "1 added declaration(s), 0 changed version guard(s)"
    )
    assert "run on the candidate (backward): 1 cells, 1 kept, 0 broken" in "\n".join(gate.evidence)
    assert "**GO**" in gate.markdown() and json.loads(json.dumps(gate.to_json()))["decision"] == "GO"
    assert gate.summary == "torch 2.13.0 keeps the stable-ABI promise in both directions: GO."
    assert not {"## Why not", "## Warnings"} & set(gate.markdown().splitlines())
    assert "## Known breaks" not in gate.markdown()


def test_removed_exports_changed_signatures_and_broken_cells_are_each_a_reason() -> None:
    abi = dataclasses.replace(
        CLEAN,
        removed_exports=("aoti_torch_gone",),
        changed_signatures=(SignatureChange("torch_f", "int(int)", "int(long)"),),
    )
    baseline = run_of(dataclasses.replace(BROKEN, verdict=Verdict.KEPT))
    current = run_of(BROKEN)
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", abi, current, compare(baseline, current))
    assert gate.decision is Decision.NO_GO and gate.exit_code is ExitCode.BROKEN
    titles = [r.title for r in gate.reasons]
    assert titles[0].startswith("the candidate removes 1 stable export(s) of 2.14.1")
    assert titles[1] == "1 stable shim signature(s) changed since 2.14.1"
    assert gate.reasons[1].evidence == ("torch_f: int(int) -> int(long)",)
    (line,) = gate.reasons[2].evidence
    assert line.startswith(f"{BROKEN.id}: TEST_FAILED") and line.endswith("new since the baseline")
    assert "backward: built on 2.10.0, run on the candidate" in line


def test_an_incomplete_run_without_a_reason_is_undecided() -> None:
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(KEPT, ERROR), None)
    assert (gate.decision, gate.exit_code) == (Decision.UNDECIDED, ExitCode.INFRASTRUCTURE)
    assert gate.evidence[-1] == f"incomplete: 1 cell(s) ended in a harness error: {ERROR.id}"
    assert (
        decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(KEPT, ERROR, BROKEN), None).decision is Decision.NO_GO
    )
    errors = [dataclasses.replace(ERROR, id=f"demo@b2.10.0~r2.10.{n}-cpu") for n in range(7)]
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(KEPT, *errors), None)
    assert gate.evidence[-1] == "incomplete: 7 cell(s) ended in a harness error: " + ", ".join(c.id for c in errors[:5])


def test_a_newer_build_on_the_candidate_is_backward_and_failing_tests_are_cut_after_five() -> None:
    cells = [
        dataclasses.replace(
            result(f"b2.14.{n}", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN),
            failing_tests=tuple(f"t{k}" for k in range(n)),
        )
        for n in (5, 6)
    ]
    five, six = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(*cells), None).reasons[0].evidence
    assert five.endswith("; backward: built on 2.14.5, run on the candidate; failing tests t0, t1, t2, t3, t4")
    assert six.endswith("; backward: built on 2.14.6, run on the candidate; failing tests t0, t1, t2, t3, t4 (+1)")


def test_a_torch_that_is_no_version_is_compared_as_written() -> None:
    """A runtime from a local build may carry no PEP 440 version: it is nobody's candidate, and no crash."""
    local = dataclasses.replace(BROKEN, id="demo@b2.10.0~rlocal-cpu", runtime_torch="local build")
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, run_of(KEPT, local), None)
    assert gate.reasons[0].evidence == (f"{local.id}: TEST_FAILED: TEST_FAILED because; not the candidate's cell",)
    assert "run on the candidate (backward): 1 cells, 1 kept, 0 broken" in gate.evidence
    with pytest.raises(dataclasses.FrozenInstanceError):
        gate.reasons[0].title = "edited"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        gate.decision = Decision.GO  # type: ignore[misc]


def test_an_interrupted_run_is_undecided_even_when_every_cell_it_ran_kept_its_promise() -> None:
    whole = run_of(KEPT)
    interrupted = dataclasses.replace(whole, interrupted=True)
    assert decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, whole, None).decision is Decision.GO
    gate = decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, interrupted, None)
    assert (gate.decision, gate.exit_code, gate.reasons) == (Decision.UNDECIDED, ExitCode.INFRASTRUCTURE, ())
    assert gate.evidence[-1].startswith("incomplete: 0 cell(s) ended in a harness error and the run was interrupted")
    assert "UNDECIDED (exit 3)" in gate.summary and json.loads(json.dumps(gate.to_json()))["exit_code"] == 3
    # A reason outweighs the gap: what was seen is already enough to say no.
    broken = dataclasses.replace(run_of(KEPT, BROKEN), interrupted=True)
    assert decide(Candidate.parse("2.13.0"), "2.10.0", CLEAN, broken, None).decision is Decision.NO_GO


def test_each_broken_cell_and_each_known_break_lands_where_it_belongs() -> None:
    """Broken cells with their evidence (both directions, missing symbols, failing tests cut at five); an expired
    known break is a reason by name; an accepted one is listed apart; a fixed or unmatched one is a warning."""
    forward = dataclasses.replace(
        result("b2.13.0-t2.12", "r2.12.0-cpu", Status.LOAD_FAILED, Verdict.BROKEN),
        target="2.12",
        prediction=CellPrediction.from_json(
            {
                "outcome": "load_failed",
                "unstable": 0,
                "missing": [
                    {"name": "aoti_torch_new", "kind": "stable", "introduced": "2.13.0"},
                    {"name": "aoti_torch_odd", "kind": "stable", "introduced": None},
                ],
            }
        ),
        failing_tests=tuple(f"test_{n}" for n in range(7)),
    )
    symbol = dataclasses.replace(
        result("b2.11.0", "r2.13.0-cpu", Status.LOAD_FAILED, Verdict.BROKEN), missing_symbol="torch_x"
    )
    lapsed = dataclasses.replace(
        result("b2.12.0", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN), known_break="lapsed"
    )
    held = dataclasses.replace(
        result("b2.9.0", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.KNOWN_BREAK), known_break="held"
    )
    both = dataclasses.replace(
        result("b2.13.0-t2.11", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN),
        reason="`torch.ops` raised",
        failing_tests=("test_a", "test_b"),
    )
    untargeted = result("b2.13.0", "r2.10.0-cpu", Status.LOAD_FAILED, Verdict.BROKEN)
    fixed = dataclasses.replace(KEPT, known_break="gone")
    later, past = datetime.date(2099, 1, 1), datetime.date(2026, 1, 31)
    entries = (
        KnownBreak("held", ("b2.9.0",), "r", "https://x/1", later),
        KnownBreak("lapsed", ("b2.12.0",), "r", "https://x/2", past),
        KnownBreak("gone", ("b2.13.0",), "r", "https://x/3", later),
        KnownBreak("typo", ("b9",), "r", "https://x/4", later),
    )
    run = dataclasses.replace(
        run_of(fixed, forward, symbol, lapsed, held, ERROR, both, untargeted), known_breaks=entries
    )
    abi = dataclasses.replace(CLEAN, old="2.12.0", new="2.13.0")
    gate = decide(Candidate.parse("2.13.0"), "2.12.0", abi, run, None)
    assert (gate.decision, gate.exit_code) == (Decision.NO_GO, ExitCode.BROKEN)
    assert gate.summary == "torch 2.13.0 breaks the stable-ABI promise: NO-GO (2 reason(s))."
    assert [(r.title, r.evidence) for r in gate.reasons] == [
        (
            "4 broken promise(s) in the matrix with the candidate on both axes",
            (
                "demo@b2.11.0~r2.13.0-cpu: LOAD_FAILED: LOAD_FAILED because; backward: built on 2.11.0, run on the "
                "candidate; missing torch_x",
                "demo@b2.13.0-t2.11~r2.13.0-cpu: TEST_FAILED: `torch.ops` raised; built and run on the candidate; "
                "failing tests test_a, test_b",
                "demo@b2.13.0-t2.12~r2.12.0-cpu: LOAD_FAILED: LOAD_FAILED because; forward: built on the candidate "
                "for target 2.12, run on 2.12.0; missing aoti_torch_new (first exported by 2.13.0), aoti_torch_odd "
                "(first exported by no release); failing tests test_0, test_1, test_2, test_3, test_4 (+2)",
                "demo@b2.13.0~r2.10.0-cpu: LOAD_FAILED: LOAD_FAILED because; forward: built on the candidate for "
                "target its own level, run on 2.10.0",
            ),
        ),
        (
            "known break lapsed expired on 2026-01-31: 1 cell(s) broken again (https://x/2)",
            (
                "demo@b2.12.0~r2.13.0-cpu: TEST_FAILED: TEST_FAILED because; backward: built on 2.12.0, "
                "run on the candidate",
            ),
        ),
    ]
    assert gate.evidence[1:] == (
        "matrix run 20261121-000000: 8 cells: 1 kept, 5 broken, 1 error, 1 known break",
        "built on the candidate (forward): 4 cells, 1 kept, 3 broken",
        "run on the candidate (backward): 5 cells, 1 kept, 3 broken, 1 known break",
    )
    assert [line.split(" (")[0] for line in gate.known_breaks] == ["held"]
    assert [line.split(" (")[0] for line in gate.warnings] == ["gone", "typo"]
    markdown = gate.markdown().splitlines()
    assert markdown[:6] == [
        "# Release gate: torch 2.13.0 (against 2.12.0): **NO-GO**",
        "",
        gate.summary,
        "",
        "## Why not",
        "",
    ]
    assert markdown[6:9] == [
        "- ❌ **4 broken promise(s) in the matrix with the candidate on both axes**",
        "  - demo@b2.11.0\\~r2.13.0-cpu: LOAD_FAILED: LOAD_FAILED because; backward: built on 2.11.0, run on the "
        "candidate; missing torch_x",
        "  - demo@b2.13.0-t2.11\\~r2.13.0-cpu: TEST_FAILED: \\`torch.ops\\` raised; built and run on the candidate; "
        "failing tests test_a, test_b",  # escaped as summary.md escapes a cell's text: no markup from a cell
    ]
    for heading in ("## Evidence", "## Known breaks (accepted until they expire; not reasons)", "## Warnings"):
        assert heading in markdown
    assert markdown[markdown.index("## Known breaks (accepted until they expire; not reasons)") + 2].startswith(
        "- 🩹 held (accepted"
    )
    assert markdown[-1] == f"- ⚠️ {md_text(gate.warnings[1])}"


def test_against_a_baseline_each_broken_cell_says_whether_it_is_new_and_what_got_fixed() -> None:
    old = result("b2.9.0", "r2.13.0-cpu", Status.TEST_FAILED, Verdict.BROKEN)
    mended = dataclasses.replace(KEPT, status=Status.PASS)
    baseline = run_of(old, dataclasses.replace(mended, status=Status.TEST_FAILED, verdict=Verdict.BROKEN))
    gate = decide(
        Candidate.parse("2.13.0"),
        "2.10.0",
        CLEAN,
        run_of(old, BROKEN, mended),
        compare(baseline, run_of(old, BROKEN, mended)),
    )
    assert [e.rsplit("; ", 1)[1] for e in gate.reasons[0].evidence] == [
        "new since the baseline",  # BROKEN: absent from the baseline
        "broken in the baseline too",
    ]
    assert gate.baseline == baseline.run_id
    assert gate.evidence[-2:] == (
        f"against baseline {baseline.run_id}: 1 new break(s), 1 fixed, 0 known break(s), 0 changed, 1 new cell(s)",
        f"fixed since the baseline: {KEPT.id}: broken (TEST_FAILED) -> kept (PASS)",
    )


def test_the_previous_release_is_the_newest_runtime_below_the_candidate() -> None:
    candidate = Candidate.parse("2.15.0")
    versions = [Version(v) for v in ("2.9.1", "2.14.1", "2.10.0", "2.16.0")]
    assert previous_release(candidate, versions) == Version("2.14.1")
    assert previous_release(candidate, [Version("2.15.0"), Version("2.14.1")]) == Version("2.14.1")
    with pytest.raises(BadInputError, match=r"no runtime of the matrix is older than the candidate 2\.15\.0"):
        previous_release(candidate, [Version("2.15.0"), Version("2.16.0")])


def test_abi_diff_compares_with_the_given_wheel_else_one_in_find_links_else_the_release(tmp_path: Path) -> None:
    given = tmp_path / "given.whl"
    with zipfile.ZipFile(given, "w") as wheel:
        wheel.writestr("torch/version.py", "__version__ = '2.15.0'\n")
        wheel.writestr("torch/lib/libtorch_cpu.so", "\x7fELF")
    assert Candidate.parse("2.15.0").located(given, [], []).ref == str(given)
    text = tmp_path / "notes.whl"
    text.write_text("not a zip\n")
    with pytest.raises(BadInputError, match=f"{text}: not a wheel"):  # checked before any work
        Candidate.parse("2.15.0").located(text, [], [])
    empty, local, variant = tmp_path / "empty", tmp_path / "local", tmp_path / "variant"
    for folder in (empty, local, variant):
        folder.mkdir()
    (local / "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (local / "torch-2.15.01-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (local / "torch-2.15.0+cpu-cp311-cp311-linux_x86_64.whl").touch()  # the plain release first
    (local / "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl").touch()  # then by name
    (variant / "torch-2.15.0+cpu-cp311-cp311-linux_x86_64.whl").touch()
    found = Candidate.parse("2.15.0").located(None, [str(empty), str(local)], ["2.15.0"]).ref
    assert found == str(local / "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert Candidate.parse("2.15.0").located(None, [str(variant)], []).ref == str(
        variant / "torch-2.15.0+cpu-cp311-cp311-linux_x86_64.whl"
    )
    assert Candidate.parse("2.15.0").located(None, [str(empty)], ["2.14.1", "2.15.0"]).ref == "2.15.0"
    with pytest.raises(BadInputError, match=r"the manifest knows 2\.14\.1, 2\.13\.0"):
        Candidate.parse("2.15.0").located(None, [str(empty)], ["2.14.1", "2.13.0"])


def _torch_wheel(path: Path, version: str, library: str = "torch/lib/libtorch_cpu.so") -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/version.py", version)
        wheel.writestr(library, "\x7fELF")
    return path


@pytest.mark.parametrize(
    "name, version_py, variants, said",
    [
        (
            "torch-2.15.0-cp311-none-macosx_11_0_arm64.whl",
            "__version__ = '2.15.0'\n",
            (),
            "tagged for macosx_11_0_arm64",
        ),
        ("torch-2.15.0-cp311-cp311-win_amd64.whl", "__version__ = '2.15.0'\n", (), "tagged for win_amd64"),
        ("torch-2.15.0+cpu-cp311-cp311-linux_x86_64.whl", "__version__ = '2.15.0+cu130'\n", (), "named a +cpu wheel"),
        ("torch-2.15.0+cpu-cp311-cp311-linux_x86_64.whl", "__version__ = '2.15.0'\ncuda = '13.0'\n", (), "cu130"),
        ("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", "cuda = '12.8'\n", ("cpu",), "runtimes use cpu"),
    ],
)
def test_a_candidate_wheel_of_another_platform_or_variant_is_refused_naming_it(
    tmp_path: Path, name: str, version_py: str, variants: tuple[str, ...], said: str
) -> None:
    wheel = _torch_wheel(tmp_path / name, version_py)
    with pytest.raises(BadInputError, match=re.escape(said)) as caught:
        check_candidate_wheel(wheel, variants)
    assert str(wheel) in str(caught.value)


def test_a_candidate_wheel_of_the_runtimes_variant_is_taken(tmp_path: Path) -> None:
    cpu = _torch_wheel(
        tmp_path / "torch-2.15.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "__version__ = '2.15.0+cpu'"
    )
    check_candidate_wheel(cpu, ["auto", "cpu"])
    cuda = _torch_wheel(tmp_path / "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", "cuda = '13.0'\n")
    check_candidate_wheel(cuda, ["cu130"])
    check_candidate_wheel(cuda, ["auto"])  # auto: whatever the sources serve, so any Linux x86_64 variant
    dylib = _torch_wheel(tmp_path / "torch-2.15.0-cp311-cp311-linux_x86_64.whl", "", "torch/lib/libtorch_cpu.dylib")
    with pytest.raises(BadInputError, match=r"without torch/lib/libtorch\*\.so"):
        check_candidate_wheel(dylib, [])


def test_bad_input_is_refused_before_any_work(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = str(repo / "matrix.yaml")
    reports = ["--reports-dir", str(tmp_path / "reports")]
    assert main(["gate", "--matrix", matrix, *reports]) == 2
    assert "--candidate RELEASE is required" in capsys.readouterr().err
    assert main(["gate", "--matrix", matrix, "--candidate", "2.99.0", *reports]) == 2
    assert "no wheel of torch 2.99.0 to compare with abi-diff: pass --candidate-wheel" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()
