"""recipe: wheel — finding, checking and unpacking a user's prebuilt wheel, on small real wheels (no torch)."""

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from torch_abi_harness.builds import Builder
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.core.versions import ApiLevel
from torch_abi_harness.plan import make_plan
from torch_abi_harness.provision.envs import Env, EnvSpec
from torch_abi_harness.static.manifest import packaged_manifest
from torch_abi_harness.static.prebuilt import claim_findings, find_wheel, tag_problem, wheel_problems
from torch_abi_harness.static.predict import ArtifactImports

ABI3 = "my_ops-1.0-cp39-abi3-linux_x86_64.whl"


def write_wheel(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


def shared_object(tmp_path: Path, imports: list[str], exports: tuple[str, ...] = ()) -> bytes:
    """A real ELF shared object that imports the given C functions and defines the exported ones (cc, no torch)."""
    source = tmp_path / "probe.c"
    source.write_text(
        "".join(f"extern int {name}(void);\n" for name in imports)
        + "int entry(void) { return 0"
        + "".join(f" + {name}()" for name in imports)
        + "; }\n"
        + "".join(f"int {name}(void) {{ return 0; }}\n" for name in exports)
    )
    library = tmp_path / "probe.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
    return library.read_bytes()


def ops_wheel(path: Path, so: bytes = b"\x7fELF") -> Path:
    return write_wheel(
        path,
        {
            "my_ops/__init__.py": b"",
            "my_ops/_C.abi3.so": so,
            "my_ops-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: my_ops\nVersion: 1.0\n",
            "my_ops-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n",
            "my_ops-1.0.dist-info/RECORD": b"",
        },
    )


def test_a_glob_must_match_exactly_one_file(tmp_path: Path) -> None:
    assert find_wheel(tmp_path, "dist/*.whl")[0] is None
    assert "matches no file: build the wheel first" in find_wheel(tmp_path, "dist/*.whl")[1]
    one = ops_wheel(tmp_path / "dist" / ABI3)
    assert find_wheel(tmp_path / "sub", "../dist/my_ops-*.whl") == (one, "")
    ops_wheel(tmp_path / "dist" / "my_ops-1.1-cp39-abi3-linux_x86_64.whl")
    found, why = find_wheel(tmp_path, "dist/*.whl")
    assert found is None
    assert why == (
        "'dist/*.whl' matches 2 files (my_ops-1.0-cp39-abi3-linux_x86_64.whl, "
        "my_ops-1.1-cp39-abi3-linux_x86_64.whl): name exactly one wheel"
    )


def test_what_a_cell_could_not_use_is_named(tmp_path: Path) -> None:
    assert wheel_problems(ops_wheel(tmp_path / ABI3), "my_ops") == []
    fake = tmp_path / "fake" / ABI3
    fake.parent.mkdir()
    fake.write_text("version https://git-lfs.github.com/spec/v1\n")
    assert wheel_problems(fake, "my_ops") == [
        f"{fake} is not a wheel: not a zip archive (a truncated download or a pointer file?)"
    ]
    pure = write_wheel(tmp_path / "pure" / ABI3, {"my_ops/__init__.py": b""})
    assert wheel_problems(pure, "my_ops") == [f"{ABI3} holds no shared object (.so): nothing in it uses the stable ABI"]
    assert wheel_problems(ops_wheel(tmp_path / "other" / ABI3), "your_ops") == [
        f"{ABI3} has no top-level 'your_ops' (it has: my_ops); `module:` must name the package the wheel installs"
    ]
    assert "is not a wheel file name" in wheel_problems(ops_wheel(tmp_path / "my_ops.whl"), "my_ops")[0]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        (ABI3, True),
        ("my_ops-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        ("my_ops-1.0-py3-none-any.whl", True),
        ("my_ops-1.0-cp312-cp312-linux_x86_64.whl", False),
        ("my_ops-1.0-cp312-abi3-linux_x86_64.whl", False),  # abi3 from 3.12 on: not for 3.11
        ("my_ops-1.0-cp39-abi3-win_amd64.whl", False),
    ],
)
def test_the_wheel_tags_must_suit_the_matrix_python_on_this_host(name: str, ok: bool) -> None:
    problem = tag_problem(Path(name), "3.11")
    assert (problem is None) is ok, problem
    if not ok:
        assert problem is not None and "Python 3.11 on this host cannot install it" in problem


