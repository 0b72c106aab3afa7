"""What the header-only wrappers and public macros of the stable headers import at a target.

A declaration the preprocessor hides cannot show what an inline wrapper or a macro
calls. So one probe per target includes every public stable header, expands each
public macro in a function of its own (where the macro is defined at that target),
and is compiled to an object with every inline function kept
(``-fkeep-inline-functions -ffunction-sections``). Each function's undefined
references (read from its own relocation section) are checked against what the
target's release exports. A wrapper or macro that imports a C shim the target
release lacks, or a macro that does not compile at a target that defines it, is a
finding.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.static.header_compiles import HeaderCompiler
from torch_abi_harness.static.symbols import STABLE_C_NAME, demangle
from torch_abi_harness.static.visibility import public_headers

MACRO_FUNCTION = "harness_macro_"
PROBE_LIBRARY = "harness_probe_lib"


@dataclasses.dataclass(frozen=True)
class MacroProbe:
    """A public macro and one use of it, as an extension would write it."""

    name: str
    use: str  # a function body, or namespace-scope code for registration macros
    scope: bool = False  # use stands at namespace scope (its functions carry its library's name, library())
    support: str = ""  # definitions the use needs, emitted before it inside the #ifdef
    cuda: bool = False  # usable only with the CUDA headers (its use names CUDA runtime types): probed there only

    def library(self) -> str:
        """The library name a registration macro's use is given: its generated functions carry it, so their
        imports are the macro's."""
        return f"{PROBE_LIBRARY}_{self.name.lower()}_"

    def source(self) -> str:
        if self.scope:
            body = self.use.replace(PROBE_LIBRARY, self.library())
        else:
            body = f"void {MACRO_FUNCTION}{self.name}() {{\n  {self.use}\n}}"
        return f"#ifdef {self.name}\n{self.support}{body}\n#endif\n"


class Side(enum.StrEnum):
    """Which build configuration a finding shows in: every build (cpu), or only one with USE_CUDA (cuda)."""

    CPU = "cpu"
    CUDA = "cuda"


PRELUDE = "#include <cstdint>\nstatic inline int32_t harness_status() { return 0; }\n"
# The CUDA macros' users include the CUDA runtime API themselves (torch/csrc/stable/macros.h says so).
CUDA_PRELUDE = (
    "#include <cuda_runtime_api.h>\nstatic inline cudaError_t harness_cuda_status() { return cudaSuccess; }\n"
)
BOXED = "static void harness_boxed(StableIValue*, uint64_t, uint64_t) {}\n"
MACRO_PROBES = (
    MacroProbe("STABLE_TORCH_ERROR_CODE_CHECK", "STABLE_TORCH_ERROR_CODE_CHECK(harness_status());"),
    MacroProbe("TORCH_ERROR_CODE_CHECK", "TORCH_ERROR_CODE_CHECK(harness_status());"),
    MacroProbe("STD_TORCH_CHECK", 'volatile bool ok = true; STD_TORCH_CHECK(ok, "harness probe");'),
    MacroProbe("AOTI_TORCH_CHECK", 'volatile bool ok = true; AOTI_TORCH_CHECK(ok, "harness probe");'),
    MacroProbe("AOTI_TORCH_WARN", 'AOTI_TORCH_WARN("harness probe");'),
    MacroProbe(
        "STABLE_TORCH_LIBRARY",
        f'STABLE_TORCH_LIBRARY({PROBE_LIBRARY}, m) {{ m.def("probe(Tensor x) -> Tensor"); }}',
        scope=True,
    ),
    MacroProbe(
        "STABLE_TORCH_LIBRARY_FRAGMENT",
        f'STABLE_TORCH_LIBRARY_FRAGMENT({PROBE_LIBRARY}, m) {{ m.def("probe2(Tensor x) -> Tensor"); }}',
        scope=True,
    ),
    MacroProbe(
        "STABLE_TORCH_LIBRARY_IMPL",
        f'STABLE_TORCH_LIBRARY_IMPL({PROBE_LIBRARY}, CPU, m) {{ m.impl("probe", &harness_boxed); }}',
        scope=True,
        support=BOXED,
    ),
    MacroProbe("STD_CUDA_CHECK", "STD_CUDA_CHECK(harness_cuda_status());", cuda=True),
    MacroProbe("STD_CUDA_KERNEL_LAUNCH_CHECK", "STD_CUDA_KERNEL_LAUNCH_CHECK();", cuda=True),
)


