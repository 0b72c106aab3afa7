"""Split a plan's cells into N balanced shards, the same way on every machine.

A cell costs its `durations.total` in a previous run when one is given (`--durations`), else
the cost model below; a shard also pays, once, for each build its cells need (a shard builds
only those). So the cells of one build are kept together: each build with its cells is one
chunk, and a chunk costlier than an even share (the total over N) is cut into as few chunks as
bring it under that share, each paying for the build again. The chunks then go longest-first
onto the least-loaded shard (a deterministic greedy: ties by first cell id, then by shard
index). Nothing random, nothing from the clock: every machine of a CI fan-out computes the
same partition. `plan --json` is written here too, beside the fan-out's job matrix.

Split by runtime (`--by runtime`), every cell of a runtime goes to one shard, so a CI job makes only
its own runtimes' envs (what fills a hosted runner's disk) and takes its builds from the build jobs.
That split reads nothing but the cells' ids, so `merge --allow-missing` can say which shard owed a
cell that no report holds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.core.kinds import Recipe
from torch_abi_harness.plan import Build, Cell, Plan, Runtime, Shard
from torch_abi_harness.results.model import RunResult
from torch_abi_harness.verdict import promise

PLAN_JSON_VERSION = 1  # `plan --json`; checked against torch_abi_harness/schemas/plan.schema.json

# The cost model, in seconds on 2 cores (README, Performance): a cell is an interpreter, `import
# torch`, the load and a suite; a build is a compile, once per shard that needs it.
CELL_SECONDS = 3.0
BUILD_SECONDS = {"wheel": 0.1, "stable": 5.0, "unstable": 14.0, "cuda": 20.0}
ENV_SECONDS = 30.0  # a runtime's env, once per shard that runs it: a warm uv cache links it in 10-30 s
SLACK = 0.05  # how far over an even share a shard may go before a build's cells are cut between shards
T = TypeVar("T")


def build_seconds(build: Build) -> float:
    """The cost model for a build: a prebuilt wheel is only unpacked; nvcc and the classic ATen headers are slow."""
    if build.extension.recipe == Recipe.WHEEL:
        return BUILD_SECONDS["wheel"]
    if build.variant.startswith("cu"):
        return BUILD_SECONDS["cuda"]
    return BUILD_SECONDS["stable" if build.extension.stable else "unstable"]


def measured_durations(run: RunResult) -> dict[str, float]:
    """Each cell's `durations.total` in a previous run (cells that never ran have none)."""
    return {c.id: float(total) for c in run.cells if (total := c.durations.get("total")) is not None}


@dataclasses.dataclass(frozen=True)
class Part:
    """One shard of a partition: its cells in plan order, and its estimated cost."""

    shard: Shard
    cells: tuple[Cell, ...]
    seconds: float

    @property
    def builds(self) -> int:
        return len({c.build for c in self.cells})


def partition(cells: Sequence[Cell], count: int, durations: Mapping[str, float] | None = None) -> tuple[Part, ...]:
    """The cells in `count` disjoint shards that together hold every cell, balanced by estimated cost."""
    known = durations or {}
    groups: dict[Build, list[tuple[float, str, Cell]]] = {}
    for cell in cells:
        groups.setdefault(cell.build, []).append((known.get(cell.id, CELL_SECONDS), cell.id, cell))
    total = sum(cost for group in groups.values() for cost, _, _ in group) + sum(map(build_seconds, groups))
    share = total / count
    chunks: list[tuple[float, str, list[Cell]]] = []
    for build, group in groups.items():
        whole = build_seconds(build) + sum(cost for cost, _, _ in group)
        pieces = min(len(group), max(1, math.ceil(whole / share - 1e-9)))
        for seconds, piece in _longest_first(group, pieces):
            chunks.append((build_seconds(build) + seconds, min(c.id for c in piece), piece))
    parts = []
    for index, (seconds, members) in enumerate(_fill(chunks, count, share, known), 1):
        ids = {cell.id for piece in members for cell in piece}
        parts.append(Part(Shard(index, count), tuple(c for c in cells if c.id in ids), seconds))
    return tuple(parts)


