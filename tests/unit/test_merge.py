"""merge: shard reports of one plan become the whole run; anything else is refused, naming what differs."""

import dataclasses
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from torch_abi_harness.cli import main
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.schema import load_schema, validator
from torch_abi_harness.core.status import Status
from torch_abi_harness.plan import Cell, Plan, Shard, make_plan
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.cases import CaseCounts
from torch_abi_harness.results.model import CellLogs, CellResult, Durations, RunResult
from torch_abi_harness.run.judge import Observed, judge_cell
from torch_abi_harness.run.merge import merge_reports
from torch_abi_harness.run.shard import shard_plan
from torch_abi_harness.verdict import promise

SELECTORS = ("stable_basic@b2.13.0-t2.10", "classic_ops")  # 22 cells of 2 builds (11 runtimes)


def cell_result(cell: Cell, backend: str = "venv") -> CellResult:
    """A cell's result as the pipeline makes one: PASS where it is promised to pass, else LOAD_FAILED."""
    status = Status.PASS if promise(cell).expected.value == "pass" else Status.LOAD_FAILED
    observed = Observed(
        status=status,
        reason=status.value.lower(),
        backend=backend,
        runtime_torch=str(cell.runtime.torch),
        runtime_variant=cell.runtime.variant,
        tests=CaseCounts(passed=len(cell.id)),
        durations=Durations.from_json({"total": 2.5}),
        logs=CellLogs(stdout=f"cells/{cell.id}/stdout.log", build=f"builds/{cell.build.id}.log"),
    )
    return judge_cell(cell, observed)


def write_run(plan: Plan, out: Path, backend: str = "venv") -> Path:
    """A run's report directory as the pipeline leaves it: results.json and the rest, cells/<id>/, builds/."""
    run = RunResult(
        run_id=out.name,
        started=f"2026-01-01T00:00:0{plan.shard.index if plan.shard else 0}+00:00",
        finished="2026-01-01T00:10:00+00:00",
        harness_version="0.1.0",
        matrix=str(plan.matrix.path),
        backend=backend,
        selectors=plan.selectors,
        cells=tuple(cell_result(c, backend) for c in plan.cells),
        build_order=tuple(b.id for b in plan.builds),
        runtime_order=tuple(r.id for r in plan.runtimes),
        plan=plan.identity,
    )
    write_report(run, out)
    for cell in plan.cells:
        (out / "cells" / cell.id).mkdir(parents=True)
        (out / "cells" / cell.id / "stdout.log").write_text(f"output of {cell.id}\n")
        (out / "cells" / cell.id / "result.json").write_text(json.dumps(cell_result(cell).to_json()))
    (out / "builds").mkdir(exist_ok=True)
    for build in plan.needed_builds:
        (out / "builds" / f"{build.id}.log").write_text(f"log of {build.id}\n")
    return out


@pytest.fixture
def plan(repo: Path) -> Plan:
    return make_plan(load_matrix(repo / "matrix.yaml"), SELECTORS)


@pytest.fixture
def shards(plan: Plan, tmp_path: Path) -> list[Path]:
    return [write_run(shard_plan(plan, Shard(k, 3)), tmp_path / f"shard-{k}") for k in (1, 2, 3)]


def test_merged_shards_are_the_whole_run_cell_by_cell(plan: Plan, shards: list[Path], tmp_path: Path) -> None:
    whole = json.loads((write_run(plan, tmp_path / "whole") / "results.json").read_text())
    (tmp_path / "latest").symlink_to(shards[0])  # a report named through a link (reports/latest) is followed
    reports = [tmp_path / "latest", shards[1] / "results.json", shards[2]]
    assert main(["merge", *map(str, reports), "--reports-dir", str(tmp_path / "merged")]) == 0
    run_dir = tmp_path / "merged" / "latest"
    merged = json.loads((run_dir / "results.json").read_text())
    jsonschema.validate(merged, load_schema("results"))
    assert merged["cells"] == whole["cells"]
    assert merged["plan"] == whole["plan"] and merged["plan"]["shard"] is None
    assert (merged["exit_code"], merged["summary"], merged["backend"]) == (0, whole["summary"], "venv")
    assert (merged["started"], merged["finished"]) == ("2026-01-01T00:00:01+00:00", "2026-01-01T00:10:00+00:00")
    for cell in merged["cells"]:
        for log in cell["logs"].values():
            assert (run_dir / log).is_file(), log
        assert (run_dir / "cells" / cell["id"] / "stdout.log").read_text() == f"output of {cell['id']}\n"
    assert (run_dir / "summary.md").is_file() and (run_dir / "junit.xml").is_file()


