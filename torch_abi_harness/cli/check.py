"""`check`: where an artifact (a shared object, a wheel, a published wheel by requirement) loads, predicted from its
ELF symbols alone (the analysis is torch_abi_harness/static/check.py; this parses arguments and prints). It starts in
a fraction of a second: it imports nothing of the run, the gate or the renderers."""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from rich.markup import escape

from torch_abi_harness.cli.args import Command, cpython_version, existing_file, listing_sources, torch_variant
from torch_abi_harness.cli.console import console, emit_json
from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.core.errors import BadInputError, ExitCode
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.artifact import fits_which_python
from torch_abi_harness.static.check import ArtifactCheck, ModuleCheck, check_artifact
from torch_abi_harness.static.op_calls import Fit
from torch_abi_harness.static.predict import Predicted


def add_check(command: Command) -> None:
    check = command("check", help="predict from ELF symbols alone where an artifact (.so or wheel) loads")
    check.add_argument(
        "artifact",
        type=artifact_or_requirement,
        help="a shared object or a wheel; or a published wheel by requirement ('torchao==0.18.0'), resolved from "
        f"the configured package sources for --python (default: {DEFAULT_PYTHON}) on this platform, downloaded once "
        "(a marker is evaluated for that Python: false, nothing is checked, exit 2; extras or a URL: exit 2)",
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
    sources = check.add_argument_group(
        "package sources of a requirement",
        "added to pip's configuration (its index-url, extra-index-url, find-links and cert) and the UV_INDEX_URL, "
        "UV_EXTRA_INDEX_URL and UV_FIND_LINKS variables; HTTPS is checked against PIP_CERT, pip's cert, "
        "REQUESTS_CA_BUNDLE or SSL_CERT_FILE, else the system's store",
    )
    sources.add_argument(
        "--index-url", default=None, metavar="URL", help="the index instead of pip's (default: PyPI, as pip's)"
    )
    listing_sources(sources, "to resolve it from (repeatable)")
    check.set_defaults(handler=cmd_check)


def requirement_sources(args: argparse.Namespace) -> Sources:
    """The sources the command line adds for a requirement; given with a file, they are refused (exit 2): a file
    is checked as it is, and a source that is never read would be a silent no-op."""
    given = [f for f, v in (("--index-url", args.index_url), ("--extra-index-url", args.extra_index_url),
                            ("--find-links", args.find_links)) if v]  # fmt: skip
    if given and not isinstance(args.artifact, Requirement):
        raise BadInputError(
            f"{' and '.join(given)}: package sources are read only for a requirement ('torchao==0.18.0'), and "
            f"{args.artifact} is a file, checked as it is: drop {given[0]}"
        )
    return Sources(
        index_url=args.index_url, extra_index_urls=tuple(args.extra_index_url), find_links=tuple(args.find_links)
    )


def artifact_or_requirement(text: str) -> Path | Requirement:
    """check's ARTIFACT: an existing file, else a requirement naming a version (a published wheel)."""
    if Path(text).exists() or "/" in text or not any(op in text for op in "=<>~"):
        return existing_file(text)
    try:
        return Requirement(text)
    except InvalidRequirement:
        return existing_file(text)


def pinned_requirement(requirement: Requirement, python: str) -> str:
    """check REQUIREMENT as the matrix takes a published wheel: a URL or extras refused (exit 2, in the matrix's
    words); a marker evaluated for the CPython checked on this platform, and when false, nothing to check (exit 2,
    saying so). The name and specifier that are resolved."""
    # Only a requirement needs these: not imported otherwise.
    from torch_abi_harness.config.matrix import PIN_ONLY, beyond_a_pin
    from torch_abi_harness.provision.published import marker_holds

    refused = beyond_a_pin(requirement, marker=False)
    if refused:
        raise BadInputError(f"{str(requirement)!r}: {' and '.join(refused)}: {PIN_ONLY}")
    if not marker_holds(requirement, python):
        raise BadInputError(
            f"{str(requirement)!r}: its marker `{requirement.marker}` is false for CPython {python} on "
            f"{sys.platform} {platform.machine()}: nothing to check (--python names the CPython it is checked for)"
        )
    return f"{requirement.name}{requirement.specifier}"


def cmd_check(args: argparse.Namespace) -> int:
    sources = requirement_sources(args)
    if isinstance(args.artifact, Requirement):
        # Only a requirement needs the package sources and the index client (http, html): not imported otherwise.
        from torch_abi_harness.provision.envs import default_cache_dir
        from torch_abi_harness.provision.published import resolve
        from torch_abi_harness.provision.sources import resolve_sources

        python = args.python or DEFAULT_PYTHON
        requirement = pinned_requirement(args.artifact, python)
        wheel = resolve(requirement, python, resolve_sources(sources), default_cache_dir())
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
    print_build_torch(check)
    print_needs(check.whole, check.built_with, args.variant, args.python, together)
    print_predictions(check.whole)
    if several:
        for module in check.modules:
            print_needs(module, check.built_with, args.variant, args.python, f"module {module.name}")
            print_predictions(module)
        console.print(f"[bold]modules:[/] {escape(check.summary)}")
    return code


def print_build_torch(check: ArtifactCheck) -> None:
    """A wheel's build torch as it says it (the census's line), and where its declared torch range admits releases
    it cannot load on."""
    if check.build_torch is None:
        return
    console.print(f"build torch: {escape(check.build_torch.describe())}", soft_wrap=True)
    console.print(f"declared torch requirement: {escape(check.torch_pin or 'none')}", soft_wrap=True)
    if check.declared_beyond:
        console.print(
            f"[yellow]its metadata {escape(check.declared_beyond)}[/]: it admits releases it cannot load on",
            soft_wrap=True,
        )


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
    if check.driver_libraries:
        names = ", ".join(check.driver_libraries)
        console.print(f"   needs the NVIDIA driver: {escape(names)} (present only on a GPU machine)", soft_wrap=True)
    for name in check.host_libraries:
        usual = host_libraries.usual_package(name) or "no package known here"
        console.print(
            f"   needs from the host system: {escape(name)} ({escape(usual)}): neither torch, CUDA nor its wheel "
            "provides it; a runtime whose system lacks it cannot load it",
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
        console.print(nowhere(check))


def nowhere(check: ModuleCheck) -> str:
    """The last line where it is predicted to load on no release checked: 'none' only where some answer is no."""
    unknown = [p.runtime for p in check.predictions if p.outcome is Predicted.UNKNOWN]
    symbols = f"its {len(check.imports.unstable)} unstable C++ symbol(s)"
    given = check.loads_from_where(given_host=True)
    if given:
        return (
            f"[yellow]predicted to load on none of the releases checked without its host libraries[/] "
            f"({', '.join(check.host_libraries)}); with them, on {given} and every newer release checked"
        )
    if len(unknown) == len(check.predictions):
        return f"[yellow]unknown on every release checked[/]: only a runtime's full exports can judge {symbols}"
    if unknown:
        return f"[red]predicted to load on none of the releases checked[/] (unknown on {', '.join(unknown)})"
    return "[red]predicted to load on none of the releases checked[/]"
