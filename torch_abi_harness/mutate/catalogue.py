"""The shim-mutant catalogue: data (torch_abi_harness/mutate/mutants/catalogue.yaml), read and checked here.

Each mutant changes one behaviour of one stable C function (or of a family of functions with the same
role, e.g. the two dispatcher shims) and names the convention it breaks. Its C++ body is a fragment
the interposer generator wraps into a function with the real one's signature (`REAL` is the real
function, `ARGS` its parameters, `a0`...`aN` each of them); a mutant of the boxed kernels instead gives
`kernel_before` / `kernel_after` fragments run around every kernel an extension registers. A survivor
that a suite cannot kill is marked `equivalent:` with the reason: one sentence for every extension, or a
mapping from extension name patterns (globs, `"*"` for every extension) to a sentence each, for a mutant
that survives by design in one extension only (its ops never take a bool, say).
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.static.symbols import STABLE_C_NAME

CONVENTIONS = {
    "sentinel": "interposition happens at all: must be killed wherever it applies",
    "boxed-stack": "a kernel's boxed stack: argument order, count, outputs written back",
    "dispatcher": "torch_call_dispatcher / aoti_torch_call_dispatcher: overload name, stack, returns",
    "ownership": "handles: a new reference per handle, each deleted once",
    "tensor-metadata": "dim, sizes, strides, storage offset, data pointer, contiguity, numel",
    "enum-codes": "dtype, device type/index, layout and memory format codes crossing the boundary",
    "stableivalue": "StableIValue rows: optionals, lists, strings, bools, doubles, ints",
    "errors": "error codes and messages reaching the caller",
    "factories": "tensor factories and from_blob: options and deleters",
}
ID_PATTERN = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
KEYS = {"id", "function", "convention", "does", "body", "kernel_before", "kernel_after", "equivalent", "sentinel"}
KERNEL_REGISTRATION = ("aoti_torch_library_impl", "torch_library_impl")
CATALOGUE = "catalogue.yaml"
SCHEMA_VERSION = 1
EXTENSION_PATTERN = re.compile(r"^[A-Za-z0-9_.*?\[\]-]+$")  # an extension's name, or a glob over names
EVERY_EXTENSION = "*"
# The body of a kernel mutant's registration shims (both take the kernel's name and function as a1, a2).
KERNEL_BODY = "a2 = harness::wrap_kernel(a1, a2);\nreturn REAL(ARGS);\n"


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: str
    functions: tuple[str, ...]  # the shims it interposes; applicable where a build imports any of them
    convention: str
    does: str  # what it changes, in words (the report's survivor lines)
    body: str  # C++ statements, the body of each interposed function
    kernel_before: str = ""  # C++ run before every registered boxed kernel (stack, num_args, sig in scope)
    kernel_after: str = ""  # ... and after it (stack, num_outputs, sig)
    # why no suite can kill it, when it survives by design: (extension glob, reason), the first match wins
    equivalent: tuple[tuple[str, str], ...] = ()
    sentinel: bool = False

    def justification(self, extension: str) -> str | None:
        """The catalogue's reason why this mutant survives in `extension` by design, or None."""
        exact = [why for pattern, why in self.equivalent if pattern == extension]
        globbed = [why for pattern, why in self.equivalent if fnmatch.fnmatchcase(extension, pattern)]
        found = exact or globbed
        return found[0] if found else None

    @property
    def wraps_kernels(self) -> bool:
        return bool(self.kernel_before or self.kernel_after)

    def applies_to(self, imports: frozenset[str]) -> bool:
        return any(f in imports for f in self.functions)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "functions": list(self.functions),
            "convention": self.convention,
            "does": self.does,
            "equivalent": dict(self.equivalent),
            "sentinel": self.sentinel,
        }


@dataclasses.dataclass(frozen=True)
class Catalogue:
    path: Path
    mutants: tuple[Mutant, ...]

    @property
    def sentinels(self) -> tuple[Mutant, ...]:
        return tuple(m for m in self.mutants if m.sentinel)

    def select(self, patterns: Sequence[str]) -> Catalogue:
        """The mutants whose id matches a glob (the sentinels always stay: they prove the run means anything)."""
        if not patterns:
            return self
        ids = [m.id for m in self.mutants]
        unmatched = [p for p in patterns if not fnmatch.filter(ids, p)]
        if unmatched:
            hints = "".join(f"\n  {p!r} matches no mutant" + _did_you_mean(p, ids) for p in unmatched)
            raise BadInputError(f"--mutant: {len(unmatched)} pattern(s) of {self.path} matched nothing:{hints}")
        chosen = tuple(m for m in self.mutants if m.sentinel or any(fnmatch.fnmatchcase(m.id, p) for p in patterns))
        return dataclasses.replace(self, mutants=chosen)


