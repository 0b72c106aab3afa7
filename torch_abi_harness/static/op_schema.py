"""The schema notation of dispatcher operators, parsed, and what a change of one means to its callers.

A schema as torch prints it (``str(torch._C._get_schema("aten::narrow", ""))``)::

    aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)
    aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)

name, overload after the dot, arguments (type, alias annotation such as ``(a!)``, name, default;
those after ``*`` are keyword-only), returns. :func:`parse` reads it into a :class:`Schema`;
:func:`compare` says whether a caller written against one release's schema still fits another's,
with the rule for each argument (the same questions PyTorch's own forward/backward check asks,
answered here for a caller that names the op).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterator

from torch_abi_harness.core.errors import BadInputError

# An alias annotation: (a), (a!), (a -> *), (a|b), (*). Type constructors also take parentheses.
ALIAS = re.compile(r"\(\s*(?:\*|[a-z]\w*(?:\s*\|\s*[a-z]\w*)*)\s*!?\s*(?:->\s*(?:\*|[a-z]\w*(?:\s*\|\s*\w+)*))?\s*\)")
TYPE_CONSTRUCTORS = ("Dict", "Future", "RRef", "Await", "Union", "Optional", "List", "Tuple")
IDENTIFIER_END = re.compile(r"([A-Za-z_]\w*)$")


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument or return: its type without alias annotations ('Tensor[]'), the annotations as
    written ('a!'; several for nested types, joined by ','), its name ('' for an unnamed return) and
    default as written ('None', '1', '[0, 1]'; None for no default)."""

    type: str
    name: str
    default: str | None = None
    kwarg_only: bool = False
    alias: str = ""

    @property
    def mutable(self) -> bool:
        return "!" in self.alias


@dataclasses.dataclass(frozen=True)
class Schema:
    name: str  # 'aten::narrow'
    overload: str  # '' for the default overload
    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    vararg: bool = False  # '...' among the arguments
    varret: bool = False  # '...' among the returns

    @property
    def qualified(self) -> str:
        """aten::add.out; aten::narrow for the default overload."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


def outside_quotes(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of every character of text from start that is not inside a quoted default."""
    quote, escaped = "", False
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        else:
            yield i, char


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """text split at separators outside (), [] and quotes; parts stripped, empty text gives []."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, char in outside_quotes(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if parts or tail else []


def strip_alias(type_text: str) -> tuple[str, str]:
    """'Tensor(a!)[]' -> ('Tensor[]', 'a!'): the type without alias annotations, and the annotations."""
    found: list[str] = []

    def drop(match: re.Match[str]) -> str:
        before = type_text[: match.start()].rstrip()
        if before.endswith(TYPE_CONSTRUCTORS) and not before.endswith("]"):
            return match[0]  # Future(t): a type parameter, not an annotation
        found.append(re.sub(r"\s+", " ", match[0][1:-1].strip()))
        return ""

    stripped = ALIAS.sub(drop, type_text)
    return re.sub(r"\s+", " ", stripped).strip(), ",".join(found)


def parse_argument(text: str, where: str, *, kwarg_only: bool) -> Argument:
    """'Tensor(a!) out', 'Scalar alpha=1', 'int[1] dim=[]', or an unnamed return 'Tensor(a)'."""
    head, equals, default = text.partition("=")
    if equals and (head.count("(") != head.count(")") or head.count("[") != head.count("]")):
        raise BadInputError(f"{where}: cannot read the argument {text!r}")
    head = head.strip()
    match = IDENTIFIER_END.search(head)
    type_text, name = head, ""
    if match and match.start() > 0 and head[match.start() - 1] in " \t":
        type_text, name = head[: match.start()].strip(), match[1]
    if not type_text:
        raise BadInputError(f"{where}: the argument {text!r} has no type")
    base, alias = strip_alias(type_text)
    return Argument(base, name, default.strip() if equals else None, kwarg_only, alias)


def matching_paren(text: str, open_at: int) -> int:
    """Index of the ')' that closes the '(' at open_at (quoted defaults skipped), -1 if none."""
    depth = 0
    for i, char in outside_quotes(text, open_at):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse(text: str) -> Schema:
    """One schema in torch's notation; a text that is not one raises BadInputError naming it."""
    text = text.strip()
    open_at = text.find("(")
    close_at = matching_paren(text, open_at) if open_at > 0 else -1
    arrow = text.find("->", close_at) if close_at > 0 else -1
    if close_at < 0 or arrow < 0 or text[close_at + 1 : arrow].strip():
        raise BadInputError(f"not an operator schema (name(args) -> returns): {text!r}")
    name, _, overload = text[:open_at].strip().partition(".")
    if "::" not in name:
        raise BadInputError(f"{text!r}: the operator name has no namespace (aten::...)")
    arguments: list[Argument] = []
    kwarg_only = vararg = False
    for part in split_top_level(text[open_at + 1 : close_at]):
        if part == "*":
            kwarg_only = True
        elif part == "...":
            vararg = True
        else:
            arguments.append(parse_argument(part, text, kwarg_only=kwarg_only))
    returns_text = text[arrow + 2 :].strip()
    varret = False
    if returns_text.startswith("(") and returns_text.endswith(")") and not ALIAS.fullmatch(returns_text):
        parts = split_top_level(returns_text[1:-1])
    else:
        parts = [returns_text]
    returns: list[Argument] = []
    for part in parts:
        if part == "...":
            varret = True
        else:
            returns.append(parse_argument(part, text, kwarg_only=False))
    return Schema(name, overload, tuple(arguments), tuple(returns), vararg, varret)


