"""The ten lines an extension's author adds (docs/authors/in-your-repository.md, read from the page) run through the
graph runner against an extension repository this test writes: a git repository in tmp holding a stable-ABI
extension (extensions/stable_basic's sources and tests), a setup.py that gives the compiler TORCH_TARGET_VERSION for
2.14, and a pyproject.toml whose `[tool.torch-abi-harness]` table limits the releases to 2.14.1 and 2.15.0. Its
workflow's `uses: OWNER/torch-abi-harness@v1` is this checkout (copied where a runner downloads actions), and the
job runs as on a hosted runner: its own 14 GB loop-mounted disk, HOME and caches, nothing seeded (the harness and
both torch releases are installed from the package sources, as a first run on GitHub would).

Asserts: the job passed; the extension was built; its tests ran and passed on each runtime; the grid is in the job
summary; the report was uploaded; the job's peak disk stayed under 14 GB. Prints the peak disk and the wall time
(run with -s to see them). Needs root (the loop mount) and the package sources (torch 2.14.1 and 2.15.0).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from graph_runner import Runner, UnsupportedWorkflow

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "authors" / "in-your-repository.md"
DISK_GB = 14
RELEASES = ("2.14.1", "2.15.0")
SETUP_PY = '''"""stable_basic built for the stable ABI of torch 2.14: one abi3 wheel for every release from 2.14 up."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

TARGET_2_14 = "-DTORCH_TARGET_VERSION=0x020e000000000000"

setup(
    ext_modules=[
        CppExtension(
            "stable_basic._C",
            ["csrc/stable_basic.cpp"],
            extra_compile_args=["-O2", "-std=c++17", "-fvisibility=hidden", TARGET_2_14],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
'''
PYPROJECT = f"""[build-system]
requires = ["setuptools>=64", "wheel", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "stable-basic"
version = "0.1.0"
requires-python = ">=3.9"

[tool.setuptools]
packages = ["stable_basic"]

[tool.torch-abi-harness]
releases = {json.dumps(list(RELEASES))}
"""


def shown(marker: str) -> str:
    """The YAML the page shows between its markers: what is run is what authors are told to write."""
    found = re.search(rf"<!-- {marker}:start -->\n```yaml\n(.*?)```\n<!-- {marker}:end -->", PAGE.read_text(), re.S)
    assert found, f"{PAGE}: no YAML between the {marker} markers"
    return found[1]


def the_ten_lines() -> str:
    return shown("the-ten-lines")


def the_call() -> str:
    """The page's call of the reusable workflow, as a workflow file."""
    return "name: stable ABI graph\non: [push]\n" + shown("the-call")


def author_repository(root: Path) -> Path:
    """An extension's own repository, committed: sources, tests, setup.py, pyproject.toml with the table, and the
    workflow file from the page."""
    repo = root / "stable-basic"
    source = REPO / "extensions" / "stable_basic"
    for part in ("csrc", "tests", "stable_basic"):
        shutil.copytree(source / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "setup.py").write_text(SETUP_PY)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text("build/\ndist/\n*.egg-info/\n")
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "stable-abi.yml").write_text(the_ten_lines())
    (repo / ".github" / "workflows" / "stable-abi-graph.yml").write_text(the_call())
    git = ["git", "-C", str(repo), "-c", "user.name=author", "-c", "user.email=author@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a stable-ABI extension"], check=True)
    return repo


def no_cache(key: str, *_: object) -> None:
    raise UnsupportedWorkflow(f"the ten lines restore no cache, yet {key!r} was asked for")


def run_workflow(graph_root: Path, name: str) -> Runner:
    """One of the author repository's workflows run, its jobs' and steps' figures printed."""
    repo = graph_root / "stable-basic"
    if not repo.is_dir():
        author_repository(graph_root)
    workflow = repo / ".github" / "workflows" / name
    runner = Runner(
        workflow, repo, graph_root / name, {}, no_cache, disk_gb=DISK_GB, actions={"OWNER/torch-abi-harness": REPO}
    )
    runner.run(tuple(runner.doc["jobs"]))
    for record in runner.records:
        print(
            f"\n{record.label}: {record.result} in {record.seconds:.0f} s, peak disk {record.peak_bytes / 1e9:.2f} GB",
            file=sys.stderr,
        )
        for step in record.steps:
            print(f"   {step.outcome:8} {step.seconds:6.0f} s  {step.name}", file=sys.stderr)
    for step in runner.inner_steps:
        print(f"   (in the action) {step.outcome:8} {step.seconds:6.0f} s  {step.name}", file=sys.stderr)
    return runner


@pytest.fixture(scope="module")
def graph(graph_root: Path) -> Runner:
    return run_workflow(graph_root, "stable-abi.yml")


def test_the_ten_lines_are_ten_lines_and_use_the_action() -> None:
    lines = the_ten_lines().splitlines()
    assert len(lines) == 10, lines
    assert lines[-1].strip() == "- uses: OWNER/torch-abi-harness@v1"


def test_the_ten_lines_build_the_extension_and_run_its_tests_on_each_release(graph: Runner) -> None:
    (record,) = graph.records
    assert record.result == "success", [*record.steps, *graph.inner_steps]
    report = graph.artifacts / "torch-abi-harness-report"  # uploaded by the action, under its default name
    results = json.loads((report / "results.json").read_text())
    assert results["exit_code"] == 0
    (build,) = results["build_results"]  # built, for the level its sources gave the compiler
    assert build["verdict"] == "kept" and build["built_for"] == "2.14", build
    cells = {c["runtime"]["torch"].split("+")[0]: c for c in results["cells"]}
    assert sorted(cells) == list(RELEASES)
    for release, cell in cells.items():
        assert cell["status"] == "PASS" and cell["verdict"] == "kept", (release, cell["reason"])
        assert cell["tests"]["passed"] > 0 and cell["tests"]["failed"] == 0, (release, cell["tests"])
    assert "| `stable_basic@b2.15.0-t2.14` | ✅ pass | ✅ pass |" in record.summary, record.summary[:2000]
    assert "every promise kept" in record.summary
    assert 0 < record.peak_bytes < DISK_GB * 2**30, record.peak_bytes


def test_the_reusable_workflow_runs_the_graph_on_the_authors_repository(graph_root: Path) -> None:
    """The page's call of .github/workflows/compat.yml: plan, one build job (torch 2.15.0), one run job per
    runtime, merge; each job on its own 14 GB disk, the harness checked out and installed in each."""
    graph = run_workflow(graph_root, "stable-abi-graph.yml")
    jobs = {r.label: r for r in graph.records}
    assert graph.results["stable-abi"] == {"result": "success", "outputs": {"exit-code": "0"}}, jobs
    assert [r.job for r in graph.records] == ["plan", "build", "run", "run", "merge"], list(jobs)
    merged = graph.artifacts / f"torch-abi-report-{graph.run_id}" / "latest"
    cells = json.loads((merged / "results.json").read_text())["cells"]
    assert sorted(c["runtime"]["torch"].split("+")[0] for c in cells) == list(RELEASES)
    assert all(c["status"] == "PASS" and c["tests"]["passed"] > 0 for c in cells), [c["reason"] for c in cells]
    (merge,) = [r for r in graph.records if r.job == "merge"]
    assert "| `stable_basic@b2.15.0-t2.14` | ✅ pass | ✅ pass |" in merge.summary, merge.summary[:2000]
    for record in graph.records:
        assert 0 < record.peak_bytes < DISK_GB * 2**30, (record.label, record.peak_bytes)