@dataclasses.dataclass(frozen=True)
class HeaderFinding:
    """A wrapper or macro that a build at target cannot use safely."""

    kind: str  # "wrapper", "macro" or "headers" (the probe itself does not compile)
    name: str
    target: ApiLevel
    missing: tuple[str, ...] = ()  # C shims it imports that the target's release does not export
    error: str | None = None  # the compiler's first error, when it does not compile
    side: Side = Side.CPU  # CUDA: found only when compiled with USE_CUDA and the CUDA headers
    first_exported: tuple[str | None, ...] = ()  # per missing shim, the release that first exports it (if known)

    def describe(self) -> str:
        side = "CUDA side: " if self.side is Side.CUDA else ""
        if self.error is not None:
            return (
                f"{side}{self.kind} {self.name}: defined at target {self.target} but does not compile there: "
                f"{self.error}"
            )
        if self.kind == "macro":
            return f"{side}{self.name} expands to {self._calls()}: not in {self.target}"
        return f"{side}{self.kind} {self.name} at target {self.target} makes {self._calls()}: not in {self.target}"

    def key(self) -> tuple[str, str, tuple[str, ...], bool]:
        """What makes two sides' findings the same (the error's text differs with the lines before it)."""
        return (self.kind, self.name, self.missing, self.error is None)

    def _calls(self) -> str:
        """Each missing shim with its first export: 'a call of torch_foo, first exported in 2.13'."""
        firsts = self.first_exported or (None,) * len(self.missing)
        said = [
            (name, f"first exported in {first}" if first else "exported by no release")
            for name, first in zip(self.missing, firsts, strict=True)
        ]
        if len(said) == 1:
            return f"a call of {said[0][0]}, {said[0][1]}"
        return "calls of " + ", ".join(f"{name} ({first})" for name, first in said)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "target": str(self.target),
            "side": self.side.value,
            "missing": list(self.missing),
            "first_exported": list(self.first_exported),
            "error": self.error,
        }


def macro_probe_source(headers: Sequence[str], macros: Sequence[MacroProbe], *, cuda: bool = False) -> str:
    """One translation unit: every header included, then a use of each macro (its function named for it); with
    cuda, the CUDA runtime API first, as a CUDA extension includes it, and the CUDA macros' uses too."""
    includes = "".join(f"#include <{h}>\n" for h in headers)
    prelude = (CUDA_PRELUDE if cuda else "") + PRELUDE
    return includes + prelude + "\n".join(m.source() for m in macros if cuda or not m.cuda)


def macro_lines(source: str, macros: Sequence[MacroProbe]) -> dict[str, range]:
    """Which lines of the probe each macro's use occupies (1-based), to read compile errors by."""
    lines = source.splitlines()
    spans: dict[str, range] = {}
    for macro in macros:
        if f"#ifdef {macro.name}" not in lines:
            continue  # a CUDA macro, left out of a CPU probe
        start = lines.index(f"#ifdef {macro.name}") + 1
        end = next(i for i in range(start, len(lines)) if lines[i] == "#endif") + 1
        spans[macro.name] = range(start, end + 1)
    return spans


def compile_probe(
    side: ProbeSide, source: str, compiler: HeaderCompiler
) -> tuple[dict[str, frozenset[str]] | None, str]:
    """The probe compiled to an object with every inline function kept: per function, the symbols it imports
    (None when it does not compile), and the compiler's errors."""
    flags = [
        "-O0",
        "-w",
        "-std=c++17",
        "-fPIC",
        "-fkeep-inline-functions",
        "-fkeep-static-functions",
        "-ffunction-sections",
        f"-DTORCH_TARGET_VERSION={side.target.hex}ULL",
    ]
    includes = [side.include]
    if side.cuda_include is not None:
        flags.append("-DUSE_CUDA")
        includes.append(side.cuda_include)
    return compiler.object_imports(source, flags, includes, side.workdir, f"header-probe-{side.target}.cpp")


ERROR_LINE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):\d+: (?P<kind>error|note): (?P<message>.*)$", re.M)