class Change(enum.StrEnum):
    SAME = "same"
    COMPATIBLE = "compatible"  # a caller of the old schema still fits the new
    BREAKING = "breaking"  # a caller of the old schema may not fit the new


@dataclasses.dataclass(frozen=True)
class Difference:
    """One thing that differs between two schemas of an op overload, and its class."""

    change: Change
    what: str  # 'argument removed: dim', 'new argument with a default: alpha=1'
    # A stack call (torch_call_dispatcher with no schema adapter) fills the slots of its build's schema in
    # order; the runtime reads its own schema's slots in order. Set where that misreads though keywords fit.
    stack_misfit: bool = False


def widens(old: str, new: str) -> bool:
    """A value of type `old` is one of `new` too: 'int' -> 'int?' / 'SymInt', 'int[2]' -> 'int[]', 'str' -> 'Any'."""
    if old == new or new == "Any":
        return True
    if new.endswith("?") and not old.endswith("?"):
        return widens(old, new[:-1])
    if old.endswith("?") and new.endswith("?"):
        return widens(old[:-1], new[:-1])
    sized = re.sub(r"\[\d+\]", "[]", old)
    if sized != old:
        return widens(sized, new)
    return re.sub(r"\bint\b", "SymInt", old) == new


def compare_argument(old: Argument, new: Argument, position: str) -> list[Difference]:
    found: list[Difference] = []
    label = f"{position} {old.name or new.name}".strip()
    if old.type != new.type:
        change = Change.COMPATIBLE if widens(old.type, new.type) else Change.BREAKING
        found.append(Difference(change, f"{label} retyped: {old.type} -> {new.type}"))
    if old.alias != new.alias:
        found.append(Difference(Change.BREAKING, f"{label} alias annotation: ({old.alias}) -> ({new.alias})"))
    if old.default is not None and new.default is None:
        found.append(Difference(Change.BREAKING, f"{label} lost its default ({old.default})"))
    elif old.default is not None and old.default != new.default:
        found.append(Difference(Change.BREAKING, f"{label} default changed: {old.default} -> {new.default}"))
    elif old.default is None and new.default is not None:
        found.append(Difference(Change.COMPATIBLE, f"{label} gained a default ({new.default})"))
    if not old.kwarg_only and new.kwarg_only:
        found.append(Difference(Change.BREAKING, f"{label} became keyword-only"))
    elif old.kwarg_only and not new.kwarg_only:
        found.append(Difference(Change.COMPATIBLE, f"{label} is no longer keyword-only"))
    if old.name and new.name and old.name != new.name:
        # A call by stack passes by position: only a caller that names the argument (Python) breaks.
        found.append(Difference(Change.COMPATIBLE, f"{position} renamed: {old.name} -> {new.name}"))
    return found


