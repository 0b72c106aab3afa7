"""The judge, each path: a promise kept or broken, a retry that makes a broken cell flaky, a known break
acknowledged or expired, a result that cannot be written (ERROR, naming the file), a cell no shard reported,
a mutant's verdict; and the typed durations and logs a cell records, as results.json has them."""

import datetime
import json
from pathlib import Path

import pytest

from torch_abi_harness.config import KnownBreak
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.execute.venv import VenvBackend
from torch_abi_harness.plan import Cell, make_plan
from torch_abi_harness.results.model import STAGES, CellLogs, CellResult, Durations
from torch_abi_harness.results.rundir import write_cell
from torch_abi_harness.run import judge as judge_module
from torch_abi_harness.run.cells import RunOptions
from torch_abi_harness.run.judge import (
    Judge,
    MutantVerdict,
    Observed,
    judge_cell,
    judge_mutant,
    known_break,
    recorded,
    retried,
    unreported,
)
from torch_abi_harness.run.pipeline import Pipeline
from torch_abi_harness.verdict import Expected, Promise, Verdict, promise

TODAY = datetime.date(2026, 11, 25)
CELL = "stable_basic@b2.13.0-t2.10~r2.11.0-cpu"


@pytest.fixture
def cell(repo: Path) -> Cell:
    (found,) = make_plan(load_matrix(repo / "matrix.yaml"), [CELL]).cells
    return found


def seen(status: Status, reason: str = "why") -> Observed:
    return Observed(
        status=status,
        reason=reason,
        backend="venv",
        runtime_torch="2.11.0+cpu",
        runtime_variant="cpu",
        durations=Durations.unrun(1.0),
        logs=CellLogs(build="builds/stable_basic@b2.13.0-t2.10.log"),
    )


def entry(selector: str, expires: datetime.date) -> KnownBreak:
    return KnownBreak("known", (selector,), "accepted for now", "https://example.org/1", expires)


def test_a_cell_that_passes_where_promised_keeps_its_promise(cell: Cell) -> None:
    result = judge_cell(cell, seen(Status.PASS))
    assert (result.id, result.status, result.expected, result.verdict) == (
        CELL,
        Status.PASS,
        Expected.PASS,
        Verdict.KEPT,
    )
    assert (result.expected_class, result.runtime_python, result.backend) == (Condition.TORCH_ABI, "3.11", "venv")


def test_a_cell_that_fails_where_promised_to_pass_breaks_it(cell: Cell) -> None:
    assert judge_cell(cell, seen(Status.TEST_FAILED)).verdict is Verdict.BROKEN
    assert judge_cell(cell, seen(Status.ERROR)).verdict is Verdict.ERROR  # the harness's failure, not a break


def test_the_promise_of_the_built_artifact_decides_over_the_plans(cell: Cell) -> None:
    artifact = Promise(Expected.LOAD_FAILED, "needs libcudart.so.13", Condition.CUDA_MAJOR)
    result = judge_cell(cell, seen(Status.LOAD_FAILED), artifact)
    assert (result.verdict, result.expected_why, result.expected_class) == (
        Verdict.EXPECTED_FAILURE,
        "needs libcudart.so.13",
        Condition.CUDA_MAJOR,
    )


def test_a_retry_that_keeps_the_promise_makes_a_broken_cell_flaky(cell: Cell) -> None:
    first = judge_cell(cell, seen(Status.TEST_FAILED, "1 failed"))
    flaky = retried(first, judge_cell(cell, seen(Status.PASS, "3 passed")))
    assert (flaky.status, flaky.verdict, flaky.reason) == (Status.PASS, Verdict.FLAKY, "3 passed")
    assert [(a.status, a.verdict) for a in flaky.attempts] == [
        (Status.TEST_FAILED, Verdict.BROKEN),
        (Status.PASS, Verdict.KEPT),
    ]
    still = retried(first, judge_cell(cell, seen(Status.CRASHED, "SIGSEGV")))
    assert (still.status, still.verdict, still.reason, len(still.attempts)) == (
        Status.TEST_FAILED,
        Verdict.BROKEN,
        "1 failed",
        2,
    )


