"""The promise's artifact conditions: the CUDA its DT_NEEDED names and the Python its wheel tags fit,
against the runtime as prepared; their classes in the promise, the prediction and the report."""

import dataclasses
import json
import subprocess
import zipfile
from pathlib import Path

import jsonschema
import pytest
from packaging.utils import parse_wheel_filename

from torch_abi_harness.cli import main
from torch_abi_harness.config import CudaPolicy
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Condition, Status
from torch_abi_harness.plan import Cell, PlanIdentity, make_plan
from torch_abi_harness.render.text import expected_failure_classes, summary_markdown
from torch_abi_harness.results.model import CellResult, RunResult
from torch_abi_harness.run.judge import Observed, judge_cell
from torch_abi_harness.static.artifact import ArtifactFacts, RuntimeFacts, cuda_major, python_problem, unmet, wheel_tags
from torch_abi_harness.static.manifest import Manifest
from torch_abi_harness.static.predict import ArtifactImports, Predicted, findings, predict
from torch_abi_harness.static.symbols import SharedObject
from torch_abi_harness.verdict import Expected, Verdict, promise

# DT_NEEDED as read from the wheels the default matrix builds (torch_abi_harness.static.symbols.read_artifact).
CUDA_OPS = ("libc10.so", "libtorch_cpu.so", "libcudart.so.13", "libtorch_cuda.so", "libstdc++.so.6", "libc.so.6")
STABLE_BASIC = ("libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6")
# A CUDA 12 extension that also uses cuFFT, whose soname (libcufft.so.11 in CUDA 12) is not the CUDA major.
CUDA12_FFT = ("libc10.so", "libcufft.so.11", "libcublas.so.12", "libcudart.so.12", "libtorch_cuda.so")
ABI3 = "cuda_ops-0.1.0-cp39-abi3-linux_x86_64.whl"
CP311 = "classic_ops-0.1.0-cp311-cp311-linux_x86_64.whl"

CU128 = RuntimeFacts.of("2.10.0+cu128", "cu128", "3.11")
CU130 = RuntimeFacts.of("2.14.1+cu130", "cu130", "3.11")
CU132 = RuntimeFacts.of("2.15.0+cu132", "cu132", "3.11")
CPU = RuntimeFacts.of("2.13.0+cpu", "cpu", "3.11")


def facts(needed: tuple[str, ...], wheel: str = ABI3) -> ArtifactFacts:
    return ArtifactFacts(tuple(sorted(needed)), parse_wheel_filename(wheel)[3])


@pytest.fixture
def cells(repo: Path) -> dict[str, Cell]:
    return {c.id: c for c in make_plan(load_matrix(repo / "matrix.yaml")).cells}


@pytest.mark.parametrize(
    ("variant", "major"),
    [("cu128", 12), ("cu130", 13), ("cu132", 13), ("cu92", 9), ("cu118", 11), ("cpu", None), ("rocm6.2", None)],
)
def test_the_cuda_major_of_a_torch_variant(variant: str, major: int | None) -> None:
    assert cuda_major(variant) == major


def test_cuda_libraries_and_their_majors_from_dt_needed() -> None:
    assert facts(CUDA_OPS).cuda_libraries == ("libtorch_cuda.so", "libcudart.so.13")
    assert facts(CUDA_OPS).cuda_majors == (("libcudart.so.13", 13),)
    assert facts(CUDA12_FFT).cuda_majors == (("libcublas.so.12", 12), ("libcudart.so.12", 12))  # not cufft's 11
    assert facts(STABLE_BASIC).cuda_libraries == ()


@pytest.mark.parametrize(
    ("runtime", "condition", "why"),
    [
        (CU128, Condition.CUDA_MAJOR, "needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12"),
        (CPU, Condition.NO_CUDA, "needs libtorch_cuda.so; torch 2.13.0+cpu is a build without CUDA"),
        (CU130, None, None),
        (CU132, None, None),
    ],
)
def test_a_cuda_build_is_promised_only_where_torch_ships_its_cuda_major(
    cells: dict[str, Cell], runtime: RuntimeFacts, condition: Condition | None, why: str | None
) -> None:
    release = runtime.torch.partition("+")[0]
    cell = cells[f"cuda_ops@b2.14.1-t2.10~r{release}-cpu"]
    got = promise(cell, facts(CUDA_OPS), runtime)
    if condition is None:
        assert (got.expected, got.condition) == (Expected.PASS, Condition.TORCH_ABI)
    else:
        assert (got.expected, got.condition, got.why) == (Expected.LOAD_FAILED, condition, why)
    assert promise(cell) == promise(cell, None, runtime)  # without the artifact: the plan's promise


