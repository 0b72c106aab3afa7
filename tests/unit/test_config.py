import textwrap
from pathlib import Path

import pytest

from torch_abi_harness.config import CudaPolicy
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.core.versions import ApiLevel


def write_matrix(tmp_path: Path, body: str, with_extension: bool = True) -> Path:
    if with_extension:
        ext = tmp_path / "extensions" / "demo"
        (ext / "tests").mkdir(parents=True)
        (ext / "extension.yaml").write_text(
            "name: demo\nmodule: demo\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n"
        )
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """\
    schema_version: 1
    runtimes:
      - torch: 2.10.0
      - torch: 2.13.0
        device: cuda
    builds:
      - extension: demo
        torch: 2.13.0
        target: "2.10"
    """


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    return info.value.problems


def test_the_committed_default_matrix_loads(repo: Path) -> None:
    matrix = load_matrix(repo / "matrix.yaml")
    assert [str(r.torch) for r in matrix.runtimes if r.python is None] == [
        "2.9.1",
        "2.10.0",
        "2.11.0",
        "2.12.1",
        "2.13.0",
        "2.14.1",
        "2.15.0",
    ]
    assert [(str(r.torch), r.python) for r in matrix.runtimes if r.python is not None] == [
        ("2.12.1", "3.10"),
        ("2.12.1", "3.13"),
        ("2.14.1", "3.10"),
        ("2.15.0", "3.13"),
    ]
    assert {b.target for b in matrix.builds} == {None, *(ApiLevel(2, m) for m in range(9, 15))}
    assert "stable_basic" in matrix.extensions


def test_a_valid_matrix_gives_typed_values(tmp_path: Path) -> None:
    matrix = load_matrix(write_matrix(tmp_path, GOOD))
    assert matrix.runtimes[1].device == "cuda"
    assert matrix.builds[0].target == ApiLevel(2, 10)
    assert matrix.settings.cell_timeout == 300
    assert matrix.sources.inherit_pip_config is True


def test_unknown_key_names_line_path_allowed_keys_and_close_match(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, GOOD.replace('target: "2.10"', 'targt: "2.10"')))
    assert len(found) == 1
    assert found[0].startswith(
        "line 9: builds[0].targt: unknown key 'targt'; allowed: "
        "cuda, extension, python, runtimes, target, torch, variant"
    )
    assert found[0].endswith("did you mean 'target'?")


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    body = GOOD.replace("device: cuda", "device: gpu").replace("torch: 2.10.0", "torch: '2.10'")
    found = problems(write_matrix(tmp_path, body))
    assert len(found) == 2
    assert any("runtimes[0].torch: '2.10' is not valid; expected a torch release X.Y.Z" in p for p in found)
    assert any("runtimes[1].device: 'gpu' is not allowed; allowed: cpu, cuda" in p for p in found)


def test_unknown_extension_gets_a_close_match(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, GOOD.replace("extension: demo", "extension: dmeo")))
    assert found == ["line 7: builds[0].extension: unknown extension 'dmeo'; known: demo; did you mean 'demo'?"]


def test_target_below_the_extensions_min_target_is_refused(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, GOOD.replace('target: "2.10"', 'target: "2.9"')))
    assert found == [
        "line 9: builds[0].target: target '2.9' is below the extension's min_target '2.10'; "
        "its sources do not build for that level"
    ]


def test_duplicate_runtime_is_refused(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, GOOD.replace("- torch: 2.13.0\n        device: cuda", "- torch: 2.10.0")))
    assert any("duplicate runtime" in p for p in found)


def test_missing_required_key(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, "schema_version: 1\nruntimes:\n  - torch: 2.10.0\n"))
    assert found == ["line 1: (top level): missing required key 'builds'"]


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, "schema_version: 1\nruntimes: [\n  - torch: 2.10.0\n"))
    assert len(found) == 1 and found[0].startswith("line ") and "not valid YAML" in found[0]


def test_missing_file(tmp_path: Path) -> None:
    found = problems(tmp_path / "nope.yaml")
    assert found[0].startswith("cannot read the file")


def test_invalid_extension_file_is_reported_with_its_own_path(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, GOOD)
    (tmp_path / "extensions" / "demo" / "extension.yaml").write_text(
        "name: demo\nmodule: demo\nmin_target: 2.10\nrecipe: cmake\ntests: tests\n"
    )
    found = problems(path)
    assert any(
        'extension.yaml: line 3: min_target: 2.10 was read as a number; write it in quotes: "2.10"' in p for p in found
    )
    assert any("recipe: 'cmake' is not allowed; allowed: pep517" in p for p in found)


