"""pytest plugin loaded into every cell with ``-p harness_cellprobe``.

It runs inside the runtime environment (stdlib, pytest and torch only, never the
harness) and records, in the JSON file named by HARNESS_PROBE_FILE, what the
harness cannot learn from junit XML: how long ``import torch`` and loading the
extension took, the loader's real error (``torch.ops.load_library`` hides it in
``__cause__``), which test was running if the process dies, the differences
from PyTorch's documents that tests record with the ``doc_difference`` fixture, and
what the suite could not import (a test module or conftest that failed to import,
a test that failed on a module the runtime lacks), from the exception itself.
It also puts the suite's test dependencies (HARNESS_SITE_DIRS) on sys.path.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import site
import sys
import time
import traceback
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

LOAD_FAILED_EXIT = 10
SKIP_EXIT = 11

# What the probe file holds. A forkserver's child puts `pytest_main_at` here (time.time() as it calls pytest.main)
# before pytest starts: what the per-phase breakdown (benchmarks/breakdown.py) splits the fork from pytest's start by.
_record: dict[str, Any] = {}


def _write() -> None:
    """Replace the probe file whole; when it cannot be written (a full disk), leave no temp file and
    go on: the harness then reads the last whole record, or none.

    The old record is unlinked before the new one is renamed into its place, not replaced by the rename: ext4
    flushes a file renamed over another to disk first (auto_da_alloc), 4-15 ms a write on a busy disk, and the
    probe writes once per test (a suite of 350 tests paid seconds). A cell killed between the two steps leaves its
    new record, whole, in the temp file, and the harness reads it there (run/collect.py)."""
    path = os.environ["HARNESS_PROBE_FILE"]
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as handle:
            json.dump(_record, handle, indent=1)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.rename(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        sys.stderr.write(f"harness_cellprobe: cannot write {path}: {exc}\n")


def _host_pid() -> int:
    """This process's pid at the outermost level its /proc shows (NSpid's first): the host's where the cell sees
    the host's /proc (no sandbox); in the sandbox, whose /proc is the cell's own PID namespace's, its pid there."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.getpid()


def _error_chain(exc: BaseException) -> list[str]:
    chain: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return chain


def _end(code: int, message: str) -> None:
    """End the process now, with a code the harness knows; the probe file says why.

    This runs before pytest can handle pytest.exit() cleanly (ahead of conftest loading,
    which must not be what imports a broken extension first).
    """
    sys.stderr.write(f"harness_cellprobe: {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """The test dependencies go on sys.path here, after the env's own site-packages (so they never shadow
    it), .pth files included: this is the first hook this plugin gets in every session, fresh or forked
    (the forkserver imported this module once, so module-level code would not run again), and pytest
    calls it before it loads plugins from entry points, one of which a test dependency may provide."""
    for directory in filter(None, os.environ.get("HARNESS_SITE_DIRS", "").split(os.pathsep)):
        if directory not in sys.path:
            site.addsitedir(directory)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    _record.update(phase="import_torch", plugin_started=time.time(), pid=_host_pid())
    _write()
    started = time.perf_counter()
    import torch

    _record.update(
        import_torch_s=round(time.perf_counter() - started, 4),
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
    )
    device = os.environ.get("HARNESS_DEVICE", "cpu")
    if device == "cuda":
        available = bool(torch.cuda.is_available())
        _record["cuda_available"] = available
        if not available:
            _record.update(phase="skipped", skip_reason=f"no CUDA device visible to torch {torch.__version__}")
            _write()
            _end(SKIP_EXIT, _record["skip_reason"])

    if not os.environ["HARNESS_EXT_MODULE"]:  # a published wheel's derived suite loads each module as a test
        _record.update(phase="collect", load_ok=None)
        _write()
        return (yield)
    _record["phase"] = "load"
    _write()
    started = time.perf_counter()
    try:
        module = importlib.import_module(os.environ["HARNESS_EXT_MODULE"])
    except Exception as exc:  # the extension failed to load: that is the result
        chain = _error_chain(exc)
        text = "\n".join(chain)
        symbol = re.search(r"undefined symbol: (\S+)", text)
        version = re.search(r"version `([^']+)' not found", text)
        _record.update(
            phase="load_failed",
            load_ok=False,
            load_s=round(time.perf_counter() - started, 4),
            error_chain=chain,
            missing_symbol=symbol[1] if symbol else None,
            missing_version=version[1] if version else None,
        )
        _write()
        _end(LOAD_FAILED_EXIT, "cannot load {}:\n  {}".format(os.environ["HARNESS_EXT_MODULE"], "\n  ".join(chain)))
    _record.update(
        phase="collect",
        load_ok=True,
        load_s=round(time.perf_counter() - started, 4),
        module_file=getattr(module, "__file__", None),
    )
    _write()
    try:
        return (yield)  # pytest loads the suite's conftest files
    except BaseException as exc:  # one failed to import: pytest prints it and exits 4
        _record["collect_error"] = _import_failure(exc, early_config.rootpath)
        _write()
        raise


def pytest_exception_interact(node: pytest.Item | pytest.Collector, call: pytest.CallInfo[Any], report: Any) -> None:
    """A collector that failed (a test module that does not import) or a test that failed on a missing module."""
    if call.excinfo is None:
        return
    if report.when == "collect":
        if "collect_error" not in _record:  # the first is the one to fix first
            _record["collect_error"] = _import_failure(call.excinfo.value, node.config.rootpath)
            _write()
        return
    missing = next((m for e in _chain(call.excinfo.value) if (m := _missing_distribution(e))), None)
    if missing:
        entry = {"test": node.nodeid, "module": missing}
        seen = _record.setdefault("missing_modules", [])
        if entry not in seen:
            seen.append(entry)
            _write()


# What pytest raises around the error of a module or conftest that failed to import; the real one is its cause.
_WRAPPERS = {"CollectError", "ConftestImportFailure"}


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _missing_distribution(exc: BaseException) -> str | None:
    """The top-level module a ModuleNotFoundError names, when nothing on the path provides it (a missing
    distribution, not a missing submodule of one that is installed)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else top


