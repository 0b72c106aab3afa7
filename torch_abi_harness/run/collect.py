"""Files a cell left behind (probe JSON, junit XML) and its exit code -> a status with a reason."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from torch_abi_harness.core.status import Status
from torch_abi_harness.execute.api import CellExecution
from torch_abi_harness.results.cases import CaseCounts, DocDifference, ModuleLoad, doc_differences, module_loads
from torch_abi_harness.static.symbols import demangle
from torch_abi_harness.static.testing_names import import_hint

PYTEST_EXIT = {
    2: "interrupted (often a test module failed to import)",
    3: "internal error",
    4: "usage error",
    5: "no tests were collected",
}
LOAD_FAILED_EXIT = 10  # harness_cellprobe.LOAD_FAILED_EXIT
SKIP_EXIT = 11  # harness_cellprobe.SKIP_EXIT


@dataclasses.dataclass(frozen=True)
class JunitReport:
    counts: CaseCounts
    failing: tuple[str, ...]
    seconds: float


# Where a module's import name is not its distribution's, for the fix a missing one suggests.
DISTRIBUTION_OF = {
    "PIL": "pillow",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "cv2": "opencv-python",
    "dateutil": "python-dateutil",
    "sklearn": "scikit-learn",
    "yaml": "PyYAML",
}


@dataclasses.dataclass(frozen=True)
class ImportFailure:
    """What the suite could not import as the probe took it from the exception (never from pytest's output)."""

    type: str  # ModuleNotFoundError
    message: str  # No module named 'expecttest'
    file: str | None = None  # the line that raised it: relative to the suite, or to the path entry holding it
    line: int | None = None
    suite_file: str | None = None  # the suite's own line that led there, when it is another
    suite_line: int | None = None
    missing: str | None = None  # a top-level module nothing on the runtime's path provides
    in_suite: bool = False  # ...which the suite's own directory holds (a helper module, not a distribution)

    @classmethod
    def of(cls, data: object) -> ImportFailure | None:
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            return None
        return cls(
            data["type"],
            _typed(data, "message", str) or "",
            _typed(data, "file", str),
            _typed(data, "line", int),
            _typed(data, "suite_file", str),
            _typed(data, "suite_line", int),
            _typed(data, "missing", str),
            _typed(data, "in_suite", bool) or False,
        )

    def reason(self) -> str:
        """`collection failed: <the error> (<where>)`, and for a module the runtime lacks, the fix; for a
        torch.testing name it lacks, the release that first has it."""
        text = f"collection failed: {self.type}: {self.message}"
        where = [f"{f}, line {n}" for f, n in ((self.file, self.line), (self.suite_file, self.suite_line)) if f]
        if where:
            text += f" ({where[0]}" + (f", imported from {where[1]}" if len(where) > 1 else "") + ")"
        hint = import_hint(self.message) if self.type == "ImportError" else None
        if hint:
            text += f"; {hint}"
        return text + (f"; {missing_fix([self.missing], self.in_suite)}" if self.missing else "")


def missing_fix(modules: Sequence[str], in_suite: bool = False) -> str:
    """What to do about top-level modules the runtime's path does not provide."""
    names = ", ".join(map(repr, modules))
    if in_suite:
        return (
            f"{names} is the suite's own module: cells run pytest with --import-mode=importlib, which does not "
            "put the test directory on sys.path (make the tests a package, or import it through one)"
        )
    distributions = ", ".join(DISTRIBUTION_OF.get(m, m) for m in modules)
    return (
        f"the runtime has no {names}: declare what the suite needs in extension.yaml (test_requires: [{distributions}])"
    )


T = TypeVar("T")


def _typed(data: dict[str, Any], key: str, kind: type[T] | tuple[type, ...]) -> Any:
    """data[key] if it has the type the probe writes (a cell may have written anything there), else None."""
    value = data.get(key)
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        return None
    return value if isinstance(value, kind) else None


@dataclasses.dataclass(frozen=True)
class ProbeRecord:
    """What harness_cellprobe recorded in the cell, read once; a field of the wrong type reads as absent."""

    phase: str = "start-up"  # start-up, import_torch, skipped, load, load_failed, collect, tests, finished
    pid: int | None = None  # the pytest process, as the host sees it
    plugin_started: float | None = None  # time.time() when the plugin started
    import_torch_s: float | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    cuda_available: bool | None = None
    skip_reason: str | None = None
    load_ok: bool | None = None
    load_s: float | None = None
    error_chain: tuple[str, ...] = ()
    missing_symbol: str | None = None
    missing_version: str | None = None
    module_file: str | None = None
    current_test: str | None = None
    exitstatus: int | None = None
    doc_differences: tuple[DocDifference, ...] = ()
    collect_error: ImportFailure | None = None  # the first module or conftest that did not import
    missing_modules: tuple[tuple[str, str], ...] = ()  # (test, top-level module) for tests that failed on one
    modules: tuple[ModuleLoad, ...] = ()  # a published wheel's derived suite: how each extension module loaded

    @classmethod
    def of(cls, data: dict[str, Any]) -> ProbeRecord:
        chain = data.get("error_chain")
        number = (int, float)
        return cls(
            phase=_typed(data, "phase", str) or "start-up",
            pid=_typed(data, "pid", int),
            plugin_started=_typed(data, "plugin_started", number),
            import_torch_s=_typed(data, "import_torch_s", number),
            torch_version=_typed(data, "torch_version", str),
            torch_cuda=_typed(data, "torch_cuda", str),
            cuda_available=_typed(data, "cuda_available", bool),
            skip_reason=_typed(data, "skip_reason", str),
            load_ok=_typed(data, "load_ok", bool),
            load_s=_typed(data, "load_s", number),
            error_chain=tuple(str(e) for e in chain) if isinstance(chain, list) else (),
            missing_symbol=_typed(data, "missing_symbol", str),
            missing_version=_typed(data, "missing_version", str),
            module_file=_typed(data, "module_file", str),
            current_test=_typed(data, "current_test", str),
            exitstatus=_typed(data, "exitstatus", int),
            doc_differences=doc_differences(data.get("doc_differences")),
            collect_error=ImportFailure.of(data.get("collect_error")),
            missing_modules=_missing_modules(data.get("missing_modules")),
            modules=module_loads(data.get("modules")),
        )

    @classmethod
    def read(cls, path: Path) -> ProbeRecord | None:
        """The record in path; None when the cell left none (or not JSON, or not a regular file)."""
        raw = read_untrusted(path)
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        return cls.of(data) if isinstance(data, dict) else None


def _missing_modules(entries: object) -> tuple[tuple[str, str], ...]:
    found = []
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("test"), str) and isinstance(entry.get("module"), str):
            found.append((entry["test"], entry["module"]))
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class CellOutcome:
    status: Status
    reason: str
    tests: CaseCounts
    failing: tuple[str, ...] = ()
    missing_symbol: str | None = None
    probe: ProbeRecord = ProbeRecord()
    tests_seconds: float | None = None


