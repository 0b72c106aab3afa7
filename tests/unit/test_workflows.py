"""The CI workflows in ci/ and .ci/run: valid structure, and every command and option they call exists."""

import argparse
import ast
import importlib.util
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from torch_abi_harness.cli import parser
from torch_abi_harness.config.matrix import load_matrix
from torch_abi_harness.mutate.run import default_cells
from torch_abi_harness.plan import make_plan
from torch_abi_harness.run.shard import build_jobs, cell_pythons, fan_out, plan_json

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / "ci").glob("*.yml"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def nox_sessions() -> set[str]:
    tree = ast.parse((REPO / "noxfile.py").read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr == "session":
                    found.add(node.name)
    return found


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options_of(sub: argparse.ArgumentParser) -> set[str]:
    return {flag for action in sub._actions for flag in action.option_strings}


def harness_invocations(script: str) -> list[list[str]]:
    """Argument lists given to the harness: `python -m torch_abi_harness`, `nox -s matrix --`, `nox -s harness --`.

    Options collected in a bash array (`args+=(--add-runtime "$PRE")`) count as `run` options.
    """
    calls = [["run", *shlex.split(items)] for items in re.findall(r"\bargs\+?=\((.*?)\)", script)]
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True, posix=True) if line.strip() else []
        for i, word in enumerate(words):
            if word == "-m" and i + 1 < len(words) and words[i + 1] == "torch_abi_harness":
                calls.append(words[i + 2 :])
            if word == "-s" and i + 1 < len(words) and words[i + 1] in {"matrix", "harness"}:
                rest = words[i + 2 :]
                args = rest[rest.index("--") + 1 :] if "--" in rest else []
                calls.append(["run", *args] if words[i + 1] == "matrix" else args)
    return calls


def check_script(script: str, where: str) -> None:
    sessions, commands = nox_sessions(), subcommands()
    for session in re.findall(r"\bnox -s (\S+)", script):
        assert session in sessions, f"{where}: nox session {session!r} does not exist"
    for argv in harness_invocations(script):
        words = [w for w in argv if not w.startswith("$") and not w.startswith('"$')]
        if not words or words[0].startswith("-"):
            continue
        assert words[0] in commands, f"{where}: harness command {words[0]!r} does not exist"
        known = options_of(commands[words[0]])
        for word in words[1:]:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"{where}: {words[0]} has no option {word}"
    for path in re.findall(r"\b(ci/[\w./-]+\.(?:sh|yaml|yml))", script):
        assert (REPO / path).is_file(), f"{where}: {path} does not exist"


def load_workflow(path: Path) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    return data


def test_every_session_that_installs_the_harness_compiles_its_bytecode() -> None:
    """With PYTHONDONTWRITEBYTECODE=1 (this project's machines) an editable install is never cached: each harness
    process the session starts would compile its modules again. Only install_harness installs it, and compiles."""
    source = (REPO / "noxfile.py").read_text()
    tree = ast.parse(source)
    editable, environments = [], []
    for function in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
        for call in (node for node in ast.walk(function) if isinstance(node, ast.Call)):
            words = [arg.value for arg in call.args if isinstance(arg, ast.Constant)]
            if isinstance(call.func, ast.Attribute) and call.func.attr == "install" and "-e" in words:
                editable.append(function.name)
                environments += [ast.unparse(k.value) for k in call.keywords if k.arg == "env"]
    assert editable == ["install_harness"], editable
    assert environments == ["COMPILED"], environments  # the install itself asks uv for bytecode
    assert '"UV_COMPILE_BYTECODE": "1"' in source
    (helper,) = (node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "install_harness")
    assert '"compileall", "-q", "torch_abi_harness"' in (ast.get_source_segment(source, helper) or "")


def test_there_are_a_nightly_and_a_release_gating_workflow() -> None:
    assert {p.name for p in WORKFLOWS} >= {"nightly.yml", "release-gating.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_structure(path: Path) -> None:
    data = load_workflow(path)
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads the key `on` as true
    assert triggers, f"{path.name}: no triggers"
    assert data["name"] and data["jobs"]
    for job_name, job in data["jobs"].items():
        if "uses" in job:  # a call of another workflow of ci/ (as .github/workflows/ once copied there)
            called = re.fullmatch(r"\$/\.github/workflows/([\w.-]+\.yml)", job["uses"])
            assert called and (path.parent / called[1]).is_file(), f"{job_name}: calls {job['uses']!r}"
            callee = load_workflow(path.parent / called[1])
            accepted = (callee.get("on", callee.get(True)) or {}).get("workflow_call") or {}
            assert set(job.get("with", {})) <= set(accepted.get("inputs") or {}), f"{job_name}: unknown inputs"
            continue
        assert job.get("runs-on"), f"{job_name}: no runs-on"
        assert isinstance(job.get("timeout-minutes"), int), f"{job_name}: no timeout-minutes"
        step_ids = {step["id"] for step in job["steps"] if "id" in step}
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), f"{job_name}: a step needs exactly one of uses/run: {step}"
            if "uses" in step:  # pinned to a commit (a tag can be moved), the release named beside it
                assert re.fullmatch(r"[\w.-]+/[\w.-]+(?:/[\w.-]+)*@[0-9a-f]{40}", step["uses"]), step["uses"]
                assert re.search(re.escape(step["uses"]) + r" # v\d+\.\d+\.\d+$", path.read_text(), re.M), step["uses"]
            for expr in EXPRESSION.findall(yaml.safe_dump(step)):
                for ref in re.findall(r"\bsteps\.([\w-]+)\.", expr):
                    assert ref in step_ids, f"{job_name}: expression refers to unknown step {ref!r}"
                for ref in re.findall(r"\binputs\.([\w-]+)", expr):
                    inputs = (triggers.get("workflow_dispatch") or {}).get("inputs") or {}
                    assert ref in inputs, f"{path.name}: unknown input {ref!r}"
                    called = (triggers.get("workflow_call") or {}).get("inputs") or {}
                    assert ref in called or ref not in {"matrix", "prerelease_index"}, f"{ref!r}: not callable"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_commands_exist(path: Path) -> None:
    for job_name, job in load_workflow(path)["jobs"].items():
        for step in job.get("steps", ()):
            if "run" in step:
                check_script(step["run"], f"{path.name}:{job_name}:{step.get('name', '?')}")


def test_the_nightly_gates_on_broken_promises_and_uses_gpus_and_a_prerelease() -> None:
    jobs = load_workflow(REPO / "ci" / "nightly.yml")["jobs"]
    gpu_runs = " ".join(step.get("run", "") for step in jobs["gpu"]["steps"])
    assert "gpu" in jobs["gpu"]["runs-on"] and "--require-gpu" in gpu_runs
    assert jobs["gpu"]["if"].startswith("vars.HAS_GPU_RUNNER == 'true' && "), "only where the repository has one"
    assert "(inputs.matrix || 'matrix.yaml') == 'matrix.yaml'" in jobs["gpu"]["if"], "not in the census's call"
    assert "(inputs.matrix || 'matrix.yaml') == 'matrix.yaml'" in jobs["mutate"]["if"], "not in the census's call"
    plan_runs = " ".join(step.get("run", "") for step in jobs["plan"]["steps"])
    assert "--add-runtime" in plan_runs and "plan-inputs/args" in plan_runs
    for job in jobs.values():
        assert any("upload-artifact" in step.get("uses", "") for step in job["steps"])
        assert any("GITHUB_STEP_SUMMARY" in step.get("run", "") for step in job["steps"])
        for step in job["steps"]:
            if "upload-artifact" in step.get("uses", ""):
                assert int(step["with"]["retention-days"]) > 0, "every artifact says how long it is kept"
            if "actions/checkout" in step.get("uses", ""):
                assert step["with"]["persist-credentials"] is False, "no token left in .git for an artifact to carry"


def test_jobs_use_only_the_outputs_of_jobs_they_need() -> None:
    for path in WORKFLOWS:
        jobs = load_workflow(path)["jobs"]
        for job_name, job in jobs.items():
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            assert set(needs) <= set(jobs), f"{path.name}:{job_name}: needs a job that does not exist"
            for expr in EXPRESSION.findall(yaml.safe_dump(job)):
                for ref, output in re.findall(r"\bneeds\.([\w-]+)\.outputs\.([\w-]+)", expr):
                    assert ref in needs, f"{path.name}:{job_name}: uses {ref}'s outputs without needing it"
                    assert output in jobs[ref].get("outputs", {}), f"{path.name}: {ref} has no output {output!r}"


def test_the_nightly_is_a_graph_of_build_jobs_run_jobs_by_runtime_and_a_merge_of_what_arrived() -> None:
    jobs = load_workflow(REPO / "ci" / "nightly.yml")["jobs"]

    def runs(job: str) -> str:
        return " ".join(step.get("run", "") for step in jobs[job]["steps"])

    assert "--build-jobs --json" in runs("plan") and "--by runtime" in runs("plan")
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.builds) }}"
    assert jobs["run"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert 'python -m torch_abi_harness build "${args[@]}" --torch "$TORCH" --out built/' in runs("build")
    assert '--shard "$SHARD" --by runtime --prebuilt built/' in runs("run")
    shard_env = next(step["env"]["SHARD"] for step in jobs["run"]["steps"] if "SHARD" in step.get("env", {}))
    assert shard_env == "${{ matrix.shard }}"
    # Every matrix.X a job names is a key of what its `plan ... --json` prints.
    plan = make_plan(load_matrix(REPO / "matrix.yaml"))
    for job, entry in (
        ("run", fan_out(plan, None, by="runtime")["include"][0]),
        ("build", build_jobs(plan)["include"][0]),
    ):
        used = set(re.findall(r"\bmatrix\.([\w-]+)", yaml.safe_dump(jobs[job])))
        assert used and used <= set(entry), (job, used - set(entry))
    assert jobs["run"]["if"].startswith("always()"), "a lost build job leaves its cells ERROR, not the night lost"
    merge = jobs["merge"]
    assert set(merge["needs"]) == {"plan", "build", "run"} and merge["if"].startswith("always()")
    assert "gpu" not in merge["needs"], "the GPU job never holds up merge"
    assert "python -m torch_abi_harness merge" in runs("merge") and "--allow-missing" in runs("merge")
    last = merge["steps"][-1]
    assert last["run"] == 'exit "$STATUS"' and "steps.merge.outputs.status" in last["env"]["STATUS"]
    assert "--shard" not in runs("gpu"), "the GPU job is one shard of another plan"


def test_the_release_gate_is_the_nightlys_graph_with_a_decide_job_that_runs_no_cell() -> None:
    """plan -> build (by build torch) -> run (by runtime) -> merge -> decide, every job planning from the same
    plan-inputs/args; the decide job decides with `gate --from-run` from the merged run and the handed-on builds,
    posts gate.md and report.html, and ends with the gate's own exit code."""
    jobs = load_workflow(REPO / "ci" / "release-gating.yml")["jobs"]

    def runs(job: str) -> str:
        return " ".join(step.get("run", "") for step in jobs[job]["steps"])

    assert set(jobs) == {"plan", "build", "run", "merge", "decide"}
    assert '--candidate "$CANDIDATE"' in runs("plan") and "plan-inputs/args" in runs("plan")
    assert '--previous "$PREVIOUS"' in runs("plan") and 'if [ -n "$PREVIOUS" ]' in runs("plan"), "empty: computed"
    assert "--build-jobs --json" in runs("plan") and "--by runtime --json" in runs("plan")
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.builds) }}"
    assert jobs["run"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert 'build "${args[@]}" --torch "$TORCH" --out built/' in runs("build")
    assert '--shard "$SHARD" --by runtime --prebuilt built/' in runs("run")
    assert "merge" in runs("merge") and "--allow-missing" in runs("merge")
    decide = jobs["decide"]
    assert set(decide["needs"]) == {"plan", "build", "merge"} and decide["if"].startswith("always()")
    assert decide["permissions"] == {"contents": "read", "actions": "read"}, "the baseline is another run's artifact"
    assert 'gate "${args[@]}" --from-run merged --prebuilt built/' in runs("decide") and " -k " not in runs("decide")
    assert "--from-run" in options_of(subcommands()["gate"]) and "--previous" in options_of(subcommands()["plan"])
    baseline = next(s for s in decide["steps"] if s.get("with", {}).get("run-id"))
    assert baseline["with"]["run-id"] == "${{ inputs.baseline_run_id }}"
    assert 'gate.md >> "$GITHUB_STEP_SUMMARY"' in runs("decide")
    uploads = [step["with"]["path"] for step in decide["steps"] if "upload-artifact" in step.get("uses", "")]
    assert "report-html/stable-abi-gate-${{ inputs.candidate }}-${{ github.run_id }}.html" in uploads
    assert "merged/report.html" in runs("decide"), "report.html copied to its artifact's name, unzipped"
    assert '["exit_code"]' in decide["steps"][-1]["run"]  # the job ends with the gate's own code
    for job in ("build", "run", "decide"):
        assert "download-artifact" in yaml.safe_dump(jobs[job]) and "-plan-${{ github.run_id }}" in yaml.safe_dump(
            jobs[job]
        )


def test_the_gate_replay_is_one_gate_graph_per_candidate_and_a_table_of_their_rows() -> None:
    """pairs (`gate --replay --pairs`: the job matrix) -> gate (release-gating.yml called once per pair, its
    artifacts named after the candidate) -> table (`gate --replay --replay-rows`: the decide jobs' rows)."""
    jobs = load_workflow(REPO / "ci" / "gate-replay.yml")["jobs"]
    assert set(jobs) == {"pairs", "gate", "table"}
    pairs = " ".join(step.get("run", "") for step in jobs["pairs"]["steps"])
    assert 'gate --replay --replay-from "$REPLAY_FROM" --pairs' in pairs
    gate = jobs["gate"]
    assert gate["uses"].endswith("/release-gating.yml") and gate["strategy"]["matrix"] == (
        "${{ fromJSON(needs.pairs.outputs.pairs) }}"
    )
    assert (
        gate["with"]["candidate"] == "${{ matrix.candidate }}" and gate["with"]["previous"] == "${{ matrix.previous }}"
    )
    assert gate["permissions"]["actions"] == "read", "a called workflow gets no more than its caller's job grants"
    table = jobs["table"]
    assert table["if"].startswith("always()") and set(table["needs"]) == {"pairs", "gate"}
    download = next(s for s in table["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"]["pattern"] == "stable-abi-gate-*-report-${{ github.run_id }}"
    called = load_workflow(REPO / "ci" / "release-gating.yml")["jobs"]["decide"]
    assert any(
        s.get("with", {}).get("name") == "stable-abi-gate-${{ inputs.candidate }}-report-${{ github.run_id }}"
        for s in called["steps"]
    ), "what the table downloads is what each decide job uploads"
    runs = " ".join(step.get("run", "") for step in table["steps"])
    assert "--replay-rows decisions" in runs and "replay.md" in runs
    assert {"--pairs", "--replay-rows"} <= options_of(subcommands()["gate"])


def test_ci_matrices_load() -> None:
    for path in (REPO / "ci").glob("*.yaml"):
        assert load_matrix(path).runtimes


def test_the_ci_script_calls_what_exists() -> None:
    check_script((REPO / ".ci" / "run").read_text(), ".ci/run")


def test_the_checker_catches_a_missing_option() -> None:
    with pytest.raises(AssertionError, match="has no option --no-such-flag"):
        check_script("nox -s matrix -- --backend docker --no-such-flag", "example")
    with pytest.raises(AssertionError, match="nox session 'nope'"):
        check_script("nox -s nope", "example")


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflows_hold_least_permissions_and_one_run_at_a_time(path: Path) -> None:
    data = load_workflow(path)
    assert data["permissions"] == {"contents": "read"}, "read-only by default; a job asks for more itself"
    assert data["concurrency"]["group"].startswith("${{ github.workflow }}-")
    for name, job in data["jobs"].items():
        for scope, level in job.get("permissions", {}).items():
            assert level == "read", f"{path.name}:{name}: {scope}: {level}"


def test_the_nightly_diffs_against_the_previous_nightly() -> None:
    """The README says the nightly posts a diff against the previous run: merge gets --baseline from the
    previous run's artifact, and its diff.md goes to the job summary."""
    merge = load_workflow(REPO / "ci" / "nightly.yml")["jobs"]["merge"]
    steps = {step.get("id"): step for step in merge["steps"]}
    assert "gh run list" in steps["previous"]["run"] and merge["permissions"]["actions"] == "read"
    download = next(s for s in merge["steps"] if s.get("with", {}).get("run-id"))
    assert download["with"]["run-id"] == "${{ steps.previous.outputs.run_id }}"
    assert download["with"]["name"] == "stable-abi-report-cpu-${{ steps.previous.outputs.run_id }}"
    uploaded = next(s for s in merge["steps"] if "upload-artifact" in s.get("uses", ""))
    assert uploaded["with"]["name"] == "stable-abi-report-cpu-${{ github.run_id }}"  # what the next one downloads
    assert '--baseline "$baseline"' in steps["merge"]["run"] and "diff.md" in steps["merge"]["run"]
    assert "--baseline" in options_of(subcommands()["merge"])


def test_the_run_jobs_cache_uv_downloads_within_githubs_limit() -> None:
    run = load_workflow(REPO / "ci" / "nightly.yml")["jobs"]["run"]
    restore = next(s for s in run["steps"] if "cache/restore" in s.get("uses", ""))
    save = next(s for s in run["steps"] if "cache/save" in s.get("uses", ""))
    assert restore["with"]["path"] == save["with"]["path"] == run["env"]["UV_CACHE_DIR"]
    assert restore["with"]["key"] == save["with"]["key"]
    sizing = next(s for s in run["steps"] if s.get("id") == "uv-cache")
    assert "9000 / JOBS" in sizing["run"], "the jobs together stay under GitHub's 10 GB"
    assert save["if"] == "always() && steps.uv-cache.outputs.save == 'true'"


def test_the_census_nightly_runs_the_graph_on_census_yaml_and_verifies_each_shard() -> None:
    """ci/census.yml calls the nightly's graph with census.yaml and no pre-release; each run job holds its cells
    against a plain load (census --verify), and merge compares the census with the docs page."""
    census = load_workflow(REPO / "ci" / "census.yml")
    (job,) = census["jobs"].values()
    assert job["with"] == {"matrix": "census.yaml", "prerelease_index": "none"}
    assert (REPO / "census.yaml").is_file()
    nightly = load_workflow(REPO / "ci" / "nightly.yml")
    assert nightly["env"]["MATRIX"] == "${{ inputs.matrix || 'matrix.yaml' }}"
    run = " ".join(
        s.get("run", "") for s in nightly["jobs"]["run"]["steps"] if s.get("if") == "env.MATRIX == 'census.yaml'"
    )
    assert "census shard-report --verify" in run
    merge = [s for s in nightly["jobs"]["merge"]["steps"] if "census" in s.get("name", "")]
    assert merge and "--check docs/results/census.md" in merge[0]["run"]
    assert "--verify" in options_of(subcommands()["census"]) and "--check" in options_of(subcommands()["census"])


def graph_expressions() -> ModuleType:
    """tests/graph's evaluator of the workflows' expression subset: the one the graph test runs them with."""
    if "graph_expressions" not in sys.modules:
        spec = importlib.util.spec_from_file_location("graph_expressions", REPO / "tests/graph/graph_expressions.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["graph_expressions"] = module
    return sys.modules["graph_expressions"]


def set_up_pythons(job: dict[str, Any], entry: dict[str, Any]) -> list[str]:
    """The CPythons a job's setup-python steps set up for one entry of its job matrix, in the order they are
    listed (the last one is `python`)."""
    evaluator = graph_expressions().Evaluator({"matrix": entry})
    listed: list[str] = []
    for step in job["steps"]:
        if step.get("uses", "").startswith("actions/setup-python@"):
            value = evaluator.interpolate(str(step["with"]["python-version"]))
            listed += [line.strip() for line in value.splitlines() if line.strip()]
    return listed


def whole_plan(matrix: str) -> list[str]:
    """The CPythons of a matrix's whole plan (`plan --json`'s pythons): a job that runs it in one place."""
    pythons: list[str] = plan_json(make_plan(load_matrix(REPO / matrix)))["pythons"]
    return pythons


def mutation_cells(matrix: str) -> list[str]:
    """The CPythons of `mutate`'s default cells: the newest runtime on the matrix's python."""
    return cell_pythons(default_cells(make_plan(load_matrix(REPO / matrix)), ()))


# Each job of ci/ that runs cells, and the CPythons it needs (None: its job matrix entry names them).
CELL_JOBS: dict[tuple[str, str], Callable[[], list[str]] | None] = {
    ("nightly.yml", "build"): None,
    ("nightly.yml", "run"): None,
    ("nightly.yml", "gpu"): lambda: whole_plan("ci/matrix-gpu.yaml"),
    ("nightly.yml", "mutate"): lambda: mutation_cells("matrix.yaml"),
    ("release-gating.yml", "build"): None,
    ("release-gating.yml", "run"): None,
}
RUNS_CELLS = re.compile(r"torch_abi_harness (?:run|build)\b|nox -s (?:matrix|mutate|gate_replay)\b|-- gate\b")


def test_every_job_that_runs_cells_is_held_to_the_cpythons_it_needs() -> None:
    found = {
        (path.name, name)
        for path in WORKFLOWS
        for name, job in load_workflow(path)["jobs"].items()
        if any(RUNS_CELLS.search(step.get("run", "")) for step in job.get("steps", ()))
    }
    assert found == set(CELL_JOBS)


@pytest.mark.parametrize("matrix", ["matrix.yaml", "ci/matrix-full.yaml", "tests/graph/matrix.yaml"])
def test_each_build_and_run_job_sets_up_the_cpythons_its_plan_names(matrix: str) -> None:
    """Hosted runners keep CPythons other than the one set up off PATH: a run job whose runtimes are on 3.10 sets
    up 3.10 (the plan's `pythons` of its job matrix entry), and the harness's own 3.11 comes last (`python`). The
    release gate's graph (the same plan with a candidate) likewise."""
    plan = make_plan(load_matrix(REPO / matrix))
    for workflow in ("nightly.yml", "release-gating.yml"):
        jobs = load_workflow(REPO / "ci" / workflow)["jobs"]
        for job, entries in (("build", build_jobs(plan)), ("run", fan_out(plan, None, by="runtime"))):
            for entry in entries["include"]:
                listed = set_up_pythons(jobs[job], entry)
                assert set(entry["pythons"]) <= set(listed), (workflow, job, entry, listed)
                assert listed[-1] == "3.11", f"{job}: the harness's own interpreter is not the last: {listed}"
    assert any(entry["pythons"] != ["3.11"] for entry in fan_out(plan, None, by="runtime")["include"]) or (
        matrix == "tests/graph/matrix.yaml"
    )


@pytest.mark.parametrize(("workflow", "job"), [key for key, matrix in CELL_JOBS.items() if matrix])
def test_each_other_job_that_runs_cells_sets_up_its_matrixs_cpythons(workflow: str, job: str) -> None:
    """A job that runs a whole matrix in one place sets up every CPython of its plan (`plan --json`'s pythons)."""
    listed = set_up_pythons(load_workflow(REPO / "ci" / workflow)["jobs"][job], {})
    needs = CELL_JOBS[workflow, job]
    assert needs is not None
    wanted = needs()
    assert wanted and set(wanted) <= set(listed) and listed[-1] == "3.11", (wanted, listed)


def test_no_job_downloads_a_cpython_it_did_not_set_up() -> None:
    """The choice: CPythons come from setup-python (the runner's tool cache), never from uv's downloads, so a
    missing one is exit 2 naming it. uv's own switch for every nightly job; `--no-python-downloads` where a
    command takes it."""
    nightly = load_workflow(REPO / "ci" / "nightly.yml")
    assert nightly["env"]["UV_PYTHON_DOWNLOADS"] == "never"
    runs = {
        (path.name, name): " ".join(step.get("run", "") for step in job.get("steps", ()))
        for path in WORKFLOWS
        for name, job in load_workflow(path)["jobs"].items()
    }
    for key in (("nightly.yml", "run"), ("release-gating.yml", "run"), ("release-gating.yml", "decide")):
        assert "--no-python-downloads" in runs[key], key


@pytest.mark.parametrize(
    ("argv", "code", "stream"),
    [(["--help"], 0, "stdout"), (["-h"], 0, "stdout"), (["--bogus"], 2, "stderr"), ([], 2, "stderr")],
    ids=["help", "h", "unknown-option", "no-session"],
)
def test_bootstrap_answers_help_with_its_usage_and_a_wrong_option_with_exit_2(
    argv: list[str], code: int, stream: str
) -> None:
    """Q7: `bash ci/bootstrap.sh --help` exited 2 as a usage error. Help prints the usage on stdout and exits 0; an
    unknown option or no session prints it on stderr and exits 2, before anything is installed."""
    done = subprocess.run(
        ["bash", str(REPO / "ci" / "bootstrap.sh"), *argv], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == code, done
    assert "usage: bash ci/bootstrap.sh [--setup-only] matrix|tests" in getattr(done, stream)
    assert "== " not in done.stdout  # nothing was set up
    if argv == ["--bogus"]:
        assert "unknown session or option: --bogus" in done.stderr


UPLOAD_V7 = re.compile(r"actions/upload-artifact@([0-9a-f]{40}) # v(\d+)\.\d+\.\d+$", re.M)


@pytest.mark.parametrize(
    ("workflow", "job", "page"),
    [
        ("nightly.yml", "merge", "merged/latest/report.html"),
        ("nightly.yml", "gpu", "reports/latest/report.html"),
        ("release-gating.yml", "decide", "merged/report.html"),
    ],
)
def test_report_html_is_uploaded_unzipped_so_that_it_opens_in_the_browser(workflow: str, job: str, page: str) -> None:
    """upload-artifact v7's `archive: false` uploads one file as it is: GitHub serves it to open in the browser
    instead of a zip to download and unpack. The artifact takes the file's name (`name` is ignored), so the page is
    first copied to a name of its own for the run (two jobs of one run upload a report.html)."""
    path = REPO / "ci" / workflow
    text = path.read_text()
    steps = load_workflow(path)["jobs"][job]["steps"]
    uploads = [(n, s) for n, s in enumerate(steps) if "upload-artifact" in s.get("uses", "")]
    html = [(n, s) for n, s in uploads if str(s["with"]["path"]).endswith(".html")]
    assert len(html) == 1, f"{workflow} {job}: one upload of report.html, found {[s['with'] for _, s in uploads]}"
    (n, step) = html[0]
    assert step["with"]["archive"] is False and "name" not in step["with"]
    pinned = {sha: int(major) for sha, major in UPLOAD_V7.findall(text)}
    sha = step["uses"].split("@")[1]
    assert pinned.get(sha, 0) >= 7, f"{step['uses']}: archive: false needs upload-artifact v7 or later, pinned by SHA"
    copy = steps[n - 1]["run"]
    folder = step["with"]["path"].rsplit("/", 1)[0]
    assert f"cp {page} " in copy and f'"{folder}/' in copy and step["if"] == steps[n - 1]["if"] == "always()"