def _fill(
    chunks: list[tuple[float, str, list[Cell]]], bins: int, share: float, known: Mapping[str, float]
) -> list[tuple[float, list[list[Cell]]]]:
    """Chunks longest first onto the least-loaded shard; a chunk that would take that shard more than
    SLACK over an even share is cut there: the cells that fit stay, the rest (paying its build again)
    goes back into the queue. Whole builds alone can leave one shard a whole chunk over the others."""
    loads = [0.0] * bins
    contents: list[list[list[Cell]]] = [[] for _ in range(bins)]
    queue = sorted(chunks, key=lambda entry: (-entry[0], entry[1]))
    while queue:
        cost, _, piece = queue.pop(0)
        least = min(range(bins), key=lambda i: (loads[i], i))
        build = cost - sum(known.get(c.id, CELL_SECONDS) for c in piece)
        room = share * (1 + SLACK) - loads[least] - build
        kept: list[Cell] = []
        for cell in piece:
            if loads[least] + cost <= share * (1 + SLACK) or len(piece) == 1:
                kept = piece
                break
            if sum(known.get(c.id, CELL_SECONDS) for c in [*kept, cell]) > room:
                break
            kept.append(cell)
        if not kept:  # nothing fits: every other shard is fuller still
            kept = piece
        rest = piece[len(kept) :]
        loads[least] += build + sum(known.get(c.id, CELL_SECONDS) for c in kept)
        contents[least].append(kept)
        if rest:
            rest_cost = build + sum(known.get(c.id, CELL_SECONDS) for c in rest)
            queue.append((rest_cost, min(c.id for c in rest), rest))
            queue.sort(key=lambda entry: (-entry[0], entry[1]))
    return [(round(load, 1), content) for load, content in zip(loads, contents, strict=True)]


def _longest_first(items: Sequence[tuple[float, str, T]], bins: int) -> list[tuple[float, list[T]]]:
    """Items (cost, key, item) into bins: longest first (ties by key), each onto the least-loaded bin (ties
    by bin index). Returns each bin's load and items."""
    loads = [0.0] * bins
    contents: list[list[T]] = [[] for _ in range(bins)]
    for cost, _, item in sorted(items, key=lambda entry: (-entry[0], entry[1])):
        least = min(range(bins), key=lambda i: (loads[i], i))
        loads[least] += cost
        contents[least].append(item)
    return [(round(load, 1), content) for load, content in zip(loads, contents, strict=True)]


def needed_pythons(made_on: Iterable[Build | Runtime]) -> list[str]:
    """The CPython versions (3.10, 3.13t) these builds' and runtimes' envs are made on, sorted by version: what a
    CI job must set up (actions/setup-python) before it runs them. An interpreter the matrix gives by path is
    the machine's own, not one to set up: it is left out."""
    versions = {x.python for x in made_on if x.interpreter is None}
    return sorted(versions, key=lambda v: (tuple(int(p) for p in v.rstrip("t").split(".")), v.endswith("t")))


def cell_pythons(cells: Iterable[Cell]) -> list[str]:
    """needed_pythons of the cells' builds and runtimes: what a job that builds and runs them sets up."""
    return needed_pythons(x for c in cells for x in (c.build, c.runtime))


def runtime_of(cell_id: str) -> str:
    """A cell id's runtime id (what follows its `~`)."""
    return cell_id.rpartition("~")[2]


def runtime_groups(cell_ids: Sequence[str], count: int | None) -> tuple[tuple[float, tuple[str, ...]], ...]:
    """The cells' ids split by runtime into `count` groups (None: one per runtime), each group's estimated
    seconds beside it: runtimes longest first onto the least-loaded group (ties by runtime id, then by
    group index), a runtime's env paid once in its group. Reads only the ids (the cost model, never a
    previous run's durations), so merge can tell from the plan's ids which shard owed a cell."""
    by_runtime: dict[str, list[str]] = {}
    for cell_id in cell_ids:
        by_runtime.setdefault(runtime_of(cell_id), []).append(cell_id)
    bins = len(by_runtime) if count is None else count
    if not 1 <= bins <= max(1, len(by_runtime)):
        raise BadInputError(
            f"--shards {count} --by runtime for {len(by_runtime)} runtime(s): every shard of a split by runtime "
            f"holds at least one runtime; ask for at most {max(1, len(by_runtime))}"
        )
    items = [(ENV_SECONDS + CELL_SECONDS * len(ids), runtime, ids) for runtime, ids in by_runtime.items()]
    groups = _longest_first(items, bins)
    return tuple((seconds, tuple(i for ids in members for i in ids)) for seconds, members in groups)