def _shown(filename: str, rootdir: Path) -> str:
    """A source path as a person finds it: relative to the suite, else to the sys.path entry holding it."""
    path = Path(filename)
    if path.is_relative_to(rootdir):
        return str(path.relative_to(rootdir.parent))
    holders = [Path(p) for p in sys.path if p and path.is_relative_to(p)]
    return str(path.relative_to(max(holders, key=lambda p: len(p.parts)))) if holders else filename


def _import_failure(exc: BaseException, rootdir: Path) -> dict[str, Any]:
    """The real error under pytest's wrapper: its type and message, the line that raised it, the line of the
    suite that led there, and, for a module nothing provides, its top-level name and whether the suite has it."""
    while type(exc).__name__ in _WRAPPERS:
        cause = exc.__cause__ or getattr(exc, "cause", None) or exc.__context__
        if not isinstance(cause, BaseException):
            break
        exc = cause
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    where = (frames[-1].filename, frames[-1].lineno) if frames else None
    if isinstance(exc, SyntaxError) and exc.filename:
        where = (exc.filename, exc.lineno)
    suite = next((f for f in frames if Path(f.filename).is_relative_to(rootdir)), None)
    missing = _missing_distribution(exc)
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return {
        "type": type(exc).__name__,
        "message": message.strip().splitlines()[0] if message.strip() else "",
        "file": _shown(where[0], rootdir) if where else None,
        "line": where[1] if where else None,
        "suite_file": _shown(suite.filename, rootdir) if suite and (suite.filename, suite.lineno) != where else None,
        "suite_line": suite.lineno if suite and (suite.filename, suite.lineno) != where else None,
        "missing": missing,
        "in_suite": bool(missing) and any((rootdir / n).exists() for n in (missing, f"{missing}.py")),
    }


def pytest_collection_finish(session: pytest.Session) -> None:
    _record["collected_at"] = time.time()  # no write: the next one (a test's start, the session's end) keeps it


# Each test's start is a line appended to the probe file's `.tests` companion, not a rewrite of the record: one
# write(2) of the node id (about 9 us) where a whole record written, unlinked and renamed cost about 170 us, paid
# by every test of every cell (21,500 in the default matrix). The last line names the test that was running if the
# process dies; the record says when the tests began. Past TESTS_KEPT bytes the file is replaced by one holding
# only the newest line (a rename: never a moment without it), so a suite of any size leaves a small file.
TESTS_KEPT = 64 * 1024
_tests: dict[str, Any] = {"fd": None, "size": 0}


def _tests_path() -> str:
    return os.environ["HARNESS_PROBE_FILE"] + ".tests"


def _note_test(nodeid: str) -> None:
    line = (nodeid.replace("\n", "\\n") + "\n").encode("utf-8", "backslashreplace")
    try:
        if _tests["fd"] is None or _tests["size"] + len(line) > TESTS_KEPT:
            _restart_tests(line)
        else:
            os.write(_tests["fd"], line)
            _tests["size"] += len(line)
    except OSError as exc:  # a full disk: the record still names the first test
        sys.stderr.write(f"harness_cellprobe: cannot write {_tests_path()}: {exc}\n")


def _restart_tests(line: bytes) -> None:
    path = _tests_path()
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
    os.write(fd, line)
    os.rename(tmp, path)
    if _tests["fd"] is not None:
        os.close(_tests["fd"])
    _tests.update(fd=fd, size=len(line))


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if _record.get("phase") != "tests":
        _record.update(phase="tests", current_test=nodeid)
        _write()
    _note_test(nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _record.get("phase") in {"collect", "tests"}:
        _record.update(phase="finished", exitstatus=int(exitstatus), current_test=None, finished_at=time.time())
        _write()


@pytest.fixture
def doc_difference(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Record that this runtime does something other than PyTorch's documents say.

    ``doc_difference(key, text)``: key names the behaviour (the report groups by it and
    lists the cells where it was seen); text says what was documented and what happened.
    It records and never fails the test: a test asserts what it must, separately.
    """

    def record(key: str, text: str) -> None:
        entry = {"key": str(key), "text": str(text), "test": request.node.nodeid}
        seen = _record.setdefault("doc_differences", [])
        if entry not in seen:
            seen.append(entry)
            _write()

    return record


@pytest.fixture
def record_module_load(request: pytest.FixtureRequest) -> Callable[[str, str | None, int, bool], None]:
    """Record how one of a published wheel's extension modules loaded (the derived suite's test_loads):
    its path in the wheel, the loader's error (None: it loaded), how many operators it registered, and whether
    they are compared with what it registers on the torch it was built for (False: it did not load there)."""

    def record(path: str, error: str | None, registered: int, compared: bool = False) -> None:
        symbol = re.search(r"undefined symbol: (\S+)", error or "")
        library = re.search(r"([\w.+-]+\.so[.\d]*): cannot open shared object file", error or "")
        _record.setdefault("modules", {})[str(path)] = {
            "error": error,
            "missing_symbol": symbol[1] if symbol else None,
            "missing_library": library[1] if library else None,
            "registered": int(registered),
            "compared": bool(compared),
        }
        _write()

    return record
