"""The toolchain probe: what a recipe needs (from its sources) and what this machine lacks (from real files)."""

import os
import stat
from pathlib import Path

import pytest

from torch_abi_harness.builds import IGNORED
from torch_abi_harness.config.extension import load_extension
from torch_abi_harness.provision import toolchain
from torch_abi_harness.provision.toolchain import Needs

REPO = Path(__file__).resolve().parents[2]


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def toolkit(root: Path, headers: bool = True) -> Path:
    executable(root / "bin" / "nvcc")
    if headers:
        (root / "include").mkdir(parents=True)
        (root / "include" / "cuda_runtime.h").write_text("/* the toolkit's runtime header */\n")
    return root


def test_nvcc_is_needed_where_declared_never_guessed_from_cu_files(tmp_path: Path) -> None:
    ext = REPO / "extensions"
    cuda_ops = load_extension(ext / "cuda_ops")
    assert cuda_ops.requires == frozenset({"nvcc"})  # the sample declares it: its setup.py always compiles .cu
    assert Needs.of(cuda_ops.root, cuda_ops.tests, requires=cuda_ops.requires) == Needs(cxx=True, cuda=True)
    # The same .cu sources, undeclared: the build is attempted (a recipe may compile them only with a GPU).
    assert Needs.of(cuda_ops.root, cuda_ops.tests) == Needs(cxx=True, cuda=False)
    assert Needs.of(ext / "stable_basic", ext / "stable_basic" / "tests") == Needs(cxx=True, cuda=False, python=True)


@pytest.mark.parametrize(
    "line",
    [
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
        "/bin/sh: 1: nvcc: not found",
        "bash: nvcc: command not found",
        "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'",
        "  No CMAKE_CUDA_COMPILER could be found.",
        "error: command '/opt/none/bin/nvcc' failed: No such file or directory",
    ],
)
def test_a_build_log_that_wanted_nvcc(line: str) -> None:
    log = f"running build_ext\nbuilding 'x._C' extension\n{line}\nerror: command failed\n"
    assert toolchain.nvcc_missing(log) == line.strip()


def test_a_build_log_that_failed_otherwise_did_not_want_nvcc() -> None:
    log = (
        "csrc/ops.cpp:3:10: error: 'nvcc_helper' was not declared in this scope\nerror: command '/usr/bin/g++' failed\n"
    )
    assert toolchain.nvcc_missing(log) is None


def test_the_sources_say_what_a_recipe_needs(tmp_path: Path) -> None:
    # A .cu file in the tests, or in a build leftover, is not the extension's source.
    (tmp_path / "pkg" / "build").mkdir(parents=True)
    (tmp_path / "pkg" / "build" / "k.cu").write_text("")
    (tmp_path / "pkg" / "tests").mkdir()
    (tmp_path / "pkg" / "tests" / "t.cu").write_text("")
    assert Needs.of(tmp_path / "pkg", tmp_path / "pkg" / "tests", frozenset(IGNORED)) == Needs()


def test_nvcc_missing_from_path_and_cuda_home(tmp_path: Path) -> None:
    compilers = tmp_path / "bin"
    executable(compilers / "c++")
    lacks = toolchain.missing(Needs(cxx=True, cuda=True), {"PATH": str(compilers)})
    assert [m.tool for m in lacks] == ["nvcc"]
    assert "not in $CUDA_HOME/bin, $CUDA_PATH/bin or on PATH" in lacks[0].text()
    # The C++ compiler alone is enough for a build without CUDA sources.
    assert toolchain.missing(Needs(cxx=True), {"PATH": str(compilers)}) == ()


def test_a_toolkit_named_by_cuda_home_or_found_on_path(tmp_path: Path) -> None:
    compilers = executable(tmp_path / "bin" / "c++").parent
    root = toolkit(tmp_path / "cuda")
    assert toolchain.missing(Needs(cxx=True, cuda=True), {"PATH": str(compilers), "CUDA_HOME": str(root)}) == ()
    on_path = f"{compilers}{os.pathsep}{root / 'bin'}"
    assert toolchain.missing(Needs(cxx=True, cuda=True), {"PATH": on_path}) == ()


def test_nvcc_without_the_cuda_headers(tmp_path: Path) -> None:
    compilers = executable(tmp_path / "bin" / "c++").parent
    root = toolkit(tmp_path / "cuda", headers=False)
    (lacks,) = toolchain.missing(Needs(cxx=True, cuda=True), {"PATH": str(compilers), "CUDA_HOME": str(root)})
    assert lacks.tool == "CUDA headers" and "cuda_runtime.h" in lacks.text()


@pytest.mark.parametrize("cxx", ["/no/such/g++", "no-such-compiler --flag"])
def test_a_missing_cxx_compiler(tmp_path: Path, cxx: str) -> None:
    (lacks,) = toolchain.missing(Needs(cxx=True), {"PATH": str(tmp_path), "CXX": cxx})
    assert lacks.tool == "C++ compiler" and "$CXX" in lacks.text() and "apt-get install g++" in lacks.fix
    (plain,) = toolchain.missing(Needs(cxx=True), {"PATH": str(tmp_path)})
    assert "c++ on PATH" in plain.text()
