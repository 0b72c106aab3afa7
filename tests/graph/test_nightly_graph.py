"""ci/nightly.yml run here, job by job, as GitHub's hosted runners would run it (tests/graph/runner.py):
plan -> build (one job per build torch) -> run (by runtime) -> merge, each job on its own 14 GB file system
with its own caches, only declared artifacts passed between jobs. The merged report must equal a one-machine
run of the same plan; a run job whose report is lost must leave its cells ERROR, not the night lost.

Needs root (loop mounts), a warm uv cache holding the plan's torch envs (the harness's cache under
~/.cache/torch-abi-harness/envs shows which wheels they are) and PyPI for `pip install -e .`. Each job's
peak disk and wall time are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from graph_runner import JobRecord, Runner, UnsupportedWorkflow, loop_disk

from torch_abi_harness.provision.envs import default_cache_dir

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "ci" / "nightly.yml"
MATRIX = "tests/graph/matrix.yaml"
DISK_GB = 14
UV_CACHE = Path(os.environ.get("UV_CACHE_DIR") or Path.home() / ".cache" / "uv")
INPUTS = {"matrix": MATRIX, "selectors": "", "prerelease_index": "none", "shards": "3"}


def env_name(runtime_or_torch: str) -> str:
    """The harness's env folder for a runtime id (r2.14.1-cpu-py3.10) or a build torch (2.14.1)."""
    body = runtime_or_torch.removeprefix("r")
    python = body.rpartition("-py")[2] if "-py" in body else "3.11"
    torch = body.split("-")[0]
    release, _, variant = torch.partition("+")
    return f"torch-{release}-{variant or 'auto'}-py{python}"


def archive_entries(env: Path) -> set[Path]:
    """uv's cache entries (archive-v0/<id>) an env of the warm harness cache is hardlinked from: matched by the
    inode of each installed distribution's METADATA, which uv links from its unpacked archive."""
    site = next((env / "lib").glob("python3.*/site-packages"))
    inodes = {(p / "METADATA").stat().st_ino for p in site.glob("*.dist-info") if (p / "METADATA").exists()}
    found = set()
    for entry in (UV_CACHE / "archive-v0").iterdir():
        for info in entry.glob("*.dist-info/METADATA"):
            if info.stat().st_ino in inodes:
                found.add(entry)
    return found


def seed(key: str, matrix: Mapping[str, Any], path: Path) -> None:
    """actions/cache/restore's effect: what an earlier nightly of the same job saved, i.e. uv's downloads of the
    envs that job makes, copied from the warm uv cache into the job's (on its disk: counted against the cap)."""
    wanted = [matrix["torch"]] if "-build-" in key else str(matrix.get("runtimes", "")).split()
    envs = default_cache_dir() / "envs"
    entries: set[Path] = set()
    for name in map(env_name, wanted):
        if not (envs / name).is_dir():
            raise UnsupportedWorkflow(f"cache {key}: no warm env {envs / name} to take its wheels from")
        entries |= archive_entries(envs / name)
    (path / "archive-v0").mkdir(parents=True, exist_ok=True)
    for folder in ("simple-v28", "wheels-v8", "CACHEDIR.TAG"):
        source = UV_CACHE / folder
        if source.exists():
            subprocess.run(["cp", "-a", str(source), str(path)], check=True)
    for entry in sorted(entries):
        subprocess.run(["cp", "-a", str(entry), str(path / "archive-v0")], check=True)


@pytest.fixture(scope="module")
def graph(graph_root: Path) -> Runner:
    runner = Runner(WORKFLOW, REPO, graph_root, INPUTS, seed, disk_gb=DISK_GB)
    runner.run(("merge",))
    print_figures(runner.records)
    return runner


def print_figures(records: list[JobRecord]) -> None:
    """Each job's wall time and peak disk, and the critical path: the slowest instance of each job, in order."""
    print("\njob                                      result   wall s  peak disk GB", file=sys.stderr)
    for r in records:
        print(f"{r.label[:40]:40} {r.result:8} {r.seconds:7.0f}  {r.peak_bytes / 1e9:6.2f}", file=sys.stderr)
    slowest: dict[str, JobRecord] = {}
    for r in records:
        if r.job not in slowest or r.seconds > slowest[r.job].seconds:
            slowest[r.job] = r
    path = " -> ".join(f"{r.label} {r.seconds:.0f} s" for r in slowest.values())
    print(f"critical path: {path} = {sum(r.seconds for r in slowest.values()):.0f} s", file=sys.stderr)
    figures = [
        {"job": r.label, "result": r.result, "seconds": round(r.seconds, 1), "peak_gb": round(r.peak_bytes / 1e9, 2)}
        for r in records
    ]
    print(json.dumps(figures), file=sys.stderr)


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch_abi_harness", *args], cwd=REPO, capture_output=True, text=True)


