"""The dispatcher ops an artifact calls, and whether each call fits a runtime's schema of that op.

Read from the artifact's ELF alone (symbols.py): the op names its read-only data holds (the first
string a ``torch_call_dispatcher("aten::narrow", "", stack, ...)`` call passes), paired with their
overload where the call's own text is kept (the check macros that wrap a call stringify it), and the
ops behind the generated shims it imports (``aoti_torch_cpu_add_Tensor`` is ``aten::add.Tensor``).

A call by name is resolved when it runs, not when the library loads: an op or overload missing on
the runtime fails that call (the tests that make it fail), never the load. A stack call passes
exactly the slots its build's schema has and the runtime reads as many as its own schema has
(``torch_call_dispatcher`` with no schema adapter registered, which is every release up to 2.15), so
even a new argument with a default puts such a call at risk. A name whose overload the artifact does
not say is judged over every overload of that name at the build's release.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Sequence
from typing import Any

from torch_abi_harness.static.op_registry import OpSchemas
from torch_abi_harness.static.op_schema import Change, compare, overall
from torch_abi_harness.static.symbols import SharedObject

SHIM = re.compile(r"^aoti_torch_(cpu|cuda|mps|xpu|aten)_(\w+)$")
DISPATCHER_SHIMS = frozenset({"torch_call_dispatcher", "aoti_torch_call_dispatcher"})  # calls by name go through


class Via(enum.StrEnum):
    NAME = "name"  # a string passed to torch_call_dispatcher / aoti_torch_call_dispatcher
    SHIM = "shim"  # a generated C shim it imports


@dataclasses.dataclass(frozen=True, order=True)
class OpCall:
    op: str  # aten::narrow
    overload: str | None  # None: the artifact does not say which (any overload of the name)
    via: Via
    source: str  # the shim's symbol, or the name as found

    @property
    def shown(self) -> str:
        if self.overload is None:
            return f"{self.op} (overload unknown: any overload of the name)"
        return f"{self.op}.{self.overload}" if self.overload else self.op


class Fit(enum.StrEnum):
    FITS = "fits"  # the op exists with the schema the call was built against, or a change that call does not see
    AT_RISK = "at_risk"  # the schema changed in a way a stack call sees, or only some overloads it may call broke
    FAILS = "fails"  # no such op or overload, or a breaking change: the call fails (at call time, not at load)
    UNKNOWN = "unknown"  # no schemas recorded for a release involved


@dataclasses.dataclass(frozen=True)
class OpFit:
    call: OpCall
    fit: Fit
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.call.op,
            "overload": self.call.overload,
            "via": self.call.via.value,
            "fit": self.fit.value,
            "why": self.why,
        }


def shim_op(symbol: str, schemas: OpSchemas) -> tuple[str, str] | None:
    """('aten::add', 'Tensor') for aoti_torch_cpu_add_Tensor; None for a symbol that is no generated op shim."""
    match = SHIM.match(symbol)
    if not match:
        return None
    found = schemas.shim_names.get(match[2])
    return found[0] if found and len(found) == 1 else None


def calls_of(objects: Sequence[SharedObject], schemas: OpSchemas) -> tuple[OpCall, ...]:
    """Every op the artifact calls by name (in a namespace torch registers) or through a generated shim."""
    found: set[OpCall] = set()
    paired = {(op, overload) for o in objects for op, overload in o.dispatcher_calls}
    known = schemas.namespaces
    named: set[str] = set()
    for text in {t for o in objects for t in o.qualified_strings}:
        prefix, _, name = text.rpartition("::")
        namespace = max((n for n in known if prefix.endswith(n)), key=len, default=None)  # _quantized, not quantized
        if namespace is not None and f"{namespace}::{name}" in schemas.by_op:
            named.add(f"{namespace}::{name}")
    for op, overload in paired:
        if op in schemas.by_op:
            found.add(OpCall(op, overload, Via.NAME, op))
            named.discard(op)
    found |= {OpCall(op, None, Via.NAME, op) for op in named}
    for symbol in {n for o in objects for n in o.imports | o.weak_imports}:
        behind = shim_op(symbol, schemas)
        if behind:
            found.add(OpCall(behind[0], behind[1], Via.SHIM, symbol))
    return tuple(sorted(found))


def fit(call: OpCall, schemas: OpSchemas, runtime: str, built_with: str | None) -> OpFit:
    """Whether call, built against release built_with (None: not known), fits runtime's schemas."""
    if runtime not in schemas.releases:
        return OpFit(call, Fit.UNKNOWN, f"no op schemas recorded for torch {runtime}")
    there = schemas.overloads(call.op, runtime)
    wanted = [call.overload] if call.overload is not None else None
    if not there:
        return OpFit(call, Fit.FAILS, f"no op {call.op} in torch {runtime}")
    if wanted is not None and wanted[0] not in there:
        return OpFit(
            call, Fit.FAILS, f"no overload {call.shown} in torch {runtime} (it has {', '.join(repr(o) for o in there)})"
        )
    if call.via is Via.SHIM:
        return OpFit(call, Fit.FITS, "registered; a shim's C signature is fixed, its symbol decides")
    if built_with is None or built_with not in schemas.releases:
        why = (
            "the build's release is not known" if built_with is None else f"no schemas recorded for torch {built_with}"
        )
        return OpFit(call, Fit.FITS, f"registered ({why}: schemas not compared)")
    overloads = wanted if wanted is not None else list(schemas.overloads(call.op, built_with))
    broken: list[str] = []
    risky: list[str] = []
    for overload in overloads:
        label = f"{call.op}.{overload}" if overload else call.op
        old, new = schemas.schema(call.op, overload, built_with), schemas.schema(call.op, overload, runtime)
        if old is None:
            continue  # not in the build's release: the build cannot have called it
        if new is None:
            broken.append(f"{label} missing")
            continue
        differences = compare(old, new)
        if overall(differences) is Change.BREAKING:
            broken.append(f"{label}: " + "; ".join(d.what for d in differences if d.change is Change.BREAKING))
        elif any(d.stack_misfit for d in differences):
            risky.append(f"{label}: " + "; ".join(d.what for d in differences if d.stack_misfit))
    if broken and (wanted is not None or len(broken) == len(overloads)):
        return OpFit(call, Fit.FAILS, f"{built_with} -> {runtime}: " + "; ".join(broken))
    if broken or risky:
        unknown = " (overload unknown: fails only if it calls one of these)" if wanted is None and broken else ""
        return OpFit(call, Fit.AT_RISK, f"{built_with} -> {runtime}: " + "; ".join(broken + risky) + unknown)
    return OpFit(call, Fit.FITS, f"{built_with} -> {runtime}: no change a call by stack sees")


def fits(calls: Iterable[OpCall], schemas: OpSchemas, runtime: str, built_with: str | None) -> tuple[OpFit, ...]:
    return tuple(fit(c, schemas, runtime, built_with) for c in calls)
