"""`check` on a real published wheel with two extension modules that load from different releases: torchao 0.18.0
(issue 25). Loaded for real, module by module, in each runtime env: `_C_cutlass_90a.abi3.so` loads from 2.10.0 and
fails on 2.9.1 (`undefined symbol: torch_c10_cuda_free_error_msg`); `_C_mxfp8...so` loads from 2.11.0 and fails on
2.10.0 (`torch_dtype_float4_e2m1fn_x2`). `check` must say that per module, not only "the wheel loads from 2.11.0"."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from harness.cli import main
from harness.core.schema import load_schema
from harness.provision.envs import default_cache_dir

TORCHAO = "torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
CUTLASS = "torchao/_C_cutlass_90a.abi3.so"
MXFP8 = "torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"


@pytest.fixture(scope="module")
def torchao_wheel() -> Path:
    """The wheel from the configured package sources (pip's configuration), downloaded once into the harness cache."""
    folder = default_cache_dir() / "tmp" / "torchao-0.18.0"
    wheel = folder / TORCHAO
    if not wheel.is_file():
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--no-deps", "torchao==0.18.0", "--only-binary=:all:"),
                *("--python-version", "3.10", "--platform", "manylinux_2_28_x86_64", "-d", str(folder)),
            ],
            check=True,
        )
    assert wheel.is_file(), f"pip downloaded no {TORCHAO} into {folder}: {sorted(p.name for p in folder.iterdir())}"
    return wheel


def test_check_predicts_each_torchao_module_on_its_own(torchao_wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(torchao_wheel), "--runtimes", "2.9+", "--json"]) == 1  # 2.9.1 and 2.10.0 fail
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, load_schema("check"))
    modules = {m["name"]: m for m in data["modules"]}
    assert sorted(modules) == [CUTLASS, MXFP8]
    outcome = {name: {p["runtime"]: p for p in m["predictions"]} for name, m in modules.items()}
    releases = ["2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
    assert list(outcome[CUTLASS]) == releases

    assert modules[CUTLASS]["loads_from"] == "2.10.0"
    assert outcome[CUTLASS]["2.9.1"]["outcome"] == "load_failed"
    assert "torch_c10_cuda_free_error_msg" in [m["name"] for m in outcome[CUTLASS]["2.9.1"]["missing"]]
    assert all(outcome[CUTLASS][r]["outcome"] == "loads" for r in releases[1:])

    assert modules[MXFP8]["loads_from"] == "2.11.0"
    for release in ("2.9.1", "2.10.0"):
        assert outcome[MXFP8][release]["outcome"] == "load_failed"
        assert "torch_dtype_float4_e2m1fn_x2" in [m["name"] for m in outcome[MXFP8][release]["missing"]]
    assert all(outcome[MXFP8][r]["outcome"] == "loads" for r in releases[2:])

    # the wheel as a whole (what loads every module) and the modules' summary
    assert data["loads_from"] == "2.11.0"
    assert data["summary"] == "2 of 2 modules on 2.11.0+, 1 of 2 on 2.10.0 (_C_cutlass_90a.abi3.so), 0 of 2 on 2.9.1"
    # CUDA and Python needs per module: both need CUDA 13; the Python C API audit against cp310-abi3's floor
    for module in modules.values():
        assert "libcudart.so.13" in module["needs"]["needed"]
        assert module["limited_api"] == {"floor": "3.10", "judged_at": "3.10", "imported": 0, "outside": []}
    assert (modules[CUTLASS]["python_tag"], modules[MXFP8]["python_tag"]) == ("abi3", "cpython-3.10")

    assert main(["check", str(torchao_wheel), "--runtimes", "2.9+"]) == 1
    text = capsys.readouterr().out.replace("\n", " ")
    assert "2 of 2 modules on 2.11.0+" in text
    assert "1 of 2 on 2.10.0" in text
