"""The mutation report: scores per extension and convention, survivors with their reason, and the states
that make a run an error (a failing baseline, a sentinel not killed, a cell in error)."""

import dataclasses
import json
from pathlib import Path

from torch_abi_harness.mutate.catalogue import Catalogue, Mutant
from torch_abi_harness.mutate.output import write_mutation_report
from torch_abi_harness.mutate.report import MutationReport, Score
from torch_abi_harness.mutate.run import MutantCell, MutantVerdict, MutationRun

SENTINEL = Mutant("sentinel.abort", ("aoti_torch_delete_tensor_object",), "sentinel", "aborts", "", sentinel=True)
DIM = Mutant("meta.dim", ("aoti_torch_get_dim",), "tensor-metadata", "dim one larger", "")
DTYPE = Mutant("enum.dtype", ("aoti_torch_get_dtype",), "enum-codes", "dtype neighbour", "")
LEAK = Mutant(
    "own.leak", ("aoti_torch_delete_tensor_object",), "ownership", "never deletes", "", equivalent=(("*", "unseen"),)
)
BOOL = Mutant(
    "ivalue.bool", ("torch_library_impl",), "stableivalue", "a bool <inverted>", "", equivalent=(("other", "no bool"),)
)
CATALOGUE = Catalogue(Path("catalogue.yaml"), (SENTINEL, DIM, DTYPE, LEAK, BOOL))


def cell(
    mutant: Mutant | None,
    verdict: MutantVerdict | None,
    build: str = "ext@b2.15.0",
    status: str = "",
    hit: bool | None = None,
) -> MutantCell:
    runtime = "r2.15.0-cpu"
    status = status or {MutantVerdict.KILLED: "TEST_FAILED", MutantVerdict.SURVIVED: "PASS"}.get(verdict, "PASS")  # type: ignore[arg-type]
    return MutantCell(
        mutant.id if mutant else None,
        f"{build}~{runtime}",
        build.split("@")[0],
        build,
        runtime,
        verdict,
        status,
        "why",
        hit=verdict is MutantVerdict.SURVIVED if hit is None else hit,
    )


def run_of(*cells: MutantCell, baselines: tuple[MutantCell, ...] = (), run_dir: Path = Path("/nowhere")) -> MutationRun:
    baselines = baselines or (cell(None, None), cell(None, None, "ext@b2.9.1"))
    return MutationRun("r1", run_dir, "2026-11-25T12:00:00+00:00", 12.0, CATALOGUE, baselines, cells, ())


GOOD = (
    cell(SENTINEL, MutantVerdict.KILLED),
    cell(SENTINEL, MutantVerdict.KILLED, "ext@b2.9.1"),
    cell(DIM, MutantVerdict.KILLED),
    cell(DIM, MutantVerdict.SURVIVED, "ext@b2.9.1"),  # survived on one build: survived for the extension
    cell(DTYPE, MutantVerdict.KILLED),
    cell(DTYPE, MutantVerdict.NOT_APPLICABLE, "ext@b2.9.1"),
    cell(LEAK, MutantVerdict.SURVIVED),
    cell(LEAK, MutantVerdict.SURVIVED, "ext@b2.9.1"),
)


def test_a_mutant_survives_for_an_extension_when_one_of_its_cells_passed() -> None:
    report = MutationReport.of(run_of(*GOOD))
    assert report.verdicts[("ext", "meta.dim")] is MutantVerdict.SURVIVED
    assert report.verdicts[("ext", "enum.dtype")] is MutantVerdict.KILLED
    score = report.score("ext")
    assert (score.killed, score.survived, score.equivalent) == (1, 2, 1)  # the sentinel is not scored
    assert score.score == 1 / 3 and score.adjusted == 1 / 2
    assert report.score("ext", "enum-codes").score == 1.0
    assert report.score("ext", "errors").score is None
    assert report.ok


def test_the_markdown_lists_every_survivor_with_its_function_and_reason(tmp_path: Path) -> None:
    report = MutationReport.of(run_of(*GOOD, run_dir=tmp_path))
    json_path, md_path = write_mutation_report(report)
    text = md_path.read_text()
    assert "| ext | 33% (1 of 3 killed, 50% without the justified equivalents) |" in text
    assert (
        "- `meta.dim` (tensor-metadata; aoti_torch_get_dim): dim one larger. Survived on `ext@b2.9.1~r2.15.0-cpu`"
        in text
    )
    assert "a gap in the suite" in text
    assert "equivalent: unseen" in text
    data = json.loads(json_path.read_text())
    assert data["scores"]["ext"]["all"]["adjusted_score"] == 0.5
    assert data["ok"] is True and data["problems"] == []


def test_a_sentinel_that_survives_anywhere_makes_the_run_an_error() -> None:
    survived = (cell(SENTINEL, MutantVerdict.KILLED), cell(SENTINEL, MutantVerdict.SURVIVED, "ext@b2.9.1"))
    report = MutationReport.of(run_of(*survived))
    assert not report.ok
    assert report.sentinel_problems == ["sentinel sentinel.abort survived on ext@b2.9.1~r2.15.0-cpu: why"]


def test_a_sentinel_that_applies_nowhere_makes_the_run_an_error() -> None:
    report = MutationReport.of(run_of(cell(SENTINEL, MutantVerdict.NOT_APPLICABLE), cell(DIM, MutantVerdict.KILLED)))
    assert report.sentinel_problems == [
        "sentinel sentinel.abort applies to no build: nothing proves interposition happens"
    ]