def test_cuda_any_promises_every_cuda_major_but_not_a_torch_without_cuda(cells: dict[str, Cell]) -> None:
    def any_major(cell: Cell) -> Cell:
        return dataclasses.replace(cell, build=dataclasses.replace(cell.build, cuda=CudaPolicy.ANY))

    on_cu128 = any_major(cells["cuda_ops@b2.14.1-t2.10~r2.10.0-cpu"])
    assert promise(on_cu128, facts(CUDA_OPS), CU128).expected is Expected.PASS
    on_cpu = any_major(cells["cuda_ops@b2.14.1-t2.10~r2.13.0-cpu"])
    assert promise(on_cpu, facts(CUDA_OPS), CPU).condition is Condition.NO_CUDA


def test_a_cpu_only_artifact_needs_no_cuda(cells: dict[str, Cell]) -> None:
    cell = cells["stable_basic@b2.13.0-t2.10~r2.13.0-cpu"]
    assert promise(cell, facts(STABLE_BASIC), CPU).expected is Expected.PASS
    assert unmet(facts(STABLE_BASIC), CU128) == ()


@pytest.mark.parametrize(
    ("wheel", "python", "problem"),
    [
        (ABI3, "3.11", None),
        (ABI3, "3.9", None),
        (ABI3, "3.8", "a cp39-abi3 wheel fits CPython >= 3.9 (not free-threaded); the runtime runs CPython 3.8"),
        (ABI3, "3.13t", "a cp39-abi3 wheel fits CPython >= 3.9 (not free-threaded); the runtime runs CPython 3.13t"),
        (CP311, "3.11", None),
        (CP311, "3.12", "a cp311-cp311 wheel fits CPython 3.11 only; the runtime runs CPython 3.12"),
        ("torch-2.12.1-cp313-cp313t-manylinux_2_28_x86_64.whl", "3.13t", None),
        (
            "torch-2.12.1-cp313-cp313t-manylinux_2_28_x86_64.whl",
            "3.13",
            "a cp313-cp313t wheel fits CPython 3.13t only; the runtime runs CPython 3.13",
        ),
        ("helper-1.0-py3-none-any.whl", "3.13t", None),
    ],
)
def test_the_python_abi_of_wheel_tags(wheel: str, python: str, problem: str | None) -> None:
    assert python_problem(parse_wheel_filename(wheel)[3], python) == problem


def test_a_wheel_that_does_not_fit_the_runtimes_python_is_expected_not_to_load(cells: dict[str, Cell]) -> None:
    cell = cells["classic_ops@b2.13.0~r2.13.0-cpu"]  # promised on its own release...
    on_312 = dataclasses.replace(CPU, python="3.12")  # ...but not where CPython cannot import it
    got = promise(cell, facts(STABLE_BASIC, CP311), on_312)
    assert (got.expected, got.condition) == (Expected.LOAD_FAILED, Condition.PYTHON_ABI)
    on_its_own = promise(cell, facts(STABLE_BASIC, CP311), CPU)  # an unstable build on the torch it was built with
    assert (on_its_own.expected, on_its_own.condition) == (Expected.PASS, Condition.UNSTABLE)
    assert promise(cell, facts(STABLE_BASIC, CP311), None) == promise(cell)  # no runtime facts: the plan's promise
    # The Python ABI is named first, then CUDA: both are listed for the prediction.
    both = unmet(facts(CUDA_OPS, CP311), dataclasses.replace(CU128, python="3.12"))
    assert [u.condition for u in both] == [Condition.PYTHON_ABI, Condition.CUDA_MAJOR]


