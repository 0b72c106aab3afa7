"""The runner's setup-python, as a hosted runner's tool cache has it: each CPython asked for on PATH where the
harness finds it, the last one `python`; a version the machine does not provide fails the job; a CPython a job
did not set up is not there (no pyenv shims on a job's PATH). No torch: the unit-level tests need no root; the
one that runs jobs loop-mounts their disks (root)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from graph_expressions import Evaluator
from graph_runner import ActionFailed, JobScope, Runner, UnsupportedWorkflow, provided_python, without_pyenv

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


ACTION = """name: act
inputs:
  greeting:
    description: what to say
    required: true
  where:
    description: a default with an expression
    default: "${{ github.action_path }}/here"
outputs:
  said:
    description: the first step's output
    value: ${{ steps.say.outputs.said }}
  status:
    description: the last step's
    value: ${{ steps.last.outputs.status }}
runs:
  using: composite
  steps:
    - id: say
      shell: bash
      working-directory: sub
      env:
        OWN: step-env
      run: |
        test "$GITHUB_ACTION_PATH" = "${{ github.action_path }}"
        echo "said=${{ inputs.greeting }} from $PWD, $FROM_USES, $OWN, ${{ inputs.where }}" >> "$GITHUB_OUTPUT"
        echo "SET_BY_ACTION=yes" >> "$GITHUB_ENV"
        echo "grid" >> "$GITHUB_STEP_SUMMARY"
    - shell: bash
      run: test "${{ inputs.greeting }}" != fail
    - name: skipped after a failure
      shell: bash
      run: echo "status=not-here" >> "$GITHUB_OUTPUT"
    - id: last
      if: always()
      shell: bash
      run: echo "status=ran" >> "$GITHUB_OUTPUT"
"""


def job_scope(runner: Runner, root: Path) -> JobScope:
    """One job's scope on a plain folder (no loop mount): its workspace, files, env and contexts as run_instance
    makes them."""
    workspace, home, temp = root / "work", root / "home", root / "temp"
    for folder in (workspace, home, temp, root / "files", workspace / "sub"):
        folder.mkdir(parents=True, exist_ok=True)
    env = runner.base_env(workspace, home, temp)
    contexts = {
        "github": {"workspace": str(workspace), "run_id": runner.run_id},
        "inputs": {},
        "env": {},
        "steps": {},
        "runner": {"temp": str(temp), "os": "Linux"},
    }
    return JobScope(Evaluator(contexts), contexts, env, root, [], time.monotonic() + 60)


def write_action(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "action.yml").write_text(ACTION)
    return folder


def test_a_local_composite_action_runs_its_steps_with_its_inputs_path_and_outputs(
    runner: Runner, tmp_path: Path
) -> None:
    job = job_scope(runner, tmp_path / "job")
    folder = write_action(tmp_path / "job" / "work" / "act")
    step = {"id": "a", "uses": "./act", "with": {"greeting": "hello"}, "env": {"FROM_USES": "uses-env"}}
    record = runner.run_step(step, 0, job)
    assert record.outcome == "success"
    said = f"hello from {folder.parent / 'sub'}, uses-env, step-env, {folder}/here"
    assert job.contexts["steps"]["a"]["outputs"] == {"said": said, "status": "ran"}
    assert job.env["SET_BY_ACTION"] == "yes"  # GITHUB_ENV reaches the job's later steps
    assert "FROM_USES" not in job.env and "GITHUB_ACTION_PATH" not in job.env  # the step's own env does not
    assert (tmp_path / "job" / "files" / "summary.md").read_text() == "grid\n"
    assert [s.outcome for s in runner.inner_steps] == ["success"] * 4


def test_a_failing_inner_step_fails_the_uses_step_keeping_its_outputs(runner: Runner, tmp_path: Path) -> None:
    job = job_scope(runner, tmp_path / "job")
    write_action(tmp_path / "job" / "work" / "act")
    record = runner.run_step({"id": "a", "uses": "./act", "with": {"greeting": "fail"}}, 0, job)
    assert record.outcome == "failure"
    assert [s.outcome for s in runner.inner_steps] == ["success", "failure", "skipped", "success"]
    assert job.contexts["steps"]["a"]["outputs"]["status"] == "ran"  # `if: always()` ran after the failure


def test_an_input_the_action_does_not_declare_fails_loudly(runner: Runner, tmp_path: Path) -> None:
    job = job_scope(runner, tmp_path / "job")
    write_action(tmp_path / "job" / "work" / "act")
    with pytest.raises(UnsupportedWorkflow, match=r"inputs \['greting'\] are not declared"):
        runner.run_step({"uses": "./act", "with": {"greting": "typo"}}, 0, job)


def test_a_mapped_remote_action_runs_from_a_copy_on_the_jobs_disk(tmp_path: Path) -> None:
    """`uses: owner/act@v1` mapped to a checkout: its files are copied where a runner downloads actions, and its
    steps run there, so nothing lands in the checkout (an install of it writes build files beside its sources)."""
    source = write_action(tmp_path / "checkout")
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    (source / ".gitignore").write_text("ignored/\n")
    (source / "ignored").mkdir()
    workflow = tmp_path / "w.yml"
    workflow.write_text("name: w\non: push\njobs: {}\n")
    graph = Runner(workflow, tmp_path, tmp_path / "root", {}, lambda *_: None, actions={"owner/act": source})
    job = job_scope(graph, tmp_path / "job")
    step = {"id": "a", "uses": "owner/act@v1", "with": {"greeting": "hi"}, "env": {"FROM_USES": "x"}}
    assert graph.run_step(step, 0, job).outcome == "success"
    copy = tmp_path / "job" / "_actions" / "owner" / "act" / "v1"
    assert (copy / "action.yml").is_file() and not (copy / "ignored").exists()
    assert job.contexts["steps"]["a"]["outputs"]["said"].endswith(f"{copy}/here")
    with pytest.raises(UnsupportedWorkflow, match="not an action this runner replaces"):
        graph.run_step({"uses": "other/act@v1"}, 1, job)  # an action neither mapped nor replaced


CALLER = """name: caller
on: push
jobs:
  call:
    uses: ./.github/workflows/called.yml
    with: {greeting: "${{ vars.GREETING }}"}
  after:
    needs: call
    runs-on: ubuntu-latest
    steps:
      - run: test "${{ needs.call.outputs.said }}" = "hi from first, the default"
