"""matrix.yaml -> Matrix: runtimes expanded, builds checked against extensions and runtimes, known breaks dated;
every problem collected before one ConfigError names them all."""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from torch_abi_harness.config import (
    DEFAULT_MATRIX,
    DEFAULT_PYTHON,
    BuildSpec,
    CudaPolicy,
    Device,
    DockerSettings,
    Extension,
    KnownBreak,
    Limits,
    Matrix,
    PublishedRequest,
    RuntimeSpec,
    Settings,
    Sources,
    is_path,
    parse_size,
    selector_pattern,
)
from torch_abi_harness.config.extension import discover_extensions
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.schema import Document, did_you_mean
from torch_abi_harness.core.versions import ApiLevel, parse_release
from torch_abi_harness.static import prebuilt
from torch_abi_harness.static.manifest import packaged_manifest


def load_matrix(path: Path = DEFAULT_MATRIX) -> Matrix:
    """Read and check a matrix file; every problem is collected before one ConfigError names them all."""
    doc = Document.load(path)
    if not isinstance(doc.data, dict):
        raise ConfigError(path, ["the file must be a mapping with schema_version, runtimes and builds"])
    problems = doc.schema_problems("matrix")
    if problems:  # the checks below assume the shapes the schema guarantees
        raise ConfigError(path, problems)
    data: dict[str, Any] = doc.data
    failed: set[str] = set()
    extensions = discover_extensions(doc, problems, failed)
    runtimes = _runtimes(doc, problems)
    python = python_request(doc, data.get("python", DEFAULT_PYTHON)) or DEFAULT_PYTHON
    builds: list[BuildSpec] = []
    published: list[PublishedRequest] = []
    for index, item in enumerate(data["builds"]):
        if "wheel" in item or "extension" not in item:
            request = _published(doc, index, runtimes, problems)
            if request is not None:
                if any(p.requirement == request.requirement for p in published):
                    problems.append(f"{doc.where(('builds', index))}: duplicate build {item!r}")
                published.append(request)
            continue
        build = _build(doc, index, extensions, failed, runtimes, python, problems)
        if build is None:
            continue
        if any(dataclasses.replace(b, cuda=build.cuda) == build for b in builds):  # `cuda:` is not in a build's id
            problems.append(f"{doc.where(('builds', index))}: duplicate build {item!r}")
        builds.append(build)
    acknowledged = known_breaks(doc, problems)
    limits = cell_limits(doc, problems)
    if problems:
        raise ConfigError(path, problems)
    settings: dict[str, Any] = dict(data.get("settings") or {})
    if "preload" in settings:
        settings["preload"] = tuple(settings["preload"])
    sources = data.get("sources") or {}
    return Matrix(
        path=path.resolve(),
        python=python,
        settings=Settings(**settings),
        sources=Sources(
            inherit_pip_config=sources.get("inherit_pip_config", True),
            index_url=sources.get("index_url"),
            extra_index_urls=tuple(sources.get("extra_index_urls", ())),
            find_links=tuple(sources.get("find_links", ())),
            index_strategy=sources.get("index_strategy"),
        ),
        extensions=extensions,
        runtimes=tuple(runtimes),
        builds=tuple(builds),
        docker=DockerSettings(**(data.get("docker") or {})),
        known_breaks=acknowledged,
        limits=limits,
        published=tuple(published),
    )


MIN_PIDS = 16  # below this a cell's interpreter and pytest cannot start their own threads


def cell_limits(doc: Document, problems: list[str]) -> Limits:
    """`limits:`: each venv cell's memory (a size: 512M, 6G) and process bound; a bad value is a problem named with
    its key and what is allowed."""
    given: dict[str, Any] = doc.data.get("limits") or {}
    limits = Limits()
    if "memory" in given:
        memory = parse_size(str(given["memory"]))
        if memory is None or memory < 64 * 2**20:
            problems.append(
                f"{doc.where(('limits', 'memory'))}: {given['memory']!r} is not a memory bound: a size of at least "
                "64M, a number with K, M, G or T (e.g. 6G, 512M)"
            )
        else:
            limits = dataclasses.replace(limits, memory=memory)
    if "pids" in given:
        pids = given["pids"]
        if isinstance(pids, bool) or not isinstance(pids, int) or pids < MIN_PIDS:
            problems.append(
                f"{doc.where(('limits', 'pids'))}: {pids!r} is not a process bound: "
                f"a whole number of at least {MIN_PIDS}"
            )
        else:
            limits = dataclasses.replace(limits, pids=pids)
    return limits


