"""Render the fault catalogue's rows (JSON lines written by the fault tests) as a Markdown table.

`nox -s faults` runs the fault tier with HARNESS_FAULT_TABLE set and then this script (with the whole
catalogue, tools/docs_faults.py, which keeps the rows and renders docs/results/fault-table.md with it).
"""

import json
import re
import sys
from pathlib import Path


def _key(probe: str) -> tuple[str, int, str]:
    match = re.match(r"([A-Z]+)(\d+)(.*)", probe)
    return (match[1], int(match[2]), match[3]) if match else (probe, 0, "")


def render(rows: list[dict[str, str]]) -> str:
    lines = ["| probe | fault | expected | observed (by the test) |", "|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: _key(r["probe"])):
        cells = [row["probe"], row["fault"], row["expected"], row["observed"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    sys.stdout.write(render(rows))
