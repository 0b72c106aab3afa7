"""The Python axis of the runtime space: runtime entries that expand with exclude:, ids that name a
Python only when it is not the matrix's (their grammar, documented in docs/the-promise.md), interpreters found
or refused with the list of those found."""

import json
import platform
import re
import sys
import textwrap
from pathlib import Path

import pytest

from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.core.errors import BadInputError, ConfigError
from torch_abi_harness.plan import make_plan
from torch_abi_harness.provision import interpreters
from torch_abi_harness.provision.envs import EnvSpec

# The documented grammar of ids (docs/the-promise.md, "Ids").
RELEASE = r"[0-9]+\.[0-9]+\.[0-9]+(?:\.?(?:a|b|rc|dev)[0-9]+)*"
RUNTIME_ID = re.compile(
    rf"^r(?P<torch>{RELEASE})(?:\+(?P<variant>[a-z0-9.]+))?-(?P<device>cpu|cuda)(?:-py(?P<python>3\.[0-9]+t?))?$"
)
BUILD_ID = re.compile(
    rf"^(?P<extension>[A-Za-z0-9_.-]+)@b(?P<torch>{RELEASE})(?:\+(?P<variant>[a-z0-9.]+))?"
    r"(?:-t(?P<target>[0-9]+\.[0-9]+))?(?:-py(?P<python>3\.[0-9]+t?))?$"
)


