"""A fault of the machine is named as the machine's, never `broken`: Python's headers or the CUDA toolkit
missing (the build is SKIPPED with the fix), the NVIDIA driver missing on a CPU runner (class no-driver), a
link error said in the linker's own words, and a good build that read outside its folder (a finding).

The compiler and linker messages are real: produced with g++ 12 / GNU ld 2.40 on Debian 12 and pasted."""

import stat
from pathlib import Path

import pytest

from torch_abi_harness.builds import BuildResult
from torch_abi_harness.builds.log import climbed_out, first_error_line, machine_lack, missing_header
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.status import CONDITION_MEANING, Condition, Status
from torch_abi_harness.plan import Cell, make_plan
from torch_abi_harness.provision import toolchain
from torch_abi_harness.provision.toolchain import Needs
from torch_abi_harness.run.judge import Observed, judge_build, judge_cell
from torch_abi_harness.static import host_libraries
from torch_abi_harness.static.artifact import ArtifactFacts, RuntimeFacts, unmet
from torch_abi_harness.verdict import Expected, Verdict, promise

REPO = Path(__file__).resolve().parents[2]
WORK = Path("/tmp/harness/tmp/stable_basic-x/src")

MULTIPLE_DEFINITION = f"""\
g++ -shared -Wl,-O1 build/temp.linux-x86_64-cpython-311/csrc/a.o build/temp.linux-x86_64-cpython-311/csrc/b.o -o \
build/lib.linux-x86_64-cpython-311/ext/_C.abi3.so
/usr/bin/ld: build/temp.linux-x86_64-cpython-311/csrc/b.o: in function `foo()':
b.cpp:(.text+0x0): multiple definition of `foo()'; {WORK}/build/temp.linux-x86_64-cpython-311/csrc/a.o:a.cpp:\
(.text+0x0): first defined here
collect2: error: ld returned 1 exit status
error: command '/usr/bin/g++' failed with exit code 1
"""
UNDEFINED_REFERENCE = """\
/usr/bin/ld: /tmp/ccMuOEE7.o: in function `main':
m.cpp:(.text+0x5): undefined reference to `bar()'
collect2: error: ld returned 1 exit status
"""
CANNOT_FIND = """\
/usr/bin/ld: cannot find -lnosuchlib: No such file or directory
collect2: error: ld returned 1 exit status
"""
PYTHON_H = """\
g++ -Wsign-compare -DNDEBUG -fPIC -I/env/torch/include -I/usr/include/python3.11 -c csrc/stable_basic.cpp -o x.o
csrc/stable_basic.cpp:11:10: fatal error: Python.h: No such file or directory
   11 | #include <Python.h>
      |          ^~~~~~~~~~
compilation terminated.
error: command '/usr/bin/g++' failed with exit code 1
"""
OWN_HEADER = """\
csrc/ops.cpp:1:10: fatal error: my_own.h: No such file or directory
    1 | #include "my_own.h"
      |          ^~~~~~~~~~
compilation terminated.
"""
CLANG_CUDA = "csrc/k.cu:6:10: fatal error: 'cuda_runtime.h' file not found\n"


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (
            MULTIPLE_DEFINITION,
            "b.cpp:(.text+0x0): multiple definition of `foo()'; build/temp.linux-x86_64-cpython-311/",
        ),
        (UNDEFINED_REFERENCE, "m.cpp:(.text+0x5): undefined reference to `bar()'"),
        (CANNOT_FIND, "/usr/bin/ld: cannot find -lnosuchlib: No such file or directory"),
        ("ld.lld: error: undefined symbol: bar()\nclang: error: linker command failed with exit code 1\n", "ld.lld:"),
    ],
)
def test_a_link_error_is_said_in_the_linkers_own_words(log: str, reason: str) -> None:
    assert first_error_line(log, WORK).startswith(reason)
    assert "collect2" not in first_error_line(log, WORK)


def test_a_compile_error_stays_the_compilers_first_error() -> None:
    assert first_error_line("csrc/ops.cpp:3:1: error: boom\ncollect2: error: ld returned 1\n", WORK) == (
        "csrc/ops.cpp:3:1: error: boom"
    )


