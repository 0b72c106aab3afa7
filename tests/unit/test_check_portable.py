"""`check` gives the same answers wherever it runs: C++ imports are classified from their mangled names and
demangled in-process, so neither a c++filt on PATH (python:*-slim images have none) nor a c++filt that answers
nonsense changes a word of what it says. The .so is built by the same small C helper as test_check_modules.py (a C
identifier may be a mangled C++ name); a real g++-built module is tests/integration/test_check_portable_cpp.py."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_check_modules import FROM_2_10, shared_object

ROOT = Path(__file__).resolve().parents[2]
# What a classic extension imports (classic_ops built with torch 2.13.0): functions, data, const and & members.
UNSTABLE = [
    "_ZN3c1010TensorType3getEv",  # c10::TensorType::get()
    "_ZNK3c1010TensorImpl15decref_pyobjectEv",  # c10::TensorImpl::decref_pyobject() const
    "_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE",  # torch::Library::_impl(...) &
    "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE",  # at::_ops::add_Tensor::call(...)
]


def check(artifact: Path, path: str, *more: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "COLUMNS")}
    env.update(PATH=path, COLUMNS="400", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "torch_abi_harness", "check", str(artifact), "--runtimes", "2.12+", *more],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


@pytest.fixture
def classic(tmp_path: Path) -> Path:
    return shared_object(tmp_path, "classic.so", [*UNSTABLE, FROM_2_10])


@pytest.fixture
def nonsense_cxxfilt(tmp_path: Path) -> Path:
    """A c++filt that answers every name as at::nonsense(): if `check` asked it, its answers would change."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "c++filt"
    tool.write_text("#!/bin/sh\nwhile read -r line; do echo 'at::nonsense()'; done\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return folder


def test_check_says_the_same_with_and_without_cxxfilt(classic: Path, nonsense_cxxfilt: Path) -> None:
    interpreter_only = str(Path(sys.executable).parent)
    real = shutil.which("c++filt")
    paths = [f"{nonsense_cxxfilt}{os.pathsep}{interpreter_only}"]
    paths += [f"{Path(real).parent}{os.pathsep}{interpreter_only}"] if real else []
    bare = check(classic, interpreter_only)
    assert bare.returncode == 0, bare.stderr
    assert "0 stable shims" not in bare.stdout and f"{len(UNSTABLE)} unstable C++ symbols" in bare.stdout
    assert "c10::TensorType::get()" in bare.stdout  # demangled without any tool
    assert "unknown" in bare.stdout and "predicted to load on none" not in bare.stdout
    for path in paths:
        other = check(classic, path)
        assert (other.returncode, other.stdout) == (bare.returncode, bare.stdout), path
    json_bare = check(classic, interpreter_only, "--json")
    assert all(check(classic, p, "--json").stdout == json_bare.stdout for p in paths)
    assert '"c10::TensorType::get()"' in json_bare.stdout
