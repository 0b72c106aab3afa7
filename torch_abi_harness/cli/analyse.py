"""`check`, `abi-diff` and `audit-guards`: what the ELF symbols, headers and op schemas say, without running
anything (the analysis lives in torch_abi_harness/static/; these parse arguments and print)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version
from rich.markup import escape

from torch_abi_harness.cli.args import Command, api_level, cpython_version, existing_file, torch_include, torch_variant
from torch_abi_harness.cli.console import console, emit_json
from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.errors import ExitCode
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.published import resolve
from torch_abi_harness.provision.sources import ResolvedSources, resolve_sources
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.abi_diff import AbiDiff, diff, surface, with_ops
from torch_abi_harness.static.artifact import fits_which_python
from torch_abi_harness.static.audit import GuardAudit, audit_guards, auditable_release
from torch_abi_harness.static.check import ModuleCheck, check_artifact
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.op_calls import Fit
from torch_abi_harness.static.op_registry import packaged_op_schemas
from torch_abi_harness.static.predict import Predicted


def add_check(command: Command) -> None:
    check = command("check", help="predict from ELF symbols alone where an artifact (.so or wheel) loads")
    check.add_argument(
        "artifact",
        type=artifact_or_requirement,
        help="a shared object or a wheel; or a published wheel by requirement ('torchao==0.18.0'), resolved from "
        f"the configured package sources for --python (default: {DEFAULT_PYTHON}) on this platform, downloaded once",
    )
    check.add_argument(
        "--runtimes",
        default=None,
        metavar="LIST",
        help="releases to check: '2.10.0,2.13' or '2.10+' (default: every release in the manifest)",
    )
    check.add_argument(
        "--variant",
        default=None,
        metavar="VARIANT",
        type=torch_variant,
        help="the runtimes' torch wheel variant (cu128, cu130, cpu): check the CUDA its DT_NEEDED names against it",
    )
    check.add_argument(
        "--python",
        default=None,
        metavar="X.Y",
        type=cpython_version,
        help="the runtimes' CPython (3.12, 3.13t): check the wheel's tags against it",
    )
    check.add_argument(
        "--built-with",
        default=None,
        metavar="RELEASE",
        help="the torch release it was built with: judge its calls by op name against that release's schemas "
        "(default: only whether each op exists)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    check.set_defaults(handler=cmd_check)


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
        "--no-probe", action="store_true", help="skip the compile probes (confirmations, wrappers and macros)"
    )
    audit.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    audit.set_defaults(handler=cmd_audit_guards)


def artifact_or_requirement(text: str) -> Path | Requirement:
    """check's ARTIFACT: an existing file, else a requirement naming a version (a published wheel)."""
    if Path(text).exists() or "/" in text or not any(op in text for op in "=<>~"):
        return existing_file(text)
    try:
        return Requirement(text)
    except InvalidRequirement:
        return existing_file(text)


def cmd_check(args: argparse.Namespace) -> int:
    if isinstance(args.artifact, Requirement):
        wheel = resolve(
            str(args.artifact), args.python or DEFAULT_PYTHON, resolve_sources(Sources()), default_cache_dir()
        )
        if not args.json:
            said = f"{args.artifact}: {wheel.filename} from {wheel.url} (sha256 {wheel.sha256[:16]})"
            console.print(escape(said), soft_wrap=True)
        args.artifact = wheel.path
    check = check_artifact(args.artifact, args.runtimes, args.variant, args.python, args.built_with)
    code = int(ExitCode.BROKEN if check.failing else ExitCode.OK)
    if args.json:
        emit_json(check.to_json())
        return code
    several = len(check.modules) > 1
    if several:
        console.print(f"[bold]{escape(check.artifact.name)}[/]: {len(check.modules)} extension modules")
    together = "together (what loads the whole wheel)" if several else None
    print_needs(check.whole, check.built_with, args.variant, args.python, together)
    print_predictions(check.whole)
    if several:
        for module in check.modules:
            print_needs(module, check.built_with, args.variant, args.python, f"module {module.name}")
            print_predictions(module)
        console.print(f"[bold]modules:[/] {escape(check.summary)}")
    return code


def print_needs(
    check: ModuleCheck, built_with: str | None, variant: str | None, python: str | None, label: str | None = None
) -> None:
    """What the artifact (or one module) imports and needs of a runtime, and what of it --variant and --python check."""
    imports, facts = check.imports, check.facts
    floor = ", ".join(f"{k} {v}" for k, v in imports.floor.items()) or "nothing versioned"
    console.print(
        f"[bold]{escape(label or check.name)}[/]: {len(imports.stable)} stable shims, "
        f"{len(imports.unstable)} unstable C++ symbols, {len(imports.python)} Python C API, "
        f"{len(imports.system)} system; needs {floor}"
    )
    for mangled, readable in imports.unstable.items():
        console.print(f"   [yellow]unstable[/] {escape(readable)}  [dim]{escape(mangled)}[/]")
    if facts.cuda_libraries:
        majors = sorted({major for _, major in facts.cuda_majors})
        which = f"a torch of CUDA {', '.join(map(str, majors))}" if majors else "a CUDA build of torch"
        checked = f"checked against {variant}" if variant else "give --variant to check it"
        console.print(f"   needs {which}: {escape(', '.join(facts.cuda_libraries))} ({checked})")
    for name in check.host_libraries:
        usual = host_libraries.usual_package(name) or "no package known here"
        console.print(
            f"   needs from the host system: {escape(name)} ({escape(usual)}): neither torch nor CUDA provides it",
            soft_wrap=True,
        )
    if facts.tags:
        checked = f"checked against CPython {python}" if python else "give --python to check it"
        console.print(f"   its wheel tags fit {escape(fits_which_python(facts.tags))} ({checked})")
    if check.limited_api:
        mark = "red" if check.limited_api.outside else "green"
        console.print(f"   [{mark}]abi3[/] {escape(check.limited_api.describe())}")
    if check.import_note:
        console.print(f"   [yellow]{escape(check.import_note)}[/]")
    if imports.calls:
        against = f"judged against torch {built_with}'s schemas" if built_with else "give --built-with to judge fit"
        console.print(f"   calls {len(imports.calls)} op(s) through the dispatcher ({against}):")
        for call in imports.calls:
            console.print(f"      {escape(call.shown)}  [dim]{call.via.value}: {escape(call.source)}[/]")
    if check.unseen_calls:
        console.print("   [dim]an op name built at run time leaves no string to read: such calls are not judged[/]")


def print_predictions(check: ModuleCheck) -> None:
    """A line per release checked, with the calls that do not plainly fit; then from where it loads."""
    style = {Predicted.LOADS: "green", Predicted.LOAD_FAILED: "red", Predicted.UNKNOWN: "yellow"}
    for p in check.predictions:
        console.print(f"   {p.runtime:<8} [{style[p.outcome]}]{p.outcome.value:<12}[/] {escape(p.symbol_summary)}")
        for op in p.ops:
            if op.fit is not Fit.FITS:
                mark = "red" if op.fit is Fit.FAILS else "yellow"
                console.print(f"            [{mark}]call {op.fit.value}[/] {escape(op.call.shown)}: {escape(op.why)}")
    if check.loads_from:
        console.print(f"predicted to load on {check.loads_from} and every newer release checked")
    elif not check.loads:
        console.print("[red]predicted to load on none of the releases checked[/]")


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
    audit = audit_guards(manifest, release, args.min_target, include, probe=not args.no_probe)
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
