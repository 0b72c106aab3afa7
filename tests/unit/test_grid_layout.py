"""The grid for people: runtimes grouped by release in numeric order, folded to the terminal's width."""

import dataclasses
import itertools
import json
import re
from pathlib import Path

import pytest
from rich.cells import cell_len

from torch_abi_harness.cli.run_output import print_grid
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.core.text import natural_key
from torch_abi_harness.plan import PlanIdentity
from torch_abi_harness.render.grid import CORNER, NOT_RUN, NOT_RUN_MEANING, Grid
from torch_abi_harness.render.report import write_report
from torch_abi_harness.render.text import grid_mark, summary_markdown
from torch_abi_harness.results.cases import CaseCounts
from torch_abi_harness.results.model import CellResult, RunResult, load_results
from torch_abi_harness.verdict import Expected, Verdict

DEFAULT_PYTHON = "3.11"  # the matrix's: runtimes on it have no -py suffix
# 20 runtimes of 7 releases on 3 Pythons: (release, variant as installed, requested +variant, device, python)
RUNTIMES = [
    ("2.15.0", "cu132", False, "cpu", "3.11"),
    ("2.15.0", "cu132", False, "cpu", "3.12"),
    ("2.15.0", "cu132", False, "cuda", "3.11"),
    ("2.9.1", "cu128", False, "cpu", "3.10"),
    ("2.9.1", "cu128", False, "cpu", "3.11"),
    ("2.10.0", "cu128", False, "cpu", "3.10"),
    ("2.10.0", "cu128", False, "cpu", "3.11"),
    ("2.10.0", "cu128", False, "cpu", "3.12"),
    ("2.11.0", "cu130", False, "cpu", "3.11"),
    ("2.11.0", "cpu", True, "cpu", "3.11"),
    ("2.11.0", "cu130", False, "cpu", "3.12"),
    ("2.12.1", "cpu", True, "cpu", "3.10"),
    ("2.12.1", "cpu", True, "cpu", "3.11"),
    ("2.12.1", "cpu", True, "cpu", "3.12"),
    ("2.13.0", "cpu", False, "cpu", "3.11"),
    ("2.13.0", "cpu", False, "cpu", "3.12"),
    ("2.14.1", "cu130", False, "cpu", "3.10"),
    ("2.14.1", "cu130", False, "cpu", "3.11"),
    ("2.14.1", "cu130", False, "cuda", "3.11"),
    ("2.14.1", "cu130", False, "cpu", "3.12"),
]
RELEASES = ["2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
BUILDS = [  # build id, its target, built for CPython 3.11 only (cp311) or every CPython since (abi3), needs CUDA 13
    ("stable_basic@b2.9.1", "2.9", False, False),
    ("stable_basic@b2.15.0-t2.11", "2.11", False, False),
    ("stable_basic@b2.13.0-t2.10", "2.10", False, False),
    ("cp311_only@b2.13.0-t2.10", "2.10", True, False),
    ("cuda_ops@b2.14.1-t2.10", "2.10", False, True),
]


def runtime_id(release: str, variant: str, pinned: bool, device: str, python: str) -> str:
    suffix = "" if python == DEFAULT_PYTHON else f"-py{python}"
    return f"r{release}{f'+{variant}' if pinned else ''}-{device}{suffix}"


def level(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def outcome(build: tuple[str, str, bool, bool], runtime: tuple[str, str, bool, str, str]) -> tuple[Status, Condition]:
    """What the promise says of the cell (and the cell did): the first matching row of docs/the-promise.md."""
    _, target, cp311, cuda = build
    release, variant, _, _, python = runtime
    if cp311 and python != "3.11":
        return Status.LOAD_FAILED, Condition.PYTHON_ABI
    if cuda and variant == "cpu":
        return Status.LOAD_FAILED, Condition.NO_CUDA
    if cuda and variant == "cu128":
        return Status.LOAD_FAILED, Condition.CUDA_MAJOR
    return (Status.PASS if level(target) <= level(release) else Status.LOAD_FAILED), Condition.TORCH_ABI


def cell_result(build: tuple[str, str, bool, bool], runtime: tuple[str, str, bool, str, str]) -> CellResult:
    status, condition = outcome(build, runtime)
    release, variant, _, device, python = runtime
    rid = runtime_id(*runtime)
    return CellResult(
        id=f"{build[0]}~{rid}",
        build_id=build[0],
        runtime_id=rid,
        extension=build[0].split("@")[0],
        build_torch=build[0].split("@b")[1].split("-")[0],
        build_variant="auto",
        target=build[1],
        runtime_torch=f"{release}+{variant}",
        runtime_variant=variant,
        backend="venv",
        device=device,
        status=status,
        reason=f"{status.value} here",
        expected=Expected.PASS if status is Status.PASS else Expected.LOAD_FAILED,
        expected_why=f"{condition.value} of {rid}",
        verdict=Verdict.KEPT if status is Status.PASS else Verdict.EXPECTED_FAILURE,
        expected_class=condition,
        build_python="3.11",
        runtime_python=python,
        tests=CaseCounts(passed=3 if status is Status.PASS else 0),
    )


def twenty_runtimes() -> RunResult:
    """Every build on every runtime, each cell as its promise says."""
    cells = tuple(cell_result(b, r) for b in BUILDS for r in RUNTIMES)
    return RunResult(
        run_id="20261201-000000",
        started="s",
        finished="f",
        harness_version="0.1.0",
        matrix="matrix.yaml",
        backend="venv",
        selectors=(),
        cells=cells,
        build_order=tuple(b[0] for b in BUILDS),
        runtime_order=tuple(sorted(runtime_id(*r) for r in RUNTIMES)),  # lexical: r2.10.0 before r2.9.1
        plan=PlanIdentity("matrix.yaml", tuple(sorted(c.id for c in cells))),
    )


@pytest.fixture
def run() -> RunResult:
    return twenty_runtimes()


def releases_in(header: str) -> list[str]:
    return [part.strip() for part in header.split("│")[1:]]


def test_the_folded_grid_fits_the_width_and_every_block_repeats_the_build_ids(run: RunResult) -> None:
    blocks = Grid.of(run).blocks(120, grid_mark)
    assert len(blocks) > 1
    for block in blocks:
        assert all(cell_len(line) <= 120 for line in block.lines()), "\n".join(block.lines())
        assert block.header[0].startswith(CORNER)
        assert [line[0][0].strip() for line in block.body] == [b[0] for b in BUILDS]
    assert blocks[0].first == 1 and blocks[-1].last == len(RUNTIMES)
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(blocks))
    shown = [r for block in blocks for r in releases_in(block.header[0])]
    assert shown == RELEASES  # each release whole, in numeric order, never two blocks' worth of one


def test_runtimes_are_grouped_by_release_in_numeric_order_with_what_tells_them_apart(run: RunResult) -> None:
    grid = Grid.of(run)
    assert [g.release for g in grid.groups] == RELEASES
    assert grid.axes == ("python", "variant", "device")  # 3 Pythons; 2.11.0 has +cpu and +cu130; 2 devices
    by_release = {g.release: [c.runtime_id for c in g.columns] for g in grid.groups}
    assert by_release["2.10.0"] == ["r2.10.0-cpu-py3.10", "r2.10.0-cpu", "r2.10.0-cpu-py3.12"]  # by Python
    assert by_release["2.11.0"] == ["r2.11.0+cpu-cpu", "r2.11.0-cpu", "r2.11.0-cpu-py3.12"]  # one Python: run order
    assert [c.label("variant") for g in grid.groups if g.release == "2.11.0" for c in g.columns] == [
        "+cpu",
        "+cu130",
        "+cu130",
    ]
    text = "\n".join(line for block in grid.blocks(120, grid_mark) for line in block.lines())
    python_rows = [line for line in text.splitlines() if line.startswith("python ")]
    assert "py3.10" in python_rows[0] and "py3.12" in python_rows[0]


def test_a_row_is_shown_only_for_what_differs(run: RunResult) -> None:
    one_python = [
        c
        for c in run.cells
        if c.runtime_python == "3.11" and c.device == "cpu" and not c.runtime_id.startswith("r2.11.0+")
    ]
    grid = Grid.of(RunResult(**{**run.__dict__, "cells": tuple(one_python)}))
    assert grid.axes == ()  # the variant differs by release (cu128, cu130, cpu) but tells no runtimes apart
    block = grid.blocks(200, grid_mark)[0]
    assert len(block.header) == 1 and releases_in(block.header[0]) == RELEASES


def test_a_release_wider_than_the_terminal_is_split_and_nothing_exceeds_it(run: RunResult) -> None:
    blocks = Grid.of(run).blocks(60, grid_mark)
    assert all(cell_len(line) <= 60 for block in blocks for line in block.lines())
    assert sum(b.last - b.first + 1 for b in blocks) == len(RUNTIMES)
    assert [r for block in blocks for r in dict.fromkeys(releases_in(block.header[0]))] == [
        r
        for r in RELEASES
        for _ in range(1 + (r == "2.14.1"))  # 4 runtimes of 2.14.1 do not fit in 60
    ]


def test_print_grid_honours_columns_and_ends_with_the_legend_of_the_classes_present(
    run: RunResult, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    print_grid(run)
    out = capsys.readouterr().out.splitlines()
    headers = [n for n, line in enumerate(out) if line.startswith(CORNER)]
    assert len(headers) > 2
    grid_lines = out[headers[0] - 1 : out.index(next(line for line in out if "✅ kept" in line))]
    assert all(cell_len(line) <= 100 for line in grid_lines), "\n".join(line for line in grid_lines)
    assert sum(1 for line in out if line.startswith("cp311_only@b2.13.0-t2.10 ")) == len(headers)
    assert re.search(rf"compatibility matrix \(runtimes 1-\d+ of {len(RUNTIMES)}\)", out[headers[0] - 1])
    legend = out[out.index(next(line for line in out if "✅ kept" in line)) + 1 :]
    named = [m.group(1) for line in legend for m in [re.match(r"\s+➖ (\S+): ", line)] if m]
    assert named == ["torch-abi", "python-abi", "no-cuda", "cuda-major"]  # present ones, in Condition's order
    assert "the wheel's tags fit no tag of the runtime's CPython" in "\n".join(legend)


def test_summary_md_has_the_release_row_the_axes_beneath_and_the_classes(run: RunResult) -> None:
    text = summary_markdown(run)
    header = next(line for line in text.splitlines() if line.startswith("| build \\ runtime |"))
    cells = [c.strip() for c in header.strip("|").split("|")][1:]
    assert [c for c in cells if c] == RELEASES and len(cells) == len(RUNTIMES)
    assert cells[:3] == ["2.9.1", "", "2.10.0"]  # a release heads its first runtime; the rest beneath it
    rows = text.splitlines()
    python = rows[rows.index(header) + 2]
    assert python.startswith("| *python* | py3.10 | py3.11 | py3.10 | py3.11 | py3.12 |")
    assert rows[rows.index(header) + 3].startswith("| *variant* |")
    assert rows[rows.index(header) + 4].startswith("| *device* |")
    for condition in ("torch-abi", "python-abi", "no-cuda", "cuda-major"):
        assert f"- ➖ **{condition}**: " in text
    assert "**unstable**" not in text and "**control**" not in text


def test_cells_are_listed_in_numeric_order_of_their_ids(run: RunResult) -> None:
    text = summary_markdown(run)
    assert text.index("`stable_basic@b2.15.0-t2.11~r2.9.1-cpu`") < text.index(
        "`stable_basic@b2.15.0-t2.11~r2.10.0-cpu`"
    )
    assert sorted(["r2.10.0-cpu", "r2.9.1-cpu-py3.10", "r2.9.1-cpu"], key=natural_key) == [
        "r2.9.1-cpu",
        "r2.9.1-cpu-py3.10",
        "r2.10.0-cpu",
    ]


def test_older_results_without_python_load_and_render(
    run: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.loads(write_report(run, tmp_path)["results"].read_text())
    data["schema_version"] = 4
    for cell in data["cells"]:
        del cell["build"]["python"], cell["runtime"]["python"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    old = load_results(tmp_path / "results.json")
    assert {c.runtime_python for c in old.cells} == {None}
    grid = Grid.of(old)
    assert [g.release for g in grid.groups] == RELEASES
    labels = {c.runtime_id: c.label("python") for c in grid.columns}
    assert labels["r2.10.0-cpu-py3.10"] == "py3.10" and labels["r2.10.0-cpu"] == "py?"  # the id's suffix, or unknown
    monkeypatch.setenv("COLUMNS", "120")
    print_grid(old)
    assert all(cell_len(line) <= 120 for line in capsys.readouterr().out.splitlines() if "│" in line)
    assert "| *python* | py3.10 | py? |" in summary_markdown(old)


def test_the_docs_show_the_grid_as_the_code_renders_it(run: RunResult, repo: Path) -> None:
    readme = (repo / "docs" / "authors" / "reading-the-report.md").read_text()
    first = Grid.of(run).blocks(120, grid_mark)[0]
    shown = "\n".join(
        [f"compatibility matrix (runtimes {first.first}-{first.last} of {len(RUNTIMES)})", *first.lines()]
    )
    assert f"```text\n{shown}\n```" in readme


def test_a_combination_the_run_left_out_is_marked_never_blank(
    run: RunResult, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    left_out = {c.id for c in run.cells if c.build_id == "cuda_ops@b2.14.1-t2.10" and c.runtime_id != "r2.11.0-cpu"}
    partial = dataclasses.replace(run, cells=tuple(c for c in run.cells if c.id not in left_out))
    assert Grid.of(partial).absent == len(left_out) and Grid.of(run).absent == 0
    row = next(line for line in summary_markdown(partial).splitlines() if line.startswith("| `cuda_ops@"))
    marks = [c.strip() for c in row.strip("|").split("|")][1:]
    assert marks.count(NOT_RUN) == len(left_out) and "" not in marks
    assert f"{NOT_RUN} {NOT_RUN_MEANING}" in summary_markdown(partial)
    assert NOT_RUN_MEANING not in summary_markdown(run)
    monkeypatch.setenv("COLUMNS", "400")
    print_grid(partial)
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("cuda_ops@b2.14.1-t2.10 "))
    assert line.count(NOT_RUN) == len(left_out)
    assert NOT_RUN_MEANING in out
