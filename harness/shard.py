"""Split a plan's cells into N balanced shards, the same way on every machine.

A cell costs its `durations.total` in a previous run when one is given (`--durations`), else
the cost model below; a shard also pays, once, for each build its cells need (a shard builds
only those). So the cells of one build are kept together: each build with its cells is one
chunk, and a chunk costlier than an even share (the total over N) is cut into as few chunks as
bring it under that share, each paying for the build again. The chunks then go longest-first
onto the least-loaded shard (a deterministic greedy: ties by first cell id, then by shard
index). Nothing random, nothing from the clock: every machine of a CI fan-out computes the
same partition. `plan --json` is written here too, beside the fan-out's job matrix.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from harness.core.errors import BadInputError
from harness.plan import Build, Cell, Plan, Shard
from harness.results.model import RunResult
from harness.verdict import promise

PLAN_JSON_VERSION = 1  # `plan --json`; checked against harness/schemas/plan.schema.json

# The cost model, in seconds on 2 cores (README, Performance): a cell is an interpreter, `import
# torch`, the load and a suite; a build is a compile, once per shard that needs it.
CELL_SECONDS = 3.0
BUILD_SECONDS = {"wheel": 0.1, "stable": 5.0, "unstable": 14.0, "cuda": 20.0}
SLACK = 0.05  # how far over an even share a shard may go before a build's cells are cut between shards
T = TypeVar("T")


def build_seconds(build: Build) -> float:
    """The cost model for a build: a prebuilt wheel is only unpacked; nvcc and the classic ATen headers are slow."""
    if build.extension.recipe == "wheel":
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


def shard_plan(plan: Plan, shard: Shard, durations: Mapping[str, float] | None = None) -> Plan:
    """The plan reduced to one shard's cells; it still knows the whole plan (for its report's identity)."""
    part = partition(plan.cells, shard.count, durations)[shard.index - 1]
    return dataclasses.replace(plan, cells=part.cells, shard=shard, unsharded=plan.cells)


def fan_out(plan: Plan, count: int, durations: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The job matrix for a CI fan-out, in the shape GitHub Actions' `strategy.matrix` takes as it is
    (`matrix: ${{ fromJSON(needs.plan.outputs.shards) }}`): one `include` entry per shard, so each
    job sees `matrix.shard` ("2/3") and, for its name, `matrix.cells` and `matrix.estimated_seconds`.
    No other top-level key: Actions would read it as another axis of the matrix.

    More shards than cells is bad input: the fan-out would start jobs with nothing to run. (One shard of a
    fan-out decided elsewhere, `run --shard K/N`, may be empty: it runs nothing and reports 0 cells.)"""
    if count > max(1, len(plan.cells)):
        raise BadInputError(
            f"--shards {count} for {len(plan.cells)} selected cell(s): every shard of a fan-out holds at least one "
            f"cell; ask for at most {max(1, len(plan.cells))}"
        )
    return {
        "include": [
            {"shard": str(part.shard), "cells": len(part.cells), "estimated_seconds": part.seconds}
            for part in partition(plan.cells, count, durations)
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
