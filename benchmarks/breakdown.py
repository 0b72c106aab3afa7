"""Where each cell's time goes in a run that is already on disk, and what the harness adds between cells.

`python benchmarks/breakdown.py REPORTS/latest` reads only what the run kept: each cell's command.txt (written
just before the cell starts), its probe.json (the cell's own clock: when pytest reached the probe plugin, what
loading took, when collection ended, when the session finished), its junit.xml (the session's start, its
testcases' own times), its logs and its result.json (written once the verdict is final). It prints, per phase,
the median and the sum over the cells, and the workers' idle time between cells, beside the run's floor line
(run/floor.py), so a change to the executor can be measured phase by phase on the same run.

Phases of a cell (seconds):
  start      command.txt written -> pytest.main called in the cell (fork, namespaces, mounts, cgroup, setup);
             only where the cell says when it called pytest.main (a forked cell); else part of `pytest`
  pytest     pytest.main -> the probe's first hook (pytest's config, plugins, the initial conftests' parse)
  load       import torch (a fresh cell) and the extension
  configure  the probe's hook left -> the session's start (conftest files, pytest_configure)
  collect    the session's start -> the last test collected
  tests      the testcases' own times (setup, call, teardown), the floor's part
  between    the rest of the session: what pytest does around each test (reporting, the probe's writes)
  finish     the session's end -> the cell's process over and its logs closed (summary, exit, the sandbox's end)
  record     its execution over -> its result.json written (junit and probe read, files swept, verdict written)
  idle       (per run) the workers' time with no cell: waiting for a server, the report, the scheduler
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

PHASES = ("start", "pytest", "load", "configure", "collect", "tests", "between", "finish", "record")


@dataclasses.dataclass(frozen=True)
class CellTimes:
    cell_id: str
    launched: float  # command.txt written (time.time())
    executed: float  # the execution over: launched + its total
    recorded: float  # result.json written
    phases: dict[str, float]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _junit(path: Path) -> tuple[float, float, float] | None:
    """(session start as time.time(), the session's time, the testcases' own time)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None or not suite.get("timestamp"):
        return None
    started = datetime.fromisoformat(suite.get("timestamp", "")).timestamp()
    own = sum(float(case.get("time") or 0) for case in root.iter("testcase"))
    return started, float(suite.get("time") or 0), own


def cell_times(run_dir: Path, cell: dict[str, Any]) -> CellTimes | None:
    """One cell's phases; None for a cell that did not run (no command.txt or no total)."""
    folder = run_dir / "cells" / cell["id"]
    launched, recorded = _mtime(folder / "command.txt"), _mtime(folder / "result.json")
    durations = cell["durations"]
    if launched is None or recorded is None or durations.get("total") is None:
        return None
    try:
        probe = json.loads((folder / "probe.json").read_text())
    except (OSError, ValueError):
        probe = {}
    executed = launched + durations["total"]
    phases = dict.fromkeys(PHASES, 0.0)
    phases["record"] = recorded - executed
    plugin = probe.get("plugin_started")
    if plugin is None:  # it never reached pytest's hooks: all of it is start-up
        phases["start"] = executed - launched
        return CellTimes(cell["id"], launched, executed, recorded, phases)
    main_at = probe.get("pytest_main_at")
    phases["start"] = (main_at - launched) if main_at else 0.0
    phases["pytest"] = plugin - (main_at or launched)
    phases["load"] = (probe.get("import_torch_s") or 0.0) + (probe.get("load_s") or 0.0)
    junit = _junit(folder / "junit.xml")
    ended = probe.get("finished_at") or max(filter(None, [_mtime(folder / "junit.xml"), _mtime(folder / "probe.json")]))
    if junit is None:
        phases["finish"] = executed - plugin - phases["load"]
        return CellTimes(cell["id"], launched, executed, recorded, phases)
    session, session_s, own = junit
    collected = probe.get("collected_at") or session
    phases["configure"] = session - plugin - phases["load"]
    phases["collect"] = collected - session
    phases["tests"] = own
    phases["between"] = session_s - (collected - session) - own
    phases["finish"] = executed - max(ended, session + session_s)
    return CellTimes(cell["id"], launched, executed, recorded, phases)


def idle_seconds(cells: list[CellTimes], workers: int) -> tuple[float, float]:
    """(the cells' phase of the run, first cell started to last recorded; the workers' time in it with no cell)."""
    if not cells:
        return 0.0, 0.0
    span = max(c.recorded for c in cells) - min(c.launched for c in cells)
    busy = sum(c.recorded - c.launched for c in cells)
    return span, max(0.0, span * workers - busy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run's directory (REPORTS/latest)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="the run's workers (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    run_dir = args.run_dir.resolve()
    run = json.loads((run_dir / "results.json").read_text())
    timed = [t for t in (cell_times(run_dir, c) for c in run["cells"]) if t is not None]
    whole = (datetime.fromisoformat(run["finished"]) - datetime.fromisoformat(run["started"])).total_seconds()
    span, idle = idle_seconds(timed, args.jobs)
    figures: dict[str, Any] = {"run": str(run_dir), "cells": len(timed), "wall_s": whole, "cells_span_s": span}
    print(f"{run_dir}: {len(timed)} cells ran; run {whole:.1f} s, cells' phase {span:.1f} s, -j {args.jobs}")
    print(f"   {'phase':<10} {'median':>8} {'sum':>8}")
    for phase in PHASES:
        values = [t.phases[phase] for t in timed] or [0.0]
        figures[phase] = {"median_s": round(statistics.median(values), 4), "sum_s": round(sum(values), 2)}
        print(f"   {phase:<10} {statistics.median(values):8.3f} {sum(values):8.1f}")
    outside = whole - span
    print(f"   idle      {'':>8} {idle:8.1f}   (worker-seconds with no cell in the cells' phase)")
    print(f"   outside   {'':>8} {outside:8.1f}   (wall: envs, builds, prediction before; the report after)")
    figures.update(idle_worker_s=round(idle, 2), outside_s=round(outside, 2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