def imports_of(stable: set[str], unstable: dict[str, str] | None = None) -> ArtifactImports:
    return ArtifactImports(frozenset(stable), unstable or {}, frozenset(), frozenset(), {})


def test_claims_that_the_imports_contradict_are_findings() -> None:
    manifest = packaged_manifest()
    uses_2_10 = imports_of({"aoti_torch_get_numel", "torch_call_dispatcher"})
    assert claim_findings(uses_2_10, Version("2.13.0"), ApiLevel(2, 10), manifest, stable=True) == ()
    assert claim_findings(uses_2_10, Version("2.13.0"), ApiLevel(2, 9), manifest, stable=True) == (
        "the wheel claims target 2.9 but imports torch_call_dispatcher, first exported in 2.10.0: "
        "it needs stable-ABI level 2.10",
    )
    assert claim_findings(uses_2_10, Version("2.9.1"), ApiLevel(2, 9), manifest, stable=True)[1] == (
        "the wheel claims build torch 2.9.1 but imports torch_call_dispatcher, which 2.9.1 does not export"
    )
    unstable = imports_of({"torch_call_dispatcher"}, {"_ZN3c104impl3fooEv": "c10::impl::foo()"})
    assert claim_findings(unstable, Version("2.13.0"), ApiLevel(2, 10), manifest, stable=True) == (
        "the wheel imports 1 unstable C++ symbol(s) (e.g. c10::impl::foo()): it is not on the stable ABI alone",
    )
    assert claim_findings(unstable, Version("2.13.0"), ApiLevel(2, 10), manifest, stable=False) == ()


def write_extension(root: Path, body: str) -> Path:
    ext = root / "extensions" / "my_ops"
    (ext / "tests").mkdir(parents=True)
    (ext / "extension.yaml").write_text(textwrap.dedent(body))
    return ext


def matrix_with(root: Path, build: str) -> Path:
    path = root / "matrix.yaml"
    path.write_text(f"schema_version: 1\nruntimes:\n  - torch: 2.13.0\nbuilds:\n  - {build}\n")
    return path


WHEEL_EXTENSION = """\
    name: my_ops
    module: my_ops
    min_target: "2.10"
    recipe: wheel
    wheel: dist/my_ops-*.whl
    tests: tests
    """


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    return info.value.problems


def test_a_wheel_extension_loads_with_its_one_wheel(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION)
    wheel = ops_wheel(ext / "dist" / ABI3)
    matrix = load_matrix(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0, target: '2.10'}"))
    assert matrix.extensions["my_ops"].wheel == wheel and matrix.extensions["my_ops"].recipe == "wheel"


def test_a_missing_wheel_is_one_problem_naming_the_file_line_and_what_to_do(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION)
    found = problems(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0}"))
    assert found == [
        f"{ext / 'extension.yaml'}: line 5: wheel: 'dist/my_ops-*.whl' ({ext / 'dist' / 'my_ops-*.whl'}) matches "
        "no file: build the wheel first (e.g. `uv build --wheel <your project>`) or fix the path"
    ]  # and no second message calling the extension unknown


def test_recipe_and_wheel_key_must_agree(tmp_path: Path) -> None:
    write_extension(tmp_path, WHEEL_EXTENSION.replace("    wheel: dist/my_ops-*.whl\n", ""))
    (found,) = problems(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0}"))
    assert found.endswith(
        "line 4: recipe: `recipe: wheel` needs `wheel:`, the path or glob of the prebuilt wheel "
        "relative to extension.yaml (e.g. wheel: dist/my_ops-*.whl)"
    )
    other = tmp_path / "other"
    write_extension(other, WHEEL_EXTENSION.replace("recipe: wheel", "recipe: pep517"))
    (found,) = problems(matrix_with(other, "{extension: my_ops, torch: 2.13.0}"))
    assert found.endswith("line 5: wheel: only `recipe: wheel` reads it; remove it or set the recipe")


