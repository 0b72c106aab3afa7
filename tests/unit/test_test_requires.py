"""`test_requires:` in extension.yaml: requirement strings and `-r` files, read into one list; every bad line named."""

import textwrap
from pathlib import Path

import pytest

from torch_abi_harness.config.extension import load_extension
from torch_abi_harness.core.commands import uv_explanation
from torch_abi_harness.core.errors import ConfigError
from torch_abi_harness.provision.testdeps import overlay_key


def extension(tmp_path: Path, test_requires: str, files: dict[str, str] | None = None) -> Path:
    (tmp_path / "tests").mkdir()
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "extension.yaml").write_text(
        "name: demo\nmodule: demo\nmin_target: '2.10'\nrecipe: pep517\ntests: tests\n" + textwrap.dedent(test_requires)
    )
    return tmp_path


def problems(directory: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_extension(directory)
    return info.value.problems


def test_requirements_and_files_are_read_in_order_each_once(tmp_path: Path) -> None:
    files = {
        "requirements-test.txt": """\
            # PyTorch's testing utilities
            expecttest  # common_utils imports it
            -r more/extra.txt

            hypothesis>=6
            """,
        "more/extra.txt": "parameterized\nexpecttest\n",
    }
    text = "test_requires:\n  - numpy\n  - -r requirements-test.txt\n  - pytest-timeout>=2; python_version >= '3.8'\n"
    ext = load_extension(extension(tmp_path, text, files))
    assert ext.test_requires == (
        "numpy",
        "expecttest",
        "parameterized",
        "hypothesis>=6",
        'pytest-timeout>=2; python_version >= "3.8"',
    )


def test_an_extension_without_test_requires_needs_nothing(tmp_path: Path) -> None:
    assert load_extension(extension(tmp_path, "")).test_requires == ()


def test_every_bad_line_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    files = {"req.txt": "expecttest\nhypothesis>=>6\n--index-url https://example.invalid/simple\n"}
    text = "test_requires:\n  - expecttest\n  - 'not a requirement!'\n  - -r req.txt\n  - -r missing.txt\n"
    found = problems(extension(tmp_path, text, files))
    assert len(found) == 4, found
    assert found[0].startswith("line 8: test_requires[1]: 'not a requirement!' is not a requirement")
    assert f"{tmp_path / 'req.txt'}: line 2: 'hypothesis>=>6' is not a requirement" in found[1]
    assert (
        f"{tmp_path / 'req.txt'}: line 3: '--index-url https://example.invalid/simple': only requirements" in found[2]
    )
    assert "package sources come from the matrix's `sources:`" in found[2]
    assert found[3].startswith("line 10: test_requires[3]: cannot read the requirements file 'missing.txt'")


def test_a_file_that_includes_itself_is_refused(tmp_path: Path) -> None:
    found = problems(
        extension(tmp_path, "test_requires: ['-r a.txt']\n", {"a.txt": "-r b.txt\n", "b.txt": "-r a.txt\n"})
    )
    assert found == [f"{tmp_path / 'b.txt'}: line 1: 'a.txt' includes itself"]


def test_the_schema_wants_a_list_of_strings(tmp_path: Path) -> None:
    found = problems(extension(tmp_path, "test_requires: expecttest\n"))
    assert len(found) == 1 and "test_requires" in found[0] and "array" in found[0], found


def test_an_overlay_is_keyed_by_its_content_not_by_order() -> None:
    key = overlay_key(["hypothesis==6.170.17", "expecttest==0.3.0"], "3.11")
    assert key == overlay_key(["expecttest==0.3.0", "hypothesis==6.170.17"], "3.11")
    assert key.startswith("py3.11-")
    assert key != overlay_key(["expecttest==0.3.0", "hypothesis==6.170.16"], "3.11")
    assert key != overlay_key(["expecttest==0.3.0", "hypothesis==6.170.17"], "3.12")


UV_CONFLICT = """\
  x No solution found when resolving dependencies:
  `-> Because you require torch>=2.14 and torch==2.13.0+cpu, we can
      conclude that your requirements are unsatisfiable.
error: No solution found when resolving dependencies
  cause: Because you require torch>=2.14 and torch==2.13.0+cpu, we can
         conclude that your requirements are unsatisfiable.
  hint: torch was requested with a pre-release marker
"""


def test_uvs_explanation_is_its_cause_paragraph_joined_or_the_one_preferred() -> None:
    assert uv_explanation(UV_CONFLICT) == (
        "Because you require torch>=2.14 and torch==2.13.0+cpu, we can conclude that your requirements are "
        "unsatisfiable."
    )
    assert uv_explanation(UV_CONFLICT, prefer=("hint", "cause")) == "torch was requested with a pre-release marker"
    assert uv_explanation("error: something else") is None
