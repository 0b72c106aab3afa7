"""The size rules' burn-down list holds only what is still needed (`nox -s lint` runs it).

ruff's complexity, argument-count, statement-count and boolean-flag rules (BURN_DOWN below) run on the whole tree;
the places that broke them when they came in are listed in `[tool.ruff.lint.per-file-ignores]` of pyproject.toml.
This fails when an entry of that list no longer has a violation to excuse (the code was split: take the entry
off, so the list only shrinks), and when an inline `# noqa` excuses one of these rules (the list is the one place
for exceptions). `--write` prints the list the tree needs today, for pasting into pyproject.toml.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BURN_DOWN = ("C901", "PLR0913", "PLR0915", "FBT")
TREES = ("torch_abi_harness", "tests", "tools", "benchmarks", "noxfile.py")


def covered(code: str) -> bool:
    return code.startswith(BURN_DOWN)


def violations() -> dict[str, set[str]]:
    """{file: {code}} for the burn-down rules with the list set aside (the rest of the configuration applies)."""
    command = [
        sys.executable,
        "-m",
        "ruff",
        "check",
        "--select",
        ",".join(BURN_DOWN),
        "--config",
        "lint.per-file-ignores = {}",
        "--output-format",
        "json",
        "--exit-zero",
        *TREES,
    ]
    found = json.loads(subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout)
    by_file: dict[str, set[str]] = defaultdict(set)
    for item in found:
        by_file[str(Path(item["filename"]).relative_to(REPO))].add(item["code"])
    return by_file


def listed() -> dict[str, set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    return {path: {c for c in codes if covered(c)} for path, codes in ignores.items() if any(map(covered, codes))}


def inline_noqa() -> list[str]:
    pattern = re.compile(r"#\s*noqa:[^\n]*\b(" + "|".join(BURN_DOWN) + r")\d*")
    return [
        f"{path.relative_to(REPO)}:{number}"
        for tree in TREES
        for path in ((REPO / tree).rglob("*.py") if (REPO / tree).is_dir() else [REPO / tree])
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def stale_entries(needed: dict[str, set[str]], have: dict[str, set[str]]) -> list[str]:
    stale = []
    for path, codes in sorted(have.items()):
        for code in sorted(codes):
            if not any(c.startswith(code) for c in needed.get(path, set())):
                stale.append(f"{path}: {code}")
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="print the list the tree needs today")
    args = parser.parse_args()
    needed = violations()
    if args.write:
        for path, codes in sorted(needed.items()):
            shown = sorted({c[:3] if c.startswith("FBT") else c for c in codes})
            sys.stdout.write(f'"{path}" = {json.dumps(shown)}\n')
        return 0
    problems = [f"no longer needed, take it off the list: {entry}" for entry in stale_entries(needed, listed())]
    problems += [f"an inline noqa for a burn-down rule (list it in pyproject.toml): {at}" for at in inline_noqa()]
    count = sum(len(codes) for codes in listed().values())
    summary = f"burn-down list: {count} entries in {len(listed())} files; {len(problems)} problem(s)"
    sys.stdout.write("\n".join([*problems, summary]) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
