"""An author's [tool.torch-abi-harness] table (or torch-abi.toml) translated into the matrix model: each default
read from the project, each key given taking its place, and every problem naming its key, all at once (exit 2)."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version
from test_prebuilt import ops_wheel

from torch_abi_harness.cli import main
from torch_abi_harness.config import Recipe
from torch_abi_harness.config.author import known_releases, load_author_config
from torch_abi_harness.config.defaults import ConfigKind, default_matrix_source
from torch_abi_harness.config.target import source_target
from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.core.files import content_digest
from torch_abi_harness.core.schema import load_schema
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import BUILD_OUTPUTS

LEVEL_2_10 = "0x020a000000000000"
LEVEL_2_14 = "0x020e000000000000"
SETUP = f'from setuptools import setup\nsetup(extra_compile_args=["-DTORCH_TARGET_VERSION={LEVEL_2_10}"])\n'
RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"


def project(root: Path, table: str = "", *, head: str = "", setup: str | None = SETUP, package: str = "my_ops") -> Path:
    """A small extension source tree: pyproject.toml (its [project], then `head`, then the author's table), setup.py
    giving the compiler a target, the package and a tests/ folder."""
    root.mkdir(parents=True, exist_ok=True)
    pyproject = f'[project]\nname = "my-ops"\nversion = "1.0"\n{head}\n[tool.torch-abi-harness]\n{table}\n'
    (root / "pyproject.toml").write_text(pyproject)
    if setup is not None:
        (root / "setup.py").write_text(setup)
    (root / package).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text("")
    (root / "tests").mkdir(exist_ok=True)
    return root


def problems(root: Path, wheel: Path | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_author_config(root, wheel)
    return caught.value.problems


def test_an_empty_table_takes_every_default_from_the_project(tmp_path: Path) -> None:
    config = load_author_config(project(tmp_path))
    matrix, ext = config.matrix, config.extension
    assert (ext.name, ext.module, ext.recipe, ext.stable) == ("my_ops", "my_ops", Recipe.PEP517, True)
    assert (ext.root, ext.tests, ext.min_target) == (tmp_path, tmp_path / "tests", ApiLevel(2, 10))
    (build,) = matrix.builds
    newest = known_releases()[-1]
    assert (build.torch, build.target, build.extension) == (newest, ApiLevel(2, 10), ext)
    releases = [r for r in known_releases() if ApiLevel.of(r) >= ApiLevel(2, 10)]
    assert [r.torch for r in matrix.runtimes] == releases
    assert {(r.variant, r.device) for r in matrix.runtimes} == {("auto", "cpu")}
    assert matrix.python == RUNNING
    assert matrix.path == tmp_path / "pyproject.toml"
    assert matrix.notes == (
        f"target 2.10: TORCH_TARGET_VERSION={LEVEL_2_10} at setup.py:2",
        f"build torch {newest}: the newest release the harness knows",
        "module my_ops: [project].name 'my-ops'",
        f"releases {', '.join(map(str, releases))}: every release the harness knows from 2.10",
        f"python {RUNNING}: the Python running the harness",
    )


def test_the_build_torch_is_the_pin_of_the_build_requirements(tmp_path: Path) -> None:
    head = '[build-system]\nrequires = ["setuptools>=64", "torch==2.12.1"]\n'
    config = load_author_config(project(tmp_path, head=head))
    assert config.matrix.builds[0].torch == Version("2.12.1")
    assert "build torch 2.12.1: the torch pin of [build-system].requires" in config.matrix.notes


def test_a_torch_range_in_the_build_requirements_is_no_pin(tmp_path: Path) -> None:
    head = '[build-system]\nrequires = ["torch>=2.10"]\n'
    config = load_author_config(project(tmp_path, head=head))
    assert config.matrix.builds[0].torch == known_releases()[-1]


def test_every_key_given_takes_the_place_of_its_default(tmp_path: Path) -> None:
    table = """
        target = "2.11"
        build-torch = "2.13.0"
        module = "other.sub"
        tests = "suite"
        test-requires = ["expecttest", "hypothesis>=6"]
        releases = ["2.12.1", "2.15.0"]
        python = "3.12"
        variants = ["auto", "cpu"]
        stable = false
        timeout = 42.5
    """
    root = project(tmp_path, textwrap.dedent(table), package="other")
    (root / "suite").mkdir()
    config = load_author_config(root)
    ext, matrix = config.extension, config.matrix
    assert (ext.name, ext.module, ext.tests) == ("other", "other.sub", root / "suite")
    assert (ext.stable, ext.timeout) == (False, 42.5)
    assert ext.test_requires == ("expecttest", "hypothesis>=6")
    assert (matrix.builds[0].torch, matrix.builds[0].target) == (Version("2.13.0"), ApiLevel(2, 11))
    assert [(str(r.torch), r.variant) for r in matrix.runtimes] == [
        ("2.12.1", "auto"), ("2.12.1", "cpu"), ("2.15.0", "auto"), ("2.15.0", "cpu"),
    ]  # fmt: skip
    assert matrix.python == "3.12"
    assert matrix.notes == ()  # nothing was decided for the author


def test_torch_abi_toml_holds_the_same_keys_at_its_top_level(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "pyproject.toml").write_text('[project]\nname = "my-ops"\n')
    (root / "torch-abi.toml").write_text('releases = ["2.14.1"]\ntimeout = "soon"\n')
    assert problems(root) == ["timeout: 'soon' should be of type number"]
    (root / "torch-abi.toml").write_text('releases = ["2.14.1"]\n')
    config = load_author_config(root)
    assert [str(r.torch) for r in config.matrix.runtimes] == ["2.14.1"]
    assert config.matrix.path == root / "torch-abi.toml"


def test_a_table_in_both_files_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "torch-abi.toml").write_text("")
    message = problems(root)[0]
    assert "has a [tool.torch-abi-harness] table too: keep one of them" in message


def test_unknown_keys_and_wrong_types_name_the_key(tmp_path: Path) -> None:
    table = 'tesst = "t"\nstable = "yes"\nreleases = ["2.15"]\ntarget = 2.10\nvariants = ["gpu"]\n'
    found = problems(project(tmp_path, table))
    assert found == [
        "tool.torch-abi-harness.tesst: unknown key 'tesst'; allowed: build-torch, module, python, releases, stable, "
        "target, test-requires, tests, timeout, variants; did you mean 'tests'?",
        "tool.torch-abi-harness.releases[0]: '2.15' is not valid; expected a torch release written X.Y.Z such as "
        '"2.15.0"',
        "tool.torch-abi-harness.stable: 'yes' should be of type boolean",
        "tool.torch-abi-harness.target: 2.1 is a number; write the value as a string, in quotes "
        '(target = "2.10": unquoted, 2.10 is the number 2.1)',
        "tool.torch-abi-harness.variants[0]: 'gpu' is not valid; expected a torch variant: 'auto' (whatever the "
        "index serves), 'cpu', 'cuXYZ' or 'rocmX.Y'",
    ]


def test_what_the_project_cannot_answer_is_named_by_its_key_all_at_once(tmp_path: Path) -> None:
    root = project(tmp_path, setup=None)
    (root / "pyproject.toml").write_text('[tool.torch-abi-harness]\ntests = "nowhere"\ntest-requires = ["not a req"]\n')
    found = problems(root)
    assert [p.split(":")[0] for p in found] == [
        "tool.torch-abi-harness.target",
        "tool.torch-abi-harness.module",
        "tool.torch-abi-harness.tests",
        "tool.torch-abi-harness.test-requires[0]",
    ]
    assert "no TORCH_TARGET_VERSION is given" in found[0] and 'target = "2.10"' in found[0]
    assert "[project].name is not given" in found[1] and 'module = "my_ops"' in found[1]
    assert f"'nowhere' ({root / 'nowhere'}) is not a directory" in found[2]


def test_a_module_the_project_does_not_hold_and_a_build_torch_below_the_target(tmp_path: Path) -> None:
    root = project(tmp_path, 'module = "missing"\nbuild-torch = "2.9.1"\n')
    assert problems(root) == [
        "tool.torch-abi-harness.build-torch: '2.9.1' is older than the target 2.10: its headers lack that level's "
        "API; build on 2.10 or later",
        f"tool.torch-abi-harness.module: 'missing': no package missing/ (or src/missing/, missing.py) in {root}: "
        "set module to the package your tests import",
    ]


def test_the_default_tests_folder_missing_says_it_is_the_default(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "tests").rmdir()
    (message,) = problems(root)
    assert message.startswith("tool.torch-abi-harness.tests: the default 'tests' (")


def test_a_src_layout_package_is_found(tmp_path: Path) -> None:
    root = project(tmp_path, package="src/my_ops")
    assert load_author_config(root).extension.module == "my_ops"


@pytest.mark.parametrize(
    ("path", "text", "level"),
    [
        ("CMakeLists.txt", f"target_compile_definitions(my_ops PRIVATE TORCH_TARGET_VERSION={LEVEL_2_14})\n", (2, 14)),
        ("csrc/api.h", f"#pragma once\n#define TORCH_TARGET_VERSION {LEVEL_2_14}ULL\n", (2, 14)),
        ("setup.py", f'define_macros=[("TORCH_TARGET_VERSION", "{LEVEL_2_10}")]\n', (2, 10)),
        ("pyproject.toml", f'[tool.scikit-build.cmake.define]\nTORCH_TARGET_VERSION = "{LEVEL_2_14}"\n', (2, 14)),
    ],
)
def test_the_target_is_read_where_the_compiler_is_given_it(
    tmp_path: Path, path: str, text: str, level: tuple[int, int]
) -> None:
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text)
    found, how = source_target(tmp_path)
    assert found == ApiLevel(*level), how
    assert how.startswith("TORCH_TARGET_VERSION=0x") and path in how


def test_what_a_build_or_a_checkout_leaves_is_not_read_for_a_target(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text(f"flags = ['-DTORCH_TARGET_VERSION={LEVEL_2_10}']\n")
    for leftover in ("build/temp/setup.py", ".venv/lib/x.h", "dist/x/CMakeLists.txt"):
        (tmp_path / leftover).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / leftover).write_text(f"#define TORCH_TARGET_VERSION {LEVEL_2_14}\n")
    (tmp_path / "README.md").write_text(f"-DTORCH_TARGET_VERSION={LEVEL_2_14}\n")  # prose is not a build file
    assert source_target(tmp_path)[0] == ApiLevel(2, 10)


def test_two_targets_in_the_sources_name_both_places(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "csrc").mkdir()
    (root / "csrc" / "ops.cpp").write_text(f"\n#define TORCH_TARGET_VERSION {LEVEL_2_14}\n")
    (message,) = problems(root)
    assert message == (
        "tool.torch-abi-harness.target: the sources give more than one TORCH_TARGET_VERSION: "
        f'2.10 ({LEVEL_2_10}) at setup.py:2; 2.14 ({LEVEL_2_14}) at csrc/ops.cpp:2: set it here (target = "2.10"), '
        "or give the compiler the level in setup.py or CMakeLists.txt (-DTORCH_TARGET_VERSION=0x020a000000000000)"
    )


def test_the_test_extra_is_the_default_test_requirements_less_the_project_itself(tmp_path: Path) -> None:
    head = '[project.optional-dependencies]\ntest = ["expecttest", "my-ops[extra]", "hypothesis>=6"]\n'
    config = load_author_config(project(tmp_path, head=head))
    assert config.extension.test_requires == ("expecttest", "hypothesis>=6")
    assert "test requirements expecttest, hypothesis>=6: [project.optional-dependencies].test" in config.matrix.notes


def test_the_test_dependency_group_with_its_includes_is_the_next_default(tmp_path: Path) -> None:
    head = '[dependency-groups]\ntest = ["expecttest", {include-group = "more"}]\nmore = ["hypothesis>=6"]\n'
    config = load_author_config(project(tmp_path, head=head))
    assert config.extension.test_requires == ("expecttest", "hypothesis>=6")


def test_a_wheel_is_tested_instead_of_a_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "src")
    wheel = ops_wheel(tmp_path / "dist" / "my_ops-1.0-cp39-abi3-linux_x86_64.whl")
    monkeypatch.chdir(tmp_path)
    config = load_author_config(root, Path("dist/*.whl"))
    assert (config.extension.recipe, config.extension.wheel) == (Recipe.WHEEL, wheel)
    assert problems(root, Path("dist/none-*.whl"))[0].startswith("--wheel: 'dist/none-*.whl' (")
    (root / "pyproject.toml").write_text('[project]\nname = "other"\n[tool.torch-abi-harness]\n')
    assert "has no top-level 'other'" in problems(root, Path("dist/*.whl"))[0]


def test_an_author_table_in_the_current_directory_wins_over_matrix_yaml(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text("schema_version: 1\n")
    assert default_matrix_source(tmp_path).kind is ConfigKind.MATRIX
    project(tmp_path)
    assert default_matrix_source(tmp_path).kind is ConfigKind.AUTHOR
    assert default_matrix_source(tmp_path, matrix=Path("m.yaml")).path == Path("m.yaml")
    assert default_matrix_source(tmp_path, wheel=Path("x.whl")).path == tmp_path
    with pytest.raises(BadInputError, match="give one of them"):
        default_matrix_source(tmp_path, matrix=Path("m.yaml"), project=tmp_path)


def test_run_in_a_source_tree_plans_its_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project(tmp_path, 'releases = ["2.14.1", "2.15.0"]\n'))
    assert main(["plan", "--json"]) == 0
    cells = [c["id"] for c in json.loads(capsys.readouterr().out)["cells"]]
    newest = known_releases()[-1]
    assert cells == [f"my_ops@b{newest}-t2.10~r2.14.1-cpu", f"my_ops@b{newest}-t2.10~r2.15.0-cpu"]


def test_a_bad_table_is_exit_2_naming_the_file_and_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, "tests = 3\n")
    assert main(["plan", "--project", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"{root / 'pyproject.toml'}: 1 problem" in err
    assert "tool.torch-abi-harness.tests: 3 is a number; write the value as a string" in err


def test_every_key_of_the_schema_is_documented() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "author-config.md").read_text()
    keys = load_schema("author")["properties"]
    assert [k for k in keys if f"`{k}`" not in page] == []


def test_what_a_run_in_the_tree_leaves_does_not_change_the_builds_key(tmp_path: Path) -> None:
    root = project(tmp_path)
    before = content_digest(root, BUILD_OUTPUTS)
    for left in ("reports/20261128-060115/results.json", ".git/HEAD", ".venv/pyvenv.cfg", ".nox/lint/x", "dist/a.whl"):
        (root / left).parent.mkdir(parents=True, exist_ok=True)
        (root / left).write_text("x")
    assert content_digest(root, BUILD_OUTPUTS) == before
    (root / "my_ops" / "ops.py").write_text("")
    assert content_digest(root, BUILD_OUTPUTS) != before
