"""pytest plugin loaded into every cell with ``-p harness_cellprobe``.

It runs inside the runtime environment (stdlib, pytest and torch only, never the
harness) and records, in the JSON file named by HARNESS_PROBE_FILE, what the
harness cannot learn from junit XML: how long ``import torch`` and loading the
extension took, the loader's real error (``torch.ops.load_library`` hides it in
``__cause__``), which test was running if the process dies, and the differences
from PyTorch's documents that tests record with the ``doc_difference`` fixture.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

LOAD_FAILED_EXIT = 10
SKIP_EXIT = 11

_record: dict[str, Any] = {}


def _write() -> None:
    """Replace the probe file whole; when it cannot be written (a full disk), leave no temp file and
    go on: the harness then reads the last whole record, or none."""
    path = os.environ["HARNESS_PROBE_FILE"]
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as handle:
            json.dump(_record, handle, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        sys.stderr.write(f"harness_cellprobe: cannot write {path}: {exc}\n")


def _host_pid() -> int:
    """This process's pid as the harness's host sees it: in the harness sandbox's PID namespace
    os.getpid() is a small local number, while /proc (the host's) lists every level in NSpid."""
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


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
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


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _record.update(phase="tests", current_test=nodeid)
    _write()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _record.get("phase") in {"collect", "tests"}:
        _record.update(phase="finished", exitstatus=int(exitstatus), current_test=None)
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
