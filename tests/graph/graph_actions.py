"""Composite actions for the graph runner (graph_runner.py): a step's `uses:` that names an action by a path in the
job's workspace (`uses: ./path`), or a remote action the test maps to a folder of this machine (`Runner.actions`:
`owner/torch-abi-harness` -> the harness's checkout), runs the action's own `runs.steps` as GitHub runs a composite
action:

- the folder holds action.yml (or action.yaml) with `runs.using: composite`; a mapped remote action is first copied
  (git's tracked and untracked-but-not-ignored files) to `_actions/<owner>/<name>/<ref>` on the job's disk, where
  a runner downloads it, so nothing it writes lands in the folder it came from;
- `inputs`: each `with:` value, else the input's `default` (expressions allowed); an input the action does not
  declare fails the job (GitHub only warns: here a typo must not pass unseen);
- `github.action_path` and GITHUB_ACTION_PATH are the action's folder; the `uses:` step's `env` is every inner
  step's; the action's own `steps` context; `success()` is the job's status with the action's steps so far;
- what an inner step writes to GITHUB_ENV or PATH reaches the job's later steps; the action's `outputs` are
  evaluated over its steps when it ends, and kept when it fails (GitHub keeps a failed step's outputs).

Every inner step runs through the runner's own step code, so `run:` steps (with `shell:`, required in a composite
action) and the actions the runner replaces work inside as they do in a workflow.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from graph_errors import ActionFailed, UnsupportedWorkflow
from graph_expressions import Evaluator, text

if TYPE_CHECKING:  # graph_runner imports this module: its types only for the type checker
    from graph_runner import JobScope, Runner

ACTION_FILES = ("action.yml", "action.yaml")


def action_folder(uses: str, workspace: Path, mapped: Mapping[str, Path]) -> Path | None:
    """Where a `uses:` action's files are, or None when it is not a composite action this module runs: a path in
    the workspace, or a remote action (owner/name@ref) the runner was given a local folder for."""
    if uses.startswith("./"):
        return workspace / uses
    return mapped.get(uses.split("@")[0])


def download(uses: str, source: Path, disk: Path) -> Path:
    """A mapped remote action copied where a runner downloads actions (`_actions/owner/name/ref` on the job's
    disk), once per job; its tracked and untracked-but-not-ignored files, as a checkout of the action has them."""
    name, _, ref = uses.partition("@")
    target = disk / "_actions" / name / (ref or "main")
    if not target.is_dir():
        copy_checkout(source, target)
    return target


def repository_files(repo: Path) -> list[str]:
    """A checkout's files: git's tracked and untracked-but-not-ignored ones."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


def copy_checkout(source: Path, target: Path) -> None:
    """A checkout of source at target: its tracked and untracked-but-not-ignored files."""
    for relative in repository_files(source):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, target / relative)


def read_action(folder: Path) -> dict[str, Any]:
    for name in ACTION_FILES:
        if (folder / name).is_file():
            doc = yaml.safe_load((folder / name).read_text())
            if doc.get("runs", {}).get("using") != "composite":
                raise UnsupportedWorkflow(f"{folder / name}: only composite actions are run")
            return dict(doc)
    raise UnsupportedWorkflow(f"{folder}: no action.yml")


def action_inputs(doc: Mapping[str, Any], given: Mapping[str, Any], evaluator: Evaluator, uses: str) -> dict[str, str]:
    """The `inputs` context: what `with:` gave, else each declared input's default."""
    declared = doc.get("inputs") or {}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UnsupportedWorkflow(f"{uses}: inputs {unknown} are not declared by the action ({sorted(declared)})")
    return {
        name: text(given[name]) if name in given else evaluator.interpolate(str((spec or {}).get("default", "")))
        for name, spec in declared.items()
    }