def test_a_known_break_acknowledges_a_broken_cell_until_it_expires(cell: Cell) -> None:
    broken = judge_cell(cell, seen(Status.TEST_FAILED))
    held = known_break(broken, [entry(CELL, TODAY)], TODAY)  # `expires` is the last day it holds
    assert (held.verdict, held.known_break) == (Verdict.KNOWN_BREAK, "known")
    lapsed = known_break(broken, [entry(CELL, TODAY - datetime.timedelta(days=1))], TODAY)
    assert (lapsed.verdict, lapsed.known_break) == (Verdict.BROKEN, "known")
    kept = known_break(judge_cell(cell, seen(Status.PASS)), [entry(CELL, TODAY)], TODAY)
    assert (kept.verdict, kept.known_break) == (Verdict.KEPT, "known")  # named, so the entry reads as fixed
    assert known_break(broken, [entry("classic_ops", TODAY)], TODAY) is broken


def test_the_final_verdict_is_written_once_and_reads_back_the_same(cell: Cell, tmp_path: Path) -> None:
    out = tmp_path / "cells" / CELL
    final = Judge((entry(CELL, TODAY),), TODAY).final(judge_cell(cell, seen(Status.TEST_FAILED)), out)
    own = json.loads((out / "result.json").read_text())
    assert (own["verdict"], own["known_break"]) == ("known_break", "known")
    assert CellResult.from_json(own) == final
    assert own["durations"] == {"build": 1.0} and own["logs"] == {"build": "builds/stable_basic@b2.13.0-t2.10.log"}


def test_a_result_that_cannot_be_written_is_error_naming_the_file(cell: Cell, tmp_path: Path) -> None:
    (tmp_path / "cells").write_text("a file where the cells' directory should be")
    out = tmp_path / "cells" / CELL
    result = recorded(judge_cell(cell, seen(Status.PASS, "3 passed")), out)
    assert (result.status, result.verdict) == (Status.ERROR, Verdict.ERROR)
    assert result.reason.startswith(f"could not write {out / 'result.json'}: ")
    assert result.reason.endswith("(the cell ended PASS: 3 passed)")
    error = judge_cell(cell, seen(Status.ERROR, "the harness failed on this cell"))
    assert recorded(error, out) == error  # an ERROR already: its own reason stands


def test_a_cell_no_shard_reported_is_error_with_no_promise() -> None:
    result = unreported(CELL, "shard 2/3 reported nothing", "venv")
    assert (result.status, result.verdict, result.expected) == (Status.ERROR, Verdict.ERROR, Expected.NONE)
    assert (result.build_id, result.runtime_id, result.extension) == (
        "stable_basic@b2.13.0-t2.10",
        "r2.11.0-cpu",
        "stable_basic",
    )


@pytest.mark.parametrize(
    ("status", "trace", "verdict"),
    [
        (Status.PASS, ["hit"], MutantVerdict.SURVIVED),
        (Status.TEST_FAILED, ["hit"], MutantVerdict.KILLED),
        (Status.CRASHED, [], MutantVerdict.KILLED),
        (Status.TIMEOUT, [], MutantVerdict.KILLED),
        (Status.LOAD_FAILED, [], MutantVerdict.KILLED),
        (Status.ERROR, [], MutantVerdict.ERROR),
        (Status.TEST_FAILED, ["unresolved"], MutantVerdict.ERROR),
        (None, [], MutantVerdict.NOT_APPLICABLE),
    ],
)
def test_a_mutant_is_judged_by_how_its_suite_ended(
    status: Status | None, trace: list[str], verdict: MutantVerdict
) -> None:
    found, reason = judge_mutant(status, "r", trace)
    assert found is verdict
    assert reason == ("the interposer found no real function to forward to: r" if "unresolved" in trace else "r")