def read_untrusted(path: Path, limit: int = 64 * 2**20) -> bytes | None:
    """A file a cell wrote, read only if it is a regular file (no symlink, FIFO or device) and not huge:
    the extension under test may have planted anything under that name."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return handle.read(limit)


def read_junit(path: Path) -> JunitReport | None:
    data = read_untrusted(path)
    if data is None:
        return None
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    passed = failed = skipped = errors = 0
    failing: list[str] = []
    seconds = 0.0
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        seconds += float(suite.get("time", 0) or 0)
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
            if case.find("failure") is not None:
                failed += 1
                failing.append(name)
            elif case.find("error") is not None:
                errors += 1
                failing.append(name)
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    return JunitReport(CaseCounts(passed, failed, skipped, errors), tuple(failing), seconds)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Phases of the probe before the extension is imported: a crash or a hang there is the runtime's
# (a damaged env, an overloaded machine), never evidence about the extension.
BEFORE_LOAD = {"start-up", "import_torch"}


def _where(probe: ProbeRecord) -> str:
    if probe.current_test and probe.phase == "tests":
        return f"in test {probe.current_test}"
    return f"during {probe.phase.replace('_', ' ')}"


def missing_only(missing: tuple[tuple[str, str], ...], failures: int) -> str | None:
    """When every failing test failed on a module the runtime lacks, why (the suite's environment, not the
    extension, is what failed); None otherwise."""
    tests = {test for test, _ in missing}
    if not failures or len(tests) < failures:
        return None
    modules = sorted({module for _, module in missing})
    return f"{len(tests)} test(s) failed only on a missing module (first: {missing[0][0]}); {missing_fix(modules)}"


def classify(execution: CellExecution, timeout: float) -> CellOutcome:
    record = ProbeRecord.read(execution.probe)
    probe = record or ProbeRecord()
    junit = read_junit(execution.junit)
    counts = junit.counts if junit else CaseCounts()
    failing = junit.failing if junit else ()
    tests_seconds = junit.seconds if junit else None

    def outcome(status: Status, reason: str, **extra: Any) -> CellOutcome:
        return CellOutcome(status, reason, counts, failing, probe=probe, tests_seconds=tests_seconds, **extra)

    if execution.decided:
        return outcome(*execution.decided)
    before_load = probe.phase in BEFORE_LOAD
    if execution.timed_out:
        if before_load:
            return outcome(
                Status.ERROR,
                f"no result after {timeout:.0f} s, killed {_where(probe)}, before the extension was loaded",
            )
        return outcome(Status.TIMEOUT, f"no result after {timeout:.0f} s, killed {_where(probe)}")
    code = execution.returncode
    assert code is not None
    if code < 0:
        if before_load:
            return outcome(
                Status.ERROR,
                f"the runtime crashed ({_signal_name(-code)}) {_where(probe)}, before the extension was loaded: "
                "the torch environment is suspect, not the extension",
            )
        return outcome(Status.CRASHED, f"killed by {_signal_name(-code)} {_where(probe)}")
    if record is None:
        return outcome(Status.ERROR, f"the cell exited {code} before the harness probe ran; see stderr.log")
    if probe.phase == "skipped" and code == SKIP_EXIT:
        return outcome(Status.SKIPPED, probe.skip_reason or "skipped")
    if probe.load_ok is False:
        symbol = probe.missing_symbol
        version = probe.missing_version
        if symbol:
            readable = demangle([symbol]).get(symbol, symbol)
            reason = f"undefined symbol: {readable}" + (f" ({symbol})" if readable != symbol else "")
        elif version:
            reason = f"version {version} not found"
        else:
            reason = (probe.error_chain or ("unknown load error",))[-1]
        return outcome(Status.LOAD_FAILED, reason, missing_symbol=symbol)
    unloaded = [m for m in probe.modules if m.error is not None]
    if unloaded and code in (0, 1):  # a published wheel's derived suite: one module's load failure fails the cell
        first = unloaded[0]
        if first.missing_symbol:
            why = f"undefined symbol: {first.missing_symbol}"
        elif first.missing_library:
            why = f"{first.missing_library}: cannot open shared object file"
        else:
            why = (first.error or "").splitlines()[0][:200]
        return outcome(
            Status.LOAD_FAILED,
            f"{len(unloaded)} of {len(probe.modules)} modules did not load: {first.name}: {why}",
            missing_symbol=first.missing_symbol,
        )
    module_file = probe.module_file
    if module_file and not Path(module_file).resolve().is_relative_to(execution.view.site.resolve()):
        return outcome(Status.ERROR, f"the tests imported the extension from {module_file}, not from the built wheel")
    if code not in (0, 1) and probe.collect_error is not None:
        return outcome(Status.ERROR, probe.collect_error.reason())
    if junit is None:
        return outcome(Status.ERROR, f"pytest exited {code} without writing its junit report")
    if code == 0:
        if counts.passed:
            return outcome(
                Status.PASS, f"{counts.passed} passed" + (f", {counts.skipped} skipped" if counts.skipped else "")
            )
        return outcome(Status.SKIPPED, f"all {counts.skipped} tests skipped")
    missing = missing_only(probe.missing_modules, counts.failed + counts.errors)
    if code == 1 and missing:
        return outcome(Status.ERROR, missing)
    if code == 1 and (counts.failed or counts.errors):
        shown = ", ".join(failing[:3]) + (f" (+{len(failing) - 3} more)" if len(failing) > 3 else "")
        return outcome(Status.TEST_FAILED, f"{counts.failed + counts.errors} of {counts.total} tests failed: {shown}")
    return outcome(Status.ERROR, f"pytest exit {code}: {PYTEST_EXIT.get(code, 'unexpected exit code')}")
