"""`check` module by module on small real wheels: each extension module's own prediction, the "N of M modules"
summary, the per-module JSON records, and the abi3 audit of the Python C API against the floor's limited API."""

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import jsonschema
import pytest

from tools.gen_limited_api import visible
from torch_abi_harness.cli import main
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.static.check import CHECK_JSON_VERSION, check_artifact
from torch_abi_harness.static.limited_api import LimitedApiAudit, abi3_floor, module_python, packaged_limited_api

# Exported from 2.10.0 (torch_new_list_reserve_size) and from 2.11.0 (torch_dtype_float4_e2m1fn_x2), by the manifest.
FROM_2_10 = "torch_new_list_reserve_size"
FROM_2_11 = "torch_dtype_float4_e2m1fn_x2"
WHEEL = "pkg-0.1.0-cp310-abi3-linux_x86_64.whl"


def shared_object(tmp_path: Path, name: str, calls: list[str]) -> Path:
    """A real .so that imports each of `calls` (undefined, strong: the loader must find them)."""
    source = tmp_path / f"{name}.c"
    declared = "".join(f"extern int {c}(void);\n" for c in calls)
    source.write_text(declared + "int use(void) { return 0" + "".join(f" + {c}()" for c in calls) + "; }\n")
    library = tmp_path / name
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def wheel(tmp_path: Path, modules: dict[str, list[str]], name: str = WHEEL) -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        for member, calls in modules.items():
            archive.write(shared_object(tmp_path, Path(member).name, calls), member)
    return path


@pytest.fixture
def two_modules(tmp_path: Path) -> Path:
    return wheel(tmp_path, {"pkg/_old.abi3.so": [FROM_2_10], "pkg/_new.cpython-310-x86_64-linux-gnu.so": [FROM_2_11]})


def test_each_module_gets_its_own_prediction_and_the_summary_counts_them(two_modules: Path) -> None:
    check = check_artifact(two_modules, "2.9+", None, None, None)
    assert check.whole.loads_from == "2.11.0"  # what loads the whole wheel
    assert {m.name: m.loads_from for m in check.modules} == {
        "pkg/_old.abi3.so": "2.10.0",
        "pkg/_new.cpython-310-x86_64-linux-gnu.so": "2.11.0",
    }
    assert check.summary == "2 of 2 modules on 2.11.0+, 1 of 2 on 2.10.0 (_old.abi3.so), 0 of 2 on 2.9.1"
    assert check_artifact(two_modules, "2.10.0,2.13", None, None, None).summary == (
        "2 of 2 modules on 2.13.0+, 1 of 2 on 2.10.0 (_old.abi3.so)"
    )
    assert check_artifact(two_modules, "2.9,2.10", None, None, None).summary == (
        "1 of 2 modules on 2.10.0+ (_old.abi3.so), 0 of 2 on 2.9.1"
    )


def test_the_json_carries_the_per_module_records(two_modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(two_modules), "--runtimes", "2.10+", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, load_schema("check"))
    assert data["schema_version"] == CHECK_JSON_VERSION == 2
    assert data["loads_from"] == "2.11.0"
    assert data["summary"].startswith("2 of 2 modules on 2.11.0+, 1 of 2 on 2.10.0")
    by_runtime = {p["runtime"]: p["modules_loading"] for p in data["predictions"]}
    assert by_runtime["2.10.0"] == ["pkg/_old.abi3.so"]
    assert len(by_runtime["2.15.0"]) == 2
    old, new = data["modules"]
    assert (old["name"], old["python_tag"], old["loads_from"]) == ("pkg/_old.abi3.so", "abi3", "2.10.0")
    assert (new["python_tag"], new["loads_from"]) == ("cpython-3.10", "2.11.0")
    assert old["imports"]["stable"] == [FROM_2_10]
    assert new["imports"]["stable"] == [FROM_2_11]
    missing = {p["runtime"]: [m["name"] for m in p["missing"]] for p in new["predictions"]}
    assert missing["2.10.0"] == [FROM_2_11]
    assert missing["2.11.0"] == []
    assert old["needs"]["tags"] == ["cp310-abi3-linux_x86_64"]
    assert old["limited_api"] == {"floor": "3.10", "judged_at": "3.10", "imported": 0, "outside": []}


def test_the_text_shows_every_module_and_the_summary(two_modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(two_modules), "--runtimes", "2.10+"]) == 1
    out = capsys.readouterr().out
    assert "2 extension modules" in out
    assert "together (what loads the whole wheel):" in out
    assert "module pkg/_old.abi3.so:" in out
    assert "named for CPython 3.10 only" in out.replace("\n", " ")
    assert "modules: 2 of 2 modules on 2.11.0+, 1 of 2 on 2.10.0 (_old.abi3.so)" in out.replace("\n", " ")


