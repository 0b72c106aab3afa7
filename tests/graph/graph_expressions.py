"""The subset of GitHub Actions' expression language that ci/nightly.yml uses, and nothing more.

Literals ('string', numbers, true/false/null), context paths (`needs.plan.outputs.shards`,
`strategy.job-index`), `!`, `==`, `!=`, `&&`, `||`, parentheses, and the functions fromJSON, join, always and
success. Semantics as GitHub documents them: `||` and `&&` yield an operand, not a bool; falsy is false,
0, '', null; `==` compares strings case-insensitively; a missing property is null. Anything else (another
function, an operator such as `<`, an unknown context) raises UnsupportedExpression: the runner fails
loudly rather than guess what GitHub would do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_*][A-Za-z0-9_-]*)*))"
)
TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
STATUS_FUNCTIONS = ("always()", "success()", "failure()", "cancelled()")


class UnsupportedExpression(Exception):
    """An expression outside the subset this runner evaluates."""


def tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip()):
        match = TOKEN.match(text, at)
        if not match or match.end() == at:
            raise UnsupportedExpression(f"cannot read {text[at:]!r} in {text!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        at = match.end()
    return found


def truthy(value: Any) -> bool:
    return value not in (False, 0, "", None)


def text(value: Any) -> str:
    """A value as `${{ }}` writes it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class Evaluator:
    """Evaluates expressions against contexts (github, env, needs, steps, matrix, strategy, runner, vars)
    and the job's status (for success())."""

    def __init__(self, contexts: Mapping[str, Any], succeeded: Callable[[], bool] = lambda: True) -> None:
        self.contexts = contexts
        self.succeeded = succeeded

    def evaluate(self, expression: str) -> Any:
        self._tokens = tokens(expression)
        self._at = 0
        self._source = expression
        value = self._or()
        if self._at != len(self._tokens):
            raise UnsupportedExpression(f"unexpected {self._tokens[self._at][1]!r} in {expression!r}")
        return value

    def interpolate(self, template: str) -> str:
        """Every `${{ expr }}` in a string replaced by its value."""
        return TEMPLATE.sub(lambda m: text(self.evaluate(m.group(1))), template)

    def value(self, template: Any) -> Any:
        """A workflow value: a whole `${{ expr }}` keeps its type (a matrix from fromJSON), else interpolated."""
        if isinstance(template, str):
            whole = TEMPLATE.fullmatch(template.strip())
            return self.evaluate(whole.group(1)) if whole else self.interpolate(template)
        return template

    def condition(self, text_: str | bool | None, default: str = "success()") -> bool:
        """An `if:`: without a status function, `success() && (...)` as GitHub reads it."""
        if text_ is None:
            return truthy(self.evaluate(default))
        if isinstance(text_, bool):
            return text_
        body = TEMPLATE.fullmatch(text_.strip())
        expression = body.group(1) if body else text_
        if not any(f in expression.replace(" ", "") for f in STATUS_FUNCTIONS):
            expression = f"success() && ({expression})"
        return truthy(self.evaluate(expression))

    def _peek(self) -> tuple[str, str] | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self._at += 1
            return True
        return False

    def _or(self) -> Any:
        value = self._and()
        while self._take("||"):
            other = self._and()
            value = value if truthy(value) else other
        return value

    def _and(self) -> Any:
        value = self._compare()
        while self._take("&&"):
            other = self._compare()
            value = other if truthy(value) else value
        return value

    def _compare(self) -> Any:
        left = self._unary()
        for op in ("==", "!="):
            if self._take(op):
                right = self._unary()
                same = _loose(left) == _loose(right)
                return same if op == "==" else not same
        return left

    def _unary(self) -> Any:
        if self._take("!"):
            return not truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        token = self._peek()
        if token is None:
            raise UnsupportedExpression(f"{self._source!r} ends too early")
        self._at += 1
        kind, word = token
        if kind == "string":
            return word[1:-1].replace("''", "'")
        if kind == "number":
            return float(word) if "." in word else int(word)
        if (kind, word) == ("op", "("):
            value = self._or()
            if not self._take(")"):
                raise UnsupportedExpression(f"unclosed ( in {self._source!r}")
            return value
        if kind != "name":
            raise UnsupportedExpression(f"unexpected {word!r} in {self._source!r}")
        if word in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[word]
        if self._take("("):
            return self._call(word)
        return self._lookup(word)

    def _call(self, name: str) -> Any:
        args = []
        if not self._take(")"):
            args.append(self._or())
            while self._take(","):
                args.append(self._or())
            if not self._take(")"):
                raise UnsupportedExpression(f"unclosed call of {name} in {self._source!r}")
        if name == "fromJSON" and len(args) == 1:
            return json.loads(text(args[0]))
        if name == "join" and len(args) in (1, 2):
            return join(*args)
        if name == "always" and not args:
            return True
        if name == "success" and not args:
            return self.succeeded()
        raise UnsupportedExpression(f"function {name}({len(args)} args) is outside this runner's subset")

    def _lookup(self, path: str) -> Any:
        head, *rest = path.split(".")
        if head not in self.contexts:
            raise UnsupportedExpression(f"context {head!r} (in {self._source!r}) is not one this runner provides")
        value: Any = self.contexts[head]
        for part in rest:
            if part == "*":
                raise UnsupportedExpression(f"object filters ({path}) are outside this runner's subset")
            value = value.get(part) if isinstance(value, Mapping) else None
        return value


def join(value: Any, separator: Any = ",") -> str:
    """GitHub's join(array, separator): each element as a string, the separator between (',' when not given);
    a value that is not an array is itself, as a string."""
    if isinstance(value, list):
        return text(separator).join(text(item) for item in value)
    return text(value)


def _loose(value: Any) -> Any:
    """GitHub's loose equality, as far as this workflow needs it: strings case-insensitively."""
    return value.casefold() if isinstance(value, str) else value
