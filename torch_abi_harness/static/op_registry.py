"""The dispatcher's operator schemas per torch release: a generated data file, its reader and its generator.

An extension calls ATen by name (``torch_call_dispatcher("aten::narrow", "", stack, ...)``); no
exported symbol changes when such an op's schema does. ``torch_abi_harness/data/op_schemas.json`` records,
for every release of the stable manifest, the schema of every operator registered with the
dispatcher once ``import torch`` has run (``torch._C._dispatch_get_all_op_names`` and
``torch._C._get_schema``: every namespace torch registers itself, ``aten`` included). Each distinct
schema text is stored once, with the releases where it holds as a bit mask over ``releases``.

Regenerate it with ``python tools/gen_op_schemas.py`` (``nox -s manifest`` runs it): it runs each
release's torch in the harness's cached environment (``--ensure`` makes missing ones). A release
whose environment is missing keeps what the file already recorded for it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from torch_abi_harness.core.errors import BadInputError, InfrastructureError
from torch_abi_harness.static.op_schema import Change, Difference, Schema, compare, overall, parse

log = logging.getLogger(__name__)

OP_SCHEMAS_VERSION = 1
DATA_FILE = "op_schemas.json"


def op_key(schema_text: str) -> str:
    """'aten::add.out(Tensor self, ...) -> ...' -> 'aten::add.out'."""
    return schema_text.split("(", 1)[0].strip()


@dataclasses.dataclass(frozen=True)
class OpSchemas:
    """Every release's schemas: `masks[text]` has bit i set when the schema text holds in releases[i]
    (kept as read: a check of one artifact looks at a few ops of thousands)."""

    releases: tuple[str, ...]
    masks: dict[str, int]

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> OpSchemas:
        if data.get("schema_version") != OP_SCHEMAS_VERSION:
            raise BadInputError(
                f"{where}: schema_version {data.get('schema_version')!r}, this harness reads {OP_SCHEMAS_VERSION}; "
                "regenerate it with `python tools/gen_op_schemas.py`"
            )
        return cls(tuple(data["releases"]), data["schemas"])

    @classmethod
    def of(cls, releases: Sequence[str], holds: Mapping[str, Iterable[str]]) -> OpSchemas:
        """From each schema text and the releases where it holds."""
        index = {r: i for i, r in enumerate(releases)}
        return cls(tuple(releases), {t: sum(1 << index[r] for r in set(rs)) for t, rs in holds.items()})

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": OP_SCHEMAS_VERSION,
            "generated_by": "python tools/gen_op_schemas.py",
            "releases": list(self.releases),
            "schemas": {text: self.masks[text] for text in sorted(self.masks, key=lambda t: (op_key(t), t))},
        }

    def holds(self, text: str, release: str) -> bool:
        return bool(self.masks.get(text, 0) >> self.releases.index(release) & 1)

    def texts(self, release: str) -> dict[str, str]:
        """op.overload -> its schema text, for every op registered in release."""
        bit = 1 << self.releases.index(release)
        return {op_key(t): t for t, mask in self.masks.items() if mask & bit}

    @functools.cached_property
    def by_op(self) -> dict[str, dict[str, list[str]]]:
        """name -> overload -> its schema texts (one per distinct schema over the releases)."""
        found: dict[str, dict[str, list[str]]] = {}
        for text in self.masks:
            name, _, overload = op_key(text).partition(".")
            found.setdefault(name, {}).setdefault(overload, []).append(text)
        return found

    @functools.cached_property
    def shim_names(self) -> dict[str, list[tuple[str, str]]]:
        """How generated shims name aten ops: 'add_Tensor' -> [('aten::add', 'Tensor')] (aoti_torch_cpu_add_Tensor)."""
        found: dict[str, list[tuple[str, str]]] = {}
        for name, overloads in self.by_op.items():
            namespace, _, short = name.partition("::")
            if namespace == "aten":
                for overload in overloads:
                    found.setdefault(f"{short}_{overload}" if overload else short, []).append((name, overload))
        return found

    @functools.cached_property
    def namespaces(self) -> frozenset[str]:
        return frozenset(name.split("::", 1)[0] for name in self.by_op)

    def release(self, ref: str) -> str:
        """'2.14' or '2.14.1' -> the recorded release; anything else is bad input that lists them."""
        matches = [r for r in self.releases if r == ref or r.rsplit(".", 1)[0] == ref]
        if not matches:
            raise BadInputError(f"no operator schemas recorded for torch {ref!r}; recorded: {', '.join(self.releases)}")
        return matches[-1]

    def schema(self, name: str, overload: str, release: str) -> Schema | None:
        """The schema of name.overload registered in release; None when it is not registered there."""
        for text in self.by_op.get(name, {}).get(overload, []):
            if self.holds(text, release):
                return parse(text)
        return None

    def overloads(self, name: str, release: str) -> tuple[str, ...]:
        """The overloads of name registered in release (empty: no op of that name there)."""
        return tuple(
            sorted(
                overload
                for overload, texts in self.by_op.get(name, {}).items()
                if any(self.holds(t, release) for t in texts)
            )
        )

    def count(self, release: str, namespace: str | None = None) -> tuple[int, int]:
        """(op names, overloads) registered in release, in one namespace or all."""
        keys = list(self.texts(release))
        if namespace is not None:
            keys = [k for k in keys if k.startswith(f"{namespace}::")]
        return len({k.partition(".")[0] for k in keys}), len(keys)


@functools.cache
def packaged_op_schemas() -> OpSchemas:
    """The op schemas shipped in the package, read once per process."""
    text = resources.files("torch_abi_harness.data").joinpath(DATA_FILE).read_text()
    return OpSchemas.from_json(json.loads(text), f"torch_abi_harness/data/{DATA_FILE}")


@dataclasses.dataclass(frozen=True)
class OpChange:
    """How one op overload changed between two releases: removed, added, or its schema differs."""

    op: str  # aten::add.out
    change: Change
    what: str  # 'overload removed', 'new overload', or the differences joined
    old: str | None
    new: str | None
    differences: tuple[Difference, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "class": self.change.value,
            "what": self.what,
            "old": self.old,
            "new": self.new,
        }


def diff_releases(
    schemas: OpSchemas, old: str, new: str, namespaces: Iterable[str] | None = None
) -> tuple[OpChange, ...]:
    """Every op overload removed, added or changed from release old to new (sorted by op): removed and
    BC-breaking changes are breaking; new overloads and compatible changes are compatible."""
    wanted = None if namespaces is None else tuple(f"{n}::" for n in namespaces)
    before, after = schemas.texts(old), schemas.texts(new)
    changes: list[OpChange] = []
    for key in sorted(set(before) | set(after)):
        if wanted is not None and not key.startswith(wanted):
            continue
        was, now = before.get(key), after.get(key)
        if now is None:
            changes.append(OpChange(key, Change.BREAKING, "overload removed", was, None))
        elif was is None:
            changes.append(OpChange(key, Change.COMPATIBLE, "new overload", None, now))
        elif was != now:
            differences = compare(parse(was), parse(now))
            what = "; ".join(d.what for d in differences) or "schema text differs only in form"
            changes.append(OpChange(key, overall(differences), what, was, now, differences))
    return tuple(c for c in changes if c.change is not Change.SAME)


# --- reading a release's schemas from its torch ------------------------------------------------------

DUMP = """
import json, torch
out = []
for name in torch._C._dispatch_get_all_op_names():
    op, _, overload = name.partition(".")
    out.append(str(torch._C._get_schema(op, overload)))
print(json.dumps({"version": torch.__version__, "schemas": sorted(out)}))
"""


def dump_release(python: Path) -> list[str]:
    """Every registered schema of the torch that `python` imports (a few seconds: it imports torch)."""
    command = [str(python), "-c", DUMP]
    log.info("%s -c <dump the dispatcher's schemas>", python)
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise InfrastructureError(
            f"{python}: dumping op schemas failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    schemas: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])["schemas"]
    for text in schemas:
        parse(text)  # refuse to record what the reader cannot read
    return schemas


def with_release(schemas: OpSchemas, release: str, python: Path) -> OpSchemas:
    """schemas plus one release read from its python (a candidate not recorded in the data file)."""
    holds: dict[str, set[str]] = {}
    for known in schemas.releases:
        for text in schemas.texts(known).values():
            holds.setdefault(text, set()).add(known)
    for text in dump_release(python):
        holds.setdefault(text, set()).add(release)
    return OpSchemas.of((*schemas.releases, release), holds)
