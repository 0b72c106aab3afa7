"""`check` on a real C++ module compiled here with g++: its torch C++ imports (a function, a const member, a
ref-qualified member, a function template that returns void, a static data member) are unstable, and `check` says the
same with no c++filt on PATH (only the interpreter's folder) as with one."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torch_abi_harness.static.check import check_artifact
from torch_abi_harness.static.symbols import read_artifact

ROOT = Path(__file__).resolve().parents[2]
SOURCE = """
namespace c10 { struct TensorType { static int get(); }; struct TensorImpl { int decref_pyobject() const; };
                struct Registry { static int count; }; }
namespace torch { struct Library { int impl(const char*) &; }; }
namespace at { template <class T> void fill(T value); }
extern "C" int use(c10::TensorImpl* impl, torch::Library& library) {
    at::fill<float>(1.0f);
    return c10::TensorType::get() + impl->decref_pyobject() + library.impl("x") + c10::Registry::count;
}
"""


@pytest.fixture(scope="module")
def cpp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no g++ here")
    folder = tmp_path_factory.mktemp("cpp")
    (folder / "ops.cpp").write_text(SOURCE)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", folder / "ops.so", folder / "ops.cpp"], check=True)
    return folder / "ops.so"


def check(artifact: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "COLUMNS")}
    env.update(PATH=path, COLUMNS="400", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch_abi_harness", "check", str(artifact), "--runtimes", "2.14+", "--json"]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=120)


def test_a_real_cpp_module_is_judged_the_same_with_and_without_cxxfilt(cpp_module: Path) -> None:
    (module,) = read_artifact(cpp_module)
    assert len([n for n in module.imports if n.startswith("_Z")]) == 5
    result = check_artifact(cpp_module, "2.14+", None, None, None)
    assert sorted(result.whole.imports.unstable.values()) == [
        "c10::Registry::count",
        "c10::TensorImpl::decref_pyobject() const",
        "c10::TensorType::get()",
        "torch::Library::impl(char const*) &",
        "void at::fill<float>(float)",
    ]
    bare = check(cpp_module, str(Path(sys.executable).parent))
    assert bare.returncode == 0, bare.stderr
    assert '"outcome": "unknown"' in bare.stdout
    tool = shutil.which("c++filt")
    if tool is not None:
        with_tool = check(cpp_module, f"{Path(tool).parent}{os.pathsep}{Path(sys.executable).parent}")
        assert (with_tool.returncode, with_tool.stdout) == (bare.returncode, bare.stdout)