def test_the_header_a_compiler_did_not_find() -> None:
    assert missing_header(PYTHON_H) == "Python.h"
    assert missing_header(CLANG_CUDA) == "cuda_runtime.h"
    assert missing_header(MULTIPLE_DEFINITION) is None


def interpreter(tmp_path: Path, *, headers: bool) -> Path:
    """A stand-in interpreter that answers the probe as CPython 3.11 whose include directory has (or lacks) Python.h."""
    include = tmp_path / "include" / "python3.11"
    include.mkdir(parents=True, exist_ok=True)
    if headers:
        (include / "Python.h").write_text("/* CPython */\n")
    python = tmp_path / ("python-with" if headers else "python-without")
    python.write_text(f"#!/bin/sh\necho {include}\necho {include}\necho 3.11\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


def test_python_h_missing_is_the_machines_lack_with_the_fix(tmp_path: Path) -> None:
    python = interpreter(tmp_path, headers=False)
    why = machine_lack(PYTHON_H, tmp_path / "ext", python)
    assert why is not None and why.startswith("the build needs Python.h, which this machine lacks: ")
    assert f"Python's headers for CPython 3.11 ({python}) are missing (no Python.h in {tmp_path}/include/" in why
    assert "install python3-dev (Debian/Ubuntu" in why and "python3-devel (Fedora/RHEL)" in why
    assert "apk add python3-dev" in why
    # The interpreter has them: the recipe did not point its compiler there, which is the extension's.
    assert machine_lack(PYTHON_H, tmp_path / "ext", interpreter(tmp_path, headers=True)) is None


def test_a_header_of_the_extensions_own_stays_its_build_failure(tmp_path: Path) -> None:
    python = interpreter(tmp_path, headers=False)
    assert machine_lack(OWN_HEADER, tmp_path, python) is None  # misspelt, or not on its include path
    (tmp_path / "ext" / "csrc").mkdir(parents=True)
    (tmp_path / "ext" / "csrc" / "Python.h").write_text("/* its own */\n")  # a header its tree holds
    assert machine_lack(PYTHON_H, tmp_path / "ext", python) is None


def test_a_cuda_header_is_the_machines_lack_only_without_a_toolkit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compilers = tmp_path / "bin"
    compilers.mkdir()
    (compilers / "c++").write_text("#!/bin/sh\n")
    (compilers / "c++").chmod(0o755)
    for key in ("CUDA_HOME", "CUDA_PATH", "CXX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PATH", str(compilers))
    why = machine_lack(CLANG_CUDA, tmp_path / "ext")
    assert why is not None and why.startswith("the build needs cuda_runtime.h, which this machine lacks: no nvcc")
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (toolkit / "bin" / "nvcc").chmod(0o755)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    assert machine_lack(CLANG_CUDA, tmp_path / "ext") is None  # the toolkit is there: the recipe's include path


def test_sources_that_include_python_h_need_the_interpreters_headers(tmp_path: Path) -> None:
    stable_basic = REPO / "extensions" / "stable_basic"
    assert Needs.of(stable_basic, stable_basic / "tests") == Needs(cxx=True, python=True)
    classic = REPO / "extensions" / "classic_ops"
    assert Needs.of(classic, classic / "tests") == Needs(cxx=True)  # ATen and torch/library.h: no Python.h
    without = interpreter(tmp_path, headers=False)
    (lacks,) = toolchain.missing(Needs(cxx=True, python=True), python=without)
    assert lacks.text().startswith(f"Python's headers for CPython 3.11 ({without}) are missing")
    assert toolchain.missing(Needs(cxx=True), python=without) == ()  # sources that do not include it
    assert toolchain.missing(Needs(cxx=True, python=True), python=interpreter(tmp_path, headers=True)) == ()


@pytest.fixture(scope="module")
def cells() -> dict[str, Cell]:
    plan = make_plan(load_matrix(REPO / "matrix.yaml"), ["stable_basic@b2.13.0"])
    return {c.id: c for c in plan.cells}


def test_a_build_skipped_for_python_headers_is_no_broken_promise(tmp_path: Path, cells: dict[str, Cell]) -> None:
    cell = next(iter(cells.values()))
    lacking = toolchain.python_headers(str(interpreter(tmp_path, headers=False)))
    assert lacking is not None
    result = BuildResult.skipped(cell.build, key="k", lacking=lacking.text(), log=tmp_path / "build.log")
    row = judge_build(result)
    assert row.verdict is Verdict.SKIPPED and row.reason.startswith("not built: Python's headers for CPython 3.11")
    assert "python3-dev" in row.reason


def test_a_good_build_that_read_outside_its_folder_has_a_finding(tmp_path: Path, cells: dict[str, Cell]) -> None:
    ext = tmp_path / "repo" / "ext"
    ext.mkdir(parents=True)
    (ext / "setup.py").write_text('include_dirs = ["../include"]\n')
    finding = climbed_out(ext)
    assert finding is not None and "(setup.py, line 1: ../include)" in finding and "sources_root: .." in finding
    (ext / "setup.py").write_text('include_dirs = ["include"]\n')
    assert climbed_out(ext) is None
    build = next(iter(cells.values())).build
    made = BuildResult.built(build, key="k", out=tmp_path, wheel=tmp_path / "x.whl", seconds=1.0, findings=(finding,))
    assert judge_build(made).findings == (finding,)


CPU_RUNNER = RuntimeFacts.of("2.13.0+cpu", "cpu", "3.11", driver=False)
CU128_RUNNER = RuntimeFacts.of("2.10.0+cu128", "cu128", "3.11", driver=False)


def test_the_nvidia_drivers_libraries_are_no_driver_on_a_runner_without_one() -> None:
    needs_driver = ArtifactFacts(("libc.so.6", "libcuda.so.1"))
    for runtime in (CPU_RUNNER, CU128_RUNNER):  # every runtime alike
        (lack,) = unmet(needs_driver, runtime)
        assert lack.condition is Condition.NO_DRIVER
        assert lack.why == "needs libcuda.so.1, the NVIDIA driver's library; this runner has no GPU driver"
    assert unmet(ArtifactFacts(("libnvidia-ml.so.1",)), CPU_RUNNER)[0].condition is Condition.NO_DRIVER
    # A GPU runner has the driver: nothing is unmet, the cell runs.
    assert unmet(needs_driver, RuntimeFacts.of("2.13.0+cpu", "cpu", "3.11", driver=True)) == ()
    # The driver is not the only cause: the class stays the CUDA one that comes first.
    both = ArtifactFacts(("libcuda.so.1", "libtorch_cuda.so"))
    assert [u.condition for u in unmet(both, CPU_RUNNER)] == [Condition.NO_CUDA, Condition.NO_DRIVER]
    # Neither a host library nor a CUDA library of torch's.
    assert not host_libraries.is_host_library("libcuda.so.1")
    assert not host_libraries.is_host_library("libnvidia-ml.so.1")
    assert ArtifactFacts(("libcuda.so.1",)).cuda_libraries == ()
    assert "no GPU driver" not in CONDITION_MEANING[Condition.CUDA_MAJOR]
    assert "NVIDIA driver" in CONDITION_MEANING[Condition.NO_DRIVER]


def test_a_no_driver_cell_is_an_expected_failure_not_broken(cells: dict[str, Cell]) -> None:
    cell = next(iter(cells.values()))  # the artifact's need decides first, whatever the torch levels
    expectation = promise(cell, ArtifactFacts(("libcuda.so.1",)), CPU_RUNNER)
    assert (expectation.expected, expectation.condition) == (Expected.LOAD_FAILED, Condition.NO_DRIVER)
    observed = Observed(
        status=Status.LOAD_FAILED,
        reason="OSError: libcuda.so.1: cannot open shared object file: No such file or directory",
        backend="venv",
        runtime_torch="2.13.0+cpu",
        runtime_variant="cpu",
    )
    result = judge_cell(cell, observed, expectation)
    assert (result.verdict, result.expected_class) == (Verdict.EXPECTED_FAILURE, Condition.NO_DRIVER)