def test_the_plans_conditions_have_their_classes(cells: dict[str, Cell]) -> None:
    assert promise(cells["stable_basic@b2.15.0~r2.14.1-cpu"]).condition is Condition.TORCH_ABI
    assert promise(cells["classic_ops@b2.13.0~r2.10.0-cpu"]).condition is Condition.UNSTABLE
    assert promise(cells["crash_control@b2.13.0-t2.9~r2.9.1-cpu"]).condition is Condition.CONTROL
    # A negative control that cannot load on a CPU torch is an expected load failure, not a broken control.
    cuda_control = promise(cells["crash_control@b2.13.0-t2.9~r2.13.0-cpu"], facts(CUDA_OPS), CPU)
    assert (cuda_control.expected, cuda_control.condition) == (Expected.LOAD_FAILED, Condition.NO_CUDA)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cuda_control.why = "edited"  # type: ignore[misc]


def test_an_unstable_build_is_promised_only_on_the_torch_it_was_built_with(cells: dict[str, Cell]) -> None:
    unstable = [c for c in cells.values() if not c.build.extension.stable]
    builds_and_runs = {(c.build.torch, c.runtime.torch) for c in unstable}
    assert any(b < r for b, r in builds_and_runs) and any(b > r for b, r in builds_and_runs)
    for cell in unstable:
        expected = Expected.PASS if cell.build.torch == cell.runtime.torch else Expected.NONE
        assert (promise(cell).expected, promise(cell).condition) == (expected, Condition.UNSTABLE), cell.id


def test_wheel_tags_come_from_the_file_name_and_the_wheel_file(tmp_path: Path) -> None:
    path = tmp_path / ABI3
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("cuda_ops-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp310-abi3-manylinux_2_28_x86_64\n")
    assert sorted(str(t) for t in wheel_tags(path)) == ["cp310-abi3-manylinux_2_28_x86_64", "cp39-abi3-linux_x86_64"]
    so = SharedObject("cuda_ops/_C.abi3.so", frozenset(), frozenset(), frozenset(), CUDA_OPS, ())
    read = ArtifactFacts.of(path, [so])
    assert read.needed == tuple(sorted(CUDA_OPS)) and read.tags == wheel_tags(path)
    assert wheel_tags(tmp_path / "_C.abi3.so") == frozenset()  # a bare shared object has no tags


def test_prediction_names_the_library_a_runtime_lacks() -> None:
    manifest = Manifest({"schema_version": 1, "releases": ["2.10.0"], "symbols": {}})
    imports = ArtifactImports(frozenset(), {}, frozenset(), frozenset(), {})
    lacks = unmet(facts(CUDA_OPS), CU128)
    fails = predict(imports, "2.10.0+cu128", set(), manifest, lacks, full_exports=True)
    assert fails.outcome is Predicted.LOAD_FAILED and fails.missing == ()
    assert fails.summary == "needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12"
    assert fails.to_json()["unmet"] == [{"class": "cuda-major", "why": fails.summary}]
    assert findings(fails, "PASS", "17 passed", None) == [
        "predicted not to load (needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12), but it loaded and ended PASS"
    ]
    reason = "OSError: libcudart.so.13: cannot open shared object file: No such file or directory"
    assert findings(fails, "LOAD_FAILED", reason, None) == []
    assert predict(
        imports, "2.14.1+cu130", set(), manifest, unmet(facts(CUDA_OPS), CU130), full_exports=True
    ).outcome is (Predicted.LOADS)


def _result(cell: Cell, status: Status, runtime: RuntimeFacts, variant: str) -> CellResult:
    expectation = promise(cell, facts(CUDA_OPS), runtime)
    observed = Observed(
        status=status, reason="OSError: ...", backend="venv", runtime_torch=runtime.torch, runtime_variant=variant
    )
    return judge_cell(cell, observed, expectation)