def test_the_nightly_graph_merges_into_what_one_machine_reports(graph: Runner, graph_root: Path) -> None:
    jobs = {r.label: r for r in graph.records}
    assert graph.results["plan"]["result"] == "success", jobs
    assert graph.results["build"]["result"] == "success" and graph.results["run"]["result"] == "success"
    assert graph.results["merge"]["result"] == "success", [r.steps for r in graph.records if r.job == "merge"]
    builds = [r for r in graph.records if r.job == "build"]
    runs = [r for r in graph.records if r.job == "run"]
    assert len(builds) == 2 and len(runs) == 3, [r.label for r in graph.records]
    assert any(len(r.label.split("(")[1].split()) > 1 for r in runs), "two runtimes share one run job"
    assert any("-py3.10" in r.label for r in runs), "a run job's runtime is on a CPython it had to set up"
    for record in graph.records:
        assert 0 < record.peak_bytes < DISK_GB * 2**30
    # merge's artifact: its reports dir (the run and `latest`, which the upload stores as the folder it points to)
    report = graph.root / "artifacts" / f"stable-abi-report-cpu-{graph.run_id}" / "latest"
    one = graph_root / "one-machine"
    done = harness("run", "--matrix", MATRIX, "--reports-dir", str(one), "-j", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    same = harness("diff", str(report), str(one / "latest"), "--fail-on-change")
    assert same.returncode == 0, same.stdout + same.stderr
    cells = json.loads((report / "results.json").read_text())["cells"]
    assert len(cells) == 12 and {c["status"] for c in cells} <= {"PASS", "LOAD_FAILED", "SKIPPED"}
    assert "stable_basic@b2.13.0-t2.10" in jobs["merge"].summary, "the merged grid is in the job summary"


def test_a_lost_run_job_leaves_its_cells_error_and_the_rest_merged(graph: Runner, graph_root: Path) -> None:
    lost = f"stable-abi-report-shard-0-{graph.run_id}"  # strategy.job-index 0: shard 1/3
    shutil.rmtree(graph.artifacts / lost)  # its runner died before the upload
    graph.records.clear()
    graph.run_job("merge")
    (merge,) = graph.records
    assert merge.result == "failure" and graph.results["merge"]["result"] == "failure"
    latest = graph.root / "artifacts" / f"stable-abi-report-cpu-{graph.run_id}" / "latest"
    cells = json.loads((latest / "results.json").read_text())["cells"]
    errors = [c for c in cells if c["status"] == "ERROR"]
    assert errors and all(c["reason"] == "shard 1/3 reported nothing" for c in errors)
    assert len(cells) == 12 and len(errors) < len(cells)
    assert "shard 1/3 reported nothing" in merge.summary


def test_a_run_job_that_does_not_set_up_its_runtimes_cpython_fails(graph: Runner) -> None:
    """The run job of the py3.10 runtime again, its job matrix entry without 3.10 (as every run job was before
    the plan named its CPythons): setup-python sets up 3.11 alone, the harness finds no CPython 3.10 (uv may
    not download one) and the run step fails with no report; the job fails. With 3.10 it passed (above)."""
    shards = json.loads(graph.results["plan"]["outputs"]["shards"])["include"]
    index, entry = next((i, e) for i, e in enumerate(shards) if "3.10" in e["pythons"])
    forgot = {**entry, "pythons": [p for p in entry["pythons"] if p != "3.10"] or ["3.11"]}
    record = graph.run_instance("run", graph.doc["jobs"]["run"], forgot, index, len(shards))
    assert record.result == "failure"
    assert [s.name for s in record.steps if s.outcome == "failure"] == ["Run this shard's runtimes"], record.steps


def test_a_loop_disk_caps_what_a_job_can_write(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("loop mounts need root")
    with loop_disk(tmp_path / "cap.img", tmp_path / "cap", 1) as disk:
        result = subprocess.run(["dd", "if=/dev/zero", f"of={disk}/fill", "bs=1M", "count=1200"], capture_output=True)
        assert result.returncode != 0 and b"No space left" in result.stderr
    assert not (tmp_path / "cap.img").exists() and not os.path.ismount(tmp_path / "cap")