def test_a_single_shared_object_has_one_module_and_no_summary_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    library = shared_object(tmp_path, "_C.so", [FROM_2_10])
    assert main(["check", str(library), "--runtimes", "2.10+"]) == 0
    assert "modules:" not in capsys.readouterr().out
    check = check_artifact(library, "2.9+", None, None, None)
    assert [m.loads_from for m in check.modules] == ["2.10.0"]
    assert check.whole.limited_api is None  # no wheel tags: no abi3 floor
    assert check.summary == "1 of 1 modules on 2.10.0+, 0 of 1 on 2.9.1"


def test_the_limited_api_table_is_what_real_headers_declare() -> None:
    """Regenerated in part from the interpreter running the tests: its headers at two levels, against the table."""
    include = Path(sysconfig.get_paths()["include"])
    here = sys.version_info[:2]
    table = packaged_limited_api()
    now, before = visible(include, here), visible(include, (here[0], here[1] - 1))
    added = sorted(now - before)
    assert added, f"CPython {here} headers add nothing to the limited API: the generator reads nothing"
    for name in added:
        if name in table.symbols:  # the table keeps what the library exports too: a declaration alone may be absent
            assert table.first(name) == f"{here[0]}.{here[1]}", name
    assert table.first("PyLong_FromLong") == "3.2"
    assert table.first("PyUnicode_AsUTF8AndSize") == "3.10"
    assert table.first("PyBuffer_Release") == "3.11"
    assert table.first("_PyObject_GetDictPtr") is None  # private: in no limited API


def test_abi3_floor_and_module_names() -> None:
    from packaging.tags import parse_tag

    assert abi3_floor(parse_tag("cp310-abi3-manylinux_2_28_x86_64")) == "3.10"
    assert abi3_floor([*parse_tag("cp39-abi3-linux_x86_64"), *parse_tag("cp311-abi3-linux_x86_64")]) == "3.9"
    assert abi3_floor(parse_tag("cp311-cp311-linux_x86_64")) is None
    assert module_python("pkg/_C.abi3.so") == "abi3"
    assert module_python("pkg/_C.cpython-313t-x86_64-linux-gnu.so") == "cpython-3.13t"
    assert module_python("pkg/_C.so") is None


def test_python_symbols_outside_the_floors_limited_api_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cp39-abi3 wheel whose module imports a 3.10 symbol and a private one: both named, exit 1."""
    path = wheel(
        tmp_path,
        {
            "pkg/_ok.abi3.so": ["PyLong_FromLong"],
            "pkg/_bad.abi3.so": ["PyLong_FromLong", "PyUnicode_AsUTF8AndSize", "_PyObject_GetDictPtr"],
        },
        name="pkg-0.1.0-cp39-abi3-linux_x86_64.whl",
    )
    check = check_artifact(path, "2.13", None, None, None)
    ok, bad = check.modules
    assert ok.limited_api is not None and ok.limited_api.outside == ()
    assert bad.limited_api is not None
    assert bad.limited_api.describe() == (
        "outside the limited API of CPython 3.9: PyUnicode_AsUTF8AndSize (limited API from 3.10), "
        "_PyObject_GetDictPtr (not limited API)"
    )
    assert check.failing and bad.failing and not ok.failing
    assert main(["check", str(path), "--runtimes", "2.13", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, load_schema("check"))
    assert data["modules"][1]["limited_api"]["outside"] == [
        {"symbol": "PyUnicode_AsUTF8AndSize", "limited_from": "3.10"},
        {"symbol": "_PyObject_GetDictPtr", "limited_from": None},
    ]
    assert data["limited_api"]["imported"] == 3  # the wheel as a whole: every module's imports
    # the same wheel tagged cp310-abi3: only the private symbol is outside
    later = check_artifact(wheel(tmp_path, {"pkg/_bad.abi3.so": ["PyUnicode_AsUTF8AndSize"]}), "2.13", None, None, None)
    assert later.whole.limited_api is not None and later.whole.limited_api.outside == ()


def test_a_floor_newer_than_the_table_is_judged_at_its_newest_level() -> None:
    table = packaged_limited_api()
    audit = LimitedApiAudit.of(["PyLong_FromLong"], "3.99", table)
    assert audit.judged_at == table.levels[-1]
    assert "table's newest level" in audit.describe()


def test_the_check_schema_refuses_a_module_record_without_its_predictions(two_modules: Path) -> None:
    data = check_artifact(two_modules, "2.13", None, None, None).to_json()
    jsonschema.validate(data, load_schema("check"))
    del data["modules"][0]["predictions"]
    with pytest.raises(jsonschema.ValidationError, match="'predictions' is a required property"):
        jsonschema.validate(data, load_schema("check"))
