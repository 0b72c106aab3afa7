"""Published wheels as builds, run for real (issue 25): a wheel named by requirement is resolved from the configured
sources, its build torch and target are read from it, its derived suite loads each module as its own test case,
and every verdict agrees with a plain `import torch; ctypes.CDLL(module)` in that runtime (`census --verify`).

Two wheels: one made here (two real shared objects, one needing a library that neither torch nor CUDA provides
and the runtime lacks: the host-library class), served from a find-links folder with no other source; and torchao
0.18.0 from the configured sources (PyPI), its two modules loading where they really load."""

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

from kit import cells_by_id, harness, latest_results
from packaging.version import Version

from torch_abi_harness.config import DEFAULT_PYTHON, Sources
from torch_abi_harness.provision.envs import EnvManager, EnvSpec, default_cache_dir
from torch_abi_harness.provision.sources import resolve_sources

CORE = """\
#include <stdint.h>
typedef struct AtenTensorOpaque* AtenTensorHandle;
extern int32_t aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret);
int64_t core_numel(AtenTensorHandle t) { int64_t n = 0; aoti_torch_get_numel(t, &n); return n; }
"""
CODEC = """\
#include <stdint.h>
typedef struct AtenTensorOpaque* AtenTensorHandle;
extern int32_t aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret);
extern int harness_codec_version(void);
int64_t codec_frames(AtenTensorHandle t) {
  int64_t n = 0;
  aoti_torch_get_numel(t, &n);
  return n * harness_codec_version();
}
"""
LIBRARY = "int harness_codec_version(void) { return 3; }\n"
METADATA = b"Metadata-Version: 2.1\nName: codec_ops\nVersion: 1.0\nRequires-Dist: torch>=2.9\n"
WHEEL = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n"


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def torch_lib() -> Path:
    """torch 2.11.0's lib/, to link against as a stable-ABI extension does (DT_NEEDED libtorch_cpu.so)."""
    manager = EnvManager(default_cache_dir(), resolve_sources(Sources()))
    try:
        env = manager.ensure(EnvSpec(Version("2.11.0"), "auto", DEFAULT_PYTHON))
        where = "import os, torch; print(os.path.dirname(torch.__file__))"
        out = subprocess.run([env.python, "-c", where], capture_output=True, text=True, check=True).stdout
    finally:
        manager.release()
    return Path(out.strip()) / "lib"