def matrix_file(tmp_path: Path, runtimes: str, builds: str = "  - {extension: demo, torch: 2.13.0}\n") -> Path:
    ext = tmp_path / "extensions" / "demo"
    (ext / "tests").mkdir(parents=True, exist_ok=True)
    (ext / "extension.yaml").write_text("name: demo\nmodule: demo\nmin_target: '2.9'\nrecipe: pep517\ntests: tests\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(f'schema_version: 1\npython: "3.11"\nruntimes:\n{textwrap.dedent(runtimes)}builds:\n{builds}')
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    return info.value.problems


PRODUCT = """\
  - torch: [2.12.1, 2.14.1, 2.15.0]
    python: ["3.10", "3.13"]
    exclude:
      - {torch: 2.15.0, python: "3.10"}
"""


def test_an_entry_expands_to_the_product_of_its_lists_less_its_exclusions(tmp_path: Path) -> None:
    matrix = load_matrix(matrix_file(tmp_path, PRODUCT))
    assert [(str(r.torch), r.python) for r in matrix.runtimes] == [
        ("2.12.1", "3.10"),
        ("2.12.1", "3.13"),
        ("2.14.1", "3.10"),
        ("2.14.1", "3.13"),
        ("2.15.0", "3.13"),
    ]
    assert {(r.variant, r.device) for r in matrix.runtimes} == {("auto", "cpu")}


def test_ids_name_the_python_only_when_it_is_not_the_matrixs(tmp_path: Path) -> None:
    runtimes = PRODUCT + '  - torch: 2.12.1\n  - {torch: 2.13.0, variant: cpu, python: "3.11"}\n'
    builds = (
        '  - {extension: demo, torch: 2.13.0}\n  - {extension: demo, torch: 2.13.0, target: "2.9", python: "3.13"}\n'
    )
    plan = make_plan(load_matrix(matrix_file(tmp_path, runtimes, builds)))
    assert [r.id for r in plan.runtimes] == [
        "r2.12.1-cpu-py3.10",
        "r2.12.1-cpu-py3.13",
        "r2.14.1-cpu-py3.10",
        "r2.14.1-cpu-py3.13",
        "r2.15.0-cpu-py3.13",
        "r2.12.1-cpu",
        "r2.13.0+cpu-cpu",
    ]
    assert [b.id for b in plan.builds] == ["demo@b2.13.0", "demo@b2.13.0-t2.9-py3.13"]
    assert len({c.id for c in plan.cells}) == len(plan.cells) == 14


def test_every_id_follows_the_documented_grammar_and_reads_back(repo: Path, tmp_path: Path) -> None:
    plans = [make_plan(load_matrix(repo / "matrix.yaml"))]
    builds = '  - {extension: demo, torch: 2.13.0, variant: cpu, target: "2.9", python: "3.13t"}\n'
    plans.append(make_plan(load_matrix(matrix_file(tmp_path, PRODUCT + "  - {torch: 2.13.0, device: cuda}\n", builds))))
    for plan in plans:
        for runtime in plan.runtimes:
            match = RUNTIME_ID.match(runtime.id)
            assert match, runtime.id
            assert (match["torch"], match["device"]) == (str(runtime.torch), runtime.device)
            assert (match["variant"] or "auto") == runtime.variant
            assert (match["python"] or plan.matrix.python) == runtime.python
        for build in plan.builds:
            match = BUILD_ID.match(build.id)
            assert match, build.id
            assert (match["extension"], match["torch"]) == (build.extension.name, str(build.torch))
            assert match["target"] == (str(build.target) if build.target else None)
            assert (match["python"] or plan.matrix.python) == build.python
        for cell in plan.cells:
            build_id, _, runtime_id = cell.id.partition("~")
            assert (build_id, runtime_id) == (cell.build.id, cell.runtime.id)


@pytest.mark.parametrize(
    ("runtimes", "expected"),
    [
        (PRODUCT + "      - {torch: 2.14.1, python: '3.12'}\n", "python: '3.12' is not a value of this entry's lists"),
        (PRODUCT.replace("2.15.0, python", "2.15.0, device: cuda, python"), "device: 'cuda' is not a value"),
        (
            "  - torch: [2.12.1]\n    python: ['3.10']\n    exclude:\n      - {torch: 2.12.1}\n",
            "`exclude:` removes every runtime of this entry",
        ),
        ("  - torch: [2.12.1, 2.12.1]\n", "a value is listed twice"),
        (
            "  - torch: [2.12.1, 2.13.0]\n    image: somewhere/torch:1\n",
            "an image holds one runtime; this entry makes 2",
        ),
        (
            "  - torch: 2.12.1\n    python: 3.10\n",
            'runtimes[0].python: 3.10 was read as a number; write it in quotes: "3.10"',
        ),
        ("  - torch: 2.12.1\n    python: '3.1O'\n", "runtimes[0].python: '3.1O' is not valid"),
        ("  - torch: [2.12.1, 2.13.0]\n  - {torch: 2.13.0}\n", "duplicate runtime torch 2.13.0 (auto, cpu)"),
        ("  - torch: 2.12.1\n    exclude: [{python: '3.10'}]\n", "python: '3.10' is not a value of this entry's lists"),
    ],
)
def test_a_wrong_entry_is_named_with_its_line(tmp_path: Path, runtimes: str, expected: str) -> None:
    found = problems(matrix_file(tmp_path, runtimes))
    assert any(expected in p for p in found), found
    assert all(p.startswith("line ") for p in found), found


def test_an_exclusion_that_removes_nothing_is_a_problem(tmp_path: Path) -> None:
    runtimes = PRODUCT + "      - {torch: 2.15.0, python: '3.10'}\n"
    assert any("excludes nothing" in p for p in problems(matrix_file(tmp_path, runtimes)))


def test_a_python_given_as_a_path_is_asked_its_version(tmp_path: Path) -> None:
    runtimes = f"  - torch: 2.12.1\n    python: {sys.executable}\n"
    plan = make_plan(load_matrix(matrix_file(tmp_path, runtimes)))
    (runtime,) = plan.runtimes
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (runtime.python, runtime.interpreter) == (own, sys.executable)
    assert runtime.id == ("r2.12.1-cpu" if own == "3.11" else f"r2.12.1-cpu-py{own}")


def test_a_relative_interpreter_path_is_read_from_the_matrixs_folder(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    matrix = load_matrix(matrix_file(tmp_path, "  - torch: 2.12.1\n    python: ./bin/python3\n"))
    assert matrix.runtimes[0].python == str(tmp_path / "bin" / "python3")


def test_a_path_that_is_not_a_python_is_bad_input(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho not python\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(BadInputError, match="exit 3 when asked its version"):
        interpreters.inspect(fake)
    with pytest.raises(BadInputError, match="cannot run it"):
        interpreters.inspect(tmp_path / "missing")


def test_a_missing_interpreter_names_every_one_found(tmp_path: Path) -> None:
    versions = tmp_path / "pyenv" / "versions"
    for name in ("3.12.9", "3.10.2", "pypy3.10-7.3.17"):
        binary = versions / name / "bin" / f"python{'.'.join(name.split('.')[:2])}"
        binary.parent.mkdir(parents=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    environ = {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": "/nonexistent", "HOME": str(tmp_path)}
    found = interpreters.candidates(environ)
    assert [(i.minor, i.origin) for i in found if i.origin == "pyenv"] == [("3.12", "pyenv"), ("3.10", "pyenv")]
    with pytest.raises(BadInputError) as info:
        interpreters.find("3.99", environ)
    message = str(info.value)
    assert message.startswith("no CPython 3.99 interpreter found; found:")
    assert "3.12 (3.12.9, pyenv: " in message and "3.10 (3.10.2, pyenv: " in message
    assert "pyenv install 3.99" in message
    # Then uv was asked to download it (the real uv: it knows no 3.99), and its answer is in the message.
    assert "`uv python install 3.99` failed (exit 2): error: No download found for request: cpython-3.99" in message


def test_no_download_is_tried_where_uvs_setting_forbids_it(tmp_path: Path) -> None:
    environ = {
        "PYENV_ROOT": str(tmp_path),
        "PATH": "/nonexistent",
        "HOME": str(tmp_path),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    with pytest.raises(BadInputError) as info:
        interpreters.find("3.99", environ)
    assert "downloads are off (UV_PYTHON_DOWNLOADS=never): not fetched" in str(info.value)
    assert "uv python install 3.99` failed" not in str(info.value)


def test_an_interpreter_uv_downloads_is_the_one_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's download is not reachable here: a stand-in uv 'installs' this test's own interpreter by listing it
    only once `uv python install` ran, as uv lists a managed Python it has just installed."""
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    installed = tmp_path / "installed"
    fake = tmp_path / "uv"
    listing = json.dumps(
        [
            {
                "implementation": "cpython",
                "path": sys.executable,
                "version": platform.python_version(),
                "variant": "default",
            }
        ]
    )
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = install ]; then echo "$3" > {installed}; exit 0; fi\n'
        f"if [ -e {installed} ]; then echo '{listing}'; else echo '[]'; fi\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(interpreters, "uv_binary", lambda: str(fake))
    environ = {"PYENV_ROOT": str(tmp_path / "none"), "PATH": "/nonexistent", "HOME": str(tmp_path)}
    found = interpreters.find(own, environ)
    assert installed.read_text().strip() == own, "uv python install was asked for the matrix's version"
    assert found.minor == own and found.origin == "uv"


def test_a_version_is_found_and_confirmed_by_running_it() -> None:
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = interpreters.find(own)
    assert found.minor == own and found.prefix is not None


def test_envs_are_keyed_by_python_and_by_an_explicit_interpreter() -> None:
    from packaging.version import Version

    keys = {
        EnvSpec(Version("2.12.1"), "auto", "3.10").key,
        EnvSpec(Version("2.12.1"), "auto", "3.13").key,
        EnvSpec(Version("2.12.1"), "auto", "3.10", "/opt/python/bin/python3.10").key,
        EnvSpec(Version("2.12.1"), "auto", "3.10", "/other/bin/python3.10").key,
    }
    assert len(keys) == 4
    assert EnvSpec(Version("2.12.1"), "auto", "3.10").key == "torch-2.12.1-auto-py3.10"


def test_the_full_matrix_is_every_release_on_every_python_the_index_serves(repo: Path) -> None:
    plan = make_plan(load_matrix(repo / "ci" / "matrix-full.yaml"))
    pairs = {(str(r.torch), r.python) for r in plan.runtimes}
    assert len(pairs) == len(plan.runtimes) == 27
    assert ("2.15.0", "3.10") not in pairs and ("2.9.1", "3.10") in pairs and ("2.15.0", "3.13") in pairs
    assert len({c.id for c in plan.cells}) == len(plan.cells) == 13 * 27


def test_run_no_python_downloads_is_exit_2_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch_abi_harness.cli import main

    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "automatic")  # restored after: the flag sets it for the process
    path = matrix_file(tmp_path, '  - {torch: 2.13.0, python: "3.99"}\n')
    argv = ["run", "--matrix", str(path), "--no-python-downloads", "--cache-dir", str(tmp_path / "cache")]
    assert main([*argv, "--reports-dir", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err
    assert "no CPython 3.99 interpreter found" in err and "downloads are off (UV_PYTHON_DOWNLOADS=never)" in err
