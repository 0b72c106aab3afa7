"""The runner's setup-python, as a hosted runner's tool cache has it: each CPython asked for on PATH where the
harness finds it, the last one `python`; a version the machine does not provide fails the job; a CPython a job
did not set up is not there (no pyenv shims on a job's PATH). No torch: the unit-level tests need no root; the
one that runs jobs loop-mounts their disks (root)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from graph_runner import ActionFailed, Runner, provided_python, without_pyenv

from torch_abi_harness.core.errors import BadInputError
from torch_abi_harness.provision import interpreters

OTHER = "3.10"  # a CPython beside the runner's own 3.11 (pyenv's on this project's machines)


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    workflow = tmp_path / "w.yml"
    workflow.write_text("name: w\non: push\njobs: {}\n")
    return Runner(workflow, tmp_path, tmp_path / "root", {}, lambda *_: None)


@pytest.fixture
def job_env(tmp_path: Path) -> dict[str, str]:
    """What a fresh job sees before setup-python: the machine's PATH without pyenv, its own HOME, no downloads."""
    for folder in ("home", "temp"):
        (tmp_path / folder).mkdir()
    return {
        "PATH": without_pyenv(os.environ["PATH"], os.environ),
        "HOME": str(tmp_path / "home"),
        "RUNNER_TEMP": str(tmp_path / "temp"),
        "UV_PYTHON_DOWNLOADS": "never",
    }


def version_of(command: str, env: dict[str, str]) -> str:
    code = "import sys; print('%d.%d' % sys.version_info[:2], sys.prefix != sys.base_prefix)"
    return subprocess.run([command, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_each_cpython_asked_for_is_on_path_where_the_harness_finds_it_and_the_last_is_python(
    runner: Runner, job_env: dict[str, str]
) -> None:
    if provided_python(OTHER) is None:
        pytest.skip(f"this machine provides no CPython {OTHER}")
    with pytest.raises(BadInputError, match=f"no CPython {re.escape(OTHER)} interpreter found"):
        interpreters.find(OTHER, environ=job_env)  # before: not there, and uv may not download it
    posts: list[Callable[[], None]] = []
    outputs = runner.setup_python({"python-version": f"{OTHER}\n3.11\n", "cache": "pip"}, job_env, posts)
    assert outputs == {"python-version": "3.11"} and len(posts) == 1
    assert version_of("python", job_env) == "3.11 True"  # the harness's own: a venv, pip installs into it
    assert version_of(f"python{OTHER}", job_env) == f"{OTHER} False"  # a real CPython, as in a tool cache
    assert interpreters.find(OTHER, environ=job_env).minor == OTHER  # found the way a job's harness finds it


def test_a_version_the_machine_does_not_provide_fails_the_step(runner: Runner, job_env: dict[str, str]) -> None:
    with pytest.raises(ActionFailed, match=r"this machine provides no CPython 3\.99"):
        runner.setup_python({"python-version": "3.11\n3.99"}, job_env, [])
    with pytest.raises(ActionFailed, match="no python-version"):
        runner.setup_python({"python-version": "\n"}, job_env, [])


def test_pyenv_shims_are_not_on_a_jobs_path(tmp_path: Path) -> None:
    environ = {"PYENV_ROOT": str(tmp_path / "pyenv"), "HOME": str(tmp_path)}
    path = os.pathsep.join([f"{tmp_path}/pyenv/shims", "/usr/bin", f"{tmp_path}/pyenv/plugins/x/shims", "/bin"])
    assert without_pyenv(path, environ) == "/usr/bin:/bin"
    (tmp_path / "pyenv" / "versions" / "3.12.1" / "bin").mkdir(parents=True)
    (tmp_path / "pyenv" / "versions" / "3.12.4" / "bin").mkdir(parents=True)
    for patch in ("1", "4"):
        (tmp_path / "pyenv" / "versions" / f"3.12.{patch}" / "bin" / "python3.12").touch()
    assert provided_python("3.12", {**environ, "PATH": ""}) == tmp_path / "pyenv/versions/3.12.4/bin/python3.12"
    assert provided_python("3.12t", {**environ, "PATH": ""}) is None


JOBS = """name: pythons
on: push
env:
  UV_PYTHON_DOWNLOADS: never
jobs:
  {name}:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    steps:
      - uses: actions/setup-python@v6
        with:
          python-version: |
            {versions}
      - run: {harness} -c "from torch_abi_harness.provision import interpreters; interpreters.find('{other}')"
"""


@pytest.mark.parametrize(
    ("versions", "result", "failed_step"),
    [((OTHER, "3.11"), "success", None), (("3.11",), "failure", 1), (("3.99",), "failure", 0)],
    ids=["set-up", "not-set-up", "not-provided"],
)
def test_a_job_that_needs_a_cpython_it_did_not_set_up_fails(
    tmp_path: Path, versions: tuple[str, ...], result: str, failed_step: int | None
) -> None:
    """A job's step asks for CPython 3.10 the way the harness does (uv's listing, then pyenv under the job's HOME,
    no download): it fails unless the job's setup-python set 3.10 up, and setup-python fails for a version
    the machine does not have."""
    if os.geteuid() != 0:
        pytest.fail("the jobs run on loop-mounted disks: run it as root")
    if provided_python(OTHER) is None:
        pytest.skip(f"this machine provides no CPython {OTHER}")
    workflow = tmp_path / "pythons.yml"
    listed = "\n            ".join(versions)  # the block's lines, indented as the block is
    workflow.write_text(JOBS.format(name="job", versions=listed, harness=sys.executable, other=OTHER))
    graph = Runner(workflow, tmp_path, tmp_path / "root", {}, lambda *_: None, disk_gb=1)
    graph.run(("job",))
    (record,) = graph.records
    assert record.result == result, record.steps
    expected = ["success", "success"]
    if failed_step is not None:
        expected[failed_step:] = ["failure"] + ["skipped"] * (1 - failed_step)
    assert [step.outcome for step in record.steps] == expected


def test_an_unzipped_upload_is_one_file_named_after_itself(runner: Runner, tmp_path: Path) -> None:
    """upload-artifact v7's `archive: false`: the artifact is the file, named after it (`name` ignored); a folder is
    refused as the action refuses it; a single file zipped under `name` lands in that artifact's folder."""
    workspace = tmp_path / "ws"
    (workspace / "report-html").mkdir(parents=True)
    page = workspace / "report-html" / "stable-abi-report-cpu-4242.html"
    page.write_text("<html></html>")
    given = {"path": "report-html/stable-abi-report-cpu-4242.html", "archive": False, "name": "ignored"}
    assert runner.upload(given, workspace) == {"artifact-id": page.name}
    assert (runner.artifacts / page.name / page.name).read_text() == "<html></html>"
    assert not (runner.artifacts / "ignored").exists()
    with pytest.raises(ActionFailed, match="is not a single file"):
        runner.upload({"path": "report-html", "archive": "false"}, workspace)
    assert runner.upload({"path": "report-html/gone.html", "archive": False}, workspace) == {}
    assert runner.upload({"path": page.relative_to(workspace), "name": "zipped"}, workspace) == {
        "artifact-id": "zipped"
    }
    assert (runner.artifacts / "zipped" / page.name).is_file()
