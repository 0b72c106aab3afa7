"""What the stable surface lost, gained or changed between two releases (or a candidate wheel)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.static.manifest import Declaration, Manifest, scan_wheel
from torch_abi_harness.static.op_registry import OpChange, OpSchemas, diff_releases
from torch_abi_harness.static.op_schema import Change

ABI_DIFF_JSON_VERSION = 2  # `abi-diff --json`; 2: op_schemas


@dataclasses.dataclass(frozen=True)
class Surface:
    release: str
    exports: frozenset[str]
    declarations: dict[str, Declaration]


@dataclasses.dataclass(frozen=True)
class SignatureChange:
    name: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class AbiDiff:
    old: str
    new: str
    removed_exports: tuple[str, ...]
    added_exports: tuple[str, ...]
    removed_declarations: tuple[str, ...]  # gone from the headers (source break; binary break only if unexported too)
    added_declarations: tuple[str, ...]
    changed_signatures: tuple[SignatureChange, ...]
    changed_guards: tuple[tuple[str, str | None, str | None], ...]
    # The dispatcher ops' schema changes (with_ops); None when a side has no recorded schemas (a wheel).
    op_changes: tuple[OpChange, ...] | None = None
    op_namespaces: tuple[str, ...] = ()

    @property
    def breaking(self) -> bool:
        """A binary built against `old` may stop loading or misbehave on `new`."""
        return bool(self.removed_exports or self.changed_signatures)

    @property
    def breaking_ops(self) -> tuple[OpChange, ...]:
        """Op overloads removed or changed so that a call built against `old` may not fit `new`."""
        return tuple(c for c in self.op_changes or () if c.change is Change.BREAKING)

    @property
    def compatible_ops(self) -> tuple[OpChange, ...]:
        return tuple(c for c in self.op_changes or () if c.change is Change.COMPATIBLE)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": ABI_DIFF_JSON_VERSION,
            "old": self.old,
            "new": self.new,
            "breaking": self.breaking,
            "removed_exports": list(self.removed_exports),
            "added_exports": list(self.added_exports),
            "removed_declarations": list(self.removed_declarations),
            "added_declarations": list(self.added_declarations),
            "changed_signatures": [dataclasses.asdict(c) for c in self.changed_signatures],
            "changed_guards": [{"name": n, "old": o, "new": w} for n, o, w in self.changed_guards],
            "op_schemas": None
            if self.op_changes is None
            else {
                "namespaces": list(self.op_namespaces),
                "breaking": [c.to_json() for c in self.breaking_ops],
                "compatible": [c.to_json() for c in self.compatible_ops],
            },
        }


def surface(manifest: Manifest, ref: str) -> Surface:
    """A release of the manifest ('2.10' or '2.10.0'), or a torch wheel on disk (a candidate)."""
    path = Path(ref)
    if ref.endswith(".whl"):
        if not path.is_file():
            raise BadInputError(f"{ref}: no such wheel")
        scan = scan_wheel(path)
        return Surface(f"{scan.release} ({path.name})", scan.exports, scan.declarations)
    try:
        release = manifest.release(ref)
    except BadInputError as exc:
        raise BadInputError(f"{exc}; or pass a torch wheel (.whl)") from exc
    declarations: dict[str, Declaration] = {}
    for name in manifest.names():
        decl = manifest[name].declaration_in(release)
        if decl is not None:
            declarations[name] = Declaration(name, decl["header"], decl["guard"], decl["device"], decl["signature"])
    return Surface(release, manifest.exported_by(release), declarations)


def diff(old: Surface, new: Surface) -> AbiDiff:
    shared = sorted(set(old.declarations) & set(new.declarations))
    return AbiDiff(
        old=old.release,
        new=new.release,
        removed_exports=tuple(sorted(old.exports - new.exports)),
        added_exports=tuple(sorted(new.exports - old.exports)),
        removed_declarations=tuple(sorted(set(old.declarations) - set(new.declarations))),
        added_declarations=tuple(sorted(set(new.declarations) - set(old.declarations))),
        changed_signatures=tuple(
            SignatureChange(n, old.declarations[n].signature, new.declarations[n].signature)
            for n in shared
            if old.declarations[n].signature != new.declarations[n].signature
        ),
        changed_guards=tuple(
            (n, old.declarations[n].guard, new.declarations[n].guard)
            for n in shared
            if old.declarations[n].guard != new.declarations[n].guard
        ),
    )


def with_ops(result: AbiDiff, schemas: OpSchemas, namespaces: tuple[str, ...]) -> AbiDiff:
    """result with the op schema changes between its two releases (in namespaces; () for all) when both
    are recorded; a wheel (a candidate) has no recorded schemas: its op_changes stay None."""
    if result.old not in schemas.releases or result.new not in schemas.releases:
        return result
    changes = diff_releases(schemas, result.old, result.new, namespaces or None)
    return dataclasses.replace(result, op_changes=changes, op_namespaces=namespaces)