def test_durations_and_logs_write_the_json_they_are_read_from() -> None:
    ran = Durations.ran(total=2.34567, build=1.0, startup=None, import_torch=0.1, load=0.01, tests=1.2)
    assert list(ran.to_json().items()) == sorted(
        {"total": 2.346, "build": 1.0, "startup": None, "import_torch": 0.1, "load": 0.01, "tests": 1.2}.items()
    )
    assert (ran.total, ran.get("startup"), ran.get("total")) == (2.34567, None, 2.34567)
    assert sorted(ran) == sorted(STAGES)
    assert Durations.unrun(3.0).to_json() == {"build": 3.0} and Durations.unrun(3.0).get("total") is None
    assert Durations().to_json() == {}
    for data in ({"total": 1.5, "import_torch": None}, {}, {"build": 2.0, "older": 4.0}):
        read = Durations.from_json(data)
        assert json.dumps(read.to_json()) == json.dumps(dict(sorted(data.items())))
        assert Durations.from_json(read.to_json()) == read
    logs = {"stdout": "cells/x/stdout.log", "build": "builds/b.log", "core": "cells/x/core.txt"}
    read_logs = CellLogs.from_json(logs)
    assert (read_logs.stdout, read_logs.build, read_logs.stderr) == ("cells/x/stdout.log", "builds/b.log", None)
    assert json.dumps(read_logs.to_json()) == json.dumps(dict(sorted(logs.items())))
    assert "stderr" not in read_logs and read_logs["core"] == "cells/x/core.txt" and len(read_logs) == 3
    assert CellLogs.from_json(read_logs.to_json()) == read_logs


class Runner:
    """A CellRunner that runs nothing: each cell ends, attempt by attempt, as `ends` says."""

    def __init__(self, run_dir: Path, ends: dict[str, list[Status]]) -> None:
        self.run_dir, self.ends = run_dir, ends

    def cell_dir(self, cell_id: str, attempt: int = 1) -> Path:
        return self.run_dir / ("cells" if attempt == 1 else f"attempt-{attempt}") / cell_id

    def run_cell(self, cell: Cell, prediction: object, attempt: int, expectation: Promise | None) -> CellResult:
        return judge_cell(cell, seen(self.ends[cell.id][attempt - 1], f"attempt {attempt}"), expectation)


class Watcher:
    def __init__(self) -> None:
        self.shown: list[tuple[str, Verdict]] = []

    def stage(self, name: str, text: str) -> None:
        pass

    def cell_done(self, result: CellResult, done: int, total: int) -> None:
        self.shown.append((result.id, result.verdict))


def test_a_runs_cells_are_judged_to_the_end_and_each_file_written_once(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept cell, a flaky one (broken, then kept) and one broken three times under a known break: each
    cells/<id>/result.json is written once, with the final verdict; each retry's in attempt-K/<id>/."""
    plan = make_plan(load_matrix(repo / "matrix.yaml"), ["stable_basic@b2.13.0-t2.10"])
    kept, flaky, known = plan.cells[2:5]
    ends = {
        kept.id: [Status.PASS],
        flaky.id: [Status.TEST_FAILED, Status.PASS],
        known.id: [Status.TEST_FAILED, Status.CRASHED, Status.TEST_FAILED],
    }
    writes: list[Path] = []

    def write(result: CellResult, out: Path) -> None:
        writes.append(out.relative_to(tmp_path))
        write_cell(result, out)

    monkeypatch.setattr(judge_module, "write_cell", write)
    pipeline = Pipeline.__new__(Pipeline)  # only what run_cells uses: no envs, no builds
    pipeline.options = RunOptions(tmp_path, tmp_path, jobs=1, rerun_broken=2)
    pipeline.observer = watcher = Watcher()
    pipeline.backend = VenvBackend()
    cells = (kept, flaky, known)
    results, interrupted = pipeline.run_cells(
        Runner(tmp_path, ends),  # type: ignore[arg-type]
        cells,
        {},
        {c.id: promise(c) for c in cells},
        Judge((entry(known.id, TODAY),), TODAY),
    )
    assert not interrupted
    assert [(r.verdict, len(r.attempts)) for r in (results[c.id] for c in cells)] == [
        (Verdict.KEPT, 0),
        (Verdict.FLAKY, 2),
        (Verdict.KNOWN_BREAK, 3),
    ]
    assert sorted(writes) == sorted(
        [Path("cells") / c.id for c in cells]
        + [Path("attempt-2") / flaky.id, Path("attempt-2") / known.id, Path("attempt-3") / known.id]
    )
    for c in cells:
        assert (
            CellResult.from_json(json.loads((tmp_path / "cells" / c.id / "result.json").read_text())) == results[c.id]
        )
    assert (known.id, Verdict.BROKEN) in watcher.shown  # as its attempts came in