def test_a_build_entry_cannot_claim_a_target_above_its_torch_or_an_uninstallable_wheel(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION)
    ops_wheel(ext / "dist" / "my_ops-1.0-cp312-cp312-linux_x86_64.whl")
    found = problems(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0, target: '2.14'}"))
    assert found[0] == (
        "line 5: builds[0]: the prebuilt wheel of 'my_ops' cannot target 2.14, newer than its build torch 2.13.0: "
        "nothing is compiled here, so state the torch and target it was really built with"
    )
    assert found[1].startswith("line 5: builds[0]: my_ops-1.0-cp312-cp312-linux_x86_64.whl is tagged cp312-cp312-")


def test_unpacking_a_prebuilt_wheel_gives_the_site_cells_use_and_is_cached(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION.replace('"2.10"', '"2.9"'))
    so = shared_object(tmp_path, ["aoti_torch_get_numel", "torch_call_dispatcher"])
    ops_wheel(ext / "dist" / ABI3, so)
    # The build torch's env only supplies the interpreter uv installs for: this one will do.
    env = Env(EnvSpec(Version("2.13.0"), "auto", "3.11"), Path(sys.prefix), "2.13.0+cpu", "cpu", 0.0, reused=True)
    builder = Builder(tmp_path / "cache", timeout=60)

    (build,) = make_plan(
        load_matrix(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0, target: '2.10'}"))
    ).builds
    result = builder.build(build, env)
    assert (result.ok, result.cached, result.findings) == (True, False, ())
    assert result.site is not None and (result.site / "my_ops" / "_C.abi3.so").read_bytes() == so
    assert result.wheel is not None and result.wheel.name == ABI3 and result.wheel.parent.name == "dist"
    assert "not compiled" in result.log.read_text()
    again = builder.build(build, env)
    assert (again.ok, again.cached, again.site) == (True, True, result.site)

    # A false claim (target 2.9 for a wheel that needs 2.10) stays with the build, cached or not.
    (false,) = make_plan(load_matrix(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0, target: '2.9'}"))).builds
    result = builder.build(false, env)
    assert result.ok and result.site is not None
    assert result.findings == (
        "the wheel claims target 2.9 but imports torch_call_dispatcher, first exported in 2.10.0: "
        "it needs stable-ABI level 2.10",
    )
    assert json.loads((result.site.parent / "build.json").read_text())["findings"] == list(result.findings)
    assert builder.build(false, env).findings == result.findings


def test_a_wheel_uv_refuses_to_install_is_bad_input_not_an_infrastructure_error(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION)
    write_wheel(ext / "dist" / ABI3, {"my_ops/__init__.py": b"", "my_ops/_C.abi3.so": shared_object(tmp_path, [])})
    (build,) = make_plan(load_matrix(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0}"))).builds
    env = Env(EnvSpec(Version("2.13.0"), "auto", "3.11"), Path(sys.prefix), "2.13.0+cpu", "cpu", 0.0, reused=True)
    with pytest.raises(BadInputError, match="uv cannot install the prebuilt wheel") as info:
        Builder(tmp_path / "cache", timeout=60).build(build, env)
    assert str(ext / "extension.yaml") in str(info.value) and "rebuild it with a standard build tool" in str(info.value)


def test_only_the_pattern_is_a_glob_not_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ops[v2]"
    wheel = ops_wheel(directory / "dist" / ABI3)
    assert find_wheel(directory, "dist/*.whl") == (wheel, "")


def test_an_unreadable_extension_yaml_is_reported_once_among_the_others(tmp_path: Path) -> None:
    ext = write_extension(tmp_path, WHEEL_EXTENSION)
    (ext / "extension.yaml").write_text("name: [unclosed\n")
    found = problems(matrix_with(tmp_path, "{extension: my_ops, torch: 2.13.0}"))
    assert len(found) == 2 and "not valid YAML" in found[0] and "unknown extension 'my_ops'" in found[1]