def test_results_and_summary_carry_and_group_the_class(cells: dict[str, Cell], tmp_path: Path) -> None:
    major = _result(cells["cuda_ops@b2.14.1-t2.10~r2.10.0-cpu"], Status.LOAD_FAILED, CU128, "cu128")
    none = _result(cells["cuda_ops@b2.14.1-t2.10~r2.13.0-cpu"], Status.LOAD_FAILED, CPU, "cpu")
    kept = _result(cells["cuda_ops@b2.14.1-t2.10~r2.14.1-cpu"], Status.PASS, CU130, "cu130")
    ran = (major, none, kept)
    assert [c.verdict for c in ran] == [Verdict.EXPECTED_FAILURE, Verdict.EXPECTED_FAILURE, Verdict.KEPT]
    run = RunResult("r", "s", "f", "0", "matrix.yaml", "venv", (), ran, (), (), plan=PlanIdentity("m", ()))
    data = run.to_json()
    by_id = {c["id"]: c for c in data["cells"]}
    assert by_id[major.id]["expected_class"] == "cuda-major" and by_id[kept.id]["expected_class"] == "torch-abi"
    jsonschema.validate(data, load_schema("results"))
    assert RunResult.from_json(json.loads(json.dumps(data))).cells[0].expected_class is major.expected_class
    del data["cells"][0]["expected_class"]  # results written before the class existed still load
    assert RunResult.from_json(data).cells[0].expected_class is None
    assert [g.name for g in expected_failure_classes(run.cells)] == ["no-cuda", "cuda-major"]
    text = summary_markdown(run)
    assert (
        "- ➖ **cuda-major**: the build needs a CUDA major the runtime's torch does not ship "
        "(1 cell(s): needs libcudart.so.13; torch 2.10.0+cu128 ships CUDA 12)"
    ) in text
    assert f"`{none.id}`: **LOAD_FAILED** (expected_failure): OSError: ... (expected load_failed [no-cuda]:" in text


def test_the_results_schema_knows_every_class_and_refuses_others() -> None:
    cell = load_schema("results")["$defs"]["cell"]["properties"]
    assert cell["expected_class"]["enum"] == [*(c.value for c in Condition), None]
    unmet_class = cell["prediction"]["oneOf"][1]["properties"]["unmet"]["items"]["properties"]["class"]["enum"]
    lacks = (Condition.PYTHON_ABI, Condition.NO_CUDA, Condition.CUDA_MAJOR, Condition.NO_DRIVER)  # unmet's
    assert unmet_class == [c.value for c in lacks]


def test_check_reads_dt_needed_and_tags_of_a_real_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub = tmp_path / "libcudart.so.13"  # a library whose soname the extension then names in DT_NEEDED
    (tmp_path / "stub.c").write_text("int cudaGetDeviceCount(int* n) { *n = 0; return 0; }\n")
    (tmp_path / "ext.c").write_text(
        "extern int cudaGetDeviceCount(int*);\nint count(int* n) { return cudaGetDeviceCount(n); }\n"
    )
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", stub, tmp_path / "stub.c"], check=True
    )
    library = tmp_path / "_C.abi3.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, tmp_path / "ext.c", stub], check=True)
    wheel = tmp_path / ABI3
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(library, "cuda_ops/_C.abi3.so")
    assert ArtifactFacts.of(wheel).cuda_majors == (("libcudart.so.13", 13),)

    assert main(["check", str(wheel), "--runtimes", "2.14", "--variant", "cu128", "--python", "3.12", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["needs"] == {"needed": ["libcudart.so.13"], "tags": ["cp39-abi3-linux_x86_64"]}
    (prediction,) = data["predictions"]
    assert prediction["outcome"] == "load_failed"
    assert prediction["unmet"] == [
        {"class": "cuda-major", "why": "needs libcudart.so.13; torch 2.14.1+cu128 ships CUDA 12"}
    ]
    assert main(["check", str(wheel), "--runtimes", "2.14", "--variant", "cu130", "--python", "3.8"]) == 1
    assert "a cp39-abi3 wheel fits CPython >= 3.9 (not free-threaded); the runtime runs CPython 3.8" in (
        capsys.readouterr().out.replace("\n", " ")
    )
    assert main(["check", str(wheel), "--runtimes", "2.14"]) == 0  # neither given: only symbols are checked
    assert "needs a torch of CUDA 13: libcudart.so.13 (give --variant to check it)" in capsys.readouterr().out
