"""`check` on a small real wheel whose modules need more than torch: a host library (FFmpeg's libavutil), the NVIDIA
driver (libcuda.so.1), a library the wheel bundles itself (auditwheel's pkg.libs/), and a C++ symbol that another
module of the same wheel exports. Only the host library keeps a module from loading, and the summary says so; what the
wheel bundles is no host need, and its own C++ symbols are never judged against torch's exports."""

import json
import subprocess
import zipfile
from pathlib import Path

import jsonschema
import pytest

from tests.unit.test_check_modules import FROM_2_10
from torch_abi_harness.cli import main
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.static.check import check_artifact

SIBLING = "_ZN2at6native7helper_Ev"  # at::native::helper_(), exported by pkg/_c, imported by pkg/_b


def library(folder: Path, name: str, source: str, *needed: Path) -> Path:
    """A real .so from C source, with DT_SONAME `name` and a DT_NEEDED for each library of `needed`."""
    (folder / f"{name}.c").write_text(source)
    command = ["cc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", folder / name, folder / f"{name}.c"]
    subprocess.run([*command, "-Wl,--no-as-needed", *needed], check=True)
    return folder / name


def module(folder: Path, name: str, calls: list[str], *needed: Path, exports: str = "") -> Path:
    declared = "".join(f"extern int {c}(void);\n" for c in calls)
    body = f"int PyInit_{name.split('.')[0]}(void) {{ return 0{''.join(f' + {c}()' for c in calls)}; }}\n"
    return library(folder, name, declared + body + exports, *needed)


@pytest.fixture
def host_wheel(tmp_path: Path) -> Path:
    avutil = library(tmp_path, "libavutil.so.59", "int av_version(void) { return 59; }\n")
    cuda = library(tmp_path, "libcuda.so.1", "int cuInit(int flags) { return flags; }\n")
    bundled = library(tmp_path, "libz-1a2b3c4d.so.1.3", "int zlibVersion(void) { return 1; }\n")
    members = {
        "pkg/_a.abi3.so": module(tmp_path, "_a.abi3.so", [FROM_2_10], avutil, cuda, bundled),
        "pkg/_b.abi3.so": module(tmp_path, "_b.abi3.so", [FROM_2_10, SIBLING], bundled),
        "pkg/_c.abi3.so": module(tmp_path, "_c.abi3.so", [FROM_2_10], exports=f"int {SIBLING}(void) {{ return 1; }}\n"),
        "pkg.libs/libz-1a2b3c4d.so.1.3": bundled,
    }
    path = tmp_path / "pkg-0.1.0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, source in members.items():
            archive.write(source, member)
    return path


def test_a_module_that_needs_a_host_library_is_counted_as_not_loading(host_wheel: Path) -> None:
    check = check_artifact(host_wheel, "2.10+", None, None, None)
    modules = {m.name: m for m in check.modules}
    assert sorted(modules) == ["pkg/_a.abi3.so", "pkg/_b.abi3.so", "pkg/_c.abi3.so"]  # pkg.libs/ holds no module
    a, b = modules["pkg/_a.abi3.so"], modules["pkg/_b.abi3.so"]
    assert a.host_libraries == ("libavutil.so.59",)  # not the bundled libz, not the driver
    assert a.driver_libraries == ("libcuda.so.1",)
    assert b.host_libraries == ()
    assert (a.loads, a.loads_from, a.loads_from_where(given_host=True)) == ([], None, "2.10.0")
    assert all(p.unmet and p.unmet[0].condition.value == "host-library" for p in a.predictions)
    assert not b.imports.unstable and b.loads_from == "2.10.0"  # its at:: import is _c's, not torch's
    assert check.summary == (
        "2 of 3 modules on 2.10.0+ (_b.abi3.so, _c.abi3.so) without FFmpeg (libavutil.so.59); "
        "with it, 3 of 3 modules on 2.10.0+"
    )
    assert check.whole.loads_from is None and check.whole.loads_from_where(given_host=True) == "2.10.0"
    assert not check.failing  # no verdict on torch: the host lacks a library


def test_check_names_the_driver_and_the_host_library_and_counts_them(
    host_wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(host_wheel), "--runtimes", "2.14+"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "needs the NVIDIA driver: libcuda.so.1 (present only on a GPU machine)" in out
    assert "needs from the host system: libavutil.so.59 (FFmpeg" in out
    assert "libz-1a2b3c4d" not in out.split("needs from the host system")[-1]
    assert "module pkg/_a.abi3.so" in out
    assert "without its host libraries (libavutil.so.59); with them, on 2.14.1" in out
    assert "modules: 2 of 3 modules on 2.14.1+ (_b.abi3.so, _c.abi3.so) without FFmpeg" in out


def test_the_json_adds_the_driver_and_where_it_loads_given_its_host_libraries(
    host_wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(host_wheel), "--runtimes", "2.14+", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, load_schema("check"))
    a = next(m for m in data["modules"] if m["name"] == "pkg/_a.abi3.so")
    assert [h["name"] for h in a["host_libraries"]] == ["libavutil.so.59"]
    assert a["driver_libraries"] == ["libcuda.so.1"]
    assert (a["loads_from"], a["loads_from_given_host"]) == (None, "2.14.1")
    assert a["predictions"][0]["unmet"][0]["class"] == "host-library"
    newest = data["predictions"][-1]
    assert len(newest["modules_loading"]) == 2 and len(newest["modules_loading_given_host"]) == 3