def test_the_merged_exit_code_is_the_worst_shards(plan: Plan, tmp_path: Path) -> None:
    first = shard_plan(plan, Shard(1, 2))
    broken = write_run(first, tmp_path / "a")
    data = json.loads((broken / "results.json").read_text())
    data["cells"][0] |= {"status": "TEST_FAILED", "verdict": "broken", "expected": "pass"}
    (broken / "results.json").write_text(json.dumps(data))
    second = write_run(shard_plan(plan, Shard(2, 2)), tmp_path / "b")
    assert main(["merge", str(broken), str(second), "--reports-dir", str(tmp_path / "merged")]) == 1


def test_shards_run_with_different_backends_merge_as_mixed(plan: Plan, tmp_path: Path) -> None:
    a = write_run(shard_plan(plan, Shard(1, 2)), tmp_path / "a", backend="venv")
    b = write_run(shard_plan(plan, Shard(2, 2)), tmp_path / "b", backend="docker")
    merged = merge_reports([a, b], tmp_path / "merged")
    assert merged.run.backend == "mixed"
    assert {c.backend for c in merged.run.cells} == {"venv", "docker"}  # each cell still says where it ran
    jsonschema.validate(merged.run.to_json(), load_schema("results"))


def test_a_version_4_shard_merges_with_version_5_shards(plan: Plan, tmp_path: Path) -> None:
    old = write_run(shard_plan(plan, Shard(1, 2)), tmp_path / "a")
    data = json.loads((old / "results.json").read_text())
    data["schema_version"] = 4
    for cell in data["cells"]:
        del cell["build"]["python"], cell["runtime"]["python"]
    (old / "results.json").write_text(json.dumps(data))
    second = shard_plan(plan, Shard(2, 2))
    new = write_run(second, tmp_path / "b")
    merged = merge_reports([old, new], tmp_path / "merged").run.to_json()
    jsonschema.validate(merged, load_schema("results"))
    pythons = {c["id"]: c["runtime"]["python"] for c in merged["cells"]}
    assert {pythons[c["id"]] for c in data["cells"]} == {None}  # not recorded there: null, never guessed
    assert {c.id: c.runtime.python for c in second.cells} == {c.id: pythons[c.id] for c in second.cells}


def test_shards_of_different_plans_are_refused(plan: Plan, shards: list[Path], tmp_path: Path) -> None:
    other = write_run(shard_plan(make_plan(plan.matrix, ["classic_ops"]), Shard(2, 3)), tmp_path / "other")
    with pytest.raises(BadInputError) as info:
        merge_reports([shards[0], other], tmp_path / "merged")
    message = str(info.value)
    assert "shards of different plans" in message
    assert f"{shards[0] / 'results.json'} (shard 1/3)" in message and f"{other / 'results.json'} (shard 2/3)" in message
    assert "11 cell(s) only in the first (e.g. stable_basic@b2.13.0-t2.10~r2.10.0-cpu" in message
    assert "merge only the shards of one fan-out" in message
    assert not (tmp_path / "merged").exists()  # refused before anything is written


def test_a_cell_in_two_reports_is_refused(shards: list[Path], tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"cell\(s\) are in more than one report:\n  - \S+ in .*shard-2"):
        merge_reports([*shards, shards[1]], tmp_path / "merged")


def test_missing_cells_name_the_missing_shard(plan: Plan, shards: list[Path], tmp_path: Path) -> None:
    lost = [c.id for c in shard_plan(plan, Shard(2, 3)).cells]
    with pytest.raises(BadInputError) as info:
        merge_reports([shards[0], shards[2]], tmp_path / "merged")
    message = str(info.value)
    assert f"{len(lost)} of the plan's 22 cells are in none of the 2 report(s): {lost[0]}" in message
    assert "missing shard(s): 2/3" in message
    assert main(["merge", str(shards[0]), str(shards[2]), "--reports-dir", str(tmp_path / "m")]) == 2