def _runtimes(doc: Document, problems: list[str]) -> list[RuntimeSpec]:
    """Every entry of `runtimes:` expanded to its combinations, a duplicate refused where it appears."""
    runtimes: list[RuntimeSpec] = []
    for index in range(len(doc.data["runtimes"])):
        for spec in expand_runtime(doc, index, problems):
            if any(r.key == spec.key for r in runtimes):
                problems.append(
                    f"{doc.where(('runtimes', index))}: duplicate runtime {_describe_runtime(spec)} "
                    "(torch, variant, python and device make a runtime's id; two images of one release need "
                    "two matrix files)"
                )
            else:
                runtimes.append(spec)
    return runtimes


def _published(
    doc: Document, index: int, runtimes: Sequence[RuntimeSpec], problems: list[str]
) -> PublishedRequest | None:
    """A build entry naming a published wheel: a requirement, with no extension, torch, variant or target (those
    are read from the wheel)."""
    item = doc.data["builds"][index]
    where = ("builds", index)
    if "wheel" not in item:
        problems.append(
            f"{doc.where(where)}: a build names an `extension:` and its `torch:`, or a published wheel "
            '(`wheel: "torchao==0.18.0"`)'
        )
        return None
    given = [key for key in ("extension", "torch", "variant", "target", "python") if key in item]
    if given:
        problems.append(
            f"{doc.where(where)}: {', '.join(f'`{k}:`' for k in given)} cannot be given for a published wheel: "
            "its build torch and target are read from the wheel, and it is resolved for each runtime's Python"
        )
    text = item["wheel"]
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        problems.append(f"{doc.where((*where, 'wheel'))}: {text!r} is not a requirement: {exc}")
        return None
    if beyond_a_pin(requirement):
        problems.append(f"{doc.where((*where, 'wheel'))}: {text!r}: {PIN_ONLY}")
    if not requirement.specifier:
        problems.append(
            f"{doc.where((*where, 'wheel'))}: {text!r} names no version: pin the release to prove "
            f"(`{requirement.name}==X.Y.Z`), so that a run is repeatable"
        )
    only = _only_runtimes(doc, where, item, runtimes, problems)
    cuda = CudaPolicy(item.get("cuda", CudaPolicy.SAME_MAJOR))
    return PublishedRequest(str(requirement), f"{doc.path}: {doc.where(where)}", tuple(only), cuda)


PIN_ONLY = (
    "give a name and a version specifier only (`torchao==0.18.0`); a local wheel is an extension with `recipe: wheel`"
)


def beyond_a_pin(requirement: Requirement, *, marker: bool = True) -> list[str]:
    """What a published wheel's requirement gives beyond a name and a version specifier, which nothing would
    honour: a URL (not a release of a source), extras (they only add dependencies, never installed: the runtime's
    torch is the one under test), and (unless marker is false: `check` evaluates it) a marker."""
    found = [f"the URL {requirement.url}"] if requirement.url else []
    found += [f"the extras [{','.join(sorted(requirement.extras))}]"] if requirement.extras else []
    return found + ([f"the marker {requirement.marker}"] if marker and requirement.marker else [])


def _only_runtimes(
    doc: Document,
    where: tuple[str | int, ...],
    item: dict[str, Any],
    runtimes: Sequence[RuntimeSpec],
    problems: list[str],
) -> list[Version]:
    """A build's `runtimes:`, each checked to be a runtime release of the matrix."""
    known_runtimes = sorted({str(r.torch) for r in runtimes})
    only: list[Version] = []
    for position, text in enumerate(item.get("runtimes", ())):
        if text in known_runtimes:
            only.append(parse_release(text))
            continue
        problems.append(
            f"{doc.where((*where, 'runtimes', position))}: {text!r} is not a runtime of this matrix; "
            f"runtimes: {', '.join(known_runtimes)}{did_you_mean(text, known_runtimes)}"
        )
    return only


def _build(
    doc: Document,
    index: int,
    extensions: dict[str, Extension],
    failed: set[str],
    runtimes: Sequence[RuntimeSpec],
    python: str,
    problems: list[str],
) -> BuildSpec | None:
    """One entry of `builds:` checked against the extensions and runtimes; None when it cannot be made."""
    item = doc.data["builds"][index]
    where = ("builds", index)
    if "torch" not in item:
        problems.append(
            f"{doc.where(where)}: a build of {item['extension']!r} names its `torch:`, the release to build against"
        )
        return None
    torch = _release(doc, (*where, "torch"), item["torch"], problems)
    ext = extensions.get(item["extension"])
    if ext is None:
        if item["extension"] not in failed:  # an extension that failed to load has said why already
            known = sorted(extensions)
            problems.append(
                f"{doc.where((*where, 'extension'))}: unknown extension {item['extension']!r}; "
                f"known: {', '.join(known) or '(none found)'}{did_you_mean(item['extension'], known)}"
            )
        return None
    target = ApiLevel.parse(item["target"]) if item.get("target") else None
    if target is not None and target < ext.min_target:
        problems.append(
            f"{doc.where((*where, 'target'))}: target {item['target']!r} is below the extension's "
            f"min_target {str(ext.min_target)!r}; its sources do not build for that level"
        )
    only = _only_runtimes(doc, where, item, runtimes, problems)
    if ext.wheel is not None and torch is not None:
        problems.extend(
            f"{doc.where(where)}: {p}" for p in prebuilt.claim_problems(ext.name, ext.wheel, torch, target, python)
        )
    return BuildSpec(
        ext,
        torch or Version("0"),
        item.get("variant", "auto"),
        target,
        tuple(only),
        CudaPolicy(item.get("cuda", CudaPolicy.SAME_MAJOR)),
        python_request(doc, item.get("python")),
    )


