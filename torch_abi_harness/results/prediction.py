"""The static prediction a cell carries into its result: what results.json keeps of static/predict's Prediction."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch_abi_harness.core.status import Condition
from torch_abi_harness.static.op_calls import Fit, Via
from torch_abi_harness.static.predict import Predicted, Prediction
from torch_abi_harness.static.symbols import SymbolKind


@dataclasses.dataclass(frozen=True)
class PredictedMissing:
    """A torch symbol the artifact imports and the runtime does not export."""

    name: str  # readable (demangled)
    kind: SymbolKind
    introduced: str | None  # the first release that exports it; None: no known release does

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind.value, "introduced": self.introduced}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PredictedMissing:
        return cls(data["name"], SymbolKind(data["kind"]), data["introduced"])


@dataclasses.dataclass(frozen=True)
class PredictedUnmet:
    """Something besides symbols the artifact needs and the runtime lacks (its Python ABI, CUDA)."""

    condition: Condition
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"class": self.condition.value, "why": self.why}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PredictedUnmet:
        return cls(Condition(data["class"]), data["why"])


@dataclasses.dataclass(frozen=True)
class PredictedCall:
    """A call through the dispatcher that does not plainly fit the runtime's op schemas."""

    op: str
    overload: str | None
    via: Via
    fit: Fit
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "overload": self.overload, "via": self.via.value, "fit": self.fit.value, "why": self.why}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PredictedCall:
        return cls(data["op"], data["overload"], Via(data["via"]), Fit(data["fit"]), data["why"])


@dataclasses.dataclass(frozen=True)
class CellPrediction:
    """Whether the cell's artifact loads on its runtime, predicted from ELF before it ran."""

    outcome: Predicted
    missing: tuple[PredictedMissing, ...]
    unstable: int  # unstable C++ imports
    unmet: tuple[PredictedUnmet, ...] = ()  # from results version 4
    calls: tuple[PredictedCall, ...] = ()  # only those that do not plainly fit: most cells' calls all fit

    @classmethod
    def of(cls, prediction: Prediction) -> CellPrediction:
        return cls(
            prediction.outcome,
            tuple(PredictedMissing(m.readable, m.kind, m.introduced) for m in prediction.missing),
            prediction.unstable,
            tuple(PredictedUnmet(u.condition, u.why) for u in prediction.unmet),
            tuple(
                PredictedCall(o.call.op, o.call.overload, o.call.via, o.fit, o.why)
                for o in prediction.ops
                if o.fit is not Fit.FITS
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "missing": [m.to_json() for m in self.missing],
            "unstable": self.unstable,
            "unmet": [u.to_json() for u in self.unmet],
            **({"ops": [c.to_json() for c in self.calls]} if self.calls else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellPrediction:
        return cls(
            Predicted(data["outcome"]),
            tuple(PredictedMissing.from_json(m) for m in data["missing"]),
            data["unstable"],
            tuple(PredictedUnmet.from_json(u) for u in data.get("unmet", ())),
            tuple(PredictedCall.from_json(c) for c in data.get("ops", ())),
        )
