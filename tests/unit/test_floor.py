"""A run's floor: the cells' load and tests' own time, one import per runtime per worker, over the workers."""

import dataclasses
from pathlib import Path

from test_report import BROKEN, KEPT

from torch_abi_harness.results.model import CellLogs, Durations
from torch_abi_harness.run.floor import floor_of, imports_measured, own_test_seconds

JUNIT = """<?xml version="1.0"?>
<testsuites><testsuite name="pytest" time="9.9">
<testcase classname="t" name="a" time="1.25"/><testcase classname="t" name="b" time="0.75"/>
</testsuite></testsuites>
"""


def cell(base, runtime: str, load: float, junit: str | None, executor: str = "forkserver", import_torch=None):  # type: ignore[no-untyped-def]
    durations = Durations.ran(total=5.0, build=None, startup=0.5, import_torch=import_torch, load=load, tests=3.0)
    return dataclasses.replace(
        base, runtime_id=runtime, durations=durations, logs=CellLogs(junit=junit), executor=executor
    )


def test_the_floor_counts_load_tests_own_time_and_one_import_per_worker(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(JUNIT)
    (tmp_path / "b.xml").write_text("not xml")  # a cell that died writing it: its tests count 0
    cells = [
        cell(KEPT, "r2.13.0-cpu", 0.5, "a.xml"),
        cell(BROKEN, "r2.13.0-cpu", 0.25, "b.xml"),
        cell(KEPT, "r2.10.0-cpu", 0.25, "a.xml"),
        dataclasses.replace(KEPT, durations=Durations(total=0.1, named=frozenset({"total"}))),  # never ran
    ]
    floor = floor_of(cells, tmp_path, {"r2.13.0-cpu": 2.0, "r2.10.0-cpu": 1.0}, workers=2, wall_s=10.0)
    assert floor.cells == 3
    assert floor.work_s == 0.5 + 2.0 + 0.25 + 0.25 + 2.0
    assert floor.imports_s == 2.0 * 2 + 1.0 * 1  # two cells of 2.13 over two workers: both import it once
    assert floor.floor_s == (5.0 + 5.0) / 2
    assert floor.ratio == 2.0
    assert floor.text().endswith("over 2 worker(s)): 2.00x the floor")
    assert own_test_seconds(tmp_path / "missing.xml") == 0.0


def test_fresh_cells_give_their_runtimes_fastest_import() -> None:
    cells = [
        cell(KEPT, "r2.13.0-cpu", 0.5, None, "fresh", 3.0),
        cell(BROKEN, "r2.13.0-cpu", 0.5, None, "fresh", 2.5),
        cell(KEPT, "r2.10.0-cpu", 0.5, None, "forkserver", 0.0),
    ]
    assert imports_measured(cells) == {"r2.13.0-cpu": 2.5}


def test_no_cell_ran_no_ratio(tmp_path: Path) -> None:
    floor = floor_of([], tmp_path, {}, workers=2, wall_s=3.0)
    assert floor.ratio is None and "no floor" in floor.text()


def test_a_cell_killed_at_its_timeout_counts_what_its_tests_ran_until_the_kill(tmp_path: Path) -> None:
    """It writes no junit: its tests' time is from its load's end to the kill (total - startup - load), the limit
    the matrix set, which no executor could shorten; one killed before its extension loaded counts nothing."""
    from torch_abi_harness.core.status import Status

    hung = dataclasses.replace(cell(BROKEN, "r2.13.0-cpu", 0.25, None), status=Status.TIMEOUT)
    before_load = dataclasses.replace(
        hung,
        durations=Durations.ran(total=5.0, build=None, startup=5.0, import_torch=None, load=None, tests=None),
    )
    floor = floor_of([hung, before_load], tmp_path, {}, workers=1, wall_s=10.0)
    assert floor.work_s == 0.25 + (5.0 - 0.5 - 0.25)
    assert floor.cells == 1
