"""Files a cell left behind (probe JSON, junit XML) and its exit code -> a status with a reason."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from torch_abi_harness.core.status import Status
from torch_abi_harness.execute.api import CellExecution
from torch_abi_harness.results.cases import CaseCounts, DocDifference, ModuleLoad, doc_differences, module_loads
from torch_abi_harness.run import disk
from torch_abi_harness.run.missing import missing_fix
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
        return text + (f"; {missing_fix([self.missing], in_suite=self.in_suite)}" if self.missing else "")


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
        """The record in path; None when the cell left none (or not JSON, or not a regular file). Where path is
        missing, the probe's temp file beside it: a cell killed between unlinking its old record and renaming the
        new one into place left that one whole there. The test running is the `.tests` companion's last line."""
        raw = read_untrusted(path)
        if raw is None:
            raw = read_untrusted(path.with_name(path.name + ".tmp"))
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return None
        record = cls.of(data)
        running = last_line_untrusted(path.with_name(path.name + ".tests")) if record.phase == "tests" else None
        return dataclasses.replace(record, current_test=running) if running else record


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


def read_untrusted(path: Path, limit: int = 64 * 2**20, *, tail: bool = False) -> bytes | None:
    """A file a cell wrote, read only if it is a regular file (no symlink, FIFO or device) and not huge:
    the extension under test may have planted anything under that name. tail=True: its last `limit` bytes,
    whatever its size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or (info.st_size > limit and not tail):
            return None
        handle.seek(max(0, info.st_size - limit))
        return handle.read(limit)


def last_line_untrusted(path: Path, tail: int = 4096) -> str | None:
    """The last whole line of a file a cell wrote (read from its last `tail` bytes); None if it has none."""
    whole = (read_untrusted(path, tail, tail=True) or b"").split(b"\n")[:-1]  # after the last newline: cut short
    return whole[-1].decode("utf-8", "replace") if whole and whole[-1] else None


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


@dataclasses.dataclass(frozen=True)
class Seen:
    """What a cell left, read once, as classify's rules look at it."""

    execution: CellExecution
    timeout: float
    record: ProbeRecord | None  # None: the probe wrote nothing (it never ran)
    junit: JunitReport | None

    @property
    def probe(self) -> ProbeRecord:
        return self.record or ProbeRecord()

    @property
    def counts(self) -> CaseCounts:
        return self.junit.counts if self.junit else CaseCounts()

    @property
    def code(self) -> int:
        """Its exit code: asked only once it neither timed out nor was decided, so it exited."""
        code = self.execution.returncode
        assert code is not None
        return code

    @property
    def before_load(self) -> bool:
        return self.probe.phase in BEFORE_LOAD


@dataclasses.dataclass(frozen=True)
class Found:
    """A rule's answer: the cell's status and why."""

    status: Status
    reason: str
    missing_symbol: str | None = None


Rule = Callable[[Seen], Found | None]


def decided(seen: Seen) -> Found | None:
    """The executor decided the cell itself (its process could not start, the run was stopped)."""
    return Found(*seen.execution.decided) if seen.execution.decided else None


def bound_reached(seen: Seen) -> Found | None:
    """The cell reached a bound of the harness's (its memory, its process count): the harness ended it, so it
    says nothing about the extension's compatibility."""
    return Found(Status.ERROR, seen.execution.bound) if seen.execution.bound else None


def disk_full(seen: Seen) -> Found | None:
    """A cell that failed while a disk it needs was full: ERROR, the machine's fault, never broken.

    Caught: ENOSPC's words in the cell's stdout, stderr or junit report (a neighbour that filled the disk
    and freed it again before the cell ended leaves only that), or less than disk.LOW_DISK_BYTES free right
    after the cell on the disk holding its directory, its env or its build. Not caught: a full disk that
    the cell's code met and hid (caught the OSError, printed nothing) and that was freed before the cell
    ended. A suite may print those words itself: its failures then read ERROR, which still fails the run
    (exit 3) and never passes a cell."""
    execution = seen.execution
    if execution.decided or (not execution.timed_out and execution.returncode in (0, SKIP_EXIT)):
        return None
    disks = disk.disks_of(execution)
    measured = [(path, free) for path in disks if (free := disk.free_bytes(path)) is not None]
    full = [(path, free) for path, free in measured if free < disk.LOW_DISK_BYTES]
    said = disk.says_no_space((execution.stdout, execution.stderr, execution.junit))
    if not full and not said:
        return None
    path, free = full[0] if full else (disks[0], disk.free_bytes(disks[0]))
    after = f"{free / 2**20:.0f} MB free after" if free is not None else "free space unknown after"
    evidence = "; its output says 'No space left on device'" if said else ""
    return Found(
        Status.ERROR,
        f"the disk holding {path} was full while the cell ran ({after}{evidence}): a fault of the machine, "
        "not evidence about the extension",
    )


def timed_out(seen: Seen) -> Found | None:
    """Killed at its timeout: the extension's hang, or the runtime's when it had not reached the extension."""
    if not seen.execution.timed_out:
        return None
    killed = f"no result after {seen.timeout:.0f} s, killed {_where(seen.probe)}"
    if seen.before_load:
        return Found(Status.ERROR, f"{killed}, before the extension was loaded")
    return Found(Status.TIMEOUT, killed)