def test_what_is_not_a_version_4_results_json_is_refused(shards: list[Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "results.json").write_text("<html>")
    with pytest.raises(BadInputError, match=r"junk/results\.json: not a results\.json of this harness"):
        merge_reports([shards[0], junk], tmp_path / "merged")
    with pytest.raises(BadInputError, match="no such results file"):
        merge_reports([tmp_path / "nowhere"], tmp_path / "merged")
    old = json.loads((shards[0] / "results.json").read_text())
    old["schema_version"] = 3
    del old["plan"]
    (junk / "results.json").write_text(json.dumps(old))
    with pytest.raises(BadInputError, match=r"older harness .* run that shard again"):
        merge_reports([junk], tmp_path / "merged")


def test_a_cell_id_that_is_a_path_is_refused(shards: list[Path], tmp_path: Path) -> None:
    data = json.loads((shards[0] / "results.json").read_text())
    data["cells"][0]["id"] = "../../../etc"
    (shards[0] / "results.json").write_text(json.dumps(data))
    with pytest.raises(BadInputError, match=re.escape("'../../../etc' is not a cell of the plan")):
        merge_reports(shards, tmp_path / "merged")


def test_links_and_special_files_in_a_shard_are_not_followed(shards: list[Path], tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the report")
    cell_dir = next((shards[0] / "cells").iterdir())
    (cell_dir / "stdout.log").unlink()
    (cell_dir / "stdout.log").symlink_to(secret)
    (cell_dir / "nested").mkdir()
    (cell_dir / "nested" / "kept.txt").write_text("a regular file in a subdirectory")
    os.mkfifo(cell_dir / "pipe")
    other = next((shards[1] / "cells").iterdir())
    moved = tmp_path / "elsewhere"
    other.rename(moved)
    other.symlink_to(moved, target_is_directory=True)  # a whole cell directory that is a link
    merged = merge_reports(shards, tmp_path / "merged")
    out = merged.run_dir / "cells"
    assert not (out / cell_dir.name / "stdout.log").exists()
    assert (out / cell_dir.name / "nested" / "kept.txt").is_file()
    assert not (out / cell_dir.name / "pipe").exists()
    assert not any((out / other.name).iterdir()) if (out / other.name).exists() else True
    skipped = "\n".join(merged.skipped)
    assert f"{cell_dir / 'stdout.log'}: not copied" in skipped and f"{cell_dir / 'pipe'}: not a regular file" in skipped
    assert f"{other}: not a directory of its own" in skipped
    assert "not for the report" not in "".join(p.read_text() for p in out.rglob("*") if p.is_file())


def test_one_whole_report_merges_into_itself(plan: Plan, tmp_path: Path) -> None:
    whole = write_run(dataclasses.replace(plan), tmp_path / "whole")
    merged = merge_reports([whole], tmp_path / "merged")
    assert merged.run.to_json()["cells"] == json.loads((whole / "results.json").read_text())["cells"]


def test_the_attempts_of_a_cell_run_again_are_copied_too(plan: Plan, shards: list[Path], tmp_path: Path) -> None:
    data = json.loads((shards[0] / "results.json").read_text())
    cell = data["cells"][0]
    attempt = {"status": "PASS", "verdict": "kept", "reason": "", "seconds": 1.0, "logs": {}}
    cell["attempts"] = [attempt, attempt]
    (shards[0] / "results.json").write_text(json.dumps(data))
    (shards[0] / "attempt-2" / cell["id"]).mkdir(parents=True)
    (shards[0] / "attempt-2" / cell["id"] / "stdout.log").write_text("the second attempt\n")
    merged = merge_reports(shards, tmp_path / "merged")
    assert (merged.run_dir / "attempt-2" / cell["id"] / "stdout.log").read_text() == "the second attempt\n"
    assert not merged.skipped


def test_merge_diffs_against_a_baseline_and_prints_json(
    plan: Plan, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The nightly's `merge --baseline <previous nightly>`: diff.md/diff.json beside the merged report."""
    baseline = write_run(plan, tmp_path / "previous")
    first = shard_plan(plan, Shard(1, 2))
    broken = write_run(first, tmp_path / "a")
    data = json.loads((broken / "results.json").read_text())
    data["cells"][0] |= {"status": "TEST_FAILED", "verdict": "broken", "expected": "pass", "reason": "<b>oops</b>"}
    (broken / "results.json").write_text(json.dumps(data))
    second = write_run(shard_plan(plan, Shard(2, 2)), tmp_path / "b")
    argv = ["merge", str(broken), str(second), "--reports-dir", str(tmp_path / "m"), "--baseline", str(baseline)]
    assert main([*argv, "--json"]) == 1
    out, err = capsys.readouterr()
    verdicts = {c["id"]: c["verdict"] for c in json.loads(out)["cells"]}
    assert verdicts[data["cells"][0]["id"]] == "broken" and "1 new break(s)" in err
    diff = json.loads((tmp_path / "m" / "latest" / "diff.json").read_text())
    assert diff["schema_version"] == 1 and [c["id"] for c in diff["new_breaks"]] == [data["cells"][0]["id"]]
    validator("diff").validate(diff)
    markdown = (tmp_path / "m" / "latest" / "diff.md").read_text()
    assert "&lt;b&gt;oops&lt;/b&gt;" in markdown and "<b>" not in markdown


def test_shards_from_a_checkout_whose_test_changed_are_another_plan(repo: Path, tmp_path: Path) -> None:
    """A plan is what it is made from: shard 2 run from a copy whose test was changed (a crash hidden, say)
    is refused, naming the extension that differs; the matrix file's content counts too."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(repo / "extensions", copy / "extensions", ignore=shutil.ignore_patterns("build", "__pycache__"))
    shutil.copy(repo / "matrix.yaml", copy / "matrix.yaml")
    before = make_plan(load_matrix(copy / "matrix.yaml"), SELECTORS)
    first = before.identity  # what the plan was made from when shard 1 ran
    one = write_run(shard_plan(before, Shard(1, 2)), tmp_path / "shard-1")
    test = next((copy / "extensions" / "classic_ops" / "tests").glob("test_*.py"))
    test.write_text(test.read_text() + "\n# changed after shard 1 ran\n")
    after = make_plan(load_matrix(copy / "matrix.yaml"), SELECTORS)
    two = write_run(shard_plan(after, Shard(2, 2)), tmp_path / "shard-2")
    assert first.cells == after.identity.cells and first.digest != after.identity.digest
    with pytest.raises(BadInputError, match=r"they differ in: extension classic_ops \(") as info:
        merge_reports([one, two], tmp_path / "merged")
    assert "stable_basic" not in str(info.value).split("they differ in:")[1]
    unchanged = after.identity
    (copy / "matrix.yaml").write_text((copy / "matrix.yaml").read_text() + "\n# a comment\n")
    edited = make_plan(load_matrix(copy / "matrix.yaml"), SELECTORS).identity
    (difference,) = edited.differences(unchanged)
    assert difference.startswith("matrix file (") and edited.digest != unchanged.digest


def test_allow_missing_merges_what_arrived_and_errors_each_lost_cell_with_its_shard(plan: Plan, tmp_path: Path) -> None:
    parts = [shard_plan(plan, Shard(k, 3, "runtime")) for k in (1, 2, 3)]
    arrived = [write_run(parts[k - 1], tmp_path / f"shard-{k}") for k in (1, 3)]
    merged = merge_reports(arrived, tmp_path / "merged", allow_missing=True)
    lost = {c.id for c in parts[1].cells}
    assert lost and {c.id for c in merged.run.cells} == {c.id for c in plan.cells}
    for cell in merged.run.cells:
        if cell.id in lost:
            assert (cell.status, cell.reason) == (Status.ERROR, "shard 2/3 reported nothing")
            assert cell.runtime_id == cell.id.rpartition("~")[2] and cell.extension == cell.id.partition("@")[0]
        else:
            assert cell.status in (Status.PASS, Status.LOAD_FAILED)
    jsonschema.validate(json.loads((merged.run_dir / "results.json").read_text()), load_schema("results"))
    out = tmp_path / "cli"
    assert main(["merge", *map(str, arrived), "--allow-missing", "--reports-dir", str(out)]) == 3
    assert "shard 2/3 reported nothing" in (out / "latest" / "summary.md").read_text()


def test_allow_missing_of_a_split_by_cells_names_the_shard_that_did_not_report(
    plan: Plan, shards: list[Path], tmp_path: Path
) -> None:
    merged = merge_reports([shards[0], shards[2]], tmp_path / "merged", allow_missing=True)
    errors = {c.reason for c in merged.run.cells if c.status is Status.ERROR}
    assert errors == {"shard 2/3 reported nothing"}
