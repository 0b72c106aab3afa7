"""Predict whether an artifact loads on a runtime, from its ELF alone: every missing symbol, and what
else it needs that the runtime lacks (its wheel's Python ABI, the CUDA its DT_NEEDED names)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Sequence
from typing import Any

from packaging.version import Version

from torch_abi_harness.static.artifact import Unmet
from torch_abi_harness.static.manifest import Manifest
from torch_abi_harness.static.op_calls import Fit, OpCall, OpFit, calls_of
from torch_abi_harness.static.op_registry import packaged_op_schemas
from torch_abi_harness.static.symbols import SharedObject, SymbolKind, classify, demangle, system_floor


class Predicted(enum.StrEnum):
    LOADS = "loads"
    LOAD_FAILED = "load_failed"
    UNKNOWN = "unknown"  # unstable C++ imports, judged only against a runtime's full exports


@dataclasses.dataclass(frozen=True)
class MissingSymbol:
    name: str
    readable: str
    kind: SymbolKind
    introduced: str | None  # the first release that exports it, from the manifest

    def describe(self) -> str:
        since = f" (exported from {self.introduced})" if self.introduced else " (exported by no known release)"
        return f"{self.readable}{since if self.kind is SymbolKind.STABLE else ' [unstable C++]'}"


@dataclasses.dataclass(frozen=True)
class ArtifactImports:
    """What an artifact needs from torch, classified once and reused for every runtime."""

    stable: frozenset[str]
    unstable: dict[str, str]  # mangled -> readable
    python: frozenset[str]
    system: frozenset[str]
    floor: dict[str, str]
    calls: tuple[OpCall, ...] = ()  # the dispatcher ops it calls by name or through generated shims

    @classmethod
    def of(cls, objects: Sequence[SharedObject], siblings: Sequence[SharedObject] = ()) -> ArtifactImports:
        """objects: the shared objects judged; siblings: the other shared objects of the same wheel. What one of
        them exports resolves there (a wheel's modules calling each other), never against torch's exports."""
        own = {n for o in (*objects, *siblings) for n in o.exports}
        names = {n for o in objects for n in o.imports} - own
        readable = demangle(names)
        kinds: dict[SymbolKind, set[str]] = {k: set() for k in SymbolKind}
        for name in names:
            kinds[classify(name)].add(name)
        return cls(
            stable=frozenset(kinds[SymbolKind.STABLE]),
            unstable={n: readable.get(n, n) for n in sorted(kinds[SymbolKind.UNSTABLE])},
            python=frozenset(kinds[SymbolKind.PYTHON]),
            system=frozenset(kinds[SymbolKind.SYSTEM]),
            floor=system_floor(v for o in objects for v in o.version_needs),
            calls=calls_of(objects, packaged_op_schemas()),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "stable": sorted(self.stable),
            "unstable": sorted(self.unstable.values()),
            "python": len(self.python),
            "system": len(self.system),
            "system_floor": self.floor,
            "ops": [{"op": c.op, "overload": c.overload, "via": c.via.value, "source": c.source} for c in self.calls],
        }


@dataclasses.dataclass(frozen=True)
class Prediction:
    runtime: str
    outcome: Predicted
    missing: tuple[MissingSymbol, ...]
    unstable: int  # unstable C++ imports (a risk even when present)
    unmet: tuple[Unmet, ...] = ()  # what it needs besides symbols that the runtime lacks (Python ABI, CUDA)
    ops: tuple[OpFit, ...] = ()  # the ops it calls through the dispatcher, each judged against the runtime's schemas

    @property
    def failing_ops(self) -> tuple[OpFit, ...]:
        """Calls predicted to fail when made (the load is not affected: a call by name resolves when it runs)."""
        return tuple(o for o in self.ops if o.fit is Fit.FAILS)

    @property
    def summary(self) -> str:
        calls = self.failing_ops
        if calls and self.outcome is not Predicted.LOAD_FAILED:
            shown = "; ".join(o.why for o in calls[:2]) + (f" (+{len(calls) - 2} more)" if len(calls) > 2 else "")
            return f"{self.symbol_summary}; calls predicted to fail: {shown}"
        return self.symbol_summary

    @property
    def symbol_summary(self) -> str:
        if self.outcome is Predicted.LOAD_FAILED:
            shown = ", ".join(m.describe() for m in self.missing[:3])
            more = f" (+{len(self.missing) - 3} more)" if len(self.missing) > 3 else ""
            symbols = [f"missing {shown}{more}"] if self.missing else []
            return "; ".join([*(u.why for u in self.unmet), *symbols])
        if self.outcome is Predicted.UNKNOWN:
            return f"{self.unstable} unstable C++ symbol(s): only a runtime's full exports can tell"
        return "every torch symbol it imports is exported" + (
            f" ({self.unstable} unstable C++)" if self.unstable else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "missing": [{"name": m.readable, "kind": m.kind.value, "introduced": m.introduced} for m in self.missing],
            "unstable": self.unstable,
            "unmet": [u.to_json() for u in self.unmet],
            # only the calls that do not plainly fit: most cells' calls all fit and stay out of results.json
            **({"ops": odd} if (odd := [o.to_json() for o in self.ops if o.fit is not Fit.FITS]) else {}),
        }


def findings(
    prediction: Prediction | None, status: str, reason: str, missing_symbol: str | None, designed: str | None = None
) -> list[str]:
    """Where the outcome disagrees with the static prediction: each is a finding of its own.

    designed: the status a negative control is built to end with; reaching it is no finding.
    """
    if prediction is None or status in ("ERROR", "SKIPPED", "BUILD_FAILED") or status == designed:
        return []
    if prediction.outcome is Predicted.LOAD_FAILED and status != "LOAD_FAILED":
        return [f"predicted not to load ({prediction.summary}), but it loaded and ended {status}"]
    if prediction.outcome is Predicted.LOADS and status == "LOAD_FAILED":
        return [f"predicted to load (every torch symbol it imports is exported), but: {reason}"]
    if prediction.outcome is Predicted.LOADS and status == "TEST_FAILED" and prediction.failing_ops:
        return []  # as predicted: a call by name that the runtime's schemas do not fit
    if prediction.outcome is Predicted.LOADS and status in ("TEST_FAILED", "CRASHED", "TIMEOUT"):
        return [f"loaded as predicted, then {status}: a break that symbols do not show ({reason})"]
    if prediction.outcome is Predicted.LOADS and status == "PASS" and prediction.failing_ops:
        calls = ", ".join(o.call.shown for o in prediction.failing_ops)
        return [f"predicted calls to {calls} to fail ({prediction.summary}), but every test passed: no test calls it?"]
    if status == "LOAD_FAILED" and missing_symbol and missing_symbol not in {m.name for m in prediction.missing}:
        return [f"the loader named {missing_symbol}, which the prediction did not list as missing"]
    return []


def predict(
    imports: ArtifactImports,
    runtime: str,
    exports: Iterable[str],
    manifest: Manifest,
    unmet: Sequence[Unmet] = (),
    ops: Sequence[OpFit] = (),
    *,
    full_exports: bool,
) -> Prediction:
    """exports: what the runtime's torch libraries export (all of it when full_exports, else the stable shims);
    unmet: what else the artifact needs that the runtime lacks (artifact.unmet): it will not load either;
    ops: its calls through the dispatcher judged against the runtime (opcalls.fits): they fail when made."""
    provided = frozenset(exports)
    missing = [
        MissingSymbol(name, name, SymbolKind.STABLE, manifest[name].first_exported if name in manifest else None)
        for name in sorted(imports.stable - provided)
    ]
    if full_exports:
        missing += [
            MissingSymbol(n, r, SymbolKind.UNSTABLE, None) for n, r in imports.unstable.items() if n not in provided
        ]
    missing.sort(key=lambda m: (Version(m.introduced) if m.introduced else Version("999"), m.name), reverse=True)
    if missing or unmet:
        outcome = Predicted.LOAD_FAILED
    elif imports.unstable and not full_exports:
        outcome = Predicted.UNKNOWN
    else:
        outcome = Predicted.LOADS
    return Prediction(runtime, outcome, tuple(missing), len(imports.unstable), tuple(unmet), tuple(ops))