def known_breaks(doc: Document, problems: list[str]) -> tuple[KnownBreak, ...]:
    """`known_breaks:` after the schema check: each expiry a real date (YAML reads an unquoted 2026-12-31 as
    one; a quoted one is parsed), each name once."""
    out: list[KnownBreak] = []
    for index, item in enumerate(doc.data.get("known_breaks") or ()):
        where = ("known_breaks", index)
        value = item["expires"]
        expires: datetime.date | None = None
        if isinstance(value, datetime.datetime):
            expires = value.date()
        elif isinstance(value, datetime.date):
            expires = value
        elif isinstance(value, str):
            try:
                expires = datetime.date.fromisoformat(value.strip())
            except ValueError:
                pass
        if expires is None:
            problems.append(f"{doc.where((*where, 'expires'))}: {value!r} is not a date; write it as YYYY-MM-DD")
            continue
        if any(k.name == item["name"] for k in out):
            problems.append(f"{doc.where((*where, 'name'))}: {item['name']!r} names another known break too")
            continue
        if "cells" not in item and "symbols" not in item:
            problems.append(
                f"{doc.where(where)}: {item['name']!r} acknowledges nothing: give `cells:` (selectors as -k takes "
                "them) or `symbols:` (symbol names, * ? [...] wildcards), or both"
            )
            continue
        cells, symbols = item.get("cells", ()), item.get("symbols", ())
        selectors = (cells,) if isinstance(cells, str) else tuple(cells)
        patterns = (symbols,) if isinstance(symbols, str) else tuple(symbols)
        entry = KnownBreak(
            item["name"], selectors, item["reason"], item["link"], expires, patterns,
            acknowledge_all=item.get("acknowledge_all", False),
        )  # fmt: skip
        problems.extend(f"{doc.where((*where, key))}: {text}" for key, text in unacknowledged_catch_alls(entry))
        out.append(entry)
    return tuple(out)


# Two cell ids with little in common but the grammar (`ext@b<torch>[-t<target>]~r<torch>-<device>`): a selector
# matching both matches any cell of any matrix ('*', '@', '~r', '.', '-c'...).
UNLIKE_CELLS = ("a@b2.9.0~r2.9.0-cpu", "zz_q@b3.4.5+cu128-t3.4~r3.4.5+cu130-cuda-py3.13")


def catch_alls(entry: KnownBreak) -> list[tuple[str, str]]:
    """(key, pattern) for each selector of the entry that matches any cell, and each symbol pattern that matches
    every stable symbol the manifest knows: such an entry acknowledges every break there is."""
    found = [
        ("cells", s) for s in entry.cells if all(fnmatch.fnmatchcase(i, selector_pattern(s)) for i in UNLIKE_CELLS)
    ]
    if entry.symbols:
        names = packaged_manifest().names()
        found += [("symbols", p) for p in entry.symbols if all(fnmatch.fnmatchcase(n, p) for n in names)]
    return found


def unacknowledged_catch_alls(entry: KnownBreak) -> list[tuple[str, str]]:
    """(key, problem) for each catch-all of an entry without `acknowledge_all: true`: with a far expiry it
    acknowledged every break silently."""
    if entry.acknowledge_all:
        return []
    what = {"cells": "every cell", "symbols": "every stable symbol"}
    return [
        (
            key,
            f"{entry.name!r} acknowledges {what[key]} ({pattern!r} matches all of them): name the cells or symbols "
            "it is for, or add `acknowledge_all: true` to the entry to mean it (every report then names it)",
        )
        for key, pattern in catch_alls(entry)
    ]


RUNTIME_AXES = ("torch", "variant", "python", "device")  # a runtime entry's lists expand in this order