def crashed(seen: Seen) -> Found | None:
    """Killed by a signal: a crash of the extension's, or the runtime's when it had not reached the extension."""
    if seen.code >= 0:
        return None
    name = _signal_name(-seen.code)
    if seen.before_load:
        return Found(
            Status.ERROR,
            f"the runtime crashed ({name}) {_where(seen.probe)}, before the extension was loaded: "
            "the torch environment is suspect, not the extension",
        )
    return Found(Status.CRASHED, f"killed by {name} {_where(seen.probe)}")


def no_probe(seen: Seen) -> Found | None:
    if seen.record is not None:
        return None
    return Found(Status.ERROR, f"the cell exited {seen.code} before the harness probe ran; see stderr.log")


def probe_skipped(seen: Seen) -> Found | None:
    """The probe skipped the cell (a CUDA runtime without a GPU)."""
    if seen.probe.phase == "skipped" and seen.code == SKIP_EXIT:
        return Found(Status.SKIPPED, seen.probe.skip_reason or "skipped")
    return None


def load_failed(seen: Seen) -> Found | None:
    """The extension did not load: the symbol or version it lacked, else the last error of the chain."""
    probe = seen.probe
    if probe.load_ok is not False:
        return None
    symbol, version = probe.missing_symbol, probe.missing_version
    if symbol:
        readable = demangle([symbol]).get(symbol, symbol)
        reason = f"undefined symbol: {readable}" + (f" ({symbol})" if readable != symbol else "")
    elif version:
        reason = f"version {version} not found"
    else:
        reason = (probe.error_chain or ("unknown load error",))[-1]
    return Found(Status.LOAD_FAILED, reason, symbol)


def module_unloaded(seen: Seen) -> Found | None:
    """A published wheel's derived suite: one module's load failure fails the cell."""
    unloaded = [m for m in seen.probe.modules if m.error is not None]
    if not unloaded or seen.code not in (0, 1):
        return None
    first = unloaded[0]
    if first.missing_symbol:
        why = f"undefined symbol: {first.missing_symbol}"
    elif first.missing_library:
        why = f"{first.missing_library}: cannot open shared object file"
    else:
        why = (first.error or "").splitlines()[0][:200]
    reason = f"{len(unloaded)} of {len(seen.probe.modules)} modules did not load: {first.name}: {why}"
    return Found(Status.LOAD_FAILED, reason, first.missing_symbol)


def foreign_module(seen: Seen) -> Found | None:
    """The suite imported an extension of that name from elsewhere than the built wheel's site/."""
    module_file = seen.probe.module_file
    if module_file and not Path(module_file).resolve().is_relative_to(seen.execution.view.site.resolve()):
        return Found(Status.ERROR, f"the tests imported the extension from {module_file}, not from the built wheel")
    return None


def collect_error(seen: Seen) -> Found | None:
    """The suite could not be collected (what it could not import, as the probe saw it)."""
    if seen.code not in (0, 1) and seen.probe.collect_error is not None:
        return Found(Status.ERROR, seen.probe.collect_error.reason())
    return None


def no_junit(seen: Seen) -> Found | None:
    return (
        None
        if seen.junit is not None
        else Found(Status.ERROR, f"pytest exited {seen.code} without writing its junit report")
    )


def exited_zero(seen: Seen) -> Found | None:
    """pytest exited 0: passed (its skips said), or every test skipped."""
    if seen.code != 0:
        return None
    counts = seen.counts
    if counts.passed:
        return Found(Status.PASS, f"{counts.passed} passed" + (f", {counts.skipped} skipped" if counts.skipped else ""))
    return Found(Status.SKIPPED, f"all {counts.skipped} tests skipped")


def missing_modules(seen: Seen) -> Found | None:
    """Every failing test failed on a module the runtime lacks: the suite's environment failed, not the extension."""
    missing = missing_only(seen.probe.missing_modules, seen.counts.failed + seen.counts.errors)
    return Found(Status.ERROR, missing) if seen.code == 1 and missing else None


def tests_failed(seen: Seen) -> Found | None:
    counts = seen.counts
    if seen.code != 1 or not (counts.failed or counts.errors):
        return None
    failing = seen.junit.failing if seen.junit else ()
    shown = ", ".join(failing[:3]) + (f" (+{len(failing) - 3} more)" if len(failing) > 3 else "")
    return Found(Status.TEST_FAILED, f"{counts.failed + counts.errors} of {counts.total} tests failed: {shown}")


def pytest_exit(seen: Seen) -> Found:
    """Anything else pytest exited with: the harness's or pytest's trouble."""
    return Found(Status.ERROR, f"pytest exit {seen.code}: {PYTEST_EXIT.get(seen.code, 'unexpected exit code')}")


# classify's rules, tried in this order: the first that answers decides the cell; pytest_exit answers every cell.
RULES: tuple[Rule, ...] = (
    decided,
    bound_reached,
    disk_full,
    timed_out,
    crashed,
    no_probe,
    probe_skipped,
    load_failed,
    module_unloaded,
    foreign_module,
    collect_error,
    no_junit,
    exited_zero,
    missing_modules,
    tests_failed,
    pytest_exit,
)


def classify(execution: CellExecution, timeout: float) -> CellOutcome:
    """A cell's status and reason from what it left: the first of RULES that answers."""
    seen = Seen(execution, timeout, ProbeRecord.read(execution.probe), read_junit(execution.junit))
    found = next(f for f in (rule(seen) for rule in RULES) if f is not None)
    junit = seen.junit
    return CellOutcome(
        found.status,
        found.reason,
        seen.counts,
        junit.failing if junit else (),
        missing_symbol=found.missing_symbol,
        probe=seen.probe,
        tests_seconds=junit.seconds if junit else None,
    )
