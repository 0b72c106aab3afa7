"""`abi-diff` and `audit-guards`: what two releases' exports and a release's headers say, without running anything
(the analysis lives in torch_abi_harness/static/; these parse arguments and print; `check` is cli/check.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version
from rich.markup import escape

from torch_abi_harness.cli.args import Command, api_level, torch_include
from torch_abi_harness.cli.console import console, emit_json
from torch_abi_harness.config import DEFAULT_PYTHON
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import ResolvedSources
from torch_abi_harness.static.abi_diff import AbiDiff, diff, surface, with_ops
from torch_abi_harness.static.audit import GuardAudit, audit_guards, auditable_release
from torch_abi_harness.static.header_compiles import HeaderCompiler
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.op_registry import packaged_op_schemas


def add_abi_diff(command: Command) -> None:
    abi = command(
        "abi-diff", help="stable exports, declarations and op schemas removed, added or changed between releases"
    )
    abi.add_argument("old", help="a release ('2.14' or '2.14.1') or a torch wheel")
    abi.add_argument("new", help="a release or a torch wheel (e.g. a release candidate)")
    abi.add_argument(
        "--op-namespace",
        action="append",
        default=None,
        metavar="NS",
        help="dispatcher op schemas of this namespace (repeatable; default: aten; 'all': every namespace)",
    )
    abi.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    abi.set_defaults(handler=cmd_abi_diff)


def add_audit_guards(command: Command) -> None:
    audit = command("audit-guards", help="declarations visible at a target that the target release does not export")
    audit.add_argument("release", help="the release whose headers are audited, e.g. 2.12.1")
    audit.add_argument(
        "--min-target",
        type=api_level,
        default="2.9",
        help="the lowest target an extension may ask for (default: %(default)s)",
    )
    audit.add_argument(
        "--headers",
        type=torch_include,
        default=None,
        help="torch/include of that release for the compile probes (default: its harness env, if made)",
    )
    audit.add_argument(
        "--no-probe",
        action="store_true",
        help="skip the compile probes (confirmations, wrappers and macros; with USE_CUDA and the CUDA headers too)",
    )
    audit.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    audit.set_defaults(handler=cmd_audit_guards)


def cmd_abi_diff(args: argparse.Namespace) -> int:
    manifest = packaged_manifest()
    namespaces = tuple(args.op_namespace or ["aten"])
    result = with_ops(
        diff(surface(manifest, args.old), surface(manifest, args.new)),
        packaged_op_schemas(),
        () if "all" in namespaces else namespaces,
    )
    code = int(ExitCode.BROKEN if result.breaking or result.breaking_ops else ExitCode.OK)
    if args.json:
        emit_json(result.to_json())
        return code
    print_abi_diff(result, code)
    return code


def print_abi_diff(result: AbiDiff, code: int) -> None:
    console.print(f"[bold]stable surface {escape(result.old)} -> {escape(result.new)}[/]")
    sections: list[tuple[str, str, Sequence[str]]] = [
        ("red", "removed exports (binaries that use them stop loading)", result.removed_exports),
        ("red", "changed signatures", [f"{c.name}: {c.old}  ->  {c.new}" for c in result.changed_signatures]),
        ("yellow", "removed declarations (source break)", result.removed_declarations),
        ("yellow", "changed version guards", [f"{n}: {o} -> {w}" for n, o, w in result.changed_guards]),
        ("green", "added exports", result.added_exports),
        ("green", "added declarations", result.added_declarations),
    ]
    if result.op_changes is not None:
        scope = ", ".join(result.op_namespaces) or "every namespace"
        sections += [
            (
                "red",
                f"op schemas ({scope}): breaking changes (calls by name built on {result.old} may fail)",
                [f"{c.op}: {c.what}" for c in result.breaking_ops],
            ),
            (
                "green",
                f"op schemas ({scope}): compatible changes",
                [f"{c.op}: {c.what}" for c in result.compatible_ops],
            ),
        ]
    for style, title, items in sections:
        console.print(f"[{style}]{title}: {len(items)}[/]")
        for item in items:
            console.print(f"   {escape(item)}")
    if result.op_changes is None:
        console.print("[dim]op schemas: not compared (recorded for the manifest's releases, not for a wheel)[/]")
    verdict = (
        "[bold red]breaking[/]"
        if result.breaking or result.breaking_ops
        else "[green]no removal, no signature change, no breaking op schema change[/]"
    )
    console.print(f"{verdict} (exit {code})")


def cmd_audit_guards(args: argparse.Namespace) -> int:
    manifest = packaged_manifest()
    release = auditable_release(manifest, args.release)
    include = args.headers if args.headers is not None else harness_headers(release)
    # The compiles' answers are kept in the harness cache: auditing the same headers again reads them back.
    compiler = HeaderCompiler(default_cache_dir())
    audit = audit_guards(manifest, release, args.min_target, include, probe=not args.no_probe, compiler=compiler)
    code = int(ExitCode.BROKEN if audit.broken else ExitCode.OK)
    if args.json:
        emit_json(audit.to_json())
        return code
    print_audit(audit)
    return code


def harness_headers(release: str) -> Path | None:
    """torch/include of the release's env in the harness cache, when one was made (nothing is downloaded)."""
    sources = ResolvedSources(None, (), (), "")
    env = EnvManager(default_cache_dir(), sources).cached(EnvSpec(Version(release), "auto", DEFAULT_PYTHON))
    return env.torch_lib.parent / "include" if env else None


def print_audit(audit: GuardAudit) -> None:
    console.print(
        f"[bold]{audit.release}[/]: {len(audit.breaks)} declaration(s) visible to the preprocessor at a target whose "
        "release does not export them"
        + ("" if audit.probed else " [dim](not confirmed by compiling: no headers; pass --headers)[/]")
    )
    for item in audit.breaks:
        mark = {True: "[red]confirmed[/]", False: "[green]not visible when compiled[/]", None: "[dim]unprobed[/]"}
        console.print(f"   {mark[item.confirmed]} {escape(item.describe())}")
    if audit.probed:
        console.print(
            f"[bold]{audit.release}[/]: {len(audit.header_findings)} header-only wrapper(s)/macro(s) that a build at "
            "a target cannot use (does not compile, or imports what that release does not export)"
        )
        for finding in audit.header_findings:
            console.print(f"   [red]finding[/] {escape(finding.describe())}")
    if audit.cuda is not None:
        style = "yellow" if audit.cuda.include is None else "dim"
        console.print(f"[{style}]{escape(audit.cuda.note())}[/]")