def test_api_level_hex_is_torch_target_version() -> None:
    assert ApiLevel.parse("2.10").hex == "0x020a000000000000"
    assert ApiLevel.parse("2.9").hex == "0x0209000000000000"
    with pytest.raises(ValueError, match=r"major\.minor"):
        ApiLevel.parse("2.10.0")


def test_a_build_limited_to_runtimes_of_the_matrix(tmp_path: Path) -> None:
    matrix = load_matrix(write_matrix(tmp_path, GOOD + '    runtimes: ["2.13.0"]\n'))
    assert [str(v) for v in matrix.builds[0].runtimes] == ["2.13.0"]


def test_a_build_limited_to_an_unknown_runtime_is_refused(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, GOOD + '    runtimes: ["2.13.1"]\n'))
    assert found == [
        "line 10: builds[0].runtimes[0]: '2.13.1' is not a runtime of this matrix; "
        "runtimes: 2.10.0, 2.13.0; did you mean '2.13.0'?"
    ]


def test_a_file_that_is_not_utf8_text_is_named_not_crashed_on(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"schema_version: 1\n\xff\xfe\x00")
    assert problems(path) == ["byte 18: not UTF-8 text, so not a YAML file: is this the file you meant?"]


def test_nested_aliases_that_would_expand_past_the_limit_are_refused_without_expanding(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    found = problems(write_matrix(tmp_path, "\n".join(lines) + "\n"))  # 10**9 values if expanded
    assert len(found) == 1 and "expand it to more than 100000 values" in found[0]


def test_a_few_anchors_still_load(tmp_path: Path) -> None:
    text = GOOD.replace("- torch: 2.13.0\n        device", "- torch: &newest 2.13.0\n        device").replace(
        "torch: 2.13.0\n        target", "torch: *newest\n        target"
    )
    assert "*newest" in text
    (build,) = load_matrix(write_matrix(tmp_path, text)).builds
    assert str(build.torch) == "2.13.0"


def test_an_alias_to_itself_is_refused(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, "a: &a [1, *a]\n"))
    assert len(found) == 1 and ("refers to itself" in found[0] or "not valid YAML" in found[0])


def test_nesting_too_deep_for_a_recursive_reader_is_refused(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n"))
    assert found == ["nested too deeply to be a matrix or extension file"]


def test_nesting_deeper_than_any_matrix_is_refused_with_its_line(tmp_path: Path) -> None:
    found = problems(write_matrix(tmp_path, "schema_version: 1\na: " + "[" * 200 + "]" * 200 + "\n"))
    assert found == ["line 2: nested more than 64 levels deep: refused"]


def test_a_build_declares_it_works_across_cuda_majors(tmp_path: Path) -> None:
    assert load_matrix(write_matrix(tmp_path / "default", GOOD)).builds[0].cuda is CudaPolicy.SAME_MAJOR
    matrix = load_matrix(write_matrix(tmp_path / "any", GOOD + "    cuda: any\n"))
    assert matrix.builds[0].cuda is CudaPolicy.ANY


def test_a_bad_cuda_policy_names_the_allowed_values_and_a_close_match(tmp_path: Path) -> None:
    assert problems(write_matrix(tmp_path, GOOD + "    cuda: anyy\n")) == [
        "line 10: builds[0].cuda: 'anyy' is not allowed; allowed: same-major, any; did you mean 'any'?"
    ]


def test_builds_that_differ_only_in_their_cuda_policy_are_duplicates(tmp_path: Path) -> None:
    body = GOOD + "  - {extension: demo, torch: 2.13.0, target: '2.10', cuda: any}\n"
    found = problems(write_matrix(tmp_path, body))
    assert len(found) == 1 and found[0].startswith("line 10: builds[1]: duplicate build")


def test_forkserver_preload_defaults_to_opchecks_machinery_and_takes_module_names(tmp_path: Path) -> None:
    assert load_matrix(write_matrix(tmp_path, GOOD)).settings.preload == ("torch.testing._internal.optests",)
    given = GOOD.replace("runtimes:", "settings:\n      preload: [numpy, torch.fx]\n    runtimes:")
    assert load_matrix(write_matrix(tmp_path, given, with_extension=False)).settings.preload == ("numpy", "torch.fx")
    bad = GOOD.replace("runtimes:", "settings:\n      preload: ['os; rm -rf /']\n    runtimes:")
    (found,) = problems(write_matrix(tmp_path, bad, with_extension=False))
    assert "settings.preload" in found and "os; rm -rf /" in found
