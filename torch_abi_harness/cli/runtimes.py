"""`runtimes` and `base-image`: what the package sources serve, and the docker backend's base image."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version
from rich.markup import escape
from rich.table import Table

from torch_abi_harness.cli.args import (
    Command,
    add_matrix_option,
    listing_sources,
    matrix_of,
    positive_seconds,
    python_specifier,
    release_specifier,
    wheel_variant,
)
from torch_abi_harness.cli.console import console, emit_json, notes
from torch_abi_harness.config import DEFAULT_MATRIX, Sources
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.core.files import writable_dir
from torch_abi_harness.provision.catalog import UNKNOWN, Catalog, Filters, PublishedRuntime, discover, host_platforms
from torch_abi_harness.provision.envs import cache_dir_of
from torch_abi_harness.provision.index import sources_of
from torch_abi_harness.provision.sources import resolve_sources


def add_base_image(command: Command) -> None:
    base = command(
        "base-image", help="docker backend: make (once) the base image cells run in, with debootstrap; print its name"
    )
    add_matrix_option(base)
    base.add_argument("--cache-dir", type=Path, default=None, help="working space (default: the user cache dir)")
    base.set_defaults(handler=cmd_base_image)


def add_runtimes(command: Command) -> None:
    found = command(
        "runtimes",
        help="list the torch releases x Pythons x variants the package sources serve (reads listings, no wheel)",
    )
    found.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help=f"the matrix file whose sources are read (default: {DEFAULT_MATRIX} if there is one; pip's "
        "configuration and the UV_* variables apply either way)",
    )
    listing_sources(found, "to list (repeatable)")
    found.add_argument(
        "--releases", type=release_specifier, default=SpecifierSet(), metavar="SPEC", help="e.g. '>=2.11,<2.16'"
    )
    found.add_argument("--python", type=python_specifier, default=SpecifierSet(), metavar="SPEC", help="e.g. '>=3.10'")
    found.add_argument(
        "--variant",
        action="append",
        type=wheel_variant,
        default=[],
        metavar="NAME",
        help="cpu, cu130, ... or auto (no local label: the source's default build); repeatable",
    )
    found.add_argument("--pre", action="store_true", help="show pre-releases and development releases too")
    found.add_argument(
        "--all-platforms", action="store_true", help="show wheels for every platform, not only those this host installs"
    )
    found.add_argument(
        "--no-metadata",
        action="store_true",
        help="do not read the default builds' core metadata (PEP 658) for their CUDA major: shown as unknown",
    )
    found.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds for each request to a source (default: %(default)s)",
    )
    shape = found.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    shape.add_argument(
        "--matrix-entries",
        action="store_true",
        help="print matrix.yaml runtime entries, one per release x variant x Python, to paste under runtimes:",
    )
    found.set_defaults(handler=cmd_runtimes)


def cmd_base_image(args: argparse.Namespace) -> int:
    # The docker SDK (~1 s to import) loads only for the commands that talk to the engine.
    from torch_abi_harness.execute.container import require_sdk

    require_sdk()
    from torch_abi_harness.execute.container.engine import connect
    from torch_abi_harness.execute.container.images import ensure_base

    settings = load_matrix(matrix_of(args.matrix)).docker
    cache = cache_dir_of(args.cache_dir)
    writable_dir(cache, "--cache-dir")
    engine = connect()
    name = ensure_base(engine, cache, settings.base_image, settings.debian_mirror)
    size = engine.client.images.get(name).attrs.get("Size", 0)
    console.print(f"{name} ({size / 1e6:.0f} MB) in the engine at {engine.address}")
    return int(ExitCode.OK)


def runtime_sources(args: argparse.Namespace) -> Sources:
    """The matrix's sources (none when no --matrix is given and there is no matrix.yaml here) and the
    command line's."""
    if args.matrix is None and not DEFAULT_MATRIX.is_file():
        notes.print(f"[dim]no {DEFAULT_MATRIX} here: pip's configuration and the UV_* variables name the sources[/]")
        sources = Sources()
    else:
        sources = load_matrix(args.matrix or DEFAULT_MATRIX).sources
    return dataclasses.replace(
        sources,
        extra_index_urls=(*sources.extra_index_urls, *args.extra_index_url),
        find_links=(*sources.find_links, *args.find_links),
    )


def cmd_runtimes(args: argparse.Namespace) -> int:
    sources = sources_of(resolve_sources(runtime_sources(args)))
    filters = Filters(
        releases=args.releases,
        pythons=args.python,
        variants=frozenset(args.variant),
        pre=args.pre,
        platforms=None if args.all_platforms else host_platforms(),
    )
    catalog = discover(sources, filters, timeout=args.timeout, metadata=not args.no_metadata)
    if args.json:
        emit_json(catalog.to_json())
    elif args.matrix_entries:
        console.print(f"# torch on {escape(', '.join(map(str, sources)))}; paste under runtimes:")
        for line in catalog.matrix_entries():
            console.print(escape(line))
    else:
        print_catalog(catalog, all_platforms=args.all_platforms, metadata=not args.no_metadata)
    if not catalog.runtimes:
        served = f"; variants served: {', '.join(catalog.variants_seen)}" if args.variant else ""
        notes.print(f"[yellow]no torch wheel of these sources passes the filters[/]{escape(served)}")
    return int(ExitCode.OK)


def print_catalog(catalog: Catalog, *, all_platforms: bool, metadata: bool) -> None:
    """One section per release; a row per variant and source, with the Pythons it serves."""
    rows: dict[tuple[Version, str, str], list[PublishedRuntime]] = {}
    for runtime in catalog.runtimes:
        rows.setdefault((runtime.release, runtime.variant, runtime.source.location), []).append(runtime)
    where = "every platform" if all_platforms else "this host's platform (--all-platforms: every one)"
    console.print(f"[bold]torch[/] for {where} on {escape(', '.join(map(str, catalog.sources)))}")
    columns = ["release", "variant", "CUDA", "Python", *(["platforms"] if all_platforms else []), "source"]
    table = Table(*columns)
    keys = list(rows)
    for position, (release, variant, source) in enumerate(keys):
        found = rows[(release, variant, source)]
        first = position == 0 or keys[position - 1][0] != release
        last = position == len(keys) - 1 or keys[position + 1][0] != release
        platforms = sorted({p for r in found for p in r.platforms})
        table.add_row(
            str(release) if first else "",
            variant,
            "/".join(sorted({r.cuda for r in found})),
            " ".join(r.python_label for r in found),
            *([" ".join(platforms)] if all_platforms else []),
            escape(source),
            end_section=last,
        )
    console.print(table)
    releases = len({r.release for r in catalog.runtimes})
    console.print(f"{releases} release(s), {len(catalog.runtimes)} runtime(s) (release x variant x Python x source)")
    if catalog.hidden:
        console.print(f"[dim]torch wheel files not shown: {escape(catalog.hidden_text())}[/]")
    if any(r.cuda == UNKNOWN for r in catalog.runtimes):
        why = "not read (--no-metadata)" if not metadata else "not served by its source"
        console.print(f"[dim]CUDA unknown: a default build (no label) whose core metadata (PEP 658) was {why}[/]")
