"""Keep docs/results/compatibility.md's table current: the compat table of one real run of the default matrix.

A run of the sample stable builds costs minutes, so the page is not rendered from a fresh run: the run's
results.json is copied, trimmed of what the table does not read (each cell's log paths and the static
prediction's op calls, which name the machine's files), into docs/data/compat.json, and the page's table
between its markers is written from that file by the harness's own `compat --update` (tests/unit/test_docs.py
runs `compat --check` on it and fails when the committed page is stale).

    python -m torch_abi_harness run -k stable_basic -k classic_ops -j 2          # the run
    python tools/docs_compat.py reports/latest/results.json            # copy, trim, update the page
    python tools/docs_compat.py                                        # the page again from docs/data
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from torch_abi_harness.cli import main as harness

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "compat.json"
PAGE = ROOT / "docs" / "results" / "compatibility.md"


def trim(document: dict[str, Any]) -> dict[str, Any]:
    """The run as compat reads it, without the paths of the machine that made it."""
    kept = dict(document, matrix=Path(document["matrix"]).name)
    cells = []
    for cell in document["cells"]:
        prediction = cell["prediction"] and dict(cell["prediction"], calls=[])
        cells.append(dict(cell, logs={}, prediction=prediction))
    kept["cells"] = cells
    return kept


def cli(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("results", nargs="?", type=Path, help="a run's results.json (else docs/data/compat.json)")
    parsed = args.parse_args(argv)
    if parsed.results is not None:
        document = trim(json.loads(parsed.results.read_text()))
        DATA.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")
    return harness(["compat", str(DATA), "--update", str(PAGE)])


if __name__ == "__main__":
    sys.exit(cli())