def _did_you_mean(text: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(text, choices, n=3)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def packaged_catalogue_path() -> Path:
    return Path(str(resources.files("torch_abi_harness.mutate.mutants").joinpath(CATALOGUE)))


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Read and check a catalogue: every problem at once (ConfigError), each naming the entry and key."""
    path = path or packaged_catalogue_path()
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the mutant catalogue: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(path, [f"not valid YAML: {exc}"]) from exc
    return parse_catalogue(data, path)


def parse_catalogue(data: Any, path: Path) -> Catalogue:
    if not isinstance(data, Mapping) or not isinstance(data.get("mutants"), list):
        raise ConfigError(path, ["the catalogue must be a mapping with a list `mutants:`"])
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(path, [f"schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}"])
    problems: list[str] = []
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for index, entry in enumerate(data["mutants"]):
        where = f"mutants[{index}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: an entry must be a mapping, not {type(entry).__name__}")
            continue
        if isinstance(entry.get("id"), str):
            where = f"{where} ({entry['id']})"
        if entry.get("id") in seen:
            problems.append(f"{where}: id {entry['id']!r} is used twice")
        seen.add(str(entry.get("id")))
        mutant = _entry(entry, where, problems)
        if mutant is not None:
            mutants.append(mutant)
    if not problems and not any(m.sentinel for m in mutants):
        problems.append("no mutant has `sentinel: true`: nothing would prove that interposition happens")
    if problems:
        raise ConfigError(path, problems)
    return Catalogue(path, tuple(mutants))


def _entry(entry: Mapping[str, Any], where: str, problems: list[str]) -> Mutant | None:
    before = len(problems)
    for key in sorted(set(entry) - KEYS):
        problems.append(f"{where}: unknown key {key!r}{_did_you_mean(key, sorted(KEYS))}")
    kernel = bool(entry.get("kernel_before") or entry.get("kernel_after"))
    missing = [k for k in ("id", "function", "convention", "does", *(() if kernel else ("body",))) if k not in entry]
    problems.extend(f"{where}: `{key}:` is missing" for key in missing)
    if missing:
        return None
    mutant_id, convention = entry["id"], entry["convention"]
    if not isinstance(mutant_id, str) or not ID_PATTERN.match(mutant_id):
        problems.append(f"{where}: id {mutant_id!r} must look like 'family.what' (lower case, dots, underscores)")
    functions = entry["function"] if isinstance(entry["function"], list) else [entry["function"]]
    for function in functions:
        if not isinstance(function, str) or not STABLE_C_NAME.match(function):
            problems.append(f"{where}: function {function!r} is not a stable C shim name (aoti_torch_* / torch_*)")
    if convention not in CONVENTIONS:
        problems.append(
            f"{where}: convention {convention!r} is not one of {', '.join(CONVENTIONS)}"
            + _did_you_mean(str(convention), list(CONVENTIONS))
        )
    texts = {k: entry.get(k, "") for k in ("does", "body", "kernel_before", "kernel_after")}
    if kernel:
        texts["body"] = KERNEL_BODY
    for key, value in texts.items():
        if not isinstance(value, str):
            problems.append(f"{where}: `{key}:` must be text, not {type(value).__name__}")
    if kernel and "body" in entry:
        problems.append(f"{where}: a kernel mutant has no `body:` (its registration shims wrap each kernel)")
    if kernel and set(functions) - set(KERNEL_REGISTRATION):
        problems.append(f"{where}: kernel_before/kernel_after need `function:` among {', '.join(KERNEL_REGISTRATION)}")
    equivalent = _equivalent(entry.get("equivalent"), where, problems)
    sentinel = entry.get("sentinel", False)
    if not isinstance(sentinel, bool):
        problems.append(f"{where}: `sentinel:` must be true or false")
    elif sentinel and (convention != "sentinel" or equivalent):
        problems.append(f"{where}: a sentinel has convention `sentinel` and is never equivalent")
    if len(problems) > before:
        return None
    return Mutant(
        mutant_id,
        tuple(functions),
        convention,
        texts["does"].strip(),
        texts["body"],
        texts["kernel_before"],
        texts["kernel_after"],
        equivalent,
        sentinel,
    )


def _equivalent(value: Any, where: str, problems: list[str]) -> tuple[tuple[str, str], ...]:
    """`equivalent:` as (extension glob, reason) pairs: a plain sentence is the reason for every extension."""
    if value is None:
        return ()
    pairs = value.items() if isinstance(value, Mapping) else [(EVERY_EXTENSION, value)]
    if isinstance(value, Mapping) and not value:
        problems.append(f"{where}: `equivalent:` is an empty mapping: name an extension (or '*') and why")
    result = []
    for pattern, why in pairs:
        key = f"`equivalent.{pattern}:`" if isinstance(value, Mapping) else "`equivalent:`"
        if not isinstance(pattern, str) or not EXTENSION_PATTERN.match(pattern):
            problems.append(
                f"{where}: `equivalent:` key {pattern!r} is not an extension name or a glob over names "
                "(letters, digits, _ . - and * ? [ ]), e.g. cuda_ops or '*'"
            )
        elif not isinstance(why, str) or len(why.strip()) < 10:
            problems.append(f"{where}: {key} must say why no suite can kill the mutant (a sentence)")
        else:
            result.append((pattern, why.strip()))
    return tuple(result)