"""
CALLED = """name: called
on:
  workflow_call:
    inputs:
      greeting: {type: string, required: true}
      other: {type: string, required: false, default: the default}
    outputs:
      said: {value: "${{ jobs.second.outputs.said }}"}
jobs:
  first:
    runs-on: ubuntu-latest
    outputs: {word: "${{ steps.w.outputs.word }}"}
    steps:
      - uses: actions/checkout@v5
      - uses: actions/checkout@v5
        with: {repository: owner/tool, path: tool}
      - id: w
        run: |
          test -f tool/marker && test -f .github/workflows/called.yml
          echo "word=first" >> "$GITHUB_OUTPUT"
  second:
    needs: first
    runs-on: ubuntu-latest
    outputs: {said: "${{ steps.s.outputs.said }}"}
    steps:
      - id: s
        run: |
          said="${{ inputs.greeting }} from ${{ needs.first.outputs.word }}"
          echo "said=$said, ${{ inputs.other }}" >> "$GITHUB_OUTPUT"
"""


def caller_repository(root: Path) -> tuple[Path, Path]:
    """A repository whose workflow calls its own reusable workflow, and another repository (`owner/tool`)."""
    repo, tool = root / "repo", root / "tool"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "caller.yml").write_text(CALLER)
    (repo / ".github" / "workflows" / "called.yml").write_text(CALLED)
    tool.mkdir()
    (tool / "marker").touch()
    for folder in (repo, tool):
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return repo, tool


def test_a_job_that_calls_a_reusable_workflow_runs_its_jobs_with_its_inputs_and_outputs(tmp_path: Path) -> None:
    """The called workflow's jobs run in order as this run's (labelled `caller / job`), with `with:` and the
    declared defaults as `inputs`; its `outputs` (over its jobs') are the calling job's, for the jobs that need it;
    a checkout of another `repository:` into a `path:` is the folder the runner was given for it."""
    if os.geteuid() != 0:
        pytest.fail("the jobs run on loop-mounted disks: run it as root")
    repo, tool = caller_repository(tmp_path)
    graph = Runner(
        repo / ".github" / "workflows" / "caller.yml",
        repo,
        tmp_path / "root",
        {},
        lambda *_: None,
        disk_gb=1,
        variables={"GREETING": "hi"},
        actions={"owner/tool": tool},
    )
    graph.run(("after",))
    assert [(r.label, r.result) for r in graph.records] == [
        ("call / first", "success"),
        ("call / second", "success"),
        ("after", "success"),
    ]
    assert graph.results["call"] == {"result": "success", "outputs": {"said": "hi from first, the default"}}


def test_a_call_without_a_required_input_is_refused(tmp_path: Path) -> None:
    repo, _ = caller_repository(tmp_path)
    caller = repo / ".github" / "workflows" / "caller.yml"
    caller.write_text(CALLER.replace('    with: {greeting: "${{ vars.GREETING }}"}\n', ""))
    graph = Runner(caller, repo, tmp_path / "root", {}, lambda *_: None)
    with pytest.raises(UnsupportedWorkflow, match=r"required inputs \['greeting'\] not given"):
        graph.run_job("call")
