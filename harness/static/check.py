"""`check`: where an artifact (a .so or a wheel) is predicted to load, from its ELF symbols alone, release by
release of the manifest; with the runtimes' variant and Python, what else it needs of them is checked too."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from harness.core.errors import BadInputError
from harness.core.status import Condition
from harness.core.versions import ApiLevel
from harness.static.artifact import ArtifactFacts, RuntimeFacts, Unmet, unmet
from harness.static.manifest import packaged_manifest
from harness.static.op_calls import DISPATCHER_SHIMS, fits
from harness.static.op_registry import packaged_op_schemas
from harness.static.predict import ArtifactImports, Predicted, Prediction, predict
from harness.static.symbols import read_artifact

CHECK_JSON_VERSION = 1  # `check --json`


@dataclasses.dataclass(frozen=True)
class ArtifactCheck:
    artifact: Path
    imports: ArtifactImports
    facts: ArtifactFacts
    built_with: str | None  # the release whose op schemas its calls are judged against; None: only existence
    predictions: tuple[Prediction, ...]  # one per release checked, oldest first

    @property
    def loads(self) -> list[str]:
        return [p.runtime for p in self.predictions if p.outcome is Predicted.LOADS]

    @property
    def loads_from(self) -> str | None:
        """The oldest release checked from which it loads on every newer one checked."""
        return next(
            (
                p.runtime
                for p in self.predictions
                if all(
                    q.outcome is Predicted.LOADS for q in self.predictions if Version(q.runtime) >= Version(p.runtime)
                )
            ),
            None,
        )

    @property
    def failing(self) -> bool:
        """A predicted load failure, or a call predicted to fail, on some release checked."""
        return any(p.outcome is Predicted.LOAD_FAILED or p.failing_ops for p in self.predictions)

    @property
    def unseen_calls(self) -> bool:
        """It calls ops by name through the dispatcher: a name built at run time leaves no string to judge."""
        return bool(self.imports.stable & DISPATCHER_SHIMS)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": CHECK_JSON_VERSION,
            "artifact": str(self.artifact),
            "built_with": self.built_with,
            "unseen_calls": "op names built at run time leave no string: not judged" if self.unseen_calls else None,
            "imports": self.imports.to_json(),
            "needs": self.facts.to_json(),
            "predictions": [{"runtime": p.runtime, **p.to_json()} for p in self.predictions],
            "loads_from": self.loads_from,
        }


def select_releases(manifest_releases: Sequence[str], spec: str | None) -> list[str]:
    """--runtimes: '2.10.0,2.13' (those levels) or '2.10+' (that level and newer); None: every release."""
    if not spec:
        return list(manifest_releases)
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        newer = item.endswith("+")
        try:
            level = ApiLevel.parse(".".join(item.rstrip("+").split(".")[:2]))
        except ValueError as exc:
            raise BadInputError(f"--runtimes: {item!r} is not a release such as '2.10.0' or '2.10+'") from exc
        found = [
            r
            for r in manifest_releases
            if (ApiLevel.of(Version(r)) >= level if newer else ApiLevel.of(Version(r)) == level)
        ]
        if not found:
            raise BadInputError(
                f"--runtimes: {item!r} matches no release of the manifest ({', '.join(manifest_releases)})"
            )
        chosen += [r for r in found if r not in chosen]
    return sorted(chosen, key=Version)


def runtime_lacks(facts: ArtifactFacts, release: str, variant: str | None, python: str | None) -> list[Unmet]:
    """What the artifact needs of a runtime of this release besides symbols, as far as variant and python
    say what the runtime is (neither given: nothing is checked)."""
    runtime = RuntimeFacts.of(f"{release}+{variant}", variant or "", python or "3.11")
    checked = {Condition.PYTHON_ABI} if python else set()
    checked |= {Condition.NO_CUDA, Condition.CUDA_MAJOR} if variant else set()
    return [u for u in unmet(facts, runtime) if u.condition in checked]


def check_artifact(
    artifact: Path, runtimes: str | None, variant: str | None, python: str | None, built_with: str | None
) -> ArtifactCheck:
    """Predict the artifact on the manifest's releases that runtimes selects (select_releases); with built_with,
    judge its calls by op name against that release's schemas."""
    manifest = packaged_manifest()
    releases = select_releases(manifest.releases, runtimes)
    objects = read_artifact(artifact)
    imports, facts = ArtifactImports.of(objects), ArtifactFacts.of(artifact, objects)
    schemas = packaged_op_schemas()
    recorded = schemas.release(built_with) if built_with else None
    predictions = tuple(
        predict(
            imports,
            r,
            manifest.exported_by(r),
            manifest,
            full_exports=False,
            unmet=runtime_lacks(facts, r, variant, python),
            ops=fits(imports.calls, schemas, r, recorded),
        )
        for r in releases
    )
    return ArtifactCheck(artifact, imports, facts, recorded, predictions)