def partition_by_runtime(cells: Sequence[Cell], count: int | None) -> tuple[Part, ...]:
    """The cells in shards by runtime (runtime_groups), each shard's cells in plan order."""
    groups = runtime_groups([c.id for c in cells], count)
    return tuple(
        Part(Shard(index, len(groups), "runtime"), tuple(c for c in cells if c.id in set(ids)), seconds)
        for index, (seconds, ids) in enumerate(groups, 1)
    )


def split(plan: Plan, count: int | None, by: str, durations: Mapping[str, float] | None = None) -> tuple[Part, ...]:
    """The selected cells in shards, by cells (count required) or by runtime (count None: one per runtime)."""
    if by == "runtime":
        return partition_by_runtime(plan.cells, count)
    return partition(plan.cells, count or 1, durations)


def shard_plan(plan: Plan, shard: Shard, durations: Mapping[str, float] | None = None) -> Plan:
    """The plan reduced to one shard's cells; it still knows the whole plan (for its report's identity)."""
    part = split(plan, shard.count, shard.by, durations)[shard.index - 1]
    return dataclasses.replace(plan, cells=part.cells, shard=shard, unsharded=plan.cells)


def fan_out(
    plan: Plan, count: int | None, durations: Mapping[str, float] | None = None, by: str = "cells"
) -> dict[str, Any]:
    """The job matrix for a CI fan-out, in the shape GitHub Actions' `strategy.matrix` takes as it is
    (`matrix: ${{ fromJSON(needs.plan.outputs.shards) }}`): one `include` entry per shard, so each
    job sees `matrix.shard` ("2/3") and, for its name, `matrix.cells` and `matrix.estimated_seconds`;
    split by runtime, also `matrix.runtimes` (their ids, space-separated). Each names `matrix.pythons`, the
    CPythons its job sets up (by runtime: its runtimes'; by cells: its builds' too). No other top-level key:
    Actions would read it as another axis of the matrix.

    More shards than cells is bad input: the fan-out would start jobs with nothing to run. (One shard of a
    fan-out decided elsewhere, `run --shard K/N`, may be empty: it runs nothing and reports 0 cells.)"""
    if by == "runtime":
        return {
            "include": [
                {
                    "shard": str(part.shard),
                    "runtimes": " ".join(dict.fromkeys(c.runtime.id for c in part.cells)),
                    "cells": len(part.cells),
                    "estimated_seconds": round(part.seconds, 1),
                    "pythons": needed_pythons(c.runtime for c in part.cells),  # its builds come made
                }
                for part in partition_by_runtime(plan.cells, count)
            ]
        }
    if count is None:
        raise BadInputError("--shards N is required to split by cells (by runtime, the default is one per runtime)")
    if count > max(1, len(plan.cells)):
        raise BadInputError(
            f"--shards {count} for {len(plan.cells)} selected cell(s): every shard of a fan-out holds at least one "
            f"cell; ask for at most {max(1, len(plan.cells))}"
        )
    return {
        "include": [
            {
                "shard": str(part.shard),
                "cells": len(part.cells),
                "estimated_seconds": part.seconds,
                "pythons": cell_pythons(part.cells),
            }
            for part in partition(plan.cells, count, durations)
        ]
    }


def build_jobs(plan: Plan) -> dict[str, Any]:
    """The job matrix of the build jobs: one per build torch (its envs are the only ones such a job makes),
    each naming how many of the plan's builds it makes (`build --torch T` makes them) and the CPythons they
    are made on."""
    by_torch: dict[str, list[Build]] = {}
    for build in plan.needed_builds:
        by_torch.setdefault(str(build.torch), []).append(build)
    return {
        "include": [
            {"torch": torch, "builds": len(builds), "pythons": needed_pythons(builds)}
            for torch, builds in by_torch.items()
        ]
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    """`plan --json`: the plan's identity (a shard's knows the whole plan) and each cell with its promise."""
    identity = plan.identity
    return {
        "schema_version": PLAN_JSON_VERSION,
        "matrix": identity.matrix,
        "digest": identity.digest,
        "shard": identity.shard.to_json() if identity.shard else None,
        "pythons": cell_pythons(plan.cells),
        "cells": [
            {
                "id": cell.id,
                "build": cell.build.id,
                "runtime": cell.runtime.id,
                "expected": p.expected.value,
                "why": p.why,
            }
            for cell in plan.cells
            for p in [promise(cell)]
        ],
    }