def macros_failing(errors: str, probe_name: str, spans: dict[str, range]) -> dict[str, str]:
    """The macros whose use an error (or a note of an error: "in expansion of macro") points into."""
    failed: dict[str, str] = {}
    last_error = ""
    for line in ERROR_LINE.finditer(errors):
        if line["kind"] == "error":
            last_error = f"{Path(line['file']).name}:{line['line']}: {line['message'].strip()}"
        if not line["file"].endswith(probe_name):
            continue
        for name, span in spans.items():
            if int(line["line"]) in span:
                failed.setdefault(name, last_error)
    return failed


def probe_headers(
    include: Path,
    target: ApiLevel,
    exports: frozenset[str],
    workdir: Path,
    cuda_include: Path | None = None,
    first_exported: Mapping[str, str | None] | None = None,
    compiler: HeaderCompiler | None = None,
) -> list[HeaderFinding]:
    """Compile the wrappers and macros of include's public stable headers at target; report what fails. With
        cuda_include, compiled a second time as a CUDA wheel's extensions are (USE_CUDA, the CUDA headers): what
        only that compile finds is the CUDA side. first_exported names the release that first exports a shim; compiler
    keeps the compiles' answers (HeaderCompiler with a cache)."""
    firsts = first_exported or {}
    compiler = compiler or HeaderCompiler()
    cpu = _probe_side(ProbeSide(include, target, exports, workdir, None), MACRO_PROBES, firsts, compiler)
    if cuda_include is None:
        return cpu
    seen = {f.key() for f in cpu}
    cuda = _probe_side(ProbeSide(include, target, exports, workdir, cuda_include), MACRO_PROBES, firsts, compiler)
    return cpu + [dataclasses.replace(f, side=Side.CUDA) for f in cuda if f.key() not in seen]


@dataclasses.dataclass(frozen=True)
class ProbeSide:
    """One compile of the probe: the headers, the target, its release's exports, and the CUDA headers if any."""

    include: Path
    target: ApiLevel
    exports: frozenset[str]
    workdir: Path
    cuda_include: Path | None


def _probe_side(
    side: ProbeSide, macros: Sequence[MacroProbe], firsts: Mapping[str, str | None], compiler: HeaderCompiler
) -> list[HeaderFinding]:
    cuda = side.cuda_include is not None
    # torch/headeronly/cuda is device code (atomicCAS...) only nvcc compiles; it declares no C shim.
    headers = public_headers(side.include, cuda=cuda, cuda_runtime=False)
    findings: list[HeaderFinding] = []
    remaining = [m for m in macros if cuda or not m.cuda]
    target = side.target
    while True:
        source = macro_probe_source(headers, remaining, cuda=cuda)
        by_function, errors = compile_probe(side, source, compiler)
        if by_function is not None:
            break
        failed = macros_failing(errors, f"header-probe-{target}.cpp", macro_lines(source, remaining))
        if not failed:
            first = next((e for e in ERROR_LINE.finditer(errors) if e["kind"] == "error"), None)
            message = f"{first['file']}:{first['line']}: {first['message']}" if first else errors.strip()[-300:]
            return [*findings, HeaderFinding("headers", "the public stable headers", target, error=message)]
        findings += [HeaderFinding("macro", name, target, error=message) for name, message in sorted(failed.items())]
        remaining = [m for m in remaining if m.name not in failed]
    readable = demangle(sorted(by_function))
    for function, undefined in sorted(by_function.items()):
        missing = tuple(sorted(n for n in undefined if STABLE_C_NAME.match(n) and n not in side.exports))
        if missing:
            kind, name = attribute(readable.get(function, function), remaining)
            findings.append(
                HeaderFinding(kind, name, target, missing, first_exported=tuple(firsts.get(n) for n in missing))
            )
    return findings


def attribute(function: str, macros: Sequence[MacroProbe]) -> tuple[str, str]:
    """Whose imports a function of the probe carries: a macro's (its use's function, or a function its
    registration use generated, named with its library), else the header-only wrapper's own."""
    if function.startswith(MACRO_FUNCTION):
        return "macro", function[len(MACRO_FUNCTION) :].split("(")[0]
    libraries = sorted((m for m in macros if m.scope and m.library() in function), key=lambda m: -len(m.library()))
    if libraries:
        return "macro", libraries[0].name
    return "wrapper", function
