"""Source trees built their own way: the target a build was really compiled for, a failed build said once,
sources read from outside the extension, a suite that imports a newer torch.testing helper, a run that
proved nothing."""

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.unit.test_report import KEPT, result, run_of
from tools.gen_testing_names import bound_names
from torch_abi_harness.builds import BuildResult, climbing_paths, compiled_levels, compiled_target, outside_reads
from torch_abi_harness.config.extension import load_extension
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError, ExitCode
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.status import Status
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import Build, Cell, make_plan
from torch_abi_harness.render.report import write_report
from torch_abi_harness.results.model import BuildRow, load_results
from torch_abi_harness.run.judge import judge_build
from torch_abi_harness.static.predict import ArtifactImports
from torch_abi_harness.static.testing_names import first_release, import_hint
from torch_abi_harness.verdict import Expected, Verdict, promise

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS_LINE = (
    "g++ -Wsign-compare -DNDEBUG -fPIC -I/env/torch/include -c csrc/ops.cpp -o build/temp/csrc/ops.o "
    "-O2 -std=c++17{define} -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C\n"
)


def log_with(*defines: str) -> str:
    lines = [SETUPTOOLS_LINE.format(define=f" -DTORCH_TARGET_VERSION={d}" if d else "") for d in defines]
    return "running build_ext\nbuilding 'x._C' extension\n" + "".join(lines)


def no_imports(*stable: str) -> ArtifactImports:
    return ArtifactImports(frozenset(stable), {}, frozenset(), frozenset(), {})


@pytest.fixture(scope="module")
def plan_cells() -> dict[str, Cell]:
    plan = make_plan(load_matrix(REPO / "matrix.yaml"), ["stable_basic@b2.15.0-t2.9~r2.9.1", "stable_basic@b2.13.0"])
    return {c.id: c for c in plan.cells}


@pytest.fixture
def build_t29(plan_cells: dict[str, Cell]) -> Build:
    return next(c.build for c in plan_cells.values() if c.build.target == ApiLevel(2, 9))


def test_a_target_hex_reads_back_as_its_level() -> None:
    assert ApiLevel.from_hex("0x020a000000000000") == ApiLevel(2, 10)
    assert ApiLevel.from_hex(ApiLevel(2, 15).hex) == ApiLevel(2, 15)


def test_the_log_says_which_targets_the_compiler_was_given() -> None:
    assert compiled_levels(log_with("0x020a000000000000")) == (ApiLevel(2, 10),)
    assert compiled_levels(log_with("0x020a000000000000", "0x020b000000000000", "0x020a000000000000")) == (
        ApiLevel(2, 10),
        ApiLevel(2, 11),
    )
    assert compiled_levels(log_with("")) == ()  # compiler lines, and none defines it
    assert compiled_levels("running build_ext\nerror: quiet\n") is None  # no compiler line: nothing known
    ninja = "[1/2] c++ -MMD -MF ops.o.d -DTORCH_TARGET_VERSION=0x020c000000000000 -c /src/ops.cpp -o ops.o\n"
    assert compiled_levels(ninja) == (ApiLevel(2, 12),)


def test_a_setup_py_with_its_own_target_is_a_finding_and_its_level(build_t29: Build) -> None:
    level, found = compiled_target(build_t29, log_with("0x020a000000000000"), no_imports())
    assert level == ApiLevel(2, 10)
    assert len(found) == 1 and "asked for target 2.9" in found[0] and "built for 2.10" in found[0]
    # The target it was asked for: nothing to say.
    assert compiled_target(build_t29, log_with(ApiLevel(2, 9).hex), no_imports()) == (ApiLevel(2, 9), ())


def test_a_log_without_the_define_is_built_for_its_build_torchs_own_level(build_t29: Build) -> None:
    level, found = compiled_target(build_t29, log_with(""), no_imports())
    assert level == ApiLevel(2, 15)
    assert "no compiler command line in its build log defines TORCH_TARGET_VERSION" in found[0]
    assert "built for its build torch's own level 2.15" in found[0]
    # A build with no target asked, compiled without one: as asked.
    own = dataclasses.replace(build_t29, target=None)
    assert compiled_target(own, log_with(""), no_imports()) == (ApiLevel(2, 15), ())