def test_a_failing_baseline_is_an_error_never_a_kill(tmp_path: Path) -> None:
    failing = cell(None, None, status="TEST_FAILED")
    report = MutationReport.of(run_of(cell(SENTINEL, MutantVerdict.KILLED), baselines=(failing,), run_dir=tmp_path))
    assert not report.ok and report.failed_baselines == [failing]
    assert "baseline TEST_FAILED on `ext@b2.15.0~r2.15.0-cpu`" in report.markdown()


def test_a_cell_in_error_makes_the_run_an_error_and_is_not_scored() -> None:
    report = MutationReport.of(
        run_of(cell(SENTINEL, MutantVerdict.KILLED), cell(DIM, MutantVerdict.ERROR, status="ERROR"))
    )
    assert not report.ok and report.score("ext") == Score(errors=1)


# ext: meta.dim killed; enum.dtype reached and survived (a gap); own.leak justified for every extension;
# ivalue.bool never reached. other: ivalue.bool survived, justified for `other` only; meta.dim killed.
MIXED = (
    cell(SENTINEL, MutantVerdict.KILLED),
    cell(SENTINEL, MutantVerdict.KILLED, "other@b2.15.0"),
    cell(DIM, MutantVerdict.KILLED),
    cell(DIM, MutantVerdict.KILLED, "other@b2.15.0"),
    cell(DTYPE, MutantVerdict.SURVIVED),
    cell(LEAK, MutantVerdict.SURVIVED, hit=True),
    cell(BOOL, MutantVerdict.SURVIVED, hit=False),
    cell(BOOL, MutantVerdict.SURVIVED, "other@b2.15.0", hit=True),
)


def test_every_survivor_has_its_reason_per_extension_and_reached_is_data(tmp_path: Path) -> None:
    report = MutationReport.of(run_of(*MIXED, run_dir=tmp_path))
    reasons = {(s.extension, s.mutant.id): (s.reached, s.reason) for s in report.survivors}
    assert reasons == {
        ("ext", "enum.dtype"): (True, "a gap in the suite"),
        ("ext", "own.leak"): (True, "equivalent: unseen"),
        ("ext", "ivalue.bool"): (False, "never reached by the suite"),  # justified for `other` only
        ("other", "ivalue.bool"): (True, "equivalent: no bool"),
    }
    ext, other = report.score("ext"), report.score("other")
    assert (ext.killed, ext.survived, ext.equivalent, ext.unreached) == (1, 3, 1, 1)
    assert ext.score == 1 / 4 and ext.adjusted == 1 / 3 and ext.strength == 1 / 3  # 3 reached: dim, dtype, leak
    assert (other.score, other.adjusted, other.strength) == (1 / 2, 1.0, 1 / 2)
    json_path, md_path = write_mutation_report(report)
    data = json.loads(json_path.read_text())
    assert data["outcomes"]["ext"]["ivalue.bool"] == {"verdict": "survived", "reached": False}
    assert data["outcomes"]["other"]["ivalue.bool"] == {"verdict": "survived", "reached": True}
    assert data["scores"]["ext"]["all"]["test_strength"] == round(1 / 3, 4)
    assert [(s["extension"], s["mutant"], s["why"]) for s in data["survivors"]] == [
        ("ext", "enum.dtype", "gap"),
        ("ext", "own.leak", "equivalent"),
        ("ext", "ivalue.bool", "not_reached"),
        ("other", "ivalue.bool", "equivalent"),
    ]
    text = md_path.read_text()
    assert "| ext | 25% (1 of 4 killed, 33% without the justified equivalents) | 33% (1 of 3 reached) |" in text
    assert "### ext: 3 survivor(s), 1 justified, 1 never reached, 1 gap(s)" in text
    assert "Survived on `ext@b2.15.0~r2.15.0-cpu`; reached: no. Reason: never reached by the suite." in text
    assert "| `ivalue.bool` | stableivalue | a bool <inverted> | survived (never reached) | survived |" in text


def test_an_interrupted_run_keeps_the_mutant_cells_that_finished(tmp_path: Path) -> None:
    """Ctrl-C after some mutant cells: they are returned (and reported), the rest never start, exit 3."""
    import threading

    from torch_abi_harness.mutate.run import run_mutants

    stopped = threading.Event()

    class Executor:
        def run(self, target: object, mutant: Mutant, library: Path) -> MutantCell:
            return cell(mutant, MutantVerdict.KILLED)

    class Backend:
        def stop_all(self) -> None:
            stopped.set()

    def progress(done: MutantCell, count: int, total: int) -> None:
        if count == 2:
            raise KeyboardInterrupt  # as Ctrl-C arrives in the main thread while it waits for cells

    todo = [(object(), m, tmp_path) for m in (SENTINEL, DIM, DTYPE, LEAK, BOOL)] * 4
    finished, interrupted = run_mutants(Executor(), Backend(), todo, 1, progress)  # type: ignore[arg-type]
    assert interrupted and stopped.is_set() and 2 <= len(finished) < len(todo)
    run = dataclasses.replace(run_of(*finished), planned=len(todo), interrupted=True)
    report = MutationReport.of(run)
    assert not report.ok and report.to_json()["interrupted"] is True
    assert f"interrupted after {len(finished)} of {len(todo)} mutant cell(s)" in report.to_json()["problems"][-1]
    assert f"interrupted after {len(finished)} of {len(todo)}" in report.markdown()


def test_a_score_whose_survivors_are_all_justified_equivalents_says_so() -> None:
    """Nothing killed and every survivor justified: the adjusted score is undefined, and the text says why
    (it raised a TypeError formatting None)."""
    score = Score(survived=2, equivalent=2)
    assert score.adjusted is None
    assert score.text() == "0% (0 of 2 killed, every survivor a justified equivalent)"
    assert (
        Score(killed=1, survived=1, equivalent=1).text()
        == "50% (1 of 2 killed, 100% without the justified equivalents)"
    )
