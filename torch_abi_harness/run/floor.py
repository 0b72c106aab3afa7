"""A run's wall time against its floor: what no executor could avoid, computed from the same run.

The floor is the work only the cells themselves can do (each loading its extension, and its tests' own time:
the junit testcases' times, without collection or start-up; for a cell killed at its timeout, which writes no
junit, the time its tests ran until the kill: the matrix's limit, which no executor could shorten) plus one
`import torch` per runtime for each worker that runs that runtime's cells, all spread over the workers. The
ratio of the run's wall time to it says how much the harness adds: start-up, collection, result writing,
waiting. `nox -s bench` prints it beside the per-cell breakdown; `run` prints it in one line at the end;
`benchmarks/breakdown.py` splits a kept run's cells into phases.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from torch_abi_harness.core.status import Status
from torch_abi_harness.results.model import CellResult

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Floor:
    wall_s: float  # the run's wall time as `run` gives it: results.json's started to finished (envs checked too)
    work_s: float  # every cell's load and its tests' own time
    imports_s: float  # one `import torch` per runtime per worker that ran its cells
    workers: int
    cells: int  # the cells that count (they ran)

    @property
    def floor_s(self) -> float:
        return (self.work_s + self.imports_s) / self.workers

    @property
    def ratio(self) -> float | None:
        return self.wall_s / self.floor_s if self.floor_s > 0 else None

    def text(self) -> str:
        ratio = self.ratio
        said = f"{ratio:.2f}x the floor" if ratio is not None else "no floor (no cell ran tests)"
        return (
            f"wall {self.wall_s:.1f} s, floor {self.floor_s:.1f} s ({self.cells} cells: "
            f"load + tests {self.work_s:.1f} s, import torch {self.imports_s:.1f} s, "
            f"over {self.workers} worker(s)): {said}"
        )


def own_test_seconds(junit: Path) -> float:
    """The tests' own time: their testcases' times (setup, call, teardown), not collection or start-up; 0 for a
    junit file that is missing or not XML (the cell died before writing it)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return 0.0
    return sum(float(case.get("time") or 0) for case in root.iter("testcase"))


def floor_of(
    cells: Sequence[CellResult], run_dir: Path, imports: Mapping[str, float], workers: int, wall_s: float
) -> Floor:
    """The floor of the cells that ran. imports: seconds of one `import torch` by runtime id (the CPU seconds of a
    forkserver's start: it may overlap the cells, so its wall time says more of the machine's load than of torch; or
    the fastest import a fresh cell of that runtime measured); a runtime missing there counts as free."""
    ran = [c for c in cells if c.durations.get("tests") is not None or c.durations.get("load") is not None]
    work = sum((c.durations.get("load") or 0.0) + _tests_seconds(c, run_dir) for c in ran)
    per_runtime = collections.Counter(c.runtime_id for c in ran)
    import_s = sum(imports.get(runtime, 0.0) * min(workers, count) for runtime, count in per_runtime.items())
    return Floor(wall_s=wall_s, work_s=work, imports_s=import_s, workers=max(1, workers), cells=len(ran))


def _tests_seconds(cell: CellResult, run_dir: Path) -> float:
    """The tests' own time: the junit testcases' times; for a cell killed at its timeout once its extension had
    loaded, from the load's end to the kill (what it spent in its tests, to the second the matrix allowed)."""
    durations = cell.durations
    if cell.status is Status.TIMEOUT and durations.get("load") is not None:
        spent = (durations.get("total") or 0.0) - (durations.get("startup") or 0.0) - (durations.get("load") or 0.0)
        return max(0.0, spent)
    return own_test_seconds(run_dir / cell.logs.junit) if cell.logs.junit else 0.0


def imports_measured(cells: Sequence[CellResult]) -> dict[str, float]:
    """One `import torch` by runtime as fresh cells measured it: the fastest of each runtime's cells (the others
    waited for the disk or a core). A forked cell's import is its server's, not measured here."""
    fastest: dict[str, float] = {}
    for cell in cells:
        seconds = cell.durations.get("import_torch")
        if seconds is not None and cell.executor == "fresh":
            fastest[cell.runtime_id] = min(seconds, fastest.get(cell.runtime_id, seconds))
    return fastest
