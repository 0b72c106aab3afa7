"""A small mutation pass (cosmic-ray) over the rules a test must notice losing: the release gate, the verdict
and report.html's URL filters. Each target is one module, or some of its functions, with the unit tests
that cover it; every mutant (a flipped comparison, a negated condition, a swapped constant, a loop that
never runs...) runs that selection, and the pass prints what was killed, what survived, and each survivor.

    python tools/mutation_pass.py [--work DIR] [TARGET ...]        # nox -s mutation_pass [-- TARGET ...]

The mutants are made in a copy of the repository (tracked and untracked, not ignored, files), never in the
checkout; the copy's `harness` is imported first (PYTHONPATH), before an editable install's. Exit 1 when a
mutant survives.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Target:
    module: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()  # only these top-level functions (or constants) of the module; all when empty
    strings: bool = False  # swap its string constants too (here most strings are messages: not worth a mutant)


TARGETS = {
    "gate": Target("torch_abi_harness/gate/decide.py", ("tests/unit/test_gate.py",)),
    "verdict": Target(
        "torch_abi_harness/verdict.py",
        ("tests/unit/test_plan_and_verdict.py", "tests/unit/test_artifact_promise.py", "tests/unit/test_flaky.py"),
    ),
    "url-filter": Target(
        "torch_abi_harness/render/html.py",
        ("tests/unit/test_html_report.py",),
        ("safe_url", "_RUN_PATH", "safe_path"),
        strings=True,
    ),
}

# Operators left out: arithmetic swaps beyond one per operator (on strings they all fail the same way), `|`
# (type unions in annotations, never evaluated here), `is` <-> `==` (the same on enum members) and ordering
# comparisons put in place of an identity test.
EXCLUDED_OPERATORS = (
    r"core/ReplaceBinaryOperator_Add_(?!Sub$)",
    r"core/ReplaceBinaryOperator_Sub_(?!Add$)",
    r"core/ReplaceBinaryOperator_BitOr_",
    r"core/ReplaceComparisonOperator_Is_(Eq|Lt|LtE|Gt|GtE)$",
    r"core/ReplaceComparisonOperator_IsNot_NotEq$",
    r"core/ReplaceComparisonOperator_Eq_Is$",
    r"core/ReplaceComparisonOperator_NotEq_IsNot$",
)


def line_ranges(module: Path, functions: tuple[str, ...]) -> list[tuple[int, int]]:
    """The (first, last) lines of the named top-level functions and constants; the whole module when none."""
    tree = ast.parse(module.read_text())
    if not functions:
        return [(1, len(module.read_text().splitlines()))]
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for name in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(name, ast.Name):
                    found[name.id] = node
    missing = sorted(set(functions) - set(found))
    if missing:
        raise SystemExit(f"{module}: no function or constant {', '.join(missing)}")
    return [(found[f].lineno, found[f].end_lineno or found[f].lineno) for f in functions]


# What cosmic-ray's operators do not make: a branch dropped, an operand of `and`/`or` dropped, an element of a
# constant collection dropped, and (where the target asks) a string constant emptied.
def _constant(*nodes: ast.expr | None) -> bool:
    """Two or more literals or dotted names (Status.CRASHED): a constant collection, not a tuple being built."""

    def plain(node: ast.expr | None) -> bool:
        if isinstance(node, ast.Attribute):
            return plain(node.value)
        return isinstance(node, ast.Constant | ast.Name)

    return len(nodes) > 1 and all(plain(n) for n in nodes)


def _candidates(tree: ast.Module, ranges: list[tuple[int, int]], *, strings: bool) -> list[tuple[ast.AST, int]]:
    """(node, variant) pairs, in one fixed order, for the nodes inside the ranges."""
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    formatted = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    slices = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}  # annotations mostly
    found: list[tuple[ast.AST, int]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if not any(first <= line <= last for first, last in ranges):
            continue
        if isinstance(node, ast.If):
            found.append((node, 0))
        elif isinstance(node, ast.IfExp):
            found += [(node, 0), (node, 1)]
        elif isinstance(node, ast.BoolOp):
            found += [(node, k) for k in range(len(node.values))]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in slices and _constant(*node.elts):
            loaded = not isinstance(node, ast.Tuple | ast.List) or isinstance(node.ctx, ast.Load)
            texts = all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
            if loaded and (strings or not texts):
                found += [(node, k) for k in range(len(node.elts))]
        elif isinstance(node, ast.Dict) and None not in node.keys and _constant(*node.keys, *node.values):
            found += [(node, k) for k in range(len(node.keys))]
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            if id(node) not in docstrings and id(node) not in formatted:
                found.append((node, 0))
    return found


def _mutate(node: ast.AST, variant: int) -> str:
    """Change the node in place; say how."""
    if isinstance(node, ast.If):
        node.test = ast.Constant(value=False)
        return "branch dropped (if False)"
    if isinstance(node, ast.IfExp):
        node.test = ast.Constant(variant == 1)
        return "conditional expression: always the " + ("first" if variant else "second") + " value"
    if isinstance(node, ast.BoolOp):
        dropped = ast.unparse(node.values.pop(variant))
        return f"operand dropped: {dropped}"
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return f"element dropped: {ast.unparse(node.elts.pop(variant))}"
    if isinstance(node, ast.Dict):
        key = node.keys.pop(variant)
        node.values.pop(variant)
        return f"entry dropped: {ast.unparse(key) if key else '**'}"
    assert isinstance(node, ast.Constant)
    before, node.value = node.value, ""
    return f"string emptied: {before!r}"


def extra_mutants(source: str, ranges: list[tuple[int, int]], *, strings: bool) -> list[tuple[int, str, str]]:
    """(line, what changed, the mutated module) for each mutant cosmic-ray would not make."""
    count = len(_candidates(ast.parse(source), ranges, strings=strings))
    mutants = []
    for index in range(count):
        tree = ast.parse(source)
        node, variant = _candidates(tree, ranges, strings=strings)[index]
        line = getattr(node, "lineno", 0)
        what = _mutate(node, variant)
        mutants.append((line, what, ast.unparse(tree) + "\n"))
    return mutants


def run_extras(target: Target, copy: Path) -> tuple[Counter[str], list[str]]:
    module = copy / target.module
    source = module.read_text()
    counts: Counter[str] = Counter()
    lines = []
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *target.tests]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    try:
        for line, what, mutated in extra_mutants(source, line_ranges(module, target.functions), strings=target.strings):
            module.write_text(mutated)
            try:
                done = subprocess.run(command, cwd=copy, env=env, capture_output=True, timeout=120)
                killed = done.returncode != 0
            except subprocess.TimeoutExpired:
                killed = True
            counts["killed" if killed else "survived"] += 1
            if not killed:
                lines.append(f"  {target.module}:{line}: {what}")
    finally:
        module.write_text(source)
    return counts, lines


def config(target: Target, copy: Path) -> str:
    tests = " ".join(target.tests)
    lines = [
        "[cosmic-ray]",
        f'module-path = "{target.module}"',
        "timeout = 120.0",
        "excluded-modules = []",
        f'test-command = "{sys.executable} -m pytest -x -q -p no:cacheprovider {tests}"',
        "",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "",
        "[cosmic-ray.filters.operators-filter]",
        "exclude-operators = [" + ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS) + "]",
    ]
    if target.functions:
        ranges = ", ".join(f'"{a}-{b}"' for a, b in line_ranges(copy / target.module, target.functions))
        lines += ["", "[cosmic-ray.filters.line-filter]", f'lines = {{ "{target.module}" = [{ranges}] }}']
    return "\n".join(lines) + "\n"


def copy_repository(into: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def run(copy: Path, *words: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(words, cwd=copy, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(words)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def survivors(session: Path) -> tuple[Counter[str], list[str]]:
    counts: Counter[str] = Counter()
    lines = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome is WorkerOutcome.SKIPPED:
                continue
            outcome = result.test_outcome.value if result.test_outcome else result.worker_outcome.value
            counts[outcome] += 1
            if result.test_outcome is TestOutcome.SURVIVED:
                (mutation,) = item.mutations
                diff = [d for d in (result.diff or "").splitlines() if d[:1] in "+-" and d[:3] not in ("+++", "---")]
                lines.append(
                    f"  {mutation.module_path}:{mutation.start_pos[0]} in {mutation.definition_name}: "
                    f"{mutation.operator_name}: " + " => ".join(d.strip() for d in diff)
                )
    return counts, lines


def say(*lines: str) -> None:
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--work", type=Path, help="keep the copy and the cosmic-ray sessions here")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"no target {', '.join(unknown)} (there are {', '.join(TARGETS)})")
    work = args.work or Path(tempfile.mkdtemp(prefix="mutation-pass-"))
    copy = work / "repo"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    copy_repository(copy)
    total: Counter[str] = Counter()
    survived = []
    try:
        for name in args.targets or list(TARGETS):
            target, started = TARGETS[name], time.monotonic()
            cfg, session = work / f"{name}.toml", work / f"{name}.sqlite"
            cfg.write_text(config(target, copy))
            session.unlink(missing_ok=True)
            run(copy, tool("cosmic-ray"), "init", str(cfg), str(session))
            run(copy, tool("cr-filter-operators"), str(session), str(cfg))
            if target.functions:
                run(copy, tool("cr-filter-lines"), str(session), "--config", str(cfg))
            run(copy, tool("cosmic-ray"), "baseline", str(cfg))
            run(copy, tool("cosmic-ray"), "exec", str(cfg), str(session))
            counts, lines = survivors(session)
            more, more_lines = run_extras(target, copy)
            counts += more
            lines += more_lines
            total += counts
            survived += lines
            shown = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            took = time.monotonic() - started
            say(f"{name}: {sum(counts.values())} mutants: {shown} ({took:.0f} s)", *lines)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    say(f"all: {sum(total.values())} mutants, {total['killed']} killed, {total['survived']} survived")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