def test_an_import_newer_than_the_level_is_a_finding_not_a_new_promise(build_t29: Build) -> None:
    # A quiet log says nothing; torch_parallel_for (first exported in 2.10.0) says it needs 2.10. That is what a
    # header guard leaking a newer shim into a 2.9 build does: the break the promise (2.9) exists to catch.
    level, found = compiled_target(build_t29, "quiet\n", no_imports("torch_parallel_for"))
    assert level == ApiLevel(2, 9)
    assert found == (
        "built for 2.9 but imports torch_parallel_for, first exported in 2.10.0: it needs stable-ABI level 2.10 "
        "(its cells are still promised by 2.9, what its compiler was given)",
    )


def test_cells_are_promised_by_the_level_really_built_for(plan_cells: dict[str, Cell]) -> None:
    cell = plan_cells["stable_basic@b2.15.0-t2.9~r2.9.1-cpu"]
    assert promise(cell).expected is Expected.PASS
    real = promise(cell, built_for=ApiLevel(2, 10))
    assert real.expected is Expected.LOAD_FAILED and real.why == "target 2.10 is newer than the runtime torch 2.9"


def built(build: Build, *, ok: bool, **details: object) -> BuildResult:
    return BuildResult(
        build,
        ok,
        "" if ok else "ops.cpp:3: error: boom",
        None,
        None,
        Path("log"),
        1.0,
        cached=False,
        key="k",
        **details,
    )  # type: ignore[arg-type]


def test_a_build_row_says_whether_it_kept_its_promise_to_compile(build_t29: Build) -> None:
    assert judge_build(built(build_t29, ok=True)).verdict is Verdict.KEPT
    failed = judge_build(built(build_t29, ok=False))
    assert (failed.verdict, failed.reason, failed.built_for) == (Verdict.BROKEN, "ops.cpp:3: error: boom", None)
    assert failed.expected_why == "target 2.9 <= build torch 2.15"
    too_new = dataclasses.replace(build_t29, target=ApiLevel(2, 16))
    assert judge_build(built(too_new, ok=False)).verdict is Verdict.EXPECTED_FAILURE
    assert judge_build(built(build_t29, ok=False, toolchain="no nvcc")).verdict is Verdict.SKIPPED
    assert judge_build(built(build_t29, ok=False, infrastructure=True)).verdict is Verdict.ERROR
    real = judge_build(built(build_t29, ok=True, built_for=ApiLevel(2, 10), findings=("asked 2.9, built 2.10",)))
    assert (real.target, real.built_for, real.findings) == ("2.9", "2.10", ("asked 2.9, built 2.10",))


NOT_RUN = dataclasses.replace(
    result("b2.10.0", "r2.13.0-cpu", Status.NOT_RUN, Verdict.NOT_RUN), reason="not run: the build failed"
)
SKIPPED = result("b2.10.0", "r2.10.0-cpu", Status.SKIPPED, Verdict.SKIPPED)
FAILED_BUILD = BuildRow("demo@b2.10.0", Verdict.BROKEN, "ops.cpp:3: error: boom", "target 2.10 <= build torch 2.10")


def test_a_failed_build_is_one_broken_promise_and_its_cells_are_not_run(tmp_path: Path) -> None:
    run = dataclasses.replace(run_of(KEPT, NOT_RUN), builds=(FAILED_BUILD,))
    assert run.exit_code is ExitCode.BROKEN and run.counts()["broken"] == 0 and run.counts()["not_run"] == 1
    files = write_report(run, tmp_path)
    data = json.loads(files["results"].read_text())
    jsonschema.validate(data, load_schema("results"))
    assert data["build_results"][0]["verdict"] == "broken" and data["exit_code"] == 1
    assert load_results(files["results"]).builds == (FAILED_BUILD,)
    summary = files["summary"].read_text()
    assert "| `demo@b2.10.0` ❌ build |" in summary  # on the build row of the grid
    assert (
        "- ❌ `demo@b2.10.0`: **broken**: ops.cpp:3: error: boom (expected: target 2.10 &lt;= build torch 2.10)"
        in summary
    )
    junit = ET.parse(files["junit"]).getroot()
    assert junit.get("failures") == "1" and junit.get("tests") == "3"
    failure = next(c for c in junit.iter("testcase") if c.get("name") == "build").find("failure")
    assert failure is not None and failure.get("message") == "BUILD_FAILED: ops.cpp:3: error: boom"
    assert "demo@b2.10.0" in (tmp_path / "report.html").read_text().split('id="builds"')[1]


