"""The action (action.yml) and the reusable workflow (.github/workflows/compat.yml) an extension's repository calls:
every input has a default that needs nothing (the action) or is declared (the workflow), every action is pinned by
a commit, every harness command and option they call exists, and ci/action-args.sh's selectors select the cells
its inputs name, no more, in a real plan."""

import fnmatch
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_workflows import check_script

from torch_abi_harness.config import selector_pattern
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.plan import make_plan

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action.yml"
COMPAT = REPO / ".github" / "workflows" / "compat.yml"
PINNED = re.compile(r"[\w.-]+/[\w.-]+(?:/[\w.-]+)*@[0-9a-f]{40}")


def load(path: Path) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    return data


def args_of(**inputs: str) -> list[str]:
    """What ci/action-args.sh prints for these inputs (RELEASES=..., one argument a line)."""
    env = {"PATH": os.environ["PATH"], **inputs}
    done = subprocess.run(["bash", str(REPO / "ci" / "action-args.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def selected(argv: list[str], cell_ids: list[str]) -> set[str]:
    patterns = [selector_pattern(argv[i + 1]) for i, word in enumerate(argv) if word == "-k"]
    return {c for c in cell_ids if any(fnmatch.fnmatchcase(c, p) for p in patterns)}


def test_the_action_needs_nothing_but_a_python_and_runs_the_harness_it_comes_with() -> None:
    action = load(ACTION)
    assert action["runs"]["using"] == "composite"
    for name, spec in action["inputs"].items():
        assert not spec.get("required") and "default" in spec, f"input {name}: needs a default that needs nothing"
    assert set(action["inputs"]) >= {"project", "wheel", "releases", "python", "variants", "args", "reports-dir"}
    assert set(action["outputs"]) == {"exit-code", "report"}
    steps = action["runs"]["steps"]
    ids = {step.get("id") for step in steps}
    for step in steps:
        if "uses" in step:
            assert PINNED.fullmatch(step["uses"]), f"{step['uses']}: pin it by a commit, as ci/*.yml do"
        else:
            assert step.get("shell") == "bash", f"{step.get('name')}: a composite action's run step needs a shell"
            check_script(step["run"], f"action.yml:{step.get('name')}")
        for ref in re.findall(r"\bsteps\.([\w-]+)\.", yaml.safe_dump(step)):
            assert ref in ids, f"{step.get('name')}: refers to unknown step {ref!r}"
    install = steps[0]["run"]
    assert "$GITHUB_ACTION_PATH" in install and "[run]" in install, "the harness installed from the action's checkout"
    last = steps[-1]
    assert last["if"] == "always()" and "exit" in last["run"], "the run's exit code fails the step, last"


def test_the_reusable_workflow_is_the_nightly_graph_on_the_callers_repository() -> None:
    workflow = load(COMPAT)
    call = workflow.get("on", workflow.get(True))["workflow_call"]
    assert set(call["inputs"]) >= {"releases", "pythons", "variants", "project", "shards", "harness-ref"}
    jobs = workflow["jobs"]
    assert list(jobs) == ["plan", "build", "run", "merge"]
    assert jobs["build"]["needs"] == "plan" and jobs["merge"]["needs"] == ["plan", "build", "run"]
    for name, job in jobs.items():
        assert isinstance(job["timeout-minutes"], int), name
        for step in job["steps"]:
            if "uses" in step:
                assert PINNED.fullmatch(step["uses"]), step["uses"]
            else:
                check_script(step["run"], f"compat.yml:{name}:{step.get('name')}")
            for ref in re.findall(r"\binputs\.([\w-]+)", yaml.safe_dump(step)):
                assert ref in call["inputs"], f"{name}: unknown input {ref!r}"
    assert workflow["permissions"] == {"contents": "read"}


@pytest.mark.parametrize(
    ("inputs", "runtimes"),
    [
        ({}, {"r2.13.0-cpu", "r2.14.1-cpu", "r2.15.0-cpu", "r2.14.1-cpu-py3.10"}),
        ({"RELEASES": "2.14.1"}, {"r2.14.1-cpu", "r2.14.1-cpu-py3.10"}),
        ({"RELEASES": "2.13.0, 2.15.0"}, {"r2.13.0-cpu", "r2.15.0-cpu"}),
        ({"PYTHONS": "3.10"}, {"r2.14.1-cpu-py3.10"}),
        ({"RELEASES": "2.15.0", "PYTHONS": "3.10"}, set()),
    ],
    ids=["none", "one-release", "two-releases", "a-python", "release-and-python"],
)
def test_the_inputs_select_the_cells_on_the_runtimes_they_name(inputs: dict[str, str], runtimes: set[str]) -> None:
    cells = [c.id for c in make_plan(load_matrix(REPO / "tests" / "graph" / "matrix.yaml")).cells]
    argv = args_of(**inputs)
    chosen = selected(argv, cells) if argv else set(cells)
    assert {c.split("~")[1] for c in chosen} == runtimes


def test_variants_wheel_and_extra_arguments(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    wheel = tmp_path / "dist" / "ext-0.1-cp39-abi3-linux_x86_64.whl"
    wheel.touch()
    argv = args_of(VARIANTS="cpu", WHEEL=f"{tmp_path}/dist/*.whl", ARGS="-j 2  --timeout 900")
    assert argv == ["-k", "~r*+cpu-", "--wheel", str(wheel), "-j", "2", "--timeout", "900"]
    assert selected(argv, ["e@b2.14.1~r2.14.1+cpu-cpu", "e@b2.14.1~r2.14.1+cu130-cpu"]) == {"e@b2.14.1~r2.14.1+cpu-cpu"}
    (tmp_path / "dist" / "other-0.1-cp39-abi3-linux_x86_64.whl").touch()
    done = subprocess.run(
        ["bash", str(REPO / "ci" / "action-args.sh")],
        env={"PATH": os.environ["PATH"], "WHEEL": f"{tmp_path}/dist/*.whl"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "matches 2 files, not one" in done.stderr
