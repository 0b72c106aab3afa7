"""benchmarks/breakdown.py on a kept cell made by hand: each phase from the file that times it."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from benchmarks.breakdown import cell_times, idle_seconds

T0 = 1_800_000_000.0  # command.txt written: the cell's launch


def kept_cell(run_dir: Path, cell_id: str, *, junit: bool = True) -> dict[str, Any]:
    folder = run_dir / "cells" / cell_id
    folder.mkdir(parents=True)
    for name, at in (("command.txt", T0), ("result.json", T0 + 5.0)):
        (folder / name).write_text("{}")
        os.utime(folder / name, (at, at))
    probe = {"pytest_main_at": T0 + 0.25, "plugin_started": T0 + 0.5, "load_s": 0.1, "import_torch_s": 0.0}
    if junit:
        probe.update(collected_at=T0 + 1.0, finished_at=T0 + 3.5)
        started = datetime.fromtimestamp(T0 + 0.75, UTC).isoformat()
        (folder / "junit.xml").write_text(
            f'<testsuites><testsuite name="pytest" time="2.75" timestamp="{started}">'
            '<testcase name="a" time="1.0"/><testcase name="b" time="0.5"/></testsuite></testsuites>'
        )
    (folder / "probe.json").write_text(json.dumps(probe))
    return {"id": cell_id, "durations": {"total": 4.0}}


def test_a_cells_phases_come_from_the_files_that_time_them(tmp_path: Path) -> None:
    times = cell_times(tmp_path, kept_cell(tmp_path, "c"))
    assert times is not None
    expected = {
        "start": 0.25,  # command.txt -> pytest.main
        "pytest": 0.25,  # pytest.main -> the probe's first hook
        "load": 0.1,
        "configure": 0.15,  # the hook (and the load) -> the session's start
        "collect": 0.25,  # the session's start -> collected
        "tests": 1.5,  # the testcases' own times
        "between": 1.0,  # the session's 2.75 s less collection and the tests
        "finish": 0.5,  # the session's end (3.5) -> the execution over (4.0)
        "record": 1.0,  # the execution over -> result.json (5.0)
    }
    assert times.phases == pytest.approx(expected, abs=1e-3)
    assert sum(times.phases.values()) == pytest.approx(5.0, abs=1e-3)  # the phases add up to launch -> recorded


def test_a_cell_that_never_reached_a_session_is_start_load_and_finish(tmp_path: Path) -> None:
    times = cell_times(tmp_path, kept_cell(tmp_path, "c", junit=False))
    assert times is not None
    assert (times.phases["tests"], times.phases["collect"]) == (0.0, 0.0)
    assert times.phases["finish"] == pytest.approx(4.0 - 0.5 - 0.1)
    assert cell_times(tmp_path, {"id": "never", "durations": {"total": None}}) is None


def test_idle_is_the_workers_time_without_a_cell(tmp_path: Path) -> None:
    one = cell_times(tmp_path, kept_cell(tmp_path, "c"))
    assert one is not None
    span, idle = idle_seconds([one], workers=2)
    assert (span, idle) == pytest.approx((5.0, 5.0))  # one cell, two workers: one of them idled throughout