def run_composite(runner: Runner, step: Mapping[str, Any], job: JobScope, number: str) -> dict[str, str]:
    """A composite action's `uses:` step: its steps run in order; its outputs returned (or carried by ActionFailed)."""
    uses = str(step["uses"])
    workspace = Path(job.env["GITHUB_WORKSPACE"])
    folder = action_folder(uses, workspace, runner.actions)
    assert folder is not None, uses
    if not uses.startswith("./"):
        folder = download(uses, folder, job.disk)
    doc = read_action(folder)
    given = {k: job.evaluator.value(v) for k, v in (step.get("with") or {}).items()}
    contexts = {**job.contexts, "github": {**job.contexts["github"], "action_path": str(folder)}, "steps": {}}
    failed: list[str] = []
    evaluator = Evaluator(contexts, succeeded=lambda: job.evaluator.succeeded() and not failed)
    contexts["inputs"] = action_inputs(doc, given, evaluator, uses)
    before = dict(job.env)
    env = {**job.env, **{k: job.evaluator.interpolate(str(v)) for k, v in (step.get("env") or {}).items()}}
    env["GITHUB_ACTION_PATH"] = str(folder)
    scope = dataclasses.replace(job, evaluator=evaluator, contexts=contexts, env=env)
    for index, inner in enumerate(doc["runs"]["steps"]):
        record = runner.run_step(inner, f"{number}.{index}", scope)
        runner.inner_steps.append(record)
        if record.outcome == "failure" and not inner.get("continue-on-error"):
            failed.append(record.name)
    for key, value in env.items():  # GITHUB_ENV and PATH changes reach the job; the step's own env does not
        if key != "GITHUB_ACTION_PATH" and (key in before or key not in (step.get("env") or {})):
            job.env[key] = value
    outputs = {k: evaluator.interpolate(str(v.get("value", ""))) for k, v in (doc.get("outputs") or {}).items()}
    if failed:
        raise ActionFailed(f"{uses}: step(s) {failed} failed", outputs)
    return outputs


def checkout(given: Mapping[str, Any], workspace: Path, repo: Path, mapped: Mapping[str, Path]) -> None:
    """actions/checkout's effect: the workflow's repository (or `repository:`, a repository the runner was given a
    folder for) copied into the workspace (or its `path:`). `ref:` is the folder as it is: the test chose it."""
    source = repo
    if given.get("repository"):
        name = str(given["repository"])
        if name not in mapped:
            raise UnsupportedWorkflow(f"checkout of {name}: no folder given for it (Runner.actions)")
        source = mapped[name]
    copy_checkout(source, workspace / str(given.get("path") or "."))


CALL_KEYS = {"uses", "with", "secrets"}


def called_workflow(uses: str, repo: Path, mapped: Mapping[str, Path]) -> Path:
    """A job's `uses:` workflow file: `./.github/workflows/x.yml` in the calling repository, or
    `owner/name/.github/workflows/x.yml@ref` in the folder the runner was given for owner/name."""
    if uses.startswith("./"):
        return repo / uses
    owner, name, rest = uses.split("@")[0].split("/", 2)
    if f"{owner}/{name}" not in mapped:
        raise UnsupportedWorkflow(f"{uses}: no folder given for {owner}/{name} (Runner.actions)")
    return mapped[f"{owner}/{name}"] / rest


def call_inputs(call: Mapping[str, Any], given: Mapping[str, Any], uses: str) -> dict[str, Any]:
    """The called workflow's `inputs`: what `with:` gave, else each declared input's default; an undeclared input or
    a required one not given fails, as GitHub refuses such a call before any job starts."""
    declared = call.get("inputs") or {}
    unknown = sorted(set(given) - set(declared))
    missing = sorted(k for k, spec in declared.items() if (spec or {}).get("required") and k not in given)
    if unknown or missing:
        raise UnsupportedWorkflow(f"{uses}: inputs {unknown} not declared, required inputs {missing} not given")
    return {k: given[k] if k in given else (spec or {}).get("default", "") for k, spec in declared.items()}


def run_called_workflow(runner: Runner, name: str, job: Mapping[str, Any], evaluator: Evaluator) -> dict[str, Any]:
    """A job that calls a reusable workflow: its jobs run in order, as this run's (same artifacts, same run id),
    labelled `caller / job`; the job's result is theirs, its outputs the called workflow's `outputs`."""
    uses = str(job["uses"])
    path = called_workflow(uses, runner.repo, runner.actions)
    doc = yaml.safe_load(path.read_text())
    triggers = doc.get("on", doc.get(True)) or {}  # YAML 1.1 reads the key `on` as true
    if not isinstance(triggers, dict) or "workflow_call" not in triggers:
        raise UnsupportedWorkflow(f"{uses}: not a reusable workflow (no `on: workflow_call`)")
    call = triggers["workflow_call"] or {}
    given = {k: evaluator.value(v) for k, v in (job.get("with") or {}).items()}
    inputs = call_inputs(call, given, uses)
    called = dataclasses.replace(runner, workflow=path, inputs=inputs, records=[])
    called.run(tuple(called.doc["jobs"]))
    for record in called.records:
        record.label = f"{name} / {record.label}"
    runner.records.extend(called.records)
    results = [r["result"] for r in called.results.values()]
    jobs = Evaluator({"jobs": called.results, "inputs": inputs})
    outputs = {k: jobs.interpolate(str(v.get("value", ""))) for k, v in (call.get("outputs") or {}).items()}
    return {"result": "success" if all(r in ("success", "skipped") for r in results) else "failure", "outputs": outputs}
