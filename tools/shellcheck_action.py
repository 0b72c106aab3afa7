"""shellcheck over action.yml's `run:` steps: actionlint checks the scripts of workflows, not of actions, so the
composite action's steps are written out as bash scripts (each `${{ expression }}` a quoted word) and checked
here, by `nox -s lint`, with the shellcheck on PATH."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.DOTALL)


def step_scripts(action: Path) -> list[str]:
    """Each run: step of a composite action, as a bash script shellcheck can read."""
    steps = yaml.safe_load(action.read_text())["runs"]["steps"]
    return ["#!/usr/bin/env bash\n" + EXPRESSION.sub('"expression"', step["run"]) for step in steps if "run" in step]


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for number, script in enumerate(step_scripts(REPO / "action.yml")):
            path = Path(folder) / f"action.yml-step-{number}.sh"
            path.write_text(script)
            paths.append(str(path))
        return subprocess.run(["shellcheck", *paths], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