def codec_wheel(tmp: Path, links: Path) -> Path:
    """codec_ops 1.0 as an unrepaired wheel ships: _core needs only a stable shim; _codec also needs
    libharness_codec.so.1, which was on the build machine and is in no runtime."""
    build = tmp / "build"
    build.mkdir()
    for name, text in (("core.c", CORE), ("codec.c", CODEC), ("lib.c", LIBRARY)):
        (build / name).write_text(text)
    cc = ["cc", "-shared", "-fPIC", f"-L{torch_lib()}"]
    subprocess.run(
        [*cc, "-Wl,-soname,libharness_codec.so.1", "-o", build / "libharness_codec.so.1", build / "lib.c"], check=True
    )
    subprocess.run([*cc, "-o", build / "_core.abi3.so", build / "core.c", "-ltorch_cpu"], check=True)
    codec = [build / "codec.c", build / "libharness_codec.so.1", "-ltorch_cpu"]
    subprocess.run([*cc, "-o", build / "_codec.abi3.so", *codec], check=True)
    files = {
        "codec_ops/__init__.py": b"",
        "codec_ops/_core.abi3.so": (build / "_core.abi3.so").read_bytes(),
        "codec_ops/_codec.abi3.so": (build / "_codec.abi3.so").read_bytes(),
        "codec_ops-1.0.dist-info/METADATA": METADATA,
        "codec_ops-1.0.dist-info/WHEEL": WHEEL,
    }
    wheel = links / "codec_ops-1.0-cp39-abi3-linux_x86_64.whl"
    records = [record_line(name, data) for name, data in files.items()] + ["codec_ops-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("codec_ops-1.0.dist-info/RECORD", "\n".join(records) + "\n")
    return wheel


def test_a_module_that_needs_a_host_library_is_classed_so_and_its_sibling_still_proven(tmp_path: Path) -> None:
    links, empty = tmp_path / "links", tmp_path / "empty-index"
    links.mkdir()
    empty.mkdir()
    wheel = codec_wheel(tmp_path, links)
    matrix = tmp_path / "census.yaml"
    matrix.write_text(
        'schema_version: 1\npython: "3.11"\n'
        f"sources: {{inherit_pip_config: false, index_url: {empty.as_uri()!r}, find_links: [{str(links)!r}]}}\n"
        "runtimes:\n  - torch: [2.11.0]\nbuilds:\n  - wheel: codec_ops==1.0\n"
    )
    reports = tmp_path / "reports"
    result = harness("run", "--matrix", matrix, "--reports-dir", reports, cwd=tmp_path)
    assert result.returncode == 0, result.stdout  # an expected failure keeps the promise
    data = latest_results(reports)
    (published,) = data["published"]
    assert published["requirement"] == "codec_ops==1.0"
    assert published["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert published["torch_pin"] == "torch>=2.9"
    assert "it imports aoti_torch_get_numel, first exported in torch 2.7" in published["target_from"]
    assert (published["build_torch"], published["build_torch_how"]) == (None, "unknown")  # read, never guessed
    assert (
        "torch 2.11.0, the oldest release here that exports every shim it imports, unpacks it"
        in (published["build_torch_from"])
    )
    (cell,) = cells_by_id(data).values()
    assert cell["id"] == "codec-ops-1.0@b2.11.0-t2.7~r2.11.0-cpu"
    assert (cell["status"], cell["verdict"], cell["expected_class"]) == (
        "LOAD_FAILED",
        "expected_failure",
        "host-library",
    )
    assert "needs libharness_codec.so.1, which neither torch nor CUDA provides" in cell["expected_why"]
    modules = {m["path"]: m for m in cell["modules"]}
    assert modules["codec_ops/_core.abi3.so"]["error"] is None  # one module's failure hides nothing of another's
    assert modules["codec_ops/_codec.abi3.so"]["missing_library"] == "libharness_codec.so.1"
    assert "test_wheel_modules::test_loads[_codec.abi3.so]" in cell["failing_tests"]
    assert "test_wheel_modules::test_loads[_core.abi3.so]" not in cell["failing_tests"]

    census = harness("census", reports / "latest", "--verify", cwd=tmp_path)
    assert census.returncode == 0, census.stdout
    text = census.stdout.replace("\n", " ")
    assert "codec_ops 1.0: _core.abi3.so on 2.11.0" in text, text
    assert "verified: 2 plain loads" in text


def test_torchao_census_agrees_with_a_plain_load_module_by_module(tmp_path: Path) -> None:
    """torchao 0.18.0 on three releases, as `nox -s census` runs it on all of them: its modules need CUDA 13
    (libcudart.so.13), which torch 2.11.0's PyPI wheel ships, 2.10.0's (CUDA 12) does not and 2.13.0's CPU build
    does not; on 2.11.0 both load. Neither its metadata nor its files name its build torch: it is unknown, so no
    reference is taken and its operators are compared with nothing (the census says "not compared")."""
    matrix = tmp_path / "census.yaml"
    matrix.write_text(
        'schema_version: 1\npython: "3.11"\nruntimes:\n  - torch: [2.10.0, 2.11.0, 2.13.0]\n'
        'builds:\n  - wheel: "torchao==0.18.0"\n'
    )
    reports = tmp_path / "reports"
    result = harness("run", "--matrix", matrix, "--reports-dir", reports, cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    data = latest_results(reports)
    (published,) = data["published"]
    assert published["filename"].startswith("torchao-0.18.0-cp310-abi3-")
    assert (default_cache_dir() / "wheels" / "torchao" / published["filename"]).is_file()
    assert published["torch_pin"] is None
    cells = {c["runtime"]["torch"].split("+")[0]: c for c in data["cells"]}
    assert set(cells) == {"2.10.0", "2.11.0", "2.13.0"}
    assert all(c["build"]["id"] == "torchao-0.18.0@b2.11.0-t2.11" for c in cells.values())
    kept = cells["2.11.0"]
    assert (kept["status"], kept["verdict"], kept["tests"]["passed"], kept["tests"]["skipped"]) == (
        "PASS",
        "kept",
        2,
        2,
    )
    assert not any(m["compared"] for m in kept["modules"])
    assert {m["path"]: m["registered"] for m in kept["modules"]} == {
        "torchao/_C_cutlass_90a.abi3.so": 2,
        "torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so": 4,
    }
    assert (cells["2.10.0"]["verdict"], cells["2.10.0"]["expected_class"]) == ("expected_failure", "cuda-major")
    assert (cells["2.13.0"]["verdict"], cells["2.13.0"]["expected_class"]) == ("expected_failure", "no-cuda")
    for cell in (cells["2.10.0"], cells["2.13.0"]):
        assert {m["missing_library"] for m in cell["modules"]} == {"libcudart.so.13"}

    page = tmp_path / "census.md"
    page.write_text("# Census\n\n<!-- census:begin -->\n<!-- census:end -->\n")
    census = harness("census", reports / "latest", "--verify", "--update", page, cwd=tmp_path)
    assert census.returncode == 0, census.stdout
    assert "verified: 6 plain loads" in census.stdout
    text = page.read_text()
    assert (
        "**torchao 0.18.0: both modules load on torch 2.11.0 (its build torch is unknown: operators not compared); "
        "none on 2.10.0, 2.13.0 (cuda-major; no-cuda)**" in text
    )
    assert harness("census", reports / "latest", "--check", page, cwd=tmp_path).returncode == 0
    assert json.loads((reports / "latest" / "results.json").read_text())["schema_version"] == 9