def test_a_run_that_proved_nothing_says_so_and_exits_4(tmp_path: Path) -> None:
    run = run_of(SKIPPED, NOT_RUN)
    assert run.exit_code is ExitCode.NOTHING_PROVEN
    assert run.unproven == "nothing was proven: 1 cells skipped, 1 not run"
    summary = write_report(run, tmp_path)["summary"].read_text()
    assert "**Result: nothing was proven: 1 cells skipped, 1 not run** (exit 4)" in summary
    assert run_of(SKIPPED, KEPT).exit_code is ExitCode.OK  # one cell proved something
    assert run_of().exit_code is ExitCode.OK  # an empty shard is not a run that tried
    results = json.loads((tmp_path / "results.json").read_text())
    jsonschema.validate(results, load_schema("results"))
    assert results["exit_code"] == 4


def test_a_recipe_that_climbs_out_is_named_with_what_to_declare(tmp_path: Path) -> None:
    ext = tmp_path / "repo" / "ext"
    ext.mkdir(parents=True)
    (ext / "setup.py").write_text('# ../comment is not a path\nsources = ["../csrc/ops.cpp", "csrc/local.cpp"]\n')
    assert climbing_paths(ext) == ("setup.py, line 2: ../csrc/ops.cpp",)
    why = outside_reads(ext, "error: boom\n", tmp_path / "tmp" / "src", tmp_path / "tmp" / "src")
    assert why is not None and "(setup.py, line 2: ../csrc/ops.cpp)" in why and "sources_root: .." in why
    (ext / "setup.py").write_text('sources = ["csrc/local.cpp"]\n')
    copied = tmp_path / "tmp" / "src"
    log = f"g++: error: {tmp_path}/tmp/shared/ops.cpp: No such file or directory\n"
    assert "(g++: error: ../shared/ops.cpp: No such file or directory)" in (
        outside_reads(ext, log, copied, copied) or ""
    )
    inside = f"g++: error: {copied}/csrc/x.cpp: No such file or directory\n"
    assert outside_reads(ext, inside, copied, copied) is None  # a file of its own that is missing: not outside


def test_sources_root_must_be_a_folder_above_the_extension(tmp_path: Path) -> None:
    ext = tmp_path / "repo" / "ext"
    (ext / "tests").mkdir(parents=True)
    head = "name: e\nmodule: e\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n"
    (ext / "extension.yaml").write_text(head + "sources_root: ..\n")
    assert load_extension(ext).sources_root == tmp_path / "repo"
    for bad in (".", "tests", "../elsewhere"):
        (ext / "extension.yaml").write_text(head + f"sources_root: {bad}\n")
        with pytest.raises(ConfigError, match=r"line 6: sources_root: .* is not a folder above the extension's"):
            load_extension(ext)
    (ext / "extension.yaml").write_text(head + "requires: [gcc]\n")
    with pytest.raises(ConfigError, match="requires"):
        load_extension(ext)


def test_a_torch_testing_name_says_in_which_release_it_first_appears() -> None:
    assert first_release("torch.testing._internal.common_utils", "skipIfFreeThreaded") == "2.11.0"
    assert first_release("torch.testing._internal.common_utils", "TestCase") is None  # in every release
    message = (
        "cannot import name 'skipIfFreeThreaded' from 'torch.testing._internal.common_utils' "
        "(/env/lib/python3.11/site-packages/torch/testing/_internal/common_utils.py)"
    )
    assert (import_hint(message) or "").startswith("`skipIfFreeThreaded` first appears in torch 2.11")
    assert import_hint("cannot import name 'nothing_like_it' from 'torch.testing._internal.common_utils'") is None
    assert import_hint("No module named 'expecttest'") is None


def test_the_generator_reads_the_names_a_module_binds() -> None:
    source = "import os, a.b as c\nfrom x import y as z, w\nX: int = 1\nY = Z = 2\ndef f(): pass\nclass K: pass\n"
    assert bound_names(source) == {"os", "c", "z", "w", "X", "Y", "Z", "f", "K"}