def first_out(arguments: tuple[Argument, ...]) -> int:
    """Index of the first out argument (keyword-only and mutable, as `.out` overloads end), else len."""
    for i, argument in enumerate(arguments):
        if argument.kwarg_only and argument.mutable and all(a.kwarg_only and a.mutable for a in arguments[i:]):
            return i
    return len(arguments)


def compare(old: Schema, new: Schema) -> tuple[Difference, ...]:
    """Every difference between two schemas of one op overload, each classed; () when they are the same.

    Positional arguments are matched by position, keyword-only ones by name, the out arguments of `.out`
    overloads from the end; a new argument is compatible only with a default. Returns are compared by
    count and type. Classes are those of a caller that passes arguments by name where it can (Python);
    `stack_misfit` marks what a call by stack, which passes every slot in order, does not survive."""
    found: list[Difference] = []
    if (old.vararg, old.varret) != (new.vararg, new.varret):
        found.append(Difference(Change.BREAKING, "variadic arguments or returns changed"))
    old_end, new_end = first_out(old.arguments), first_out(new.arguments)
    matched: set[int] = set()
    for i, argument in enumerate(old.arguments[:old_end]):
        if not argument.kwarg_only:
            j = i if i < new_end and not new.arguments[i].kwarg_only else None
        else:
            j = next((k for k, a in enumerate(new.arguments[:new_end]) if a.name == argument.name), None)
        if j is None or j in matched:
            found.append(Difference(Change.BREAKING, f"argument removed: {argument.name}"))
            continue
        matched.add(j)
        found += compare_argument(argument, new.arguments[j], f"argument {i}")
        if j != i:
            found.append(
                Difference(Change.COMPATIBLE, f"argument {argument.name} moved: {i} -> {j}", stack_misfit=True)
            )
    for k, argument in enumerate(new.arguments[:new_end]):
        if k in matched:
            continue
        if argument.default is None:
            what = f"new argument without a default: {argument.type} {argument.name}"
            found.append(Difference(Change.BREAKING, what))
        else:
            what = f"new argument with a default: {argument.type} {argument.name}={argument.default}"
            found.append(Difference(Change.COMPATIBLE, what, stack_misfit=True))
    old_out, new_out = old.arguments[old_end:], new.arguments[new_end:]
    if len(old_out) != len(new_out):
        found.append(Difference(Change.BREAKING, f"out arguments: {len(old_out)} -> {len(new_out)}"))
    else:
        for i, (a, b) in enumerate(zip(old_out, new_out, strict=True)):
            found += compare_argument(a, b, f"out argument {i}")
    if len(old.returns) != len(new.returns):
        found.append(Difference(Change.BREAKING, f"returns: {len(old.returns)} -> {len(new.returns)}"))
    else:
        for i, (a, b) in enumerate(zip(old.returns, new.returns, strict=True)):
            if a.type != b.type or a.alias != b.alias:
                shown_old, shown_new = render_type(a), render_type(b)
                found.append(Difference(Change.BREAKING, f"return {i} changed: {shown_old} -> {shown_new}"))
    return tuple(found)


def render_type(argument: Argument) -> str:
    return f"{argument.type}({argument.alias})" if argument.alias else argument.type


def overall(differences: tuple[Difference, ...]) -> Change:
    """The class of a change as a whole: breaking if any part is, same if nothing differs."""
    if not differences:
        return Change.SAME
    return Change.BREAKING if any(d.change is Change.BREAKING for d in differences) else Change.COMPATIBLE
