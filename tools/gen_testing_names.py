"""Regenerate torch_abi_harness/data/torch_testing_names.json: the first torch release whose torch.testing modules
define each name that the oldest release given lacks.

A suite written against a newer torch imports a helper (`from torch.testing._internal.common_utils import
skipIfFreeThreaded`) that an older runtime does not have; the cell's ImportError then says in which release
the name first appears. The source is each release's own files, read (never imported: common_utils needs
expecttest, which the harness's envs do not hold): every name a module of torch/testing binds at its top
level (def, class, assignment, import). A name that only the newer releases bind gets the oldest of them.

    python tools/gen_testing_names.py ~/.cache/torch-abi-harness/envs/torch-*-auto-py3.11 [--out FILE]
    python tools/gen_testing_names.py torch-2.*.whl          # or the wheels (nox -s manifest does this)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path

from packaging.version import Version

DATA = Path(__file__).resolve().parents[1] / "torch_abi_harness" / "data"
FORMAT = 1
VERSION_LINE = re.compile(r"^__version__\s*=\s*'([^']+)'", re.M)


def torch_dir(env: Path) -> Path:
    """The torch package of a venv."""
    found = sorted(env.glob("lib/python3*/site-packages/torch/version.py"))
    if not found:
        raise SystemExit(f"{env}: no lib/python3*/site-packages/torch: give a torch env's directory")
    return found[0].parent


def release_of(torch: Path) -> Version:
    match = VERSION_LINE.search((torch / "version.py").read_text())
    if match is None:
        raise SystemExit(f"{torch / 'version.py'}: no __version__")
    return Version(Version(match[1]).public)


def bound_names(source: str) -> set[str]:
    """The names a module binds at its top level (what `from module import name` finds)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return names


def modules(torch: Path) -> dict[str, set[str]]:
    """Each module of torch/testing (dotted name) and the names it binds."""
    found: dict[str, set[str]] = {}
    for path in sorted((torch / "testing").rglob("*.py")):
        parts = path.relative_to(torch.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            found[name] = bound_names(path.read_text(errors="replace"))
        except SyntaxError:
            continue
    return found


def wheel_modules(wheel: Path) -> tuple[Version, dict[str, set[str]]]:
    """A torch wheel's release (its file name) and each module of its torch/testing with the names it binds."""
    found: dict[str, set[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(n for n in archive.namelist() if n.startswith("torch/testing/") and n.endswith(".py")):
            parts = Path(member).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                found[name] = bound_names(archive.read(member).decode(errors="replace"))
            except SyntaxError:
                continue
    return Version(Version(wheel.name.split("-")[1]).public), found


def one_release(source: Path) -> tuple[Version, dict[str, set[str]]]:
    """A release's torch.testing names, from a wheel or a venv holding torch."""
    if source.suffix == ".whl":
        return wheel_modules(source)
    torch = torch_dir(source)
    return release_of(torch), modules(torch)


def first_appearances(sources: list[Path]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The releases read, oldest first, and per module each name the oldest lacks with the first release binding it."""
    by_release = sorted(map(one_release, sources), key=lambda pair: pair[0])
    oldest = by_release[0][1]
    first: dict[str, dict[str, str]] = {}
    for release, found in by_release[1:]:
        for module, names in found.items():
            for name in sorted(names - oldest.get(module, set())):
                first.setdefault(module, {}).setdefault(name, str(release))
    return [str(r) for r, _ in by_release], {m: dict(sorted(n.items())) for m, n in sorted(first.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "sources", nargs="+", type=Path, help="torch wheels or envs (venv directories), one per release"
    )
    parser.add_argument("--out", type=Path, default=DATA / "torch_testing_names.json")
    args = parser.parse_args(argv)
    releases, names = first_appearances(args.sources)
    data = {"format": FORMAT, "releases": releases, "names": names}
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    count = sum(len(n) for n in names.values())
    sys.stderr.write(f"{args.out}: {count} names first appearing after {releases[0]}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
