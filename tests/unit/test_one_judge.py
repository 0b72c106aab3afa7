"""A verdict is decided in one module, torch_abi_harness/run/judge.py: every other module of the package only
reads verdicts (results.json read back keeps the verdict stored in it).

Each module is parsed with `ast`. Outside the judge, none may call `judge(...)`, set a verdict with
`dataclasses.replace(..., verdict=...)` or setattr, or construct a record that carries a verdict (CellResult,
Attempt, BuildRow, MutantCell) with one that is not read back (`Verdict(data["verdict"])`), None, or a
name bound only by what a function of the judge returned. The checker itself is tested on planted sources,
and on the judge (where it must see the decisions).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torch_abi_harness

PACKAGE = Path(torch_abi_harness.__file__).parent
JUDGE = PACKAGE / "run" / "judge.py"
JUDGE_MODULE = "torch_abi_harness.run.judge"
# The records that carry a verdict, and where it stands among their positional arguments (None: keywords only).
RECORDS: dict[str, int | None] = {"CellResult": None, "Attempt": 1, "BuildRow": 1, "MutantCell": 5}
READERS = {"Verdict", "MutantVerdict"}  # Verdict(data["verdict"]): a verdict stored in a file, read back
SETTERS = {"setattr", "__setattr__"}
REPLACERS = {"replace", "__replace__"}


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _verdict_argument(call: ast.Call, position: int | None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "verdict":
            return keyword.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _assigned(scope: ast.AST, name: str) -> list[ast.expr | None]:
    """Every value bound to `name` in scope (a tuple target binds the whole value)."""
    values: list[ast.expr | None] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                values.append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                values.append(node.value)
        elif isinstance(node, ast.arg) and node.arg == name:
            values.append(None)  # a parameter: whatever the caller decided
    return values


class Deciders(ast.NodeVisitor):
    """The places in one module that decide a verdict."""

    def __init__(self, tree: ast.Module) -> None:
        self.found: list[str] = []
        self.scopes: list[ast.AST] = [tree]
        self.from_judge = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == JUDGE_MODULE
            for alias in node.names
        }

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        name = _called(node.func)
        if name == "judge":
            self.found.append(f"line {node.lineno}: calls judge()")
        elif name in REPLACERS and any(k.arg == "verdict" for k in node.keywords):
            self.found.append(f"line {node.lineno}: {name}(..., verdict=...)")
        elif name in SETTERS and any(isinstance(a, ast.Constant) and a.value == "verdict" for a in node.args):
            self.found.append(f"line {node.lineno}: {name}(..., 'verdict', ...)")
        elif name in RECORDS:
            value = _verdict_argument(node, RECORDS[name])
            if value is not None and not self.read_or_judged(value):
                self.found.append(f"line {node.lineno}: {name}(verdict={ast.unparse(value)})")
        self.generic_visit(node)

    def read_or_judged(self, value: ast.expr) -> bool:
        """A verdict read back from a file, None, or a name bound only by a call to a function of the judge."""
        if isinstance(value, ast.Call) and _called(value.func) in READERS:
            return True
        if isinstance(value, ast.Constant) and value.value is None:
            return True
        if not isinstance(value, ast.Name):
            return False
        bound = _assigned(self.scopes[-1], value.id)
        return bool(bound) and all(self.judged(v) for v in bound)

    def judged(self, value: ast.expr | None) -> bool:
        if isinstance(value, ast.Constant) and value.value is None:
            return True
        return isinstance(value, ast.Call) and _called(value.func) in self.from_judge


def deciders(source: str) -> list[str]:
    tree = ast.parse(source)
    finder = Deciders(tree)
    finder.visit(tree)
    return finder.found


def test_only_the_judge_decides_a_verdict() -> None:
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p != JUDGE)
    assert len(modules) > 100  # the whole package, not an empty glob
    found = [f"{p.relative_to(PACKAGE.parent)}: {d}" for p in modules for d in deciders(p.read_text())]
    assert found == [], "a verdict decided outside torch_abi_harness/run/judge.py:\n" + "\n".join(found)


def test_the_checker_sees_the_judges_own_decisions() -> None:
    """Not vacuous: in the judge it finds the calls of judge(), the verdicts it sets and the records it makes."""
    found = " | ".join(deciders(JUDGE.read_text()))
    for decision in ("calls judge()", "replace(..., verdict=...)", "CellResult(verdict=", "BuildRow(verdict="):
        assert decision in found, found


PLANTED = {
    "a call of judge": "from torch_abi_harness.run.judge import judge\nv = judge(e, s)\n",
    "judge through its module": "from torch_abi_harness.run import judge as j\nv = j.judge(e, s)\n",
    "replace": "import dataclasses\nr = dataclasses.replace(r, verdict=Verdict.FLAKY)\n",
    "replace by name": "from dataclasses import replace\nr = replace(r, reason='x', verdict=v)\n",
    "setattr": "object.__setattr__(r, 'verdict', Verdict.KEPT)\n",
    "a member": "CellResult(id='x', verdict=Verdict.ERROR)\n",
    "a copied verdict": "Attempt(r.status, r.verdict, r.reason, None)\n",
    "a build's": "BuildRow('b', Verdict.KEPT if ok else Verdict.BROKEN, '', '')\n",
    "a name": "def f():\n    v = Verdict.KNOWN_BREAK\n    return CellResult(id='x', verdict=v)\n",
    "a parameter": "def f(v):\n    return CellResult(id='x', verdict=v)\n",
    "a mutant's": "MutantCell(None, 'c', 'e', 'b', 'r', MutantVerdict.KILLED, 'PASS', '')\n",
    "a name bound twice": (
        "from torch_abi_harness.run.judge import judge_mutant\n"
        "def f():\n    v, why = judge_mutant(s, r, t)\n    v = MutantVerdict.KILLED\n    MutantCell(1, 2, 3, 4, 5, v)\n"
    ),
}
ALLOWED = {
    "read back": "CellResult(id=data['id'], verdict=Verdict(data['verdict']))\n",
    "read back, positional": "Attempt(Status(d['status']), Verdict(d['verdict']), d['reason'], d['seconds'])\n",
    "a baseline": "MutantCell(None, 'c', 'e', 'b', 'r', None, 'PASS', '')\n",
    "the judge's": (
        "from torch_abi_harness.run.judge import judge_mutant\n"
        "def f():\n    verdict: MutantVerdict | None = None\n    verdict, why = judge_mutant(s, r, t)\n"
        "    return MutantCell(None, 'c', 'e', 'b', 'r', verdict, 'PASS', why)\n"
    ),
    "no verdict": "r = dataclasses.replace(r, prediction=None)\ns = 'a'.replace('a', 'b')\n",
}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_second_judge_is_found(source: str) -> None:
    assert deciders(source) != []


@pytest.mark.parametrize("source", ALLOWED.values(), ids=ALLOWED.keys())
def test_reading_a_verdict_is_not_deciding_one(source: str) -> None:
    assert deciders(source) == []