def expand_runtime(doc: Document, index: int, problems: list[str]) -> list[RuntimeSpec]:
    """One runtime entry -> its runtimes: every combination of its lists (torch outermost), less `exclude:`.

    ``{torch: [2.12.1, 2.15.0], python: ["3.10", "3.13"]}`` is four runtimes; an exclusion is a
    mapping of some axes to one value each and removes every combination that agrees with it.
    An exclusion that removes nothing is a problem (it is a typo, or the entry changed under it).
    """
    item: dict[str, Any] = doc.data["runtimes"][index]
    where = ("runtimes", index)
    axes: dict[str, list[Any]] = {}
    for axis in RUNTIME_AXES:
        value = item.get(axis)
        values = value if isinstance(value, list) else [value]
        if len(set(map(str, values))) != len(values):
            problems.append(f"{doc.where((*where, axis))}: a value is listed twice in {values!r}")
        axes[axis] = values
    torches: dict[str, Version | None] = {}
    for position, text in enumerate(axes["torch"]):
        path = (*where, "torch", position) if isinstance(item["torch"], list) else (*where, "torch")
        torches[text] = _release(doc, path, text, problems)
    combos = [dict(zip(RUNTIME_AXES, values, strict=True)) for values in itertools.product(*axes.values())]
    kept = combos
    for position, rule in enumerate(item.get("exclude", ())):
        rule_where = doc.where((*where, "exclude", position))
        unknown = [f"{axis}: {rule[axis]!r}" for axis in rule if str(rule[axis]) not in map(str, axes[axis])]
        if unknown:
            problems.append(f"{rule_where}: {', '.join(unknown)} is not a value of this entry's lists")
            continue
        before = len(kept)
        kept = [c for c in kept if any(str(c[axis]) != str(rule[axis]) for axis in rule)]
        if len(kept) == before:
            problems.append(f"{rule_where}: excludes nothing")
    if item.get("image") and len(kept) > 1:
        problems.append(f"{doc.where((*where, 'image'))}: an image holds one runtime; this entry makes {len(kept)}")
    if combos and not kept:
        problems.append(f"{doc.where(where)}: `exclude:` removes every runtime of this entry")
    return [
        RuntimeSpec(
            torches[c["torch"]] or Version("0"),
            c["variant"] or "auto",
            Device(c["device"] or Device.CPU),
            item.get("image"),
            python_request(doc, c["python"]),
        )
        for c in kept
    ]


def python_request(doc: Document, value: str | None) -> str | None:
    """A matrix's python as the harness uses it: a version as written; a path made absolute from the matrix's folder."""
    if value is None or not is_path(value):
        return value
    return os.path.normpath(doc.path.parent.resolve() / Path(value).expanduser())


def _describe_runtime(spec: RuntimeSpec) -> str:
    python = f", python {spec.python}" if spec.python else ""
    return f"torch {spec.torch} ({spec.variant}, {spec.device}{python})"


def _release(doc: Document, path: tuple[str | int, ...], text: str, problems: list[str]) -> Version | None:
    try:
        return parse_release(text)
    except ValueError as exc:
        problems.append(f"{doc.where(path)}: {exc}")
        return None


def with_overrides(
    matrix: Matrix,
    add_runtimes: Sequence[str] = (),
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    environments: Sequence[str] = (),
) -> Matrix:
    """The matrix plus runtimes and package sources given on the command line (nightly and gating jobs).

    An added runtime is ``RELEASE`` or ``RELEASE:cuda`` (e.g. a pre-release, ``2.16.0.dev20261120``,
    or a release candidate served by an added index or wheel directory). An environment (``--use-env``) is
    an interpreter's path, kept as given (absolute, links not followed: a venv's python is a link to its base's).
    """
    runtimes = list(matrix.runtimes)
    problems: list[str] = []
    for text in add_runtimes:
        release, _, device = text.partition(":")
        if device not in ("", *Device):
            problems.append(f"--add-runtime {text!r}: the device after ':' must be cpu or cuda")
            continue
        try:
            spec = RuntimeSpec(parse_release(release), device=Device(device or Device.CPU))
        except ValueError as exc:
            problems.append(f"--add-runtime {text!r}: {exc}")
            continue
        if all(r.key != spec.key for r in runtimes):
            runtimes.append(spec)
    if problems:
        raise ConfigError("command line", problems)
    sources = dataclasses.replace(
        matrix.sources,
        extra_index_urls=(*matrix.sources.extra_index_urls, *extra_index_urls),
        find_links=(*matrix.sources.find_links, *(str(Path(f).resolve()) for f in find_links)),
        environments=(*matrix.sources.environments, *(str(Path(e).expanduser().absolute()) for e in environments)),
    )
    return dataclasses.replace(matrix, runtimes=tuple(runtimes), sources=sources)
