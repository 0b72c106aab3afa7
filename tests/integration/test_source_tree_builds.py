"""Source trees built their own way, end to end with real builds and real cells: a setup.py that hard-codes its
own TORCH_TARGET_VERSION, one that does not compile, one that reads ../ (with and without sources_root), a
suite importing a torch.testing helper older releases lack, and a build that wants nvcc it did not declare."""

from pathlib import Path

from kit import cells_by_id, harness, latest_results, make_extension
from test_missing_toolchain_cells import without_nvcc

LOADS = """
import @NS@

def test_loads():
    assert @NS@.ops.answer() == 41
"""
NEWER_HELPER = """
from torch.testing._internal.common_dtype import highest_precision_float  # first in torch 2.12

import @NS@

def test_loads():
    assert @NS@.ops.answer() == 41 and highest_precision_float
"""
CLIMBING_SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

EXTRA = ["-std=c++17", "-include", "cstring", "-DTORCH_TARGET_VERSION=0x020a000000000000"]
setup(
    name="@NS@",
    version="0.0.1",
    packages=["@NS@"],
    ext_modules=[CppExtension("@NS@._C", ["../shared/ops.cpp"], extra_compile_args=EXTRA, py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
"""


def test_source_trees_built_their_own_way(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    own = make_extension(tree, "own_target", NEWER_HELPER, min_target="2.9")
    setup = (own / "setup.py").read_text()
    own_target = 'EXTRA.append("-DTORCH_TARGET_VERSION=0x020a000000000000")\nif None and os.environ.get('
    (own / "setup.py").write_text(setup.replace("if os.environ.get(", own_target))  # ignores the harness's
    broken = make_extension(tree, "broken_src", LOADS)
    (broken / "csrc" / "ops.cpp").write_text("int broken( {\n")
    (tree / "shared").mkdir()
    for name, declared in (("climbs", ""), ("declared", "sources_root: ..\n")):
        ext = make_extension(tree, name, LOADS)
        (tree / "shared" / "ops.cpp").write_text((ext / "csrc" / "ops.cpp").read_text().replace(name, "shared_ns"))
        (ext / name / "__init__.py").write_text((ext / name / "__init__.py").read_text().replace(name, "shared_ns"))
        (ext / "setup.py").write_text(CLIMBING_SETUP.replace("@NS@", name))
        (ext / "extension.yaml").write_text((ext / "extension.yaml").read_text() + declared)
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\n"
        "extensions:\n" + "".join(f"  - path: tree/{n}\n" for n in ("own_target", "broken_src", "climbs", "declared"))
        + "runtimes:\n  - torch: 2.9.1\n  - torch: 2.10.0\n  - torch: 2.13.0\n"
        "builds:\n"
        "  - {extension: own_target, torch: 2.13.0, target: '2.9'}\n"
        "  - {extension: broken_src, torch: 2.13.0, target: '2.10'}\n"
        "  - {extension: climbs, torch: 2.13.0, target: '2.10'}\n"
        "  - {extension: declared, torch: 2.13.0, target: '2.10'}\n"
    )  # fmt: skip
    proc = harness("run", "--reports-dir", "reports", "-j", "2", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout  # two builds broke their promise to compile
    results = latest_results(tmp_path / "reports")
    builds = {b["id"]: b for b in results["build_results"]}
    cells = cells_by_id(results)

    # (a) setup.py's own target: a finding on the build, and its cells promised by 2.10, not 2.9.
    real = builds["own_target@b2.13.0-t2.9"]
    assert (real["verdict"], real["target"], real["built_for"]) == ("kept", "2.9", "2.10")
    assert any("-DTORCH_TARGET_VERSION=0x020a000000000000: built for 2.10" in f for f in real["findings"]), real
    old = cells["own_target@b2.13.0-t2.9~r2.9.1-cpu"]
    assert (old["expected"], old["status"], old["verdict"]) == ("load_failed", "LOAD_FAILED", "expected_failure")
    assert old["expected_why"] == "target 2.10 is newer than the runtime torch 2.9"
    # (e) the suite's helper is newer than the runtime: the reason says since when.
    helper = cells["own_target@b2.13.0-t2.9~r2.10.0-cpu"]
    assert helper["status"] == "ERROR" and "`highest_precision_float` first appears in torch 2.12" in helper["reason"]
    assert cells["own_target@b2.13.0-t2.9~r2.13.0-cpu"]["status"] == "PASS"

    # (c) a compile error: one broken build, its three cells not run (none broken).
    failed = builds["broken_src@b2.13.0-t2.10"]
    assert failed["verdict"] == "broken" and "error" in failed["reason"], failed
    for runtime in ("r2.9.1-cpu", "r2.10.0-cpu", "r2.13.0-cpu"):
        cell = cells[f"broken_src@b2.13.0-t2.10~{runtime}"]
        assert (cell["status"], cell["verdict"]) == ("NOT_RUN", "not_run"), cell
    assert results["summary"]["broken"] == 0 and results["summary"]["not_run"] == 6

    # (d) ../ without sources_root: named, with what to declare; with it, the copy holds ../shared.
    climbs = builds["climbs@b2.13.0-t2.10"]
    assert climbs["verdict"] == "broken"
    assert "(setup.py, line 10: ../shared/ops.cpp)" in climbs["reason"] and "sources_root: .." in climbs["reason"]
    assert builds["declared@b2.13.0-t2.10"]["verdict"] == "kept"
    assert cells["declared@b2.13.0-t2.10~r2.13.0-cpu"]["status"] == "PASS"
    summary = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    assert "| `broken_src@b2.13.0-t2.10` ❌ build |" in summary and "| `own_target@b2.13.0-t2.9` 🔎 |" in summary


CUDA_WHEN_ASKED = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="@NS@",
    version="0.0.1",
    packages=["@NS@"],
    ext_modules=[CUDAExtension("@NS@._C", ["csrc/ops.cpp", "csrc/kernel.cu"], py_limited_api=True)],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
"""


def test_a_build_that_wants_nvcc_it_did_not_declare_is_skipped_and_proves_nothing(tmp_path: Path) -> None:
    ext = make_extension(tmp_path, "wants_nvcc", LOADS)
    (ext / "csrc" / "kernel.cu").write_text("__global__ void k() {}\n")
    (ext / "setup.py").write_text(CUDA_WHEN_ASKED.replace("@NS@", "wants_nvcc"))
    (tmp_path / "matrix.yaml").write_text(
        "schema_version: 1\nextensions:\n  - path: wants_nvcc\nruntimes:\n  - torch: 2.13.0\n"
        "builds:\n  - {extension: wants_nvcc, torch: 2.13.0, target: '2.10'}\n"
    )
    # torch.utils.cpp_extension would find a toolkit at /usr/local/cuda: CUDA_HOME names one that is not there.
    env = {**without_nvcc(), "CUDA_HOME": str(tmp_path / "no-toolkit")}
    proc = harness("run", "--reports-dir", "reports", cwd=tmp_path, env=env)
    assert proc.returncode == 4, proc.stdout
    assert "nothing was proven: 1 cells skipped, 0 not run (exit 4)" in proc.stdout
    results = latest_results(tmp_path / "reports")
    cell = results["cells"][0]
    assert (cell["status"], cell["verdict"]) == ("SKIPPED", "skipped"), cell
    needs = "not built: the recipe needs nvcc (OSError: CUDA_HOME environment variable is not set"
    assert cell["reason"].startswith(needs), cell["reason"]
    assert results["build_results"][0]["verdict"] == "skipped"
