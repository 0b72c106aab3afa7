"""ci/release-gating.yml run here, job by job, as GitHub's hosted runners would run it (tests/graph/graph_runner.py):
plan -> build (one job per build torch, the candidate's included) -> run (one job per runtime) -> merge -> decide
(`gate --from-run`), each job on its own 14 GB file system with its own caches, only declared artifacts passed
between jobs. The decision, gate.md and gate.json must be those of a one-machine `gate` of the same plan (but for
the run's id and the timings).

The candidate is a released version (2.15.0 against 2.14.1, tests/graph/gate-matrix.yaml), served by the matrix's
own sources (`candidate_index: none`), so the manifest reads its ABI and no wheel is fetched. Needs root (loop
mounts), a warm uv cache holding the plan's torch envs and PyPI for `pip install -e .`, as the nightly's graph test.
Each job's peak disk and wall time are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from graph_runner import Runner
from test_nightly_graph import DISK_GB, REPO, harness, print_figures, seed

WORKFLOW = REPO / "ci" / "release-gating.yml"
MATRIX = "tests/graph/gate-matrix.yaml"
CANDIDATE, PREVIOUS = "2.15.0", "2.14.1"
INPUTS = {
    "candidate": CANDIDATE,
    "candidate_index": "none",
    "candidate_wheel_url": "",
    "previous": PREVIOUS,
    "baseline_run_id": "",
    "matrix": MATRIX,
}


def seed_gate(key: str, matrix: Mapping[str, Any], path: Path) -> None:
    """cache/restore's effect, as in the nightly's test; the decide job's restore (no job matrix) is seeded with
    the candidate's downloads: the env its `gate` makes."""
    if "-decide-" in key:
        seed(key.replace("-decide-", "-build-"), {"torch": CANDIDATE}, path)
    else:
        seed(key, matrix, path)


@pytest.fixture(scope="module")
def gate_graph(graph_root: Path) -> Runner:
    runner = Runner(WORKFLOW, REPO, graph_root, INPUTS, seed_gate, disk_gb=DISK_GB)
    runner.run(("decide",))
    print_figures(runner.records)  # each job's wall time and peak disk, and the critical path
    return runner


CACHE = re.compile(r"/\S*/envs/")  # where a job's harness cache lies: the candidate env's CUDA headers are named


def comparable(gate: dict[str, Any]) -> dict[str, Any]:
    """gate.json without what differs between any two runs of one plan: the run's id, the timings and where the
    harness's cache lies."""
    data = {k: v for k, v in gate.items() if k not in {"run_id", "timings"}}
    for key in ("evidence", "warnings"):
        lines = (line.replace(gate["run_id"], "RUN") for line in gate[key] if not line.startswith("gate timings:"))
        data[key] = [CACHE.sub("<cache>/envs/", line) for line in lines]
    return data


def comparable_md(text: str, run_id: str) -> str:
    lines = [line for line in text.replace(run_id, "RUN").splitlines() if not line.startswith("- gate timings:")]
    return CACHE.sub("<cache>/envs/", "\n".join(lines))


def test_the_gate_as_a_graph_decides_as_one_machine_does(gate_graph: Runner, graph_root: Path) -> None:
    graph = gate_graph
    jobs = {r.label: r for r in graph.records}
    for job in ("plan", "build", "run", "merge", "decide"):
        assert graph.results[job]["result"] == "success", (job, [r.steps for r in graph.records if r.job == job])
    builds = sorted(r.label for r in graph.records if r.job == "build")
    runs = [r for r in graph.records if r.job == "run"]
    assert len(builds) == 2 and CANDIDATE in builds[-1], builds  # the candidate's own build job
    assert len(runs) == 3 and any(f"r{CANDIDATE}" in r.label for r in runs), [r.label for r in runs]
    for record in graph.records:
        assert 0 < record.peak_bytes < DISK_GB * 2**30, record
    report = graph.root / "artifacts" / f"stable-abi-gate-{CANDIDATE}-report-{graph.run_id}"
    decided = json.loads((report / "gate.json").read_text())
    one = graph_root / "one-machine"
    done = harness(
        "gate",
        "--matrix",
        MATRIX,
        "--candidate",
        CANDIDATE,
        "--previous",
        PREVIOUS,
        "--reports-dir",
        str(one),
        "-j",
        "2",
    )
    mine = json.loads((one / "latest" / "gate.json").read_text())
    assert done.returncode == mine["exit_code"], done.stdout[-3000:] + done.stderr[-3000:]
    assert decided["decision"] == mine["decision"] and decided["exit_code"] == mine["exit_code"]
    assert decided["evidence"][0].startswith("abi-diff 2.14.1 -> 2.15.0")
    assert comparable(decided) == comparable(mine)
    graph_md = comparable_md((report / "gate.md").read_text(), decided["run_id"])
    one_md = comparable_md((one / "latest" / "gate.md").read_text(), mine["run_id"])
    assert graph_md == one_md
    page = f"stable-abi-gate-{CANDIDATE}-{graph.run_id}.html"  # upload-artifact v7, archive: false: named after it
    assert (graph.root / "artifacts" / page / page).is_file()
    assert f"torch {CANDIDATE}" in jobs["decide"].summary and decided["decision"] in jobs["decide"].summary


def test_the_decide_job_refuses_a_run_of_another_plan(gate_graph: Runner, graph_root: Path) -> None:
    """`gate --from-run` with the merged run of the graph but another plan (no --previous: 2.14.1 is the matrix's
    newest runtime below the candidate, so the plan is the same; -k narrows it): exit 2, naming what differs."""
    graph = gate_graph
    merged = graph.root / "artifacts" / f"stable-abi-gate-{CANDIDATE}-merged-{graph.run_id}"
    built = graph_root / "built"
    for artifact in graph.artifacts.glob(f"stable-abi-gate-{CANDIDATE}-builds-*-{graph.run_id}"):
        for entry in artifact.iterdir():
            target = built / entry.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(entry)
    args = ["gate", "--matrix", MATRIX, "--candidate", CANDIDATE, "--prebuilt", str(built), "-k", "r2.13.0"]
    done = harness(*args, "--from-run", str(merged), "--reports-dir", str(graph_root / "refused"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "the run of another plan than this gate's" in done.stderr and "cell(s) only in the second" in done.stderr
